"""The gRPC side of who may call what: a servicer asks `require_peer` before it acts.

With TLS off (`strongroom up --insecure`, a chart without certificates) there are no
identities, and nothing is checked: such a deployment is open to whoever reaches its ports,
as its processes say at start. With TLS on, a call only a member, a DR service (or both) of a
cluster may make (or, on a router, only a neighbour cluster's router) is refused PERMISSION_DENIED (ErrorInfo reason `PERMISSION_DENIED`, metadata
`permission` and `refusal`) when the caller's certificate names anyone else, and counted and
logged as a refusal (`strongroom.security.refusals`). Nothing it asked is done.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from typing import Any

import grpc

from strongroom.errors import PermissionDenied, Unauthenticated
from strongroom.grpcerrors import abort_with
from strongroom.handlers import Handler, behaviour, replace_behaviour
from strongroom.security import refusals, revocation
from strongroom.security.identity import Kind, admits
from strongroom.security.tls import current, peer_identity

__all__ = ["RevocationInterceptor", "require_peer"]


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



async def _refuse_revoked(context: grpc.aio.ServicerContext) -> None:  # type: ignore[type-arg]
    """Abort the call when the caller's certificate is on the authority's revocation list."""
    pem = context.auth_context().get("x509_pem_cert")
    if not pem:
        return
    refused = revocation.refused(revocation.serial_of_pem(pem[0]))
    if refused is None:
        return
    refusals.count("grpc", refused.reason, refused.message, context.peer())
    await abort_with(context, Unauthenticated(f"the caller is refused: {refused.message}", refused.reason))


class RevocationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose caller presents a revoked certificate (security/revocation.py)
    UNAUTHENTICATED, ErrorInfo reason `UNAUTHENTICATED`, metadata `refusal` =
    `certificate_revoked`, before the servicer sees it; a stream is checked as it opens."""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Handler | None]],
                                details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        inner = behaviour(handler)
        if handler.response_streaming and inspect.isasyncgenfunction(inner):
            async def streamed(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[object]:  # type: ignore[type-arg]
                await _refuse_revoked(context)
                async for response in inner(request, context):
                    yield response

            return replace_behaviour(handler, streamed)
        if handler.response_streaming and inspect.isgeneratorfunction(inner):
            async def generated(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[object]:  # type: ignore[type-arg]
                await _refuse_revoked(context)
                for response in inner(request, context):
                    yield response

            return replace_behaviour(handler, generated)

        async def checked(request: object, context: grpc.aio.ServicerContext) -> object:  # type: ignore[type-arg]
            await _refuse_revoked(context)
            result = inner(request, context)
            return await result if inspect.isawaitable(result) else result

        return replace_behaviour(handler, checked)
