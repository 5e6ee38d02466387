"""The DR generation on every call of the client API (docs/dr.md, "Clients carry the generation").

Every answer of `MessagingService`, `MapService` and `UowService` names the DR generation of the
site that gave it, under the metadata key `strongroom-generation`: in the trailing metadata of
a unary call, in the initial metadata of a stream (sent as the stream opens); a site of
generation 0 (never activated, the common case) names none and its calls are not wrapped. A client keeps the
highest generation it has seen and sends it with every call under the same key.

A member whose site is a primary of an **older** generation than a call names refuses the call
with FENCED before anything is done: the client has talked to a newer primary, so this site may
have been superseded without hearing of it yet (the sites cut off from each other), and a write
here would fork the history the client already saw go on elsewhere. The member then asks the
other site at once (`DrSite.heard_of`): when it is the newer primary, the site fences itself and
refuses every write, as if it had been told by the other site. A call without the key (a client
that has seen no primary yet, or one of another language that does not send it) is served as
before. Standby and fenced sites refuse writes by their role already.

The same wrapping names, on the standard of a shared store (docs/store-operations.md), the
address of its standby under `strongroom-partner`, so that a client that was given the
standard's address alone learns where to go when it is gone.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from strongroom.errors import Fenced, StrongroomError
from strongroom.grpcerrors import GENERATION_METADATA_KEY, PARTNER_METADATA_KEY, abort_with
from strongroom.handlers import Handler, behaviour, replace_behaviour

if TYPE_CHECKING:
    from strongroom.persistence.drsite import DrSite

__all__ = ["CLIENT_SERVICES", "GenerationInterceptor", "generation_in", "partner_metadata"]

CLIENT_SERVICES = ("/strongroom.v1.MessagingService/", "/strongroom.v1.MapService/", "/strongroom.v1.UowService/")
"""The services whose calls carry the generation both ways."""



def partner_metadata(partner: str) -> tuple[tuple[str, str], ...]:
    """What a shared store's standard adds to every answer of the client API ("": nothing)."""
    return ((PARTNER_METADATA_KEY, partner),) if partner else ()


def generation_in(metadata: Sequence[tuple[str, str | bytes]] | None) -> int:
    """The generation a call's metadata names (0: none, or not a number)."""
    for key, value in metadata or ():
        if key == GENERATION_METADATA_KEY:
            try:
                return int(value)
            except (TypeError, ValueError):
                return 0
    return 0


class GenerationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses client calls that name a newer generation than this site's primary, and names
    the site's generation in every answer of the client API."""

    def __init__(self) -> None:
        self.site: DrSite | None = None
        """The member's DR site (set once the member exists: the server is made before it); until
        then calls pass unstamped."""
        self.partner: tuple[tuple[str, str], ...] = ()
        """A shared store's standard: its partner's address under `strongroom-partner`, named in
        every answer of the client API beside the generation (docs/store-operations.md); empty
        for other members."""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Handler | None]],
                                details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(details)
        site = self.site
        if handler is None or not details.method.startswith(CLIENT_SERVICES):
            return handler
        partner = self.partner
        if site is None or not site.loaded:
            # A member still starting knows its site's record only from the realm: no verdict.
            return _stamped(handler, partner) if partner else handler
        role, ours, peer = site.described()
        theirs = generation_in(details.invocation_metadata)
        if theirs > ours and role == "primary":
            site.heard_of(theirs)
            return _refusing(handler, Fenced(
                f"the caller has seen the primary of generation {theirs}; this site is the primary of generation "
                f"{ours} and may have been superseded: it refuses the call and asks the other site "
                f"({','.join(peer) or 'none known'})", {"primary": ",".join(peer), "generation": str(theirs)}))
        if not ours:
            # Generation 0 (never activated): nothing to name, nothing to wrap but the partner.
            return _stamped(handler, partner) if partner else handler
        return _stamped(handler, ((GENERATION_METADATA_KEY, str(ours)), *partner))


def _refusing(handler: Handler, err: StrongroomError) -> Handler:
    async def refuse(_request: object, context: grpc.aio.ServicerContext) -> None:  # type: ignore[type-arg]
        await abort_with(context, err)

    return replace_behaviour(handler, refuse)


def _stamped(handler: Handler, metadata: tuple[tuple[str, str], ...]) -> Handler:
    inner = behaviour(handler)
    if not handler.response_streaming:
        async def unary(request: object, context: grpc.aio.ServicerContext) -> object:  # type: ignore[type-arg]
            context.set_trailing_metadata(metadata)
            return await inner(request, context)

        return replace_behaviour(handler, unary)
    if inspect.isasyncgenfunction(inner):
        async def streamed(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[object]:  # type: ignore[type-arg]
            await context.send_initial_metadata(metadata)
            async for response in inner(request, context):
                yield response

        return replace_behaviour(handler, streamed)

    async def written(request: object, context: grpc.aio.ServicerContext) -> object:  # type: ignore[type-arg]
        await context.send_initial_metadata(metadata)
        return await inner(request, context)

    return replace_behaviour(handler, written)
