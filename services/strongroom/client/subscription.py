"""Subscriptions: a Subscribe stream on the leader, reopened on the new leader after a
failover, with credit, acknowledgments (on the stream or synchronous) and the durable kinds and
ack modes as enums."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from enum import Enum
from typing import Any, NamedTuple, TypeVar

import grpc

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.client.connection import Connection
from strongroom.client.messages import Received, from_field
from strongroom.client.retry import error_from_rpc
from strongroom.errors import (
    Fenced,
    InvalidArgument,
    PersistenceUnavailable,
    StrongroomError,
    SubscriptionClosed,
    error_for_reason,
)

__all__ = ["CLOSE_GRACE_SECONDS", "AckMode", "DurableKind", "MAX_REFUSALS", "Refusal", "Subscription", "ack_sync"]

log = logging.getLogger("strongroom.client")

MAX_REFUSALS = 1000
"""How many refused acks, naks and terms a subscription remembers."""
CLOSE_GRACE_SECONDS = 2.0
"""`close` waits this long at most for the leader to end the stream after the last request (it
ends it once it has read them all, asynchronous acks included)."""


class Refusal(NamedTuple):
    """An ack, nak or term the leader refused (the others of its batch took effect)."""

    message_seq: int
    operation: str
    """"ack", "nak" or "term"."""
    error: StrongroomError
    """Why, as the error the server named (e.g. `UnknownMessage`, `ForeignMessage`)."""


class DurableKind(str, Enum):
    """How a durable hands out its messages."""

    STANDARD = "standard"
    """One subscriber at a time; a second one replaces the first."""
    SHARED = "shared"
    """Each message to exactly one of the subscribers, rotated."""
    LAST_VALUE = "lastvalue"
    """The latest message (per key, with a key field), then updates; no acks."""

    @classmethod
    def _missing_(cls, value: object) -> DurableKind | None:
        # The realm file spells it last-value.
        return cls.LAST_VALUE if value == "last-value" else None

    @classmethod
    def parse(cls, value: DurableKind | str) -> DurableKind:
        """The kind named by `value`; InvalidArgument if it names none."""
        return _parse(cls, value, "durable kind")

    def to_proto(self) -> cpb.DurableKind:
        """The kind on the wire."""
        return _KIND_PROTO[self]


_KIND_PROTO = {
    DurableKind.STANDARD: cpb.DURABLE_KIND_STANDARD,
    DurableKind.SHARED: cpb.DURABLE_KIND_SHARED,
    DurableKind.LAST_VALUE: cpb.DURABLE_KIND_LASTVALUE,
}
_PROTO_KIND = {v: k for k, v in _KIND_PROTO.items()}


class AckMode(str, Enum):
    """Who acknowledges a delivered message."""

    EXPLICIT = "explicit"
    """The application calls `ack`."""
    AUTO = "auto"
    """The client acks a message when the application asks for the next one."""

    @classmethod
    def parse(cls, value: AckMode | str) -> AckMode:
        """The mode named by `value`; InvalidArgument if it names none."""
        return _parse(cls, value, "ack mode")


E = TypeVar("E", bound=Enum)


def _parse(cls: type[E], value: object, what: str) -> E:
    try:
        return cls(value)
    except ValueError:
        names = " or ".join(", ".join(m.value for m in cls).rsplit(", ", 1))
        raise InvalidArgument(f"unknown {what} {value!r}; use {names}") from None


async def ack_sync(connection: Connection, destination: str, durable: str, seqs: list[int],
                   subscription_id: str = "") -> None:
    """Synchronous acknowledgment through the leader: returns once committed."""
    req = mpb.AckRequest(destination=destination, durable=durable, message_seqs=seqs,
                         subscription_id=subscription_id)
    timeout = connection.policy.timeout

    async def call(address: str) -> None:
        await connection.unary(connection.messaging(address).Ack(req, timeout=timeout, metadata=connection.metadata))

    await connection.call_leader(call)


class Subscription:
    """A subscription that follows the leader: reopened on the new one after a failover."""

    def __init__(self, connection: Connection, destination: str, durable: str, kind: DurableKind | None,
                 ack_mode: AckMode, credit: int, sync_ack: bool | None,
                 matcher: cpb.ContentMatcher | None = None, replay: mpb.ReplayFrom | None = None,
                 client_name: str = "") -> None:
        self.connection = connection
        self.destination = destination
        self.durable = durable
        self.kind = kind
        """The durable's kind: as asked, then as the leader opened it."""
        self.queue = False
        """True once the leader opened the subscription on a queue: its subscribers share the
        queue's one durable, and a durable name given for it is not used."""
        self.ack_mode = ack_mode
        self.credit = max(1, credit)
        self.client_name = client_name
        self._sync_choice = sync_ack
        self.sync_ack = bool(sync_ack)
        self.matcher = matcher or cpb.ContentMatcher()
        # Replay repositions the durable once: a reopen after failover continues where it was.
        self._replay = replay
        self.key_field = ""
        self.subscription_id = ""
        self._address = ""
        self._call: Any = None
        self._buffer: deque[mpb.Delivery] = deque()
        self._consumed_since_grant = 0
        self._pending_auto: Received | None = None
        self._unsent_acks: list[int] = []
        self._generation = 0
        """The DR generation of the site the current stream was opened at."""
        self.stale_settlements = 0
        """Acks, naks and terms not sent because their messages were delivered by the primary of
        an older DR generation than the one this subscription now reads from (`Received.generation`)."""
        # Terminations not written yet (the stream was gone): they go on the next stream.
        self._unsent_terms: list[int] = []
        self._ack_buffer: list[int] = []
        self._ack_task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._read: asyncio.Future[Any] | None = None
        self._closed: SubscriptionClosed | None = None
        self.reopened = 0
        self.closed_reason = ""
        """Why the server closed the subscription (e.g. REPLACED), if it did."""
        self.refusals: deque[Refusal] = deque(maxlen=MAX_REFUSALS)
        """The acks, naks and terms the leader refused, newest last (at most MAX_REFUSALS)."""

    @property
    def closed(self) -> bool:
        """True once the subscription is closed, by `close()` or for good by the server."""
        return self._closed is not None

    def _open_request(self) -> mpb.SubscribeRequest:
        sync_mode = (cpb.ACK_SYNC_MODE_UNSPECIFIED if self._sync_choice is None
                     else cpb.ACK_SYNC_MODE_SYNC if self._sync_choice else cpb.ACK_SYNC_MODE_ASYNC)
        return mpb.SubscribeRequest(open=mpb.OpenSubscription(
            destination=self.destination, durable=self.durable,
            kind=self.kind.to_proto() if self.kind else cpb.DURABLE_KIND_UNSPECIFIED,
            ack_mode=mpb.ACK_MODE_AUTO if self.ack_mode is AckMode.AUTO else mpb.ACK_MODE_EXPLICIT,
            credit=self.credit, client_name=self.client_name, matcher=self.matcher,
            ack_sync_mode=sync_mode, replay=self._replay))

    async def open(self) -> None:
        """Open (or reopen) the stream on the leader."""
        async def call(address: str) -> tuple[Any, mpb.SubscriptionOpened, str]:
            stream = self.connection.messaging(address).Subscribe(metadata=self.connection.metadata)
            await stream.write(self._open_request())
            try:
                first = await stream.read()
                self.connection.learn_generation(await stream.initial_metadata())
            except grpc.aio.AioRpcError:
                stream.cancel()
                raise
            if first is grpc.aio.EOF or first.WhichOneof("response") != "opened":
                stream.cancel()
                raise PersistenceUnavailable("subscription was not opened")
            return stream, first.opened, address

        before = self._generation
        self._call, opened, self._address = await self.connection.call_leader(call)
        self._generation = self.connection.generation
        if self._generation > before and (self._unsent_acks or self._unsent_terms):
            # Message sequences of an older primary's deliveries may name other messages here:
            # the lost tail of a DR activation is numbered again. Those still here come again.
            self._stale(len(self._unsent_acks) + len(self._unsent_terms))
            self._unsent_acks, self._unsent_terms = [], []
        self.subscription_id = opened.subscription_id
        self._replay = None
        if opened.kind:
            self.kind = _PROTO_KIND.get(opened.kind, self.kind)
        self.key_field = opened.key_field
        self.queue = not opened.durable  # a topic's or an endpoint's durable always has a name
        self.sync_ack = opened.ack_sync_mode == cpb.ACK_SYNC_MODE_SYNC
        self._consumed_since_grant = 0
        if self._unsent_acks:
            seqs, self._unsent_acks = self._unsent_acks, []
            if not await self._write_acks(seqs):
                self._unsent_acks = seqs + self._unsent_acks
        if self._unsent_terms:
            seqs, self._unsent_terms = self._unsent_terms, []
            if not await self._write_settle(mpb.SubscribeRequest(term=mpb.TermBatch(message_seqs=seqs))):
                self._unsent_terms = seqs + self._unsent_terms

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Received:
        """The next message; the iteration ends once the subscription is closed (see
        `closed_reason`)."""
        try:
            return await self.next()
        except SubscriptionClosed:
            raise StopAsyncIteration from None

    async def next(self, timeout: float | None = None) -> Received:
        """The next message.

        Raises `TimeoutError` when none arrived within `timeout` seconds (the subscription stays
        open), `SubscriptionClosed` once it is closed (`SubscriptionReplaced` when a second
        subscriber of a standard durable took over; `reason` says why), and the error of a
        failure it cannot ride out (a `StrongroomError`)."""
        if self._pending_auto is not None:
            done, self._pending_auto = self._pending_auto, None
            await self.ack(done)
        await self._fill(timeout)
        msg = self._received(self._buffer.popleft())
        await self._consumed(1)
        if self.ack_mode is AckMode.AUTO and self.kind is not DurableKind.LAST_VALUE:
            # Acknowledged once the application asks for the next message (it is done with this one).
            self._pending_auto = msg
        return msg

    async def next_batch(self, most: int, timeout: float | None = None) -> list[mpb.Delivery]:
        """Up to `most` messages at once, as the leader delivered them (`Delivery`, not decoded
        into `Received`): waits for the first as `next` does (and raises as it does), then takes
        what has arrived. For a subscriber that passes messages on as they are (a router); it
        acknowledges them itself (`ack_many`): none is acknowledged for it, whatever the ack
        mode."""
        await self._fill(timeout)
        n = min(max(1, most), len(self._buffer))
        taken = [self._buffer.popleft() for _ in range(n)]
        await self._consumed(n)
        return taken

    async def _fill(self, timeout: float | None) -> None:
        """Wait until a delivery is buffered (see `next` for what it raises)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._closed is not None:
                raise self._closed
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no message on {self.destination!r} within {timeout:g} s")
            # The pending read outlives a timeout: cancelling it would cancel the whole stream.
            if self._read is None:
                self._read = asyncio.ensure_future(self._call.read())
            read = self._read
            done_reads, _ = await asyncio.wait({read}, timeout=remaining)
            if not done_reads:
                continue  # the deadline check above raises
            if self._closed is not None:
                raise self._closed  # closed meanwhile: `close` reads the rest of the stream
            if self._read is read:
                self._read = None
            try:
                resp = read.result()
            except asyncio.CancelledError:
                # Our read was cancelled with the stream (close, or a reopen elsewhere).
                if self._closed is None:
                    await self._reopen()
                continue
            except grpc.aio.AioRpcError as exc:
                if self._closed is None:
                    await self._recover(error_from_rpc(exc, self._address))
                continue
            if resp is grpc.aio.EOF:
                if self._closed is None:
                    await self._reopen()
                continue
            if self._take(resp):
                # The leader ended the subscription (it stepped down): find the new one, at once
                # when the close names it.
                closed = resp.closed
                self.connection.note_failure(self._address, error_for_reason(closed.reason, closed.message,
                                                                             dict(closed.metadata)))
                await self._reopen()

    async def _consumed(self, n: int) -> None:
        """`n` buffered deliveries were taken: grant the leader credit for them once half the
        credit is used up."""
        self._consumed_since_grant += n
        if self._consumed_since_grant >= max(1, self.credit // 2):
            grant, self._consumed_since_grant = self._consumed_since_grant, 0
            try:
                await self._write(mpb.SubscribeRequest(credit=grant))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the stream ended: the next read reopens it

    def _received(self, d: mpb.Delivery) -> Received:
        m = d.message
        # Most messages carry no fields: iterating an empty map costs more than the rest of this.
        fields = m.fields
        return Received(seq=d.message_seq, body=m.body,
                        fields={k: from_field(v) for k, v in fields.items()} if fields else {},
                        delivery_count=d.delivery_count, destination=d.destination, producer_id=m.producer_id,
                        sequence=m.sequence, published_at=d.published_at,
                        origin=m.origin if m.HasField("origin") else None, traceparent=m.traceparent,
                        generation=self._generation, _sub=self)

    def _take(self, resp: mpb.SubscribeResponse) -> bool:
        """Buffer a response's deliveries. A `closed` response ends the subscription for good
        when its reason is a `SubscriptionClosed` (REPLACED, DURABLE_UNREACHABLE,
        DURABLE_DELETED: reopening would take over from the new subscriber or reach another
        durable), else asks for it to be reopened on the leader (True)."""
        which = resp.WhichOneof("response")
        if which == "closed":
            self.closed_reason = resp.closed.reason
            err = error_for_reason(resp.closed.reason, resp.closed.message or "subscription closed")
            if isinstance(err, SubscriptionClosed):
                self._closed = err
                return False
            return True
        if which == "refusals":
            for r in resp.refusals.refusals:
                refusal = Refusal(r.message_seq, r.operation, error_for_reason(r.reason, r.message, dict(r.metadata)))
                log.warning("%s of message %d on %r refused: %s: %s", r.operation, r.message_seq,
                            self.destination, r.reason, r.message)
                self.refusals.append(refusal)
            return False
        if which == "deliveries":
            # Kept as delivered; `next` makes a `Received` of each as it is taken.
            self._buffer.extend(resp.deliveries.deliveries)
        return False

    async def _recover(self, err: StrongroomError) -> None:
        """The stream on `_address` failed: raise what cannot be ridden out, else note the
        failure against that member and reopen on the leader."""
        if not err.retried_by_client:
            raise err
        self.connection.note_failure(self._address, err)
        await self._reopen()

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

    def _stale(self, count: int) -> None:
        self.stale_settlements += count
        log.info("subscription %s: %d settlement(s) of messages delivered before the DR generation changed to %d "
                 "not sent (the newer primary delivers those it holds again)", self.subscription_id, count,
                 self._generation)

    def _from_older_generation(self, msg: Received | int) -> bool:
        """True (and counted) for a message delivered by the primary of an older generation than
        the current stream's: its settlement is not sent (`Received.generation`)."""
        if isinstance(msg, int) or msg.generation >= self._generation:
            return False
        self._stale(1)
        return True

    async def ack(self, msg: Received | int) -> None:
        """Acknowledge a message (sync: returns once committed; async: sent on the stream). A
        message delivered by the primary of an older DR generation is not acknowledged at the
        newer one (its sequence may name another message there): async, the ack is dropped;
        sync, `Fenced` is raised. Either way the newer primary delivers it again if it holds it."""
        seq = msg if isinstance(msg, int) else msg.seq
        if self._from_older_generation(msg):
            if self.sync_ack:
                raise Fenced(f"message {seq} was delivered by the primary of DR generation "
                             f"{getattr(msg, 'generation', 0)}; this subscription reads from generation "
                             f"{self._generation} now, which delivers it again if it holds it",
                             {"generation": str(self._generation)})
            return
        if self.sync_ack:
            await ack_sync(self.connection, self.destination, self.durable, [seq], self.subscription_id)
            return
        # Asynchronous: acks made in the same turn of the event loop go as one AckBatch.
        self._ack_buffer.append(seq)
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.create_task(self._flush_acks())

    def _settling(self, msg: Received | int) -> int | None:
        """The sequence to settle; None for a message of an older DR generation (not settled)."""
        seq = msg if isinstance(msg, int) else msg.seq
        if self._pending_auto is not None and self._pending_auto.seq == seq:
            self._pending_auto = None  # settled by the application: not acknowledged for it
        return None if self._from_older_generation(msg) else seq

    async def nak(self, msg: Received | int, delay: float = 0.0) -> None:
        """Give a message back: delivered again at once, or after `delay` seconds (on the
        stream, not waiting; if the stream is gone the message comes again anyway)."""
        if not (delay >= 0 and delay != float("inf")):
            raise InvalidArgument(f"nak delay {delay} is not a number of seconds >= 0")
        seq = self._settling(msg)
        if seq is not None:
            await self._write_settle(mpb.SubscribeRequest(nak=mpb.NakBatch(message_seqs=[seq], delay_seconds=delay)))

    async def term(self, msg: Received | int) -> None:
        """Never deliver a message again: dead-lettered, or dropped when its destination names
        no dead-letter destination (on the stream, not waiting; written on the next stream if
        this one is gone)."""
        seq = self._settling(msg)
        if seq is not None and not await self._write_settle(mpb.SubscribeRequest(term=mpb.TermBatch(message_seqs=[seq]))):
            self._unsent_terms.append(seq)

    async def _write_settle(self, request: mpb.SubscribeRequest) -> bool:
        """Write a nak or term on the stream; False if the stream is gone."""
        if self._closed is not None:
            raise self._closed
        try:
            await self._write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, AttributeError):
            return False
        return True

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
            if not await self._write_acks(seqs):
                self._unsent_acks.extend(seqs)
                return

    async def _write_acks(self, seqs: list[int]) -> bool:
        """Write an AckBatch on the stream; False if the stream is gone (the acks go on the
        next one)."""
        try:
            await self._write(mpb.SubscribeRequest(ack=mpb.AckBatch(message_seqs=seqs)))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, AttributeError):
            return False
        return True

    async def _write(self, request: mpb.SubscribeRequest) -> None:
        # One write at a time on a stream: credit grants and ack flushes come from two tasks.
        async with self._write_lock:
            await self._call.write(request)

    async def ack_many(self, seqs: list[int]) -> None:
        """Acknowledge several messages in one request."""
        if not seqs:
            return
        if self.sync_ack:
            await ack_sync(self.connection, self.destination, self.durable, seqs, self.subscription_id)
            return
        if not await self._write_acks(seqs):
            self._unsent_acks.extend(seqs)

    async def _until_stream_ends(self, grace: float) -> None:
        """Read the stream to its end (what is still delivered goes back to the durable with
        the subscription), for at most `grace` seconds."""
        deadline = time.monotonic() + grace
        while (remaining := deadline - time.monotonic()) > 0:
            if self._read is None:
                self._read = asyncio.ensure_future(self._call.read())
            done, _ = await asyncio.wait({self._read}, timeout=remaining)
            if not done:
                return
            read, self._read = self._read, None
            try:
                if read.result() is grpc.aio.EOF:
                    return
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                return

    async def close(self) -> None:
        """Close the stream (unacknowledged messages will be redelivered); `next()` raises
        `SubscriptionClosed` from then on. Asynchronous acks made before are written first, and
        the stream ends only once the leader has read them (or after `CLOSE_GRACE_SECONDS`)."""
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
        if self._closed is None:
            self._closed = SubscriptionClosed(f"the subscription to {self.destination!r} was closed")
        if self._call is not None:
            try:
                await self._call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
            # The leader ends the stream once it has read every request before the half-close,
            # acks included: cancelling sooner can drop acks it has not read yet (a CI run lost
            # all 240 acks of a subscription closed at once on a loaded machine).
            await self._until_stream_ends(CLOSE_GRACE_SECONDS)
            if self._read is not None:
                self._read.cancel()
                self._read = None
            self._call.cancel()
