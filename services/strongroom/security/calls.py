"""The gRPC side of who may call what: a servicer asks `require_peer` before it acts.

With TLS off (`strongroom up --insecure`, a chart without certificates) there are no
identities, and nothing is checked: such a deployment is open to whoever reaches its ports,
as its processes say at start. With TLS on, a call only a member, a DR service (or both) of a
cluster may make (or, on a router, only a neighbour cluster's router) is refused PERMISSION_DENIED (ErrorInfo reason `PERMISSION_DENIED`, metadata
`permission` and `refusal`) when the caller's certificate names anyone else, and counted and
logged as a refusal (`strongroom.security.refusals`). Nothing it asked is done.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import grpc

from strongroom.errors import PermissionDenied
from strongroom.grpcerrors import abort_with
from strongroom.security import refusals
from strongroom.security.identity import Kind, admits
from strongroom.security.tls import current, peer_identity

__all__ = ["require_peer"]


async def require_peer(context: grpc.aio.ServicerContext, cluster: str | Collection[str],  # type: ignore[type-arg]
                       kinds: Iterable[Kind], permission: str, claimed: str = "") -> None:
    """Abort the call unless its caller is one of `kinds` of `cluster` (or of one of several)
    (and, for a member, the one named `claimed` when given); `permission` names what it would
    have needed."""
    if current() is None:
        return
    refused = admits(peer_identity(context), cluster, kinds, claimed)
    if refused is None:
        return
    refusals.count("grpc", refused.reason, f"{permission}: {refused.message}", context.peer())
    await abort_with(context, PermissionDenied(f"permission {permission!r} denied: {refused.message}",
                                               permission, refused.reason))
