"""gRPC servicers of a persistence member: thin adapters over the member's domain objects.

Each method translates the request into domain values, calls the domain (over the Protocols
below, never the concrete node), maps domain errors through the error table (`grpcerrors`) and
builds the reply. Validation lives in the domain fronts, not here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol, cast

import grpc

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.errors import (InvalidArgument, StrongroomError,
                               error_for_reason)
from strongroom.grpcerrors import abort_with, to_status
from strongroom.persistence.committed import CommittedBatch
from strongroom.security.access import Access, Action
from strongroom.security.calls import require_peer
from strongroom.security.guard import Guard
from strongroom.security.identity import Kind
from strongroom.security.tls import peer_identity
from strongroom.persistence.dispatcher import Closed, Delivered, Outgoing, Refusal, Subscription
from strongroom.persistence.link import entries_of
from strongroom.persistence.messaging import Replay
from strongroom.persistence.publishing import PendingPublishes, PublishItem, PublishOutcome
from strongroom.wire import delivery, destination_field, subscribe_deliveries

__all__ = ["MessagingServicer", "ReplicationServicer"]

log = logging.getLogger("strongroom.servicer")

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]


class Messaging(Protocol):
    """The messaging front (`MessagingFront`)."""

    async def publish(self, item: PublishItem, access: Access | None = None) -> PublishOutcome: ...

    def submit_publishes(self, items: Sequence[PublishItem], pin: list[int] | None,
                         broken: list[StrongroomError], access: Access | None = None) -> PendingPublishes: ...

    def store_of(self, destination: str) -> str: ...

    def check_leader(self) -> None: ...

    def named(self, err: StrongroomError) -> StrongroomError: ...

    async def open_subscription(self, destination: str, durable_name: str, kind: int, client_name: str,
                                credit: int, matcher: cpb.ContentMatcher | None = None, ack_sync_mode: int = 0,
                                replay: Replay | None = None, ack_mode: int = 0) -> Subscription: ...

    def grant(self, sub: Subscription, credit: int) -> None: ...

    def close_subscription(self, sub: Subscription) -> None: ...

    async def ack(self, destination: str, durable_name: str, seqs: list[int], sub_id: str) -> int: ...

    def ack_subscription(self, sub: Subscription, destination: str,
                         seqs: list[int]) -> list[tuple[int, StrongroomError]]: ...

    def refused(self, sub: Subscription, operation: str, refusals: list[tuple[int, StrongroomError]]) -> None: ...

    def nak_subscription(self, sub: Subscription, destination: str, seqs: list[int],
                         delay: float) -> list[tuple[int, StrongroomError]]: ...

    def term_subscription(self, sub: Subscription, destination: str,
                          seqs: list[int]) -> list[tuple[int, StrongroomError]]: ...


class MessagingServicer(mgrpc.MessagingServiceServicer):
    """The client API."""

    def __init__(self, front: Messaging, guard: Guard) -> None:
        self.front = front
        self.guard = guard

    async def _may_subscribe(self, context: Context, destination: str) -> Access | None:
        """The caller's access, once it may subscribe to `destination` (else the call ends
        PERMISSION_DENIED)."""
        return await self.guard.require(context, Action.SUBSCRIBE, destination=destination,
                                        store_of=self.front.store_of)

    async def Publish(self, request: mpb.PublishRequest, context: Context) -> mpb.PublishResponse:
        access = await self.guard.caller(context)
        try:
            # The request is a PublishItem as it is (publishing.PublishItem), presence of `message` included.
            out = await self.front.publish(request, access)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return mpb.PublishResponse(correlation_id=request.correlation_id, message_seq=out.message_seq,
                                   duplicate=out.duplicate, confirmed=out.confirmed, log_index=out.log_index,
                                   no_interest=out.no_interest)

    async def PublishStream(self, request_iterator: AsyncIterator[mpb.PublishBatch],
                            context: Context) -> AsyncIterator[mpb.PublishResponseBatch]:
        # Each batch is submitted as it arrives (so one group-commit round carries many);
        # responses go out batch by batch, in request order, as their rounds commit.
        try:
            # A stream opened on a member that does not lead ends at once with NOT_LEADER and
            # the leader's address, as a unary call would, so the client follows it directly.
            self.front.check_leader()
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        access = await self.guard.caller(context)
        # Per batch read: its requests, submitted (each batch as it arrives, no task per batch).
        out: asyncio.Queue[tuple[list[mpb.PublishRequest], PendingPublishes] | None] = asyncio.Queue()
        pin: list[int] = []
        broken: list[StrongroomError] = []

        async def reader() -> None:
            try:
                async for batch in request_iterator:
                    # A PublishRequest is a PublishItem as it is (publishing.PublishItem says why).
                    requests = list(batch.requests)
                    out.put_nowait((requests, self.front.submit_publishes(requests, pin, broken, access)))
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
                            duplicate=res.duplicate, confirmed=res.confirmed, log_index=res.log_index,
                            no_interest=res.no_interest)
                    else:
                        res = self.front.named(res)
                        status = to_status(res)
                        add(correlation_id=req.correlation_id, error_code=status.code.value[0],
                            error_reason=res.reason, error_message=res.message, error_metadata=res.metadata)
                yield reply
        finally:
            task.cancel()

    async def Subscribe(self, request_iterator: AsyncIterator[mpb.SubscribeRequest],
                        context: Context) -> AsyncIterator[mpb.SubscribeResponse]:
        first = await request_iterator.__anext__()
        if first.WhichOneof("request") != "open":
            await abort_with(context, InvalidArgument("the first subscribe request must open the subscription"))
        o = first.open
        access = await self._may_subscribe(context, o.destination)
        start = o.replay.WhichOneof("start") if o.HasField("replay") else None
        replay = (Replay(sequence=o.replay.sequence) if start == "sequence" else
                  Replay(time=o.replay.time) if start == "time" else None)
        try:
            sub = await self.front.open_subscription(
                o.destination, o.durable, o.kind, o.client_name, o.credit or 256, matcher=o.matcher,
                ack_sync_mode=o.ack_sync_mode, replay=replay, ack_mode=o.ack_mode)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        # A later request that breaks the protocol ends the stream with its error.
        broken: list[StrongroomError] = []
        control = asyncio.create_task(self._control(sub, o.destination, request_iterator, broken, access))
        try:
            while True:
                item = await sub.outbox.get()
                if item is None:
                    break
                yield subscribe_answer(item, self.front.named)
        finally:
            control.cancel()
            self.front.close_subscription(sub)
        if broken:
            await abort_with(context, broken[0])

    async def _control(self, sub: Subscription, destination: str, requests: AsyncIterator[mpb.SubscribeRequest],
                       broken: list[StrongroomError], access: Access | None) -> None:
        try:
            async for req in requests:
                if access is not None:
                    # A revoked token or a realm that takes the permission away ends the stream.
                    try:
                        access.check(Action.SUBSCRIBE, self.front.store_of(destination), destination)
                    except StrongroomError as err:
                        broken.append(err)
                        return
                which = req.WhichOneof("request")
                if which == "credit":
                    self.front.grant(sub, req.credit)
                elif which in ("ack", "nak", "term"):
                    self._settle(sub, destination, which, req)
                else:
                    # A second open, or a request with nothing set (or a kind this version does
                    # not know): nothing it could mean is done silently.
                    broken.append(InvalidArgument(
                        "a subscribe stream opens one subscription, with its first request; later requests "
                        "carry credit, ack, nak or term" if which == "open" else
                        "subscribe request carries nothing this member knows (credit, ack, nak or term)"))
                    return
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        except Exception:  # logged; the subscription ends and the client reopens
            log.exception("subscription control stream failed")
        finally:
            self.front.close_subscription(sub)
            sub.outbox.put_nowait(None)

    def _settle(self, sub: Subscription, destination: str, which: str, req: mpb.SubscribeRequest) -> None:
        """An ack, nak or term on the stream: what is refused goes back to the subscriber."""
        seqs = list(req.ack.message_seqs if which == "ack" else req.nak.message_seqs if which == "nak"
                    else req.term.message_seqs)
        try:
            if which == "ack":
                refused = self.front.ack_subscription(sub, destination, seqs)
            elif which == "nak":
                refused = self.front.nak_subscription(sub, destination, seqs, req.nak.delay_seconds)
            else:
                refused = self.front.term_subscription(sub, destination, seqs)
        except StrongroomError as err:
            # The whole batch (a last-value durable, a bad delay, this member no longer leads).
            refused = [(seq, err) for seq in seqs]
        if refused:
            log.info("%s of %d message(s) of subscription %s refused: %s", which, len(refused), sub.id,
                     refused[0][1])
            self.front.refused(sub, which, refused)

    async def Ack(self, request: mpb.AckRequest, context: Context) -> mpb.AckResponse:
        await self._may_subscribe(context, request.destination)
        try:
            index = await self.front.ack(request.destination, request.durable, list(request.message_seqs),
                                         request.subscription_id)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return mpb.AckResponse(log_index=index)


def subscribe_answer(item: Outgoing, named: Callable[[StrongroomError], StrongroomError] = lambda err: err
                     ) -> mpb.SubscribeResponse | bytes:
    """What the Subscribe stream writes for an item of a subscription's outbox: deliveries as
    the encoded `SubscribeResponse` (each stored message serialised once and joined with its
    delivery's fields, `wire.delivery`: not copied into a `Delivery`), anything else as
    `subscribe_response` builds it. The Subscribe handler passes bytes through
    (`server.add_messaging_service`)."""
    if isinstance(item, list) and item and isinstance(item[0], Delivered):
        fields: dict[str, bytes] = {}
        encoded = []
        for d in cast(list[Delivered], item):
            dest = fields.get(d.destination)
            if dest is None:
                dest = fields[d.destination] = destination_field(d.destination)
            encoded.append(delivery(d.message_seq, d.message.SerializeToString(), d.delivery_count, dest,
                                    d.published_at))
        return subscribe_deliveries(encoded)
    return subscribe_response(item, named)


def subscribe_response(item: Outgoing, named: Callable[[StrongroomError], StrongroomError] = lambda err: err
                       ) -> mpb.SubscribeResponse:
    """The Subscribe stream's message for what the dispatcher put in a subscription's outbox.
    `named` completes an error as the client is told it (a NOT_LEADER names the leader this
    member knows of when the message is written)."""
    if isinstance(item, list):
        reply = mpb.SubscribeResponse()
        if item and isinstance(item[0], Refusal):
            refuse = reply.refusals.refusals.add
            for r in cast(list[Refusal], item):
                err = named(r.error)
                refuse(message_seq=r.message_seq, operation=r.operation, reason=err.reason, message=err.message,
                       metadata=err.metadata)
            return reply
        add = reply.deliveries.deliveries.add
        for d in cast(list[Delivered], item):
            add(message_seq=d.message_seq, message=d.message, delivery_count=d.delivery_count,
                destination=d.destination, published_at=d.published_at)
        return reply
    if isinstance(item, Closed):
        # The metadata of the reason's error: NOT_LEADER's names the leader (empty when unknown).
        err = named(error_for_reason(item.reason, item.message))
        return mpb.SubscribeResponse(closed=mpb.SubscriptionClosed(reason=item.reason, message=item.message,
                                                                   metadata=err.metadata))
    return mpb.SubscribeResponse(opened=mpb.SubscriptionOpened(
        subscription_id=item.subscription_id, durable=item.durable, kind=item.kind, key_field=item.key_field,
        ack_sync_mode=item.ack_sync_mode))


class Replicating(Protocol):
    """The follower side of replication (`Follower`)."""

    async def handle_promise(self, req: rpb.PromiseRequest) -> rpb.PromiseResponse: ...

    async def handle_append(self, req: rpb.AppendRequest | rpb.AppendRequestRaw,
                            entries: list[rpb.LogEntry] | None = None,
                            raws: list[bytes] | None = None) -> rpb.AppendResponse: ...

    async def handle_fetch(self, req: rpb.FetchRequest) -> rpb.FetchResponse: ...

    def handle_fetch_snapshot(self, req: rpb.FetchSnapshotRequest) -> AsyncIterator[rpb.SnapshotChunk]: ...

    async def handle_snapshot(self, chunks: AsyncIterator[rpb.SnapshotChunk]) -> rpb.InstallSnapshotResponse: ...


class CommittedLog(Protocol):
    """The committed-entry stream of a member, and a standby leader's intake of shipped entries
    (`PersistenceNode`; disaster recovery, docs/dr.md)."""

    member: str

    def committed_entries(self, from_index: int, max_entries: int = 0,
                          heartbeat: float = 0.0) -> AsyncIterator[CommittedBatch]: ...

    def ship(self, first_index: int, raws: list[bytes], snapshot: bytes = b"", snapshot_index: int = 0,
             snapshot_epoch: int = 0, primary_commit_index: int = 0, prev_epoch: int | None = None,
             primary_messages: int = 0) -> tuple[bool, int, int, int, int]: ...

    async def compare_generation(self, theirs: rpb.GenerationInfo) -> rpb.GenerationInfo: ...


class ReplicationServicer(rgrpc.ReplicationServiceServicer):
    """The member-to-member API. Every method maps domain errors; appends normally come on the
    `AppendStream` or the replication link, the unary `Append` serves tools and leaders of
    versions before the stream. `StreamCommitted` serves readers outside the cluster."""

    def __init__(self, follower: Replicating, committed: CommittedLog, cluster: str, guard: Guard) -> None:
        self.follower = follower
        self.committed = committed
        self.cluster = cluster
        self.guard = guard
        """What a user calling the operators' reads needs (`administer`, where the realm enables auth)."""

    async def _users_administer(self, context: Context) -> None:
        """A user (not the deployment's own processes) needs `administer` on the whole realm."""
        peer = peer_identity(context)
        if peer is not None and peer.kind is Kind.USER:
            await self.guard.require(context, Action.ADMINISTER)

    async def _members_only(self, context: Context, claimed: str = "") -> None:
        await require_peer(context, self.cluster, [Kind.MEMBER], "replicate", claimed)

    async def Promise(self, request: rpb.PromiseRequest, context: Context) -> rpb.PromiseResponse:
        await self._members_only(context, request.leader)
        try:
            return await self.follower.handle_promise(request)
        except StrongroomError as err:
            await abort_with(context, err)

    async def Append(self, request: rpb.AppendRequest, context: Context) -> rpb.AppendResponse:
        await self._members_only(context, request.leader)
        try:
            return await self.follower.handle_append(request)
        except StrongroomError as err:
            await abort_with(context, err)

    async def AppendStream(self, request_iterator: AsyncIterator[rpb.AppendRequestRaw],
                           context: Context) -> None:
        # Reader/writer style: one answer per append, in order, no generator machinery per round.
        checked = ""
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            if request.leader != checked:  # the caller once per stream, unless it claims another name
                await self._members_only(context, request.leader)
                checked = request.leader
            try:
                answer = await self.follower.handle_append(request, *entries_of(request))
            except StrongroomError as err:
                await abort_with(context, err)
            await context.write(answer)

    async def Fetch(self, request: rpb.FetchRequest, context: Context) -> rpb.FetchResponse:
        await self._members_only(context)
        try:
            return await self.follower.handle_fetch(request)
        except StrongroomError as err:
            await abort_with(context, err)

    async def FetchSnapshot(self, request: rpb.FetchSnapshotRequest, context: Context) -> AsyncIterator[rpb.SnapshotChunk]:
        await self._members_only(context)
        try:
            async for chunk in self.follower.handle_fetch_snapshot(request):
                yield chunk
        except StrongroomError as err:
            await abort_with(context, err)

    async def InstallSnapshot(self, request_iterator: AsyncIterator[rpb.SnapshotChunk],
                              context: Context) -> rpb.InstallSnapshotResponse:
        await self._members_only(context)

        async def chunks() -> AsyncIterator[rpb.SnapshotChunk]:
            # The leader a chunk names is the caller (it takes the member's promise): checked as
            # Append checks it, before the chunk is read on (nothing is stored when refused).
            checked = ""
            async for chunk in request_iterator:
                if chunk.leader and chunk.leader != checked:
                    await self._members_only(context, chunk.leader)
                    checked = chunk.leader
                yield chunk

        try:
            return await self.follower.handle_snapshot(chunks())
        except StrongroomError as err:
            await abort_with(context, err)

    async def StreamCommitted(self, request: rpb.StreamCommittedRequest, context: Context) -> None:
        # Operators' tools read it too (the activation's tail report, the drills, the chaos
        # checker): as a user (who needs `administer` where the realm enables auth: the log holds
        # every message), or from the realm service's pod (the chart's `kubectl exec` tools), as
        # the realm service.
        await require_peer(context, self.cluster, [Kind.DR, Kind.MEMBER, Kind.USER, Kind.REALM], "read-committed")
        await self._users_administer(context)
        member = self.committed.member
        try:
            batches = self.committed.committed_entries(request.from_index, request.max_entries,
                                                       request.heartbeat_ms / 1000)
            async for b in batches:
                await context.write(rpb.CommittedEntries(
                    first_index=b.first_index, entries=b.entries, commit_index=b.commit_index, snapshot=b.snapshot,
                    snapshot_index=b.snapshot_index, snapshot_epoch=b.snapshot_epoch, member=member,
                    prev_epoch=b.prev_epoch, leader_silence_seconds=b.leader_silence, applied_index=b.applied_index,
                    stored_messages=b.stored_messages, acked_messages=b.acked_messages))
        except StrongroomError as err:
            await abort_with(context, err)

    async def ShipEntries(self, request: rpb.ShipEntriesRequest, context: Context) -> rpb.ShipEntriesResponse:
        await require_peer(context, self.cluster, [Kind.DR], "ship")
        try:
            accepted, last, applied, stored, acked = self.committed.ship(
                request.first_index, list(request.entries), request.snapshot, request.snapshot_index,
                request.snapshot_epoch, request.primary_commit_index, request.prev_epoch if request.entries else None,
                request.primary_stored_messages)
        except StrongroomError as err:
            await abort_with(context, err)
        return rpb.ShipEntriesResponse(accepted=accepted, last_index=last, applied_index=applied, stored_messages=stored,
                                       acked_messages=acked)

    async def CompareGeneration(self, request: rpb.GenerationInfo, context: Context) -> rpb.GenerationInfo:
        await require_peer(context, self.cluster, [Kind.MEMBER, Kind.DR, Kind.USER, Kind.REALM], "compare-generation")
        await self._users_administer(context)
        try:
            return await self.committed.compare_generation(request)
        except StrongroomError as err:
            await abort_with(context, err)
