"""RouterService over gRPC: check, delegate to the `Router`, map its errors through the one
error table (`strongroom.grpcerrors`)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc

from strongroom.api.v1 import router_pb2 as rpb
from strongroom.api.v1 import router_pb2_grpc as rgrpc
from strongroom.errors import StrongroomError
from strongroom.grpcerrors import abort_with
from strongroom.routing.interest import ClusterInterest
from strongroom.routing.router import Router
from strongroom.security.access import Action
from strongroom.security.calls import require_peer
from strongroom.security.guard import Guard
from strongroom.security.identity import Kind

__all__ = ["RouterServicer"]

class RouterServicer(rgrpc.RouterServiceServicer):
    """The RouterService of one router replica."""

    def __init__(self, router: Router, guard: Guard) -> None:
        self.router = router
        self.guard = guard
        """Who may read the router's status (`browse`, where the realm enables auth)."""

    async def _neighbours_only(self, context: grpc.aio.ServicerContext, claimed: str = "") -> None:  # type: ignore[type-arg]
        # Only the router of a cluster that shares a zone with this one (of the one the call
        # says it comes from, when it says).
        await require_peer(context, [claimed] if claimed else self.router.neighbours(), [Kind.ROUTER],
                           "route")

    async def ExchangeInterest(self, request: rpb.InterestExchange, context: grpc.aio.ServicerContext) -> rpb.InterestExchange:  # type: ignore[type-arg]
        await self._neighbours_only(context, request.from_cluster)
        try:
            self.router.require_active()
            records = self.router.exchange(request.from_cluster,
                                           [ClusterInterest.from_proto(r) for r in request.clusters])
        except StrongroomError as err:
            await abort_with(context, err)
        return rpb.InterestExchange(from_cluster=self.router.cluster, clusters=[r.to_proto() for r in records])

    async def Forward(self, request_iterator: AsyncIterable[rpb.ForwardBatch],  # type: ignore[override]
                      context: grpc.aio.ServicerContext) -> AsyncIterator[rpb.ForwardAck]:  # type: ignore[type-arg]
        await self._neighbours_only(context)
        try:
            self.router.require_active()
        except StrongroomError as err:
            await abort_with(context, err)
        async for ack in self.router.receiver.forward(request_iterator):
            yield ack

    async def Status(self, request: rpb.RouterStatusRequest, context: grpc.aio.ServicerContext) -> rpb.RouterStatus:  # type: ignore[type-arg]
        await self.guard.require(context, Action.BROWSE)
        return self.router.status()
