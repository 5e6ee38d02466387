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


def _serial_of_caller(context: grpc.aio.ServicerContext) -> int | None:  # type: ignore[type-arg]
    """The serial number of the caller's certificate (None: no TLS, or none presented)."""
    pem = context.auth_context().get("x509_pem_cert")
    return revocation.serial_of_pem(pem[0]) if pem else None


async def _refuse_revoked(context: grpc.aio.ServicerContext, serial: int | None) -> None:  # type: ignore[type-arg]
    """Abort the call when the caller's certificate is on the authority's revocation list."""
    refused = revocation.refused(serial)
    if refused is None:
        return
    refusals.count("grpc", refused.reason, refused.message, context.peer())
    await abort_with(context, Unauthenticated(f"the caller is refused: {refused.message}", refused.reason))


class RevocationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose caller presents a revoked certificate (security/revocation.py)
    UNAUTHENTICATED, ErrorInfo reason `UNAUTHENTICATED`, metadata `refusal` =
    `certificate_revoked`, before the servicer sees it. A stream is checked as it opens, and a
    stream of responses (a subscription) again before each response, so a revocation ends it;
    a reader/writer stream opened before the revocation runs on until it ends (README,
    Security). Every Strongroom handler is a coroutine or an async generator; any other kind
    is refused here rather than run unchecked."""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Handler | None]],
                                details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        inner = behaviour(handler)
        if inspect.isasyncgenfunction(inner):
            async def streamed(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[object]:  # type: ignore[type-arg]
                serial = _serial_of_caller(context)
                await _refuse_revoked(context, serial)
                async for response in inner(request, context):
                    await _refuse_revoked(context, serial)
                    yield response

            return replace_behaviour(handler, streamed)
        if not inspect.iscoroutinefunction(inner):
            raise TypeError(f"{details.method}: a handler that is neither a coroutine nor an async generator "
                            f"cannot be checked for revoked certificates")

        async def checked(request: object, context: grpc.aio.ServicerContext) -> object:  # type: ignore[type-arg]
            await _refuse_revoked(context, _serial_of_caller(context))
            return await inner(request, context)

        return replace_behaviour(handler, checked)
