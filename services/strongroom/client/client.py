"""The client facade: one `Client` per cluster, handing out publishers, subscriptions and maps
over one `Connection` (see the package docstring)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Self, TypeVar

import grpc

from strongroom.api.v1 import admin_pb2, router_pb2
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.client.connection import Connection
from strongroom.client.maps import Map
from strongroom.client.messages import PublishResult, build_matcher, fill_message
from strongroom.client.publisher import Publisher
from strongroom.client.retry import RetryPolicy
from strongroom.client.shared import SharedSenders
from strongroom.client.subscription import AckMode, DurableKind, Subscription, ack_sync
from strongroom.client.uow import (
    PublicationSubscription,
    ReceivedUnitOfWork,
    UnitOfWork,
    UowResult,
    UowStatusInfo,
    list_subscriptions,
    new_uow_id,
    receive_uow,
    uow_status,
)
from strongroom.client.uow import subscribe as uow_subscribe
from strongroom.client.uow import unsubscribe as uow_unsubscribe
from strongroom.client.uowsender import UowSender
from strongroom.errors import InvalidArgument
from strongroom.observability.msgtrace import STEPS

__all__ = ["MAX_SHARED_PUBLISHERS", "MAX_SHARED_UOW_SENDERS", "SHARED_UOW_WINDOW", "SHARED_WINDOW", "Client"]

T = TypeVar("T")

# publish(): messages in flight on a destination's shared stream, and how many such streams stay open.
SHARED_WINDOW = 1024
MAX_SHARED_PUBLISHERS = 64
# A UnitOfWork's whole commit: UOWs in flight on a (destination, options) shared stream, and how
# many such streams stay open.
SHARED_UOW_WINDOW = 64
MAX_SHARED_UOW_SENDERS = 64

_STORE_ACTIONS = {"disconnect": "DisconnectPersistentStore", "connect": "ConnectPersistentStore",
                  "allow-new": "AllowNewUnitsOfWork"}
"""An operator's store operations and their AdminService calls."""

UowKey = tuple[str, bool | None, bool | None, float | None, int | None]
"""A shared UOW sender's destination and options (persistent, persistent_status, lifetime,
status_lifetime_multiple)."""


