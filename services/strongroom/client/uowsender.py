"""Pipelined sending of whole units of work over one `UowService.SendBatchStream`.

    sender = client.uow_sender("orders.queue", window=64)
    fut = await sender.send([b"line 1", b"line 2"])       # waits for room in the window
    result = await fut                                    # committed: ACCEPTED, one log entry
    await sender.close()

Each UOW goes as one request (open + its messages + COMMIT) under an id the client chose, so the
leader commits it as one log entry, and up to `window` of them are in flight on the stream.
Everything queued since the stream's last write goes as one `UowSendBatch` (as the publisher
writes a `PublishBatch`), so the UOWs reach the leader's group-commit round together. A member
of an older version answers `SendBatchStream` with UNIMPLEMENTED: the stream goes again to it as
a `SendStream`, one UOW per stream message. After a retriable failure (NOT_LEADER, no quorum, a
broken stream) every unanswered UOW is sent again, in order and under the same id, on a new
stream to the leader: one the old leader had committed is answered with `duplicate` and stored
once.

`Client` also keeps one per destination and options for `UnitOfWork.commit()` of a whole UOW
(`failures="as_raised"`: a UOW fails with the error a unary commit would raise).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import grpc

from strongroom.api.v1 import uow_pb2 as upb
from strongroom.client.connection import Connection
from strongroom.client.publisher import outcome_unknown
from strongroom.client.retry import Outage
from strongroom.client.uow import UnitOfWork, UowResult, new_uow_id, response_result
from strongroom.errors import (
    ConnectionFailed,
    InvalidArgument,
    PersistenceUnavailable,
    StrongroomError,
    error_for_reason,
)
from strongroom.wire import UOW_BATCH_REQUESTS, repeated_after

__all__ = ["MAX_BATCH_BYTES", "UowSender"]

# Most bytes of requests in one stream message (a UOW larger than that goes alone).
MAX_BATCH_BYTES = 1 << 20
SEND_BATCH_STREAM = "/strongroom.v1.UowService/SendBatchStream"
SEND_STREAM = "/strongroom.v1.UowService/SendStream"

Body = bytes | tuple[bytes, dict[str, object] | None]
"""A message of a UOW: its body, or (body, fields)."""


class UowSender:
    """Whole units of work to one queue, pipelined on one stream, each answered by a future."""

    def __init__(self, connection: Connection, destination: str, window: int = 64, persistent: bool | None = None,
                 persistent_status: bool | None = None, lifetime: float | None = None,
                 status_lifetime_multiple: int | None = None,
                 failures: Literal["outcome_unknown", "as_raised"] = "outcome_unknown") -> None:
        if window < 1:
            raise InvalidArgument(f"window must be 1 or more, not {window}")
        self.connection = connection
        self.destination = destination
        self.window = window
        # Every UOW's options (None: the destination's default).
        self._options = (persistent, persistent_status, lifetime, status_lifetime_multiple)
        # A slot per UOW in flight, given back when it is answered or failed.
        self._slots = asyncio.Semaphore(window)
        # correlation id -> (its request, serialised once, and its future), in the order sent:
        # what a new stream sends again, the same bytes.
        self._unanswered: OrderedDict[int, tuple[bytes, asyncio.Future[UowResult]]] = OrderedDict()
        self._next_id = 0
        # Requests not yet written, taken whole by the stream's writer when `_wake` is set.
        self._outgoing: list[bytes] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Once the retry policy gives up: fail what is unanswered with "outcome unknown", or
        # with the policy's own error (as a unary call raises it).
        self._failures = failures
        self.streams = 0
        """Streams opened so far (more than 1: it failed over)."""

    async def send(self, messages: Iterable[Body], uow_id: str | None = None,
                   user_status: bytes | None = None) -> asyncio.Future[UowResult]:
        """Queue a whole UOW (waiting for room in the window); the returned future resolves when
        it is committed (or fails with a `StrongroomError`)."""
        if self._closed:
            raise InvalidArgument("the unit-of-work sender is closed")
        uow = UnitOfWork(self.connection, self.destination, uow_id or new_uow_id(), *self._options)
        for item in messages:
            body, fields = item if isinstance(item, tuple) else (item, None)
            uow.add(body, fields)
        if not uow.messages:
            raise InvalidArgument("a unit of work needs one message or more")
        uow.user_status = user_status
        return await self.submit(uow.whole_request())

    async def submit(self, req: upb.UowSendRequest) -> asyncio.Future[UowResult]:
        """Queue one whole UOW's request (`UnitOfWork.whole_request`), waiting for room in the
        window; the returned future resolves when it is committed (or fails)."""
        if self._closed:
            raise InvalidArgument("the unit-of-work sender is closed")
        await self._slots.acquire()
        self._next_id += 1
        req.correlation_id = self._next_id
        raw = req.SerializeToString()
        fut: asyncio.Future[UowResult] = asyncio.get_running_loop().create_future()
        self._unanswered[req.correlation_id] = (raw, fut)
        self._outgoing.append(raw)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        return fut

    @property
    def closed(self) -> bool:
        """True once `close()` or `abandon()` was called."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """UOWs sent and not yet answered."""
        return len(self._unanswered)

    async def flush(self) -> None:
        """Wait until every UOW sent so far is answered or failed."""
        futs = [fut for _, fut in self._unanswered.values()]
        if futs:
            await asyncio.gather(*futs, return_exceptions=True)

    async def close(self) -> None:
        """Flush, then end the stream."""
        await self.flush()
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def abandon(self) -> None:
        """Stop at once: what is unanswered fails (its outcome is unknown)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._fail_unanswered(PersistenceUnavailable("the sender was closed before the unit of work was answered; "
                                                     "its outcome is unknown"))

    async def _run(self) -> None:
        # The outage clock starts at the first failure, and again after each answer.
        outage = self.connection.policy.outage(started=False)
        try:
            await self.connection.call_leader(lambda address: self._stream(address, outage), outage)
        except StrongroomError as err:
            if self._failures == "outcome_unknown":
                err = outcome_unknown(err, self.connection.policy.timeout, "units of work")
            self._fail_unanswered(err)

    def _answered(self, correlation_id: int) -> asyncio.Future[UowResult]:
        self._slots.release()
        return self._unanswered.pop(correlation_id)[1]

    def _fail_unanswered(self, err: StrongroomError) -> None:
        for correlation_id in list(self._unanswered):
            fut = self._answered(correlation_id)
            if not fut.done():
                fut.set_exception(err)

    async def _stream(self, address: str, outage: Outage) -> None:
        """One stream on `address`, until it ends cleanly (closing) or fails: a failure is
        raised for `call_leader` to judge, and what is unanswered goes again on the next one.
        A member that does not know `SendBatchStream` (an older version) gets `SendStream`."""
        self.streams += 1
        try:
            await self._stream_on(address, outage, batched=True)
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        # Nothing was taken: the server refused the call before reading a request.
        await self._stream_on(address, outage, batched=False)

    async def _stream_on(self, address: str, outage: Outage, batched: bool) -> None:
        channel = self.connection.channel(address)
        call: grpc.aio.StreamStreamCall[bytes, Any] = channel.stream_stream(
            SEND_BATCH_STREAM if batched else SEND_STREAM, request_serializer=None,
            response_deserializer=(upb.UowSendResponseBatch if batched else upb.UowSendResponse).FromString)(metadata=self.connection.metadata)
        # Everything unanswered goes again, in order, under its id.
        self._outgoing = [raw for raw, _ in self._unanswered.values()]
        self._wake.set()

        async def writer() -> None:
            # Everything queued at the moment goes as one stream message (MAX_BATCH_BYTES at most
            # each), or on SendStream one per UOW.
            wake = self._wake
            while True:
                await wake.wait()
                wake.clear()
                queued, self._outgoing = self._outgoing, []
                if batched:
                    for run in _batches(queued):
                        await call.write(repeated_after(b"", UOW_BATCH_REQUESTS, run))  # a UowSendBatch
                else:
                    for raw in queued:
                        await call.write(raw)  # a UowSendRequest
                if self._closed and not self._outgoing:
                    await call.done_writing()
                    return

        wtask = asyncio.create_task(writer())
        # A write that fails with the stream is seen by the reader; the writer's error is not news.
        wtask.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            # The stream's headers come as it opens: the answering site's generation.
            self.connection.learn_generation(await call.initial_metadata())
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    if self._unanswered:
                        raise ConnectionFailed(f"the unit-of-work stream on {address} ended with "
                                               f"{len(self._unanswered)} unanswered")
                    return
                retry: StrongroomError | None = None
                for item in resp.responses if batched else (resp,):
                    retry = self._answer(item, outage) or retry
                if retry is not None:
                    raise retry
                self.connection.note_leader(address)
        finally:
            wtask.cancel()
            call.cancel()

    def _answer(self, resp: upb.UowSendResponse, outage: Outage) -> StrongroomError | None:
        """Settle the UOW an answer is for; a retriable refusal is returned instead (it and every
        unanswered UOW go again, in order, on a new stream)."""
        if resp.correlation_id not in self._unanswered:
            return None
        if resp.error_reason:
            err = error_for_reason(resp.error_reason, resp.error_message, dict(resp.error_metadata))
            if err.retried_by_client:
                return err
            fut = self._answered(resp.correlation_id)
            if not fut.done():
                fut.set_exception(err)
            return None
        outage.progress()
        fut = self._answered(resp.correlation_id)
        if not fut.done():
            fut.set_result(response_result(resp))
        return None


def _batches(queued: list[bytes]) -> Iterator[list[bytes]]:
    """`queued` in runs of at most MAX_BATCH_BYTES (a larger request alone)."""
    run: list[bytes] = []
    size = 0
    for raw in queued:
        if run and size + len(raw) > MAX_BATCH_BYTES:
            yield run
            run, size = [], 0
        run.append(raw)
        size += len(raw)
    if run:
        yield run
