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
from strongroom.wire import BATCH_REQUESTS, length_delimited

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
    if err.retriable:
        return NoLeaderError(f"no leader reachable within {timeout:.0f}s; the outcome of the unconfirmed {what} "
                             f"is unknown")
    return err


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
        self._unconfirmed: OrderedDict[int, tuple[bytes, asyncio.Future[PublishResult]]] = OrderedDict()
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

    async def send(self, body: bytes, fields: dict[str, object] | None = None,
                   origin: cpb.Origin | None = None) -> asyncio.Future[PublishResult]:
        """Queue a message; the returned future resolves when it is confirmed (or fails with a
        `StrongroomError`). `origin` is for routers: where a forwarded message was first
        published (see `Message.origin`)."""
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
        fill_message(req.message, body, fields, self.producer_id, sequence)
        if origin is not None:
            req.message.origin.CopyFrom(origin)
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

    async def _stream(self, address: str, outage: Outage) -> None:
        """One stream on `address` until it ends cleanly (closing) or fails; a failure is raised
        for `call_leader` to judge, and what is unconfirmed goes again on the next stream."""
        channel = self.connection.channel(address)
        call: grpc.aio.StreamStreamCall[bytes, mpb.PublishResponseBatch] = channel.stream_stream(
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
        for item in resp.responses:
            if item.correlation_id not in self._unconfirmed:
                continue
            if item.error_reason:
                err = error_for_reason(item.error_reason, item.error_message, dict(item.error_metadata))
                # A refusal of the message itself its caller must act on (ORIGIN_GAP: send what
                # the gap misses first) fails its future; the stream goes on.
                if err.retriable and self.resend_refused and not err.caller_retries:
                    retry = retry or err
                    continue
                fut = self._settle(item.correlation_id)
                if not fut.done():
                    fut.set_exception(err)
                continue
            fut = self._settle(item.correlation_id)
            outage.progress()
            if not fut.done():
                fut.set_result(PublishResult(item.message_seq, item.duplicate, item.confirmed, item.no_interest))
        if retry is not None:
            raise retry
