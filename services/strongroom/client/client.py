"""Client implementation (see the package docstring)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import grpc

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.client.maps import Map
from strongroom.errors import (
    InvalidArgument,
    NoLeaderError,
    NotLeaderError,
    PersistenceUnavailable,
    StrongroomError,
    error_for_reason,
)
from strongroom.grpcerrors import from_rpc_error
from strongroom.wire import BATCH_REQUESTS, length_delimited

__all__ = ["Client", "Publisher", "Subscription", "Received", "PublishResult", "KINDS", "to_field", "from_field"]

log = logging.getLogger("strongroom.client")

T = TypeVar("T")

KINDS = {
    "standard": cpb.DURABLE_KIND_STANDARD,
    "shared": cpb.DURABLE_KIND_SHARED,
    "lastvalue": cpb.DURABLE_KIND_LASTVALUE,
    "last-value": cpb.DURABLE_KIND_LASTVALUE,
}
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
]
# Most publish requests carried by one stream message.
MAX_STREAM_BATCH = 512
PUBLISH_STREAM = "/strongroom.v1.MessagingService/PublishStream"
# publish(): messages in flight on a destination's shared stream, and how many such streams stay open.
SHARED_WINDOW = 1024
MAX_SHARED_PUBLISHERS = 64
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
              grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def to_field(value: object) -> cpb.FieldValue:
    """A Python value as a typed message field."""
    if isinstance(value, bool):
        return cpb.FieldValue(bool_value=value)
    if isinstance(value, int):
        return cpb.FieldValue(int_value=value)
    if isinstance(value, float):
        return cpb.FieldValue(float_value=value)
    if isinstance(value, bytes):
        return cpb.FieldValue(bytes_value=value)
    if isinstance(value, str):
        return cpb.FieldValue(string_value=value)
    raise InvalidArgument(f"field values are str, int, float, bytes or bool, not {type(value).__name__}")


class _Test:
    def __init__(self, name: str, test: int) -> None:
        self.name = name
        self.test = test

    def __repr__(self) -> str:
        return self.name


PRESENT = _Test("PRESENT", cpb.FIELD_TEST_PRESENT)
"""Matcher condition: the field is present (any value)."""
ABSENT = _Test("ABSENT", cpb.FIELD_TEST_ABSENT)
"""Matcher condition: the field is absent."""


def build_matcher(spec: dict[str, object] | cpb.ContentMatcher | None) -> cpb.ContentMatcher:
    """A content matcher from {field: value | PRESENT | ABSENT}; values match by type and value
    (1 matches an integer field 1, not a float 1.0 or a string "1")."""
    if spec is None:
        return cpb.ContentMatcher()
    if isinstance(spec, cpb.ContentMatcher):
        return spec
    matcher = cpb.ContentMatcher()
    for name, value in spec.items():
        if isinstance(value, _Test):
            matcher.fields[name].test = value.test  # type: ignore[assignment]
        else:
            matcher.fields[name].equals.CopyFrom(to_field(value))
    return matcher


def from_field(value: cpb.FieldValue) -> object:
    """A typed message field as a Python value."""
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


def _fill_message(msg: cpb.Message, body: bytes, fields: dict[str, object] | None, producer_id: str,
                  sequence: int) -> None:
    msg.body = body
    msg.producer_id = producer_id
    msg.sequence = sequence
    for key, value in (fields or {}).items():
        msg.fields[key].CopyFrom(to_field(value))


class PublishResult(NamedTuple):
    """What the leader said about a published message."""

    message_seq: int
    duplicate: bool
    confirmed: bool


@dataclass
class Received:
    """A delivered message."""

    seq: int
    body: bytes
    fields: dict[str, object]
    delivery_count: int
    destination: str
    producer_id: str
    sequence: int
    published_at: float = 0.0
    _sub: Subscription | None = field(default=None, repr=False)

    async def ack(self) -> None:
        """Acknowledge this message on its subscription."""
        if self._sub is None:
            raise InvalidArgument("message is not attached to a subscription")
        await self._sub.ack(self)

    def to_json(self) -> dict[str, object]:
        """A JSON-friendly dict (body as text when it is UTF-8, else base64)."""
        try:
            body: str = self.body.decode()
            encoding = "utf-8"
        except UnicodeDecodeError:
            body = base64.b64encode(self.body).decode()
            encoding = "base64"
        fields = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v) for k, v in self.fields.items()}
        return {"seq": self.seq, "delivery_count": self.delivery_count, "destination": self.destination,
                "producer_id": self.producer_id, "sequence": self.sequence,
                "published_at": self.published_at, "body": body,
                "body_encoding": encoding, "fields": fields}


def _domain_error(exc: grpc.RpcError) -> StrongroomError | None:
    return from_rpc_error(exc)


class Client:
    """Connection to one persistence cluster through any of its members."""

    def __init__(self, endpoints: str | Sequence[str], client_name: str = "", timeout: float = 30.0) -> None:
        items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
        self.endpoints = [e.strip() for e in items if e.strip()]
        if not self.endpoints:
            raise InvalidArgument("no endpoints given")
        self.client_name = client_name or f"client-{uuid.uuid4().hex[:8]}"
        self.timeout = timeout
        self.producer_id = uuid.uuid4().hex
        self._sequence = itertools.count(1)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._leader: str | None = None
        self._rotation = itertools.cycle(range(len(self.endpoints)))
        # publish(): one shared publisher per (destination, confirm), most recently used last.
        self._publishers: dict[tuple[str, bool | None], Publisher] = {}
        self._closing: set[asyncio.Future[None]] = set()

    # --- connections --------------------------------------------------------------------------

    def next_sequence(self) -> int:
        """The next sequence of this client's producer id."""
        return next(self._sequence)

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        return ch

    def stub(self, address: str) -> mgrpc.MessagingServiceStub:
        """A messaging stub for an address."""
        return mgrpc.MessagingServiceStub(self._channel(address))

    def candidate(self) -> str:
        """Where to send the next call: the known leader, else the next endpoint."""
        if self._leader:
            return self._leader
        return self.endpoints[next(self._rotation)]

    def note_failure(self, address: str, err: StrongroomError | None) -> None:
        """Learn from a failed call: follow NOT_LEADER, forget a leader that went away."""
        if isinstance(err, NotLeaderError) and err.leader_address and err.leader_address != address:
            self._leader = err.leader_address
        elif self._leader == address:
            self._leader = None

    def note_leader(self, address: str) -> None:
        """A call succeeded here: this is the leader."""
        self._leader = address

    async def retrying(self, call: Callable[[str], Awaitable[T]], deadline: float | None = None) -> T:
        """Run `call(address)` against the leader, following redirects and retrying transient
        failures until the client's timeout."""
        deadline = deadline or time.monotonic() + self.timeout
        delay = 0.02
        last: Exception | None = None
        while True:
            address = self.candidate()
            try:
                result = await call(address)
                self.note_leader(address)
                return result
            except grpc.aio.AioRpcError as exc:
                err = _domain_error(exc)
                if err is not None and not err.retriable:
                    raise err from None
                if err is None and exc.code() not in _TRANSIENT:
                    raise
                self.note_failure(address, err)
                last = err or exc
                if isinstance(err, NotLeaderError) and err.leader_address:
                    delay = 0.02
                    continue
            if time.monotonic() + delay > deadline:
                if isinstance(last, StrongroomError):
                    raise last
                raise NoLeaderError(f"no leader reachable within {self.timeout:.0f}s: {last}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def close(self) -> None:
        """End the shared publish streams and close every channel."""
        publishers = list(self._publishers.values())
        self._publishers.clear()
        for pub in publishers:
            pub.abandon()
        for task in list(self._closing):
            task.cancel()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- publishing -----------------------------------------------------------------------------

    def make_message(self, body: bytes, fields: dict[str, object] | None = None,
                     producer_id: str | None = None, sequence: int | None = None) -> cpb.Message:
        """A message with a producer id and sequence (by default this client's, and the next)."""
        msg = cpb.Message()
        _fill_message(msg, body, fields, producer_id or self.producer_id,
                      sequence if sequence is not None else self.next_sequence())
        return msg

    async def publish(self, destination: str, body: bytes, fields: dict[str, object] | None = None,
                      confirm: bool | None = None) -> PublishResult:
        """Publish one message; with confirmation (the store default) returns once committed.

        Goes on a publish stream the client keeps open per destination (a stream round trip
        costs about half a unary call), so concurrent calls share it and its group-commit
        rounds; failover, redirects and re-sends are the `Publisher`'s."""
        key = (destination, confirm)
        pub = self._publishers.pop(key, None)
        if pub is None or pub.closed:
            pub = Publisher(self, destination, SHARED_WINDOW, confirm)
            if len(self._publishers) >= MAX_SHARED_PUBLISHERS:
                # Least recently used first: its stream closes once what it carries is confirmed.
                oldest = next(iter(self._publishers))
                task = asyncio.ensure_future(self._publishers.pop(oldest).close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self._publishers[key] = pub
        return await (await pub.send(body, fields))

    def publisher(self, destination: str, window: int = 256, confirm: bool | None = None) -> Publisher:
        """A pipelined publisher: up to `window` messages in flight, each confirmed."""
        return Publisher(self, destination, window, confirm)

    # --- subscribing -----------------------------------------------------------------------------

    async def subscribe(self, destination: str, durable: str = "", kind: str | None = None,
                        ack: str = "explicit", credit: int = 256, sync_ack: bool | None = None,
                        matcher: dict[str, object] | cpb.ContentMatcher | None = None,
                        replay_from_seq: int | None = None, replay_from_time: float | None = None) -> Subscription:
        """Open a subscription (the durable is created if it does not exist).

        `destination` is a topic, a queue or an endpoint. `kind` defaults to standard on a topic;
        a queue is always shared; an endpoint's durable template decides. `matcher`
        ({field: value | PRESENT | ABSENT}) is the durable's interest, or for a keyed
        last-value durable the key this subscriber follows. `sync_ack` None takes the
        destination's (or template's) default. `replay_from_seq` / `replay_from_time` (unix
        seconds) reposition the durable once, when the subscription first opens."""
        if kind is not None and kind not in KINDS:
            raise InvalidArgument(f"unknown durable kind {kind!r}; use standard, shared or lastvalue")
        if ack not in ("explicit", "auto"):
            raise InvalidArgument(f"unknown ack mode {ack!r}; use explicit or auto")
        if replay_from_seq is not None and replay_from_time is not None:
            raise InvalidArgument("replay from a sequence or from a time, not both")
        replay = None
        if replay_from_seq is not None:
            replay = mpb.ReplayFrom(sequence=replay_from_seq)
        elif replay_from_time is not None:
            replay = mpb.ReplayFrom(time=replay_from_time)
        sub = Subscription(self, destination, durable, KINDS[kind] if kind else cpb.DURABLE_KIND_UNSPECIFIED,
                           ack, credit, sync_ack, build_matcher(matcher), replay)
        await sub.open()
        return sub

    async def ack(self, destination: str, durable: str, seqs: list[int], subscription_id: str = "") -> None:
        """Synchronous acknowledgment: returns once committed."""
        req = mpb.AckRequest(destination=destination, durable=durable, message_seqs=seqs,
                             subscription_id=subscription_id)

        async def call(address: str) -> mpb.AckResponse:
            return await self.stub(address).Ack(req, timeout=self.timeout)

        await self.retrying(call)

    # --- maps ------------------------------------------------------------------------------------

    def map(self, store: str, name: str) -> Map:
        """A replicated key-value map of a store (created by its first write)."""
        return Map(self, store, name)

    # --- status ----------------------------------------------------------------------------------

    async def status(self, timeout: float = 3.0) -> list[admin_pb2.ClusterStatus]:
        """Every reachable member's view of its cluster."""
        async def one(address: str) -> admin_pb2.ClusterStatus | None:
            try:
                stub = admin_pb2_grpc.AdminServiceStub(self._channel(address))
                return await stub.Status(admin_pb2.StatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                return None

        results = await asyncio.gather(*(one(a) for a in self.endpoints))
        return [r for r in results if r is not None]


class Publisher:
    """Pipelined publishing over one PublishStream, re-sent unconfirmed after a failover."""

    def __init__(self, client: Client, destination: str, window: int, confirm: bool | None) -> None:
        self.client = client
        self.destination = destination
        self.window = window
        self.mode = (mpb.PUBLISH_MODE_STORE_DEFAULT if confirm is None else
                     mpb.PUBLISH_MODE_STORE_CONFIRM_SEND if confirm else mpb.PUBLISH_MODE_STORE_SEND_NOCONFIRM)
        # Free places in the window; `_room` wakes senders waiting for one.
        self._free = window
        self._room: asyncio.Future[None] | None = None
        # Each request serialised once, as a `PublishBatch.requests` field: a batch is their
        # concatenation, and a re-send after a failover sends the same bytes.
        self._unconfirmed: OrderedDict[int, tuple[bytes, asyncio.Future[PublishResult]]] = OrderedDict()
        # Requests not yet written, taken whole by the stream's writer when `_wake` is set;
        # `_ending`: write what is queued, then end the stream.
        self._outgoing: list[bytes] = []
        self._wake = asyncio.Event()
        self._ending = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._progress = False
        self.reconnects = 0
        # Each publisher has its own producer id: its sequences stay dense, so a re-send after
        # a failover is always within the leader's deduplication window.
        self.producer_id = uuid.uuid4().hex
        self._sequence = itertools.count(1)

    async def send(self, body: bytes, fields: dict[str, object] | None = None) -> asyncio.Future[PublishResult]:
        """Queue a message; the returned future resolves when it is confirmed (or fails)."""
        if self._closed:
            raise InvalidArgument("publisher is closed")
        while self._free <= 0:
            room = self._room
            if room is None or room.done():
                room = self._room = asyncio.get_running_loop().create_future()
            await room
        self._free -= 1
        sequence = next(self._sequence)
        req = mpb.PublishRequest(destination=self.destination, mode=self.mode, correlation_id=sequence)
        _fill_message(req.message, body, fields, self.producer_id, sequence)
        raw = length_delimited(BATCH_REQUESTS, req.SerializeToString())
        fut: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        # The slot is freed when the message leaves `_unconfirmed` (answered or failed).
        self._unconfirmed[sequence] = (raw, fut)
        self._outgoing.append(raw)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        return fut

    @property
    def closed(self) -> bool:
        """True once `close()` or `abandon()` was called."""
        return self._closed

    def abandon(self) -> None:
        """Stop at once, without waiting for confirmations: what is unconfirmed fails (its
        outcome is unknown)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._fail_all(PersistenceUnavailable("the client was closed before the message was confirmed; "
                                              "its outcome is unknown"))

    async def flush(self) -> None:
        """Wait until everything sent so far is confirmed or failed."""
        futs = [f for _, f in self._unconfirmed.values()]
        if futs:
            await asyncio.gather(*futs, return_exceptions=True)

    async def close(self) -> None:
        """Flush and end the stream."""
        await self.flush()
        self._closed = True
        if self._task is not None:
            self._ending = True
            self._wake.set()
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        deadline: float | None = None
        delay = 0.02
        while not self._closed:
            address = self.client.candidate()
            self._progress = False
            try:
                await self._stream(address)
                return
            except grpc.aio.AioRpcError as exc:
                err = _domain_error(exc)
                if err is not None and not err.retriable:
                    self._fail_all(err)
                    return
                self.client.note_failure(address, err)
                if isinstance(err, NotLeaderError) and err.leader_address:
                    delay = 0.02
                    continue
            except _Reconnect as exc:
                self.client.note_failure(address, exc.err)
                if isinstance(exc.err, NotLeaderError) and exc.err.leader_address:
                    continue
            now = time.monotonic()
            if self._progress:
                # The last stream confirmed something: a new outage starts its own clock.
                deadline, delay = None, 0.02
            deadline = deadline or now + self.client.timeout
            if now > deadline:
                # These messages may or may not have been stored: re-sending them under new
                # ids could duplicate them. Say so.
                self._fail_all(NoLeaderError(
                    f"no leader reachable within {self.client.timeout:.0f}s; the outcome of the "
                    f"unconfirmed messages is unknown"))
                deadline = None
                if not self._unconfirmed:
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _settle(self, correlation_id: int) -> asyncio.Future[PublishResult]:
        """The message leaves `_unconfirmed` (answered or failed) and frees its window slot."""
        self._free += 1
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return self._unconfirmed.pop(correlation_id)[1]

    def _fail_all(self, err: Exception) -> None:
        for correlation_id in list(self._unconfirmed):
            fut = self._settle(correlation_id)
            if not fut.done():
                fut.set_exception(err)
        # Drop queued requests of the failed messages.
        self._outgoing.clear()

    async def _stream(self, address: str) -> None:
        call = self.client._channel(address).stream_stream(
            PUBLISH_STREAM, request_serializer=None, response_deserializer=mpb.PublishResponseBatch.FromString)()
        # Everything not yet confirmed goes again, in order, with its original id.
        self._outgoing = [req for req, _ in self._unconfirmed.values()]
        self._wake.set()

        async def writer() -> None:
            # Everything queued at the moment goes as one stream message (MAX_STREAM_BATCH
            # requests at most each).
            wake = self._wake
            while True:
                await wake.wait()
                wake.clear()
                queued, self._outgoing = self._outgoing, []
                for at in range(0, len(queued), MAX_STREAM_BATCH):
                    await call.write(b"".join(queued[at:at + MAX_STREAM_BATCH]))  # a PublishBatch
                if self._ending and not self._outgoing:
                    await call.done_writing()
                    return

        wtask = asyncio.create_task(writer())
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    if self._unconfirmed and not self._closed:
                        raise _Reconnect(None)
                    return
                retry: StrongroomError | None = None
                for item in resp.responses:
                    if item.correlation_id not in self._unconfirmed:
                        continue
                    if item.error_reason:
                        err = error_for_reason(item.error_reason, item.error_message)
                        if err.retriable:
                            # This and every later message go again on a new stream, in order.
                            retry = retry or err
                            continue
                        fut = self._settle(item.correlation_id)
                        if not fut.done():
                            fut.set_exception(err)
                        continue
                    fut = self._settle(item.correlation_id)
                    self._progress = True
                    if not fut.done():
                        fut.set_result(PublishResult(item.message_seq, item.duplicate, item.confirmed))
                if retry is not None:
                    raise _Reconnect(retry)
                self.client.note_leader(address)
        finally:
            wtask.cancel()
            call.cancel()
            self.reconnects += 1


class _Reconnect(Exception):
    def __init__(self, err: StrongroomError | None) -> None:
        super().__init__(str(err))
        self.err = err


class Subscription:
    """A subscription that follows the leader: reopened on the new one after a failover."""

    def __init__(self, client: Client, destination: str, durable: str, kind: int, ack_mode: str,
                 credit: int, sync_ack: bool | None, matcher: cpb.ContentMatcher | None = None,
                 replay: mpb.ReplayFrom | None = None) -> None:
        self.client = client
        self.destination = destination
        self.durable = durable
        self.kind = kind
        self.ack_mode = ack_mode
        self.credit = max(1, credit)
        self._sync_choice = sync_ack
        self.sync_ack = bool(sync_ack)
        self.matcher = matcher or cpb.ContentMatcher()
        # Replay repositions the durable once: a reopen after failover continues where it was.
        self._replay = replay
        self.key_field = ""
        self.subscription_id = ""
        self._call: Any = None
        self._buffer: list[Received] = []
        self._consumed_since_grant = 0
        self._pending_auto: Received | None = None
        self._unsent_acks: list[int] = []
        self._ack_buffer: list[int] = []
        self._ack_task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._read: asyncio.Future[Any] | None = None
        self._closed = False
        self.reopened = 0
        self.closed_reason = ""

    async def open(self) -> None:
        """Open (or reopen) the stream on the leader."""
        async def call(address: str) -> Any:
            stream = self.client.stub(address).Subscribe()
            kind = self.kind
            sync_mode = (cpb.ACK_SYNC_MODE_UNSPECIFIED if self._sync_choice is None
                         else cpb.ACK_SYNC_MODE_SYNC if self._sync_choice else cpb.ACK_SYNC_MODE_ASYNC)
            await stream.write(mpb.SubscribeRequest(open=mpb.OpenSubscription(
                destination=self.destination, durable=self.durable, kind=kind,
                ack_mode=mpb.ACK_MODE_AUTO if self.ack_mode == "auto" else mpb.ACK_MODE_EXPLICIT,
                credit=self.credit, client_name=self.client.client_name, matcher=self.matcher,
                ack_sync_mode=sync_mode, replay=self._replay)))
            try:
                first = await stream.read()
            except grpc.aio.AioRpcError:
                stream.cancel()
                raise
            if first is grpc.aio.EOF or first.WhichOneof("response") != "opened":
                stream.cancel()
                raise PersistenceUnavailable("subscription was not opened")
            return stream, first.opened

        self._call, opened = await self.client.retrying(call)
        self.subscription_id = opened.subscription_id
        self._replay = None
        if opened.kind:
            self.kind = opened.kind
        self.key_field = opened.key_field
        self.sync_ack = opened.ack_sync_mode == cpb.ACK_SYNC_MODE_SYNC
        self._consumed_since_grant = 0
        if self._unsent_acks:
            seqs, self._unsent_acks = self._unsent_acks, []
            try:
                await self._write(mpb.SubscribeRequest(ack=mpb.AckBatch(message_seqs=seqs)))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                self._unsent_acks = seqs + self._unsent_acks

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Received:
        msg = await self.next()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def next(self, timeout: float | None = None) -> Received | None:
        """The next message; None after `timeout` seconds without one, or once closed."""
        if self._pending_auto is not None:
            done, self._pending_auto = self._pending_auto, None
            await self.ack(done)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._closed:
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            # The pending read outlives a timeout: cancelling it would cancel the whole stream.
            if self._read is None:
                self._read = asyncio.ensure_future(self._call.read())
            done, _ = await asyncio.wait({self._read}, timeout=remaining)
            if not done:
                return None
            read, self._read = self._read, None
            try:
                resp = read.result()
            except asyncio.CancelledError:
                # Our read was cancelled with the stream (close, or a reopen elsewhere).
                if self._closed:
                    return None
                await self._reopen()
                continue
            except grpc.aio.AioRpcError as exc:
                if self._closed:
                    return None
                err = _domain_error(exc)
                if err is not None and not err.retriable:
                    raise err from None
                self.client.note_failure(self.client.candidate(), err)
                await self._reopen()
                continue
            if resp is grpc.aio.EOF:
                if self._closed:
                    return None
                await self._reopen()
                continue
            which = resp.WhichOneof("response")
            if which == "closed":
                self.closed_reason = resp.closed.reason
                if resp.closed.reason == "REPLACED":
                    self._closed = True
                    return None
                self.client.note_failure(self.client.candidate(), None)
                await self._reopen()
                continue
            if which == "deliveries":
                for d in resp.deliveries.deliveries:
                    m = d.message
                    self._buffer.append(Received(
                        seq=d.message_seq, body=m.body, fields={k: from_field(v) for k, v in m.fields.items()},
                        delivery_count=d.delivery_count, destination=d.destination,
                        producer_id=m.producer_id, sequence=m.sequence, published_at=d.published_at,
                        _sub=self))
        msg = self._buffer.pop(0)
        self._consumed_since_grant += 1
        if self._consumed_since_grant >= max(1, self.credit // 2):
            grant, self._consumed_since_grant = self._consumed_since_grant, 0
            try:
                await self._write(mpb.SubscribeRequest(credit=grant))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the stream ended: the next read reopens it
        if self.ack_mode == "auto" and self.kind != cpb.DURABLE_KIND_LASTVALUE:
            # Acknowledged once the application asks for the next message (it is done with this one).
            self._pending_auto = msg
        return msg

    async def _reopen(self) -> None:
        # Acks not yet written go to the new stream.
        self._unsent_acks.extend(self._ack_buffer)
        self._ack_buffer = []
        if self._read is not None:
            self._read.cancel()
            self._read = None
        if self._call is not None:
            self._call.cancel()
        # Deliveries buffered from the old leader come again from the new one.
        self._buffer.clear()
        self._pending_auto = None
        self.reopened += 1
        await self.open()

    async def ack(self, msg: Received | int) -> None:
        """Acknowledge a message (sync: returns once committed; async: sent on the stream)."""
        seq = msg if isinstance(msg, int) else msg.seq
        if self.sync_ack:
            await self.client.ack(self.destination, self.durable, [seq], self.subscription_id)
            return
        # Asynchronous: acks made in the same turn of the event loop go as one AckBatch.
        self._ack_buffer.append(seq)
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.create_task(self._flush_acks())

    async def acks_written(self) -> None:
        """Wait until every asynchronous ack made so far is written on the stream (they go
        from a task of their own, one batch per turn of the event loop); `close` does too."""
        await asyncio.sleep(0)
        if self._ack_task is not None:
            await self._ack_task

    async def _flush_acks(self) -> None:
        await asyncio.sleep(0)
        # Acks made while a batch is being written go in the next batch, until none are left.
        while self._ack_buffer:
            seqs, self._ack_buffer = self._ack_buffer, []
            try:
                await self._write(mpb.SubscribeRequest(ack=mpb.AckBatch(message_seqs=seqs)))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, AttributeError):
                self._unsent_acks.extend(seqs)
                return

    async def _write(self, request: mpb.SubscribeRequest) -> None:
        # One write at a time on a stream: credit grants and ack flushes come from two tasks.
        async with self._write_lock:
            await self._call.write(request)

    async def ack_many(self, seqs: list[int]) -> None:
        """Acknowledge several messages in one request."""
        if not seqs:
            return
        if self.sync_ack:
            await self.client.ack(self.destination, self.durable, seqs, self.subscription_id)
            return
        try:
            await self._write(mpb.SubscribeRequest(ack=mpb.AckBatch(message_seqs=seqs)))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            self._unsent_acks.extend(seqs)

    async def close(self) -> None:
        """Close the stream (unacknowledged messages will be redelivered)."""
        if self._pending_auto is not None:
            done, self._pending_auto = self._pending_auto, None
            try:
                await self.ack(done)
            except StrongroomError:
                pass
        if self._ack_task is not None:
            await self._ack_task
        if self._ack_buffer:
            await self._flush_acks()
        self._closed = True
        if self._call is not None:
            try:
                await self._call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
            # Let the acks written just before reach the server before the stream goes.
            await asyncio.sleep(0.05)
            if self._read is not None:
                self._read.cancel()
                self._read = None
            self._call.cancel()
