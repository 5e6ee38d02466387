"""gRPC servicers of a persistence member: thin adapters over `PersistenceNode`.

Each method validates the request, calls the node, maps domain errors through the error table
and builds the reply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import admin_pb2_grpc as agrpc
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.errors import InvalidArgument, StrongroomError, UnknownDurableKind
from strongroom.grpcerrors import abort_with, to_status
from strongroom.persistence.dispatcher import Subscription
from strongroom.persistence.link import entries_of
from strongroom.persistence.node import PendingPublishes, PersistenceNode, PublishOutcome

__all__ = ["MessagingServicer", "ReplicationServicer", "AdminServicer"]

log = logging.getLogger("strongroom.servicer")

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]


class MessagingServicer(mgrpc.MessagingServiceServicer):
    """The client API."""

    def __init__(self, node: PersistenceNode) -> None:
        self.node = node

    async def Publish(self, request: mpb.PublishRequest, context: Context) -> mpb.PublishResponse:
        try:
            out = await self.node.publish(request.destination, request.message, request.mode)
        except StrongroomError as err:
            await abort_with(context, err)
        return mpb.PublishResponse(correlation_id=request.correlation_id, message_seq=out.message_seq,
                                   duplicate=out.duplicate, confirmed=out.confirmed, log_index=out.log_index)

    async def PublishStream(self, request_iterator: AsyncIterator[mpb.PublishBatch],
                            context: Context) -> AsyncIterator[mpb.PublishResponseBatch]:
        # Each batch is submitted as it arrives (so one group-commit round carries many);
        # responses go out batch by batch, in request order, as their rounds commit.
        try:
            # A stream opened on a member that does not lead ends at once with NOT_LEADER and
            # the leader's address, as a unary call would, so the client follows it directly.
            self.node.require_leader()
        except StrongroomError as err:
            await abort_with(context, err)
        # Per batch read: its requests, submitted (each batch as it arrives, no task per batch).
        out: asyncio.Queue[tuple[list[mpb.PublishRequest], PendingPublishes] | None] = asyncio.Queue()
        term: list[int] = []
        broken: list[StrongroomError] = []

        async def reader() -> None:
            try:
                async for batch in request_iterator:
                    requests = list(batch.requests)
                    out.put_nowait((requests, self.node.submit_publishes(requests, term, broken)))
            finally:
                out.put_nowait(None)

        task = asyncio.create_task(reader())
        try:
            while True:
                item = await out.get()
                if item is None:
                    break
                requests, pending = item
                outcomes = await pending.outcomes()
                reply = mpb.PublishResponseBatch()
                add = reply.responses.add
                for req, res in zip(requests, outcomes):
                    if isinstance(res, PublishOutcome):
                        add(correlation_id=req.correlation_id, message_seq=res.message_seq,
                            duplicate=res.duplicate, confirmed=res.confirmed, log_index=res.log_index)
                    else:
                        assert isinstance(res, StrongroomError)
                        status = to_status(res)
                        add(correlation_id=req.correlation_id, error_code=status.code.value[0],
                            error_reason=res.reason, error_message=res.message)
                yield reply
        finally:
            task.cancel()

    async def Subscribe(self, request_iterator: AsyncIterator[mpb.SubscribeRequest],
                        context: Context) -> AsyncIterator[mpb.SubscribeResponse]:
        first = await request_iterator.__anext__()
        if first.WhichOneof("request") != "open":
            await abort_with(context, InvalidArgument("the first subscribe request must open the subscription"))
        o = first.open
        try:
            if o.kind not in (cpb.DURABLE_KIND_UNSPECIFIED, cpb.DURABLE_KIND_STANDARD,
                              cpb.DURABLE_KIND_SHARED, cpb.DURABLE_KIND_LASTVALUE):
                raise UnknownDurableKind(f"unknown durable kind {o.kind}; use STANDARD, SHARED or LASTVALUE")
            if not o.destination:
                raise InvalidArgument("destination is required")
            sub = await self.node.open_subscription(
                o.destination, o.durable, o.kind, o.client_name, o.credit or 256, matcher=o.matcher,
                ack_sync_mode=o.ack_sync_mode, replay=o.replay if o.HasField("replay") else None)
        except StrongroomError as err:
            await abort_with(context, err)
        control = asyncio.create_task(self._control(sub, o.destination, request_iterator))
        try:
            while True:
                item = await sub.outbox.get()
                if item is None:
                    break
                yield item
        finally:
            control.cancel()
            self.node.close_subscription(sub)

    async def _control(self, sub: Subscription, destination: str,
                       requests: AsyncIterator[mpb.SubscribeRequest]) -> None:
        try:
            async for req in requests:
                which = req.WhichOneof("request")
                if which == "credit":
                    self.node.grant(sub, req.credit)
                elif which == "ack":
                    try:
                        store = self.node.resolve(destination).store
                        await self.node.ack_durable(store, sub.durable_key, list(req.ack.message_seqs), sub.id,
                                                    wait=False)
                    except StrongroomError as err:
                        log.info("async ack rejected: %s", err)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        except Exception:  # noqa: BLE001 - logged; the subscription ends and the client reopens
            log.exception("subscription control stream failed")
        finally:
            self.node.close_subscription(sub)
            sub.outbox.put_nowait(None)

    async def Ack(self, request: mpb.AckRequest, context: Context) -> mpb.AckResponse:
        try:
            if not request.destination:
                raise InvalidArgument("destination is required")
            index = await self.node.ack(request.destination, request.durable, list(request.message_seqs),
                                        request.subscription_id, wait=True)
        except StrongroomError as err:
            await abort_with(context, err)
        return mpb.AckResponse(log_index=index)


class ReplicationServicer(rgrpc.ReplicationServiceServicer):
    """The member-to-member API."""

    def __init__(self, node: PersistenceNode) -> None:
        self.node = node

    async def Promise(self, request: rpb.PromiseRequest, context: Context) -> rpb.PromiseResponse:
        return await self.node.handle_promise(request)

    async def Append(self, request: rpb.AppendRequest, context: Context) -> rpb.AppendResponse:
        return await self.node.handle_append(request)

    async def AppendStream(self, request_iterator: AsyncIterator[rpb.AppendRequestRaw],
                           context: Context) -> None:
        # Reader/writer style: one answer per append, in order, no generator machinery per round.
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            await context.write(await self.node.handle_append(request, *entries_of(request)))

    async def Fetch(self, request: rpb.FetchRequest, context: Context) -> rpb.FetchResponse:
        try:
            return await self.node.handle_fetch(request)
        except StrongroomError as err:
            await abort_with(context, err)

    async def InstallSnapshot(self, request_iterator: AsyncIterator[rpb.SnapshotChunk],
                              context: Context) -> rpb.InstallSnapshotResponse:
        return await self.node.handle_snapshot(request_iterator)


class AdminServicer(agrpc.AdminServiceServicer):
    """Operator API."""

    def __init__(self, node: PersistenceNode) -> None:
        self.node = node

    async def Status(self, request: apb.StatusRequest, context: Context) -> apb.ClusterStatus:
        st = self.node.status()
        stores = st.pop("stores")
        members = st.pop("members")
        reply = apb.ClusterStatus(**st)  # type: ignore[arg-type]
        for m in members:  # type: ignore[attr-defined]
            reply.members.append(apb.MemberStatus(**m))
        for s in stores:  # type: ignore[attr-defined]
            durables = s.pop("durables")
            store = apb.StoreStatus(**s)
            for d in durables:
                store.durables.append(apb.DurableStatus(**d))
            reply.stores.append(store)
        return reply

    async def StepDown(self, request: apb.StepDownRequest, context: Context) -> apb.StepDownResponse:
        was = self.node.is_leader_role()
        if was:
            await self.node.step_down_and_resign()
        return apb.StepDownResponse(stepped_down=was)