class Client:
    """Connection to one persistence cluster through any of its members.

    `timeout` is how long an outage may last before an operation fails (the retry policy's
    timeout, also each unary call's deadline); `retry` replaces the whole policy."""

    def __init__(self, endpoints: str | Sequence[str], client_name: str = "", timeout: float = 30.0,
                 retry: RetryPolicy | None = None, token: str | None = None) -> None:
        # `token`: a bearer token (`strongroom auth issue`) every call carries, over TLS; None:
        # the process's ($STRONGROOM_TOKEN, read by endpoints_from_environment), if any.
        self.connection = Connection(endpoints, retry or RetryPolicy(timeout=timeout), token)
        self.client_name = client_name or f"client-{uuid.uuid4().hex[:8]}"
        self.producer_id = uuid.uuid4().hex
        self._sequence = itertools.count(1)
        # publish(): one shared publisher per (destination, confirm).
        self._publishers: SharedSenders[tuple[str, bool | None], Publisher] = SharedSenders(
            lambda key: Publisher(self.connection, key[0], SHARED_WINDOW, key[1]), MAX_SHARED_PUBLISHERS)
        # UnitOfWork.commit() of a whole UOW: one shared sender per destination and options.
        self._uow_senders: SharedSenders[UowKey, UowSender] = SharedSenders(
            lambda key: UowSender(self.connection, key[0], SHARED_UOW_WINDOW, *key[1:], failures="as_raised"),
            MAX_SHARED_UOW_SENDERS)

    @property
    def endpoints(self) -> list[str]:
        """The member addresses the client was given (or moved to by `set_endpoints`)."""
        return self.connection.endpoints

    async def set_endpoints(self, endpoints: str | Sequence[str]) -> None:
        """The cluster's members are now at `endpoints` (a process that follows their
        registrations: a member moved, one was added): later calls, and the retries of calls
        under way, go there; channels to addresses no longer listed are closed (a call or stream
        on one fails and is retried, subscriptions reopen)."""
        for channel in self.connection.set_endpoints(endpoints):
            await channel.close(grace=1.0)

    @property
    def timeout(self) -> float:
        """Seconds an outage may last before an operation fails."""
        return self.connection.policy.timeout

    # --- connections --------------------------------------------------------------------------

    def channel(self, address: str) -> grpc.aio.Channel:
        """The client's channel to one member, for calls through the generated stubs."""
        return self.connection.channel(address)

    def stub(self, address: str) -> mgrpc.MessagingServiceStub:
        """A messaging stub for an address."""
        return self.connection.messaging(address)

    def candidate(self) -> str:
        """Where the next call goes: the known leader, else the next endpoint."""
        return self.connection.candidate()

    async def retrying(self, call: Callable[[str], Awaitable[T]]) -> T:
        """Run `call(address)` against the leader, following redirects and retrying retriable
        failures under the client's retry policy; raises a `StrongroomError`."""
        return await self.connection.call_leader(call)

    def next_sequence(self) -> int:
        """The next sequence of this client's producer id."""
        return next(self._sequence)

    async def close(self) -> None:
        """End the shared publish and unit-of-work streams and close every channel."""
        self._publishers.abandon()
        self._uow_senders.abandon()
        await self.connection.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- publishing -----------------------------------------------------------------------------

    def make_message(self, body: bytes, fields: dict[str, object] | None = None,
                     producer_id: str | None = None, sequence: int | None = None) -> cpb.Message:
        """A message with a producer id and sequence (by default this client's, and the next)."""
        msg = cpb.Message()
        fill_message(msg, body, fields, producer_id or self.producer_id,
                     sequence if sequence is not None else self.next_sequence())
        return msg

    async def publish(self, destination: str, body: bytes, fields: dict[str, object] | None = None,
                      confirm: bool | None = None, origin: cpb.Origin | None = None,
                      traceparent: str = "") -> PublishResult:
        """Publish one message; with confirmation (the store default) returns once committed.

        Goes on a publish stream the client keeps open per destination (a stream round trip
        costs about half a unary call), so concurrent calls share it and its group-commit
        rounds; failover, redirects and re-sends are the `Publisher`'s. `origin` is for routers
        (`Message.origin`): a forwarded message's ORIGIN_GAP or INVALID_ORIGIN is raised
        (`OriginGap`, `InvalidOrigin`), never retried by the client. `traceparent`: a W3C trace
        context (`Message.traceparent`) that travels with the message to its subscribers."""
        pub = self._publishers.get((destination, confirm))
        return await (await pub.send(body, fields, origin, traceparent))

    def publisher(self, destination: str, window: int = 256, confirm: bool | None = None,
                  resend_refused: bool = True) -> Publisher:
        """A pipelined publisher: up to `window` messages in flight, each confirmed. With
        `resend_refused=False` a message the leader refuses with a retriable reason (e.g.
        ORIGIN_GAP) fails with it instead of being sent again."""
        return Publisher(self.connection, destination, window, confirm, resend_refused)

    # --- subscribing -----------------------------------------------------------------------------

    async def subscribe(self, destination: str, durable: str = "", kind: DurableKind | str | None = None,
                        ack: AckMode | str = AckMode.EXPLICIT, credit: int = 256, sync_ack: bool | None = None,
                        matcher: dict[str, object] | cpb.ContentMatcher | None = None,
                        replay_from_seq: int | None = None, replay_from_time: float | None = None) -> Subscription:
        """Open a subscription (the durable is created if it does not exist).

        `destination` is a topic, a queue or an endpoint. `kind` (a `DurableKind` or its name)
        defaults to standard on a topic; a queue is always shared; an endpoint's durable
        template decides. `ack` is an `AckMode` or its name. `matcher`
        ({field: value | PRESENT | ABSENT}) is the durable's interest, or for a keyed
        last-value durable the key this subscriber follows. `sync_ack` None takes the
        destination's (or template's) default. `replay_from_seq` / `replay_from_time` (unix
        seconds) reposition the durable once, when the subscription first opens."""
        durable_kind = DurableKind.parse(kind) if kind is not None else None
        ack_mode = AckMode.parse(ack)
        if replay_from_seq is not None and replay_from_time is not None:
            raise InvalidArgument("replay from a sequence or from a time, not both")
        replay = None
        if replay_from_seq is not None:
            replay = mpb.ReplayFrom(sequence=replay_from_seq)
        elif replay_from_time is not None:
            replay = mpb.ReplayFrom(time=replay_from_time)
        sub = Subscription(self.connection, destination, durable, durable_kind, ack_mode, credit, sync_ack,
                           build_matcher(matcher), replay, client_name=self.client_name)
        await sub.open()
        return sub

    async def ack(self, destination: str, durable: str, seqs: list[int], subscription_id: str = "") -> None:
        """Synchronous acknowledgment: returns once committed."""
        await ack_sync(self.connection, destination, durable, seqs, subscription_id)

    # --- maps ------------------------------------------------------------------------------------

    def map(self, store: str, name: str) -> Map:
        """A replicated key-value map of a store (created by its first write)."""
        return Map(self.connection, store, name)

    # --- units of work ---------------------------------------------------------------------------

    def unit_of_work(self, destination: str, uow_id: str | None = None, persistent: bool | None = None,
                     persistent_status: bool | None = None, lifetime: float | None = None,
                     status_lifetime_multiple: int | None = None) -> UnitOfWork:
        """A new unit of work to a queue, or a publication to a durable topic (nothing is sent
        before `open`, `send` or `commit`); unset options take the destination's defaults from
        the realm. Committed whole (never opened before), it goes on a `SendBatchStream` the
        client shares per destination and options (see `_commit_whole`)."""
        return UnitOfWork(self.connection, destination, uow_id or new_uow_id(), persistent, persistent_status,
                          lifetime, status_lifetime_multiple, commit_whole=self._commit_whole)

    async def _commit_whole(self, uow: UnitOfWork) -> UowResult:
        """A whole UOW's one request (open + messages + COMMIT) on the shared `UowSender` of its
        destination and options: a round trip on an open stream instead of a new unary call;
        failover, redirects and the re-send under its id are the sender's."""
        sender = self._uow_senders.get((uow.destination, uow.persistent, uow.persistent_status, uow.lifetime,
                                        uow.status_lifetime_multiple))
        return await (await sender.submit(uow.whole_request()))

    def uow_sender(self, destination: str, window: int = 64, persistent: bool | None = None,
                   persistent_status: bool | None = None, lifetime: float | None = None,
                   status_lifetime_multiple: int | None = None) -> UowSender:
        """A pipelined sender of whole units of work to a queue: up to `window` in flight on
        one stream, each committed as one log entry, re-sent under its id after a failover."""
        return UowSender(self.connection, destination, window, persistent, persistent_status, lifetime,
                         status_lifetime_multiple)

    async def receive_uow(self, destination: str, receiver: str, wait: float = 0.0) -> ReceivedUnitOfWork | None:
        """Take the oldest committed unit of work of a queue, whole (None: none within `wait`)."""
        return await receive_uow(self.connection, destination, receiver, wait)

    async def uow_status(self, uow_id: str) -> UowStatusInfo:
        """A unit of work's status by id."""
        return await uow_status(self.connection, uow_id)

    async def subscribe_publications(self, topic: str, subscriber: str) -> tuple[PublicationSubscription, bool]:
        """Subscribe durably to a durable topic: every publication committed from now on waits
        for `subscriber` (`receive_uow(topic, subscriber)`). The subscription, and whether it is
        new (subscribing again marks it used)."""
        return await uow_subscribe(self.connection, topic, subscriber)

    async def unsubscribe_publications(self, topic: str, subscriber: str) -> int:
        """End a durable subscription; how many publications it released."""
        return await uow_unsubscribe(self.connection, topic, subscriber)

    async def publication_subscriptions(self, topic: str = "") -> tuple[list[PublicationSubscription], float]:
        """The durable subscriptions to durable topics (of one topic, or all), and the
        cluster's pseudo-clock."""
        return await list_subscriptions(self.connection, topic)

    # --- operator calls --------------------------------------------------------------------------

    async def delete_durable(self, destination: str, durable: str = "", content: bool = False) -> tuple[str, int]:
        """Delete a durable, named as status lists it (destination or endpoint it was created on,
        name; `content` for one opened through an endpoint; an empty name: a queue's own
        durable, which holds the queue's messages). Its subscriptions end with DURABLE_DELETED.
        Returns its store and how many messages it released; UnknownDurable if there is none."""
        req = admin_pb2.DeleteDurableRequest(destination=destination, durable=durable, content=content)
        connection = self.connection

        async def call(address: str) -> admin_pb2.DeleteDurableResponse:
            reply: admin_pb2.DeleteDurableResponse = await connection.admin(address).DeleteDurable(
                req, timeout=connection.policy.timeout)
            return reply

        reply = await connection.call_leader(call)
        return reply.store, reply.released_messages

    async def list_durables(self, store: str = "", destination: str = "") -> admin_pb2.ListDurablesResponse:
        """Every durable of the cluster as the leader sees it (only those of `store`, created on
        `destination`, when given): pending messages, subscribers, last use and expiry on the
        pseudo-clock (`clock`: the leader's now). UnknownStore for a store the cluster lacks."""
        req = admin_pb2.ListDurablesRequest(store=store, destination=destination)
        connection = self.connection

        async def call(address: str) -> admin_pb2.ListDurablesResponse:
            reply: admin_pb2.ListDurablesResponse = await connection.admin(address).ListDurables(
                req, timeout=connection.policy.timeout)
            return reply

        return await connection.call_leader(call)

    async def origin_marks(self, store: str, destination: str = "") -> list[router_pb2.OriginMark]:
        """The origin marks of a routed store as the leader sees them (only those of
        `destination`, when given): per origin cluster and destination, the highest origin
        sequence of the messages routers forwarded here that the cluster stored. UnknownStore
        for a store the cluster lacks, InvalidArgument for one that is not routed (an empty
        `store`: every routed store of the cluster)."""
        req = admin_pb2.ListOriginMarksRequest(store=store, destination=destination)
        connection = self.connection

        async def call(address: str) -> admin_pb2.ListOriginMarksResponse:
            reply: admin_pb2.ListOriginMarksResponse = await connection.admin(address).ListOriginMarks(
                req, timeout=connection.policy.timeout)
            return reply

        return list((await connection.call_leader(call)).marks)

    async def persistent_store(self, cluster: str = "") -> admin_pb2.PersistentStore:
        """The cluster's persistent store: available, unavailable or taking no new units of work,
        since when and why, what it holds against its capacity and which members cannot write
        their own storage (docs/store-operations.md). The leader answers, from the record in the
        cluster's etcd (any member while there is none)."""
        req = admin_pb2.GetPersistentStoreRequest(cluster=cluster)
        connection = self.connection

        async def call(address: str) -> admin_pb2.PersistentStore:
            reply: admin_pb2.PersistentStore = await connection.admin(address).GetPersistentStore(
                req, timeout=connection.policy.timeout)
            return reply

        return await connection.call_leader(call)

    async def change_persistent_store(self, action: str, cluster: str, reason: str = "") -> admin_pb2.PersistentStore:
        """An operator's store operation on `cluster`: "disconnect" (commands that need
        persistence are refused at once), "connect" (available again, taking no new units of
        work) or "allow-new" (available); `reason` is recorded with the state. The leader
        answers, enforcing the state first. StoreStateError when the store's state does not allow
        it (nothing changed). Returns the store as it is then."""
        rpc = _STORE_ACTIONS.get(action)
        if rpc is None:
            raise InvalidArgument(f"store action {action!r} is not one of {', '.join(_STORE_ACTIONS)}")
        req = admin_pb2.ChangePersistentStoreRequest(cluster=cluster, reason=reason)
        connection = self.connection

        async def call(address: str) -> admin_pb2.PersistentStore:
            reply: admin_pb2.PersistentStore = await getattr(connection.admin(address), rpc)(
                req, timeout=connection.policy.timeout)
            return reply

        return await connection.call_leader(call)

    # --- status ----------------------------------------------------------------------------------

    async def status(self, timeout: float = 3.0) -> list[admin_pb2.ClusterStatus]:
        """Every reachable member's view of its cluster."""
        async def one(address: str) -> admin_pb2.ClusterStatus | None:
            try:
                reply: admin_pb2.ClusterStatus = await self.connection.admin(address).Status(
                    admin_pb2.StatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                return None
            return reply

        results = await asyncio.gather(*(one(a) for a in self.endpoints))
        return [r for r in results if r is not None]

    # --- message tracing ---------------------------------------------------------------------------

    async def set_message_trace(self, destination: str = "", producer_id: str = "", seconds: float = 0.0,
                                off: bool = False) -> admin_pb2.MessageTraceSettings:
        """Turn message tracing on for a destination (or pattern) or a producer id for `seconds`
        (0: ten minutes), or off (`off`; neither given: every filter). Every member of the
        cluster traces while a filter is on. The filters in force."""
        req = admin_pb2.SetMessageTraceRequest(destination=destination, producer_id=producer_id, seconds=seconds,
                                               off=off)
        connection = self.connection

        async def call(address: str) -> admin_pb2.MessageTraceSettings:
            reply: admin_pb2.MessageTraceSettings = await connection.admin(address).SetMessageTrace(
                req, timeout=connection.policy.timeout)
            return reply

        return await connection.call_leader(call)

    async def message_trace(self, destination: str = "", producer_id: str = "", sequence: int = 0, store: str = "",
                            message_seq: int = 0, limit: int = 0,
                            timeout: float = 3.0) -> tuple[list[admin_pb2.MessageTraceStep], list[str]]:
        """The traced steps every reachable member kept that match every criterion given, in
        time order, and the endpoints that did not answer."""
        req = admin_pb2.GetMessageTraceRequest(destination=destination, producer_id=producer_id, sequence=sequence,
                                               store=store, message_seq=message_seq, limit=limit)

        async def one(address: str) -> list[admin_pb2.MessageTraceStep] | None:
            try:
                reply: admin_pb2.GetMessageTraceResponse = await self.connection.admin(address).GetMessageTrace(
                    req, timeout=timeout)
            except grpc.aio.AioRpcError:
                return None
            return list(reply.steps)

        results = await asyncio.gather(*(one(a) for a in self.endpoints))
        order = {s: i for i, s in enumerate(STEPS)}
        steps = sorted((s for r in results if r is not None for s in r),
                       key=lambda s: (s.time, order.get(s.step, len(order))))
        return steps, [a for a, r in zip(self.endpoints, results, strict=True) if r is None]
