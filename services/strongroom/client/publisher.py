"""Pipelined publishing over one PublishStream, with every message confirmed and what is
unconfirmed re-sent, in order and with its id, on the new leader after a failover."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import OrderedDict

import grpc

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.client.connection import Connection
from strongroom.client.messages import PublishResult, fill_message
from strongroom.client.retry import Outage
from strongroom.errors import (
    ConnectionFailed,
    InvalidArgument,
    NoLeaderError,
    PersistenceUnavailable,
    StrongroomError,
    error_for_reason,
)
from strongroom.wire import BATCH_REQUESTS, length_delimited, producer_id_field, publish_request

__all__ = ["MAX_STREAM_BATCH", "Publisher", "outcome_unknown", "publish_mode"]

# Most publish requests carried by one stream message.
MAX_STREAM_BATCH = 512
PUBLISH_STREAM = "/strongroom.v1.MessagingService/PublishStream"


def publish_mode(confirm: bool | None) -> mpb.PublishMode:
    """The publish mode for `confirm`: None takes the store's, True waits for the commit, False
    only for the leader to queue the message."""
    if confirm is None:
        return mpb.PUBLISH_MODE_STORE_DEFAULT
    return mpb.PUBLISH_MODE_STORE_CONFIRM_SEND if confirm else mpb.PUBLISH_MODE_STORE_SEND_NOCONFIRM


def outcome_unknown(err: StrongroomError, timeout: float, what: str) -> StrongroomError:
    """The error to fail a pipelined sender's unconfirmed `what` with once its stream gave up
    with `err`: a retriable failure says that their outcome is unknown (they may have been
    stored before the outage; re-sent under new ids they could be stored twice)."""
    if isinstance(err, ConnectionFailed) and err.metadata.get("unreachable"):
        # No member could be reached at all: say where it looked.
        return ConnectionFailed(f"{err.message}; the outcome of the unconfirmed {what} is unknown", err.metadata)
    if isinstance(err, PersistenceUnavailable) and err.metadata.get("state"):
        # An operator disconnected the cluster's persistent store: say so, not "no leader".
        return PersistenceUnavailable(f"{err.message}; the outcome of the unconfirmed {what} is unknown", err.metadata)
    if err.retriable:
        return NoLeaderError(f"no leader reachable within {timeout:.0f}s; the outcome of the unconfirmed {what} "
                             f"is unknown")
    return err


class _Gathered:
    """The outcomes of the messages of one `send_encoded` call, in order; `future` resolves once
    every one is answered."""

    __slots__ = ("future", "left", "outcomes")

    def __init__(self, n: int) -> None:
        self.future: asyncio.Future[list[PublishResult | StrongroomError]] = asyncio.get_running_loop().create_future()
        self.outcomes: list[PublishResult | StrongroomError | None] = [None] * n
        self.left = n

    def settle(self, at: int, outcome: PublishResult | StrongroomError) -> None:
        if self.outcomes[at] is None:
            self.outcomes[at] = outcome
            self.left -= 1
            if not self.left and not self.future.done():
                self.future.set_result(self.outcomes)  # type: ignore[arg-type]


# Where a message's outcome goes: its own future (`send`), or its place among the messages of a
# `send_encoded` call.
_Sink = asyncio.Future[PublishResult] | tuple[_Gathered, int]


def _resolve(sink: _Sink, result: PublishResult) -> None:
    if isinstance(sink, tuple):
        sink[0].settle(sink[1], result)
    elif not sink.done():
        sink.set_result(result)


def _reject(sink: _Sink, err: StrongroomError) -> None:
    if isinstance(sink, tuple):
        sink[0].settle(sink[1], err)
    elif not sink.done():
        sink.set_exception(err)


class Publisher:
    """Pipelined publishing over one PublishStream, re-sent unconfirmed after a failover."""

    def __init__(self, connection: Connection, destination: str, window: int, confirm: bool | None,
                 resend_refused: bool = True) -> None:
        self.connection = connection
        # A message the leader refused with a retriable reason goes again on a new stream (True),
        # or its future fails with the refusal (False: a router hands ORIGIN_GAP to its sender).
        self.resend_refused = resend_refused
        self.destination = destination
        self.window = window
        self.mode = publish_mode(confirm)
        # Free places in the window; `_room` wakes senders waiting for one.
        self._free = window
        self._room: asyncio.Future[None] | None = None
        # Each request serialised once, as a `PublishBatch.requests` field: a batch is their
        # concatenation, and a re-send after a failover sends the same bytes.
        self._unconfirmed: OrderedDict[int, tuple[bytes, _Sink]] = OrderedDict()
        # Unconfirmed when a new stream started: sent again (`PublishResult.resent`).
        self._resent: set[int] = set()
        # Requests not yet written, taken whole by the stream's writer when `_wake` is set;
        # `_ending`: write what is queued, then end the stream.
        self._outgoing: list[bytes] = []
        self._wake = asyncio.Event()
        self._ending = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.reconnects = 0
        # Each publisher has its own producer id: its sequences stay dense, so a re-send after
        # a failover is always within the leader's deduplication window.
        self.producer_id = uuid.uuid4().hex
        self._sequence = itertools.count(1)
        # `send_encoded`'s parts of every request: destination and mode, and the producer id.
        self._head = mpb.PublishRequest(destination=destination, mode=self.mode).SerializeToString()
        self._producer_field = producer_id_field(self.producer_id)

    async def send(self, body: bytes, fields: dict[str, object] | None = None,
                   origin: cpb.Origin | None = None, traceparent: str = "") -> asyncio.Future[PublishResult]:
        """Queue a message; the returned future resolves when it is confirmed (or fails with a
        `StrongroomError`). `origin` is for routers: where a forwarded message was first
        published (see `Message.origin`). `traceparent`: the W3C trace context of the caller's
        trace, delivered with the message (`Message.traceparent`)."""
        await self._wait_for_room(1)
        sequence = next(self._sequence)
        req = mpb.PublishRequest(destination=self.destination, mode=self.mode, correlation_id=sequence)
        fill_message(req.message, body, fields, self.producer_id, sequence)
        if origin is not None:
            req.message.origin.CopyFrom(origin)
        if traceparent:
            req.message.traceparent = traceparent
        fut: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        self._queue(sequence, length_delimited(BATCH_REQUESTS, req.SerializeToString()), fut)
        self._started()
        return fut

    async def send_encoded(self, messages: list[bytes]) -> asyncio.Future[list[PublishResult | StrongroomError]]:
        """Queue messages given encoded (each a serialised `Message` as a router forwards it:
        body, fields, origin); the publisher adds its id to each, so a message's own
        `producer_id` and `sequence`, if any, are not used. The returned future resolves once
        every one is answered, to their outcomes in order: a `PublishResult`, or the
        `StrongroomError` that failed the message. They take the window's room as a whole
        (waiting until it has room for all of them, or is empty)."""
        if not messages:
            done: asyncio.Future[list[PublishResult | StrongroomError]] = asyncio.get_running_loop().create_future()
            done.set_result([])
            return done
        await self._wait_for_room(len(messages))
        gathered = _Gathered(len(messages))
        head, producer = self._head, self._producer_field
        for at, message in enumerate(messages):
            sequence = next(self._sequence)
            self._queue(sequence, publish_request(head, message, producer, sequence), (gathered, at))
        self._started()
        return gathered.future

    async def _wait_for_room(self, n: int) -> None:
        """Wait until the window has room for `n` messages (or is empty), then take it."""
        if self._closed:
            raise InvalidArgument("publisher is closed")
        need = min(n, self.window)
        while self._free < need:
            room = self._room
            if room is None or room.done():
                room = self._room = asyncio.get_running_loop().create_future()
            await room
            if self._closed:
                raise InvalidArgument("publisher is closed")
        self._free -= n

    def _queue(self, sequence: int, raw: bytes, sink: _Sink) -> None:
        # The slot is freed when the message leaves `_unconfirmed` (answered or failed).
        self._unconfirmed[sequence] = (raw, sink)
        self._outgoing.append(raw)

    def _started(self) -> None:
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

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
        futs = {id(f): f for f in (s[0].future if isinstance(s, tuple) else s for _, s in self._unconfirmed.values())}
        if futs:
            await asyncio.gather(*futs.values(), return_exceptions=True)

    async def close(self) -> None:
        """Flush and end the stream."""
        await self.flush()
        self._closed = True
        if self._task is not None:
            self._ending = True
            self._wake.set()
            self._task.cancel()
            # Whatever ended it (the cancellation, a failure) is already settled in the futures.
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        # The outage clock starts at the first failure and starts again whenever a stream
        # confirms something (`_stream` calls `progress`).
        outage = self.connection.policy.outage(started=False)
        try:
            await self.connection.call_leader(lambda address: self._stream(address, outage), outage)
        except StrongroomError as err:
            self._fail_all(outcome_unknown(err, self.connection.policy.timeout, "messages"))

    def _settle(self, correlation_id: int) -> _Sink:
        """The message leaves `_unconfirmed` (answered or failed) and frees its window slot."""
        self._free += 1
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        self._resent.discard(correlation_id)
        return self._unconfirmed.pop(correlation_id)[1]

    def _fail_all(self, err: StrongroomError) -> None:
        for correlation_id in list(self._unconfirmed):
            _reject(self._settle(correlation_id), err)
        # Drop queued requests of the failed messages.
        self._outgoing.clear()

    async def _stream(self, address: str, outage: Outage) -> None:
        """One stream on `address` until it ends cleanly (closing) or fails; a failure is raised
        for `call_leader` to judge, and what is unconfirmed goes again on the next stream."""
        channel = self.connection.channel(address)
        call: grpc.aio.StreamStreamCall[bytes, mpb.PublishResponseBatch] = channel.stream_stream(
            PUBLISH_STREAM, request_serializer=None, response_deserializer=mpb.PublishResponseBatch.FromString)(metadata=self.connection.metadata)
        # Everything not yet confirmed goes again, in order, with its original id.
        self._outgoing = [req for req, _ in self._unconfirmed.values()]
        if self.reconnects:
            self._resent.update(self._unconfirmed)
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
            # The stream's headers come as it opens: the answering site's generation.
            self.connection.learn_generation(await call.initial_metadata())
            while True:
                resp = await call.read()
                if not isinstance(resp, mpb.PublishResponseBatch):  # grpc.aio.EOF
                    if self._unconfirmed and not self._closed:
                        raise ConnectionFailed(f"the publish stream on {address} ended with messages "
                                               f"unconfirmed")
                    return
                self._answer(resp, outage)
                self.connection.note_leader(address)
        finally:
            wtask.cancel()
            call.cancel()
            self.reconnects += 1

    def _answer(self, resp: mpb.PublishResponseBatch, outage: Outage) -> None:
        """Settle the messages a response batch answers; raise the first retriable refusal (it
        and every later message go again on a new stream, in order)."""
        retry: StrongroomError | None = None
        confirmed = False
        unconfirmed = self._unconfirmed
        for item in resp.responses:
            correlation_id = item.correlation_id
            if correlation_id not in unconfirmed:
                continue
            if item.error_reason:
                err = error_for_reason(item.error_reason, item.error_message, dict(item.error_metadata))
                # A refusal of the message itself its caller must act on (ORIGIN_GAP: send what
                # the gap misses first) fails its future; the stream goes on.
                if err.retried_by_client and self.resend_refused:
                    retry = retry or err
                    continue
                _reject(self._settle(correlation_id), err)
                continue
            resent = correlation_id in self._resent
            _resolve(self._settle(correlation_id),
                     PublishResult(item.message_seq, item.duplicate, item.confirmed, item.no_interest, resent))
            confirmed = True
        if confirmed:
            outage.progress()
        if retry is not None:
            raise retry
