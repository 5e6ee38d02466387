"""The gRPC servicer of units of work (`UowService`): requests into domain values, the front's
answers and errors back (the error table in `grpcerrors`). Validation lives in `front.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

import grpc

from strongroom.api.v1 import uow_pb2 as upb
from strongroom.api.v1 import uow_pb2_grpc as ugrpc
from strongroom.errors import InvalidArgument, StrongroomError
from strongroom.grpcerrors import abort_with, to_status
from strongroom.security.access import Access
from strongroom.security.access import Action as SecurityAction
from strongroom.security.guard import Guard
from strongroom.uow.values import (
    Action,
    ReceivedUow,
    SenderStream,
    SendOutcome,
    SendRequest,
    Settlement,
    SettleOutcome,
    SubscriptionView,
    UowChoices,
    UowView,
)

__all__ = ["UowServicer"]

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]

_ACTIONS = {upb.UOW_ACTION_UNSPECIFIED: Action.NONE, upb.UOW_ACTION_COMMIT: Action.COMMIT,
            upb.UOW_ACTION_BACKOUT: Action.BACKOUT, upb.UOW_ACTION_CANCEL: Action.CANCEL}
_SETTLEMENTS = {upb.UOW_SETTLEMENT_COMMIT: Settlement.COMMIT, upb.UOW_SETTLEMENT_BACKOUT: Settlement.BACKOUT,
                upb.UOW_SETTLEMENT_CANCEL: Settlement.CANCEL}
# Requests of one SendStream in flight at once; more wait for the oldest to be answered.
STREAM_WINDOW = 256


class Uows(Protocol):
    """The units-of-work front (`UowFront`)."""

    async def send(self, req: SendRequest) -> SendOutcome: ...

    def open_stream(self) -> SenderStream: ...

    def submit(self, stream: SenderStream, requests: Sequence[SendRequest]) -> list[asyncio.Future[SendOutcome]]: ...

    async def receive(self, destination: str, receiver: str, wait: float) -> ReceivedUow | None: ...

    async def settle(self, uow_id: str, receiver: str, settlement: str, user_status: bytes | None) -> SettleOutcome: ...

    def status(self, uow_id: str) -> UowView: ...


class Publications(Protocol):
    """Durable subscriptions (`PublicationFront`)."""

    async def subscribe(self, topic: str, subscriber: str) -> tuple[SubscriptionView, bool]: ...

    async def unsubscribe(self, topic: str, subscriber: str) -> int: ...

    def subscriptions(self, topic: str = "") -> tuple[list[SubscriptionView], float]: ...


class Naming(Protocol):
    """Who leads, for NOT_LEADER answers (`MessagingFront.named`)."""

    def __call__(self, err: StrongroomError) -> StrongroomError: ...


def _send_request(request: upb.UowSendRequest) -> SendRequest:
    action = _ACTIONS.get(request.action)
    if action is None:
        raise InvalidArgument(f"unknown action {request.action}")
    o = request.options
    choices = UowChoices(
        persistent=o.persistent if o.HasField("persistent") else None,
        persistent_status=o.persistent_status if o.HasField("persistent_status") else None,
        lifetime=o.lifetime_seconds if o.HasField("lifetime_seconds") else None,
        status_lifetime_multiple=o.status_lifetime_multiple if o.HasField("status_lifetime_multiple") else None)
    return SendRequest(destination=request.destination, uow_id=request.uow_id, open=request.open,
                       messages=tuple(request.messages), action=action, choices=choices,
                       user_status=request.user_status if request.HasField("user_status") else None)


def _subscription(v: SubscriptionView) -> upb.UowSubscription:
    return upb.UowSubscription(topic=v.topic, store=v.store, subscriber=v.subscriber, subscribed_at=v.subscribed_at,
                               last_used=v.last_used, expires_at=v.expires_at, pending=v.pending)


def _send_response(request: upb.UowSendRequest, out: SendOutcome) -> upb.UowSendResponse:
    return upb.UowSendResponse(correlation_id=request.correlation_id, uow_id=out.uow_id, status=int(out.status),
                               messages=out.messages, duplicate=out.duplicate, log_index=out.log_index)


def _error_response(request: upb.UowSendRequest, err: StrongroomError) -> upb.UowSendResponse:
    """A stream's answer to a request that failed (`err` as the client is told it)."""
    return upb.UowSendResponse(correlation_id=request.correlation_id, uow_id=request.uow_id,
                               error_code=to_status(err).code.value[0], error_reason=err.reason,
                               error_message=err.message, error_metadata=err.metadata)


def _add_answer(reply: upb.UowSendResponseBatch, request: upb.UowSendRequest, work: asyncio.Future[SendOutcome],
                named: Naming) -> None:
    """The answer to one request of a batch, from its finished work."""
    err = work.exception()
    if err is None:
        out = work.result()
        reply.responses.add(correlation_id=request.correlation_id, uow_id=out.uow_id, status=int(out.status),
                            messages=out.messages, duplicate=out.duplicate, log_index=out.log_index)
    elif isinstance(err, StrongroomError):
        reply.responses.append(_error_response(request, named(err)))
    else:
        raise err


def _failed(err: StrongroomError) -> asyncio.Future[SendOutcome]:
    """A request refused before it reached the front, as a failed future."""
    failed: asyncio.Future[SendOutcome] = asyncio.get_running_loop().create_future()
    failed.set_exception(err)
    return failed


def _retrieve(work: asyncio.Future[SendOutcome]) -> None:
    """Mark a finished request's error seen (its stream ended before it was answered)."""
    if not work.cancelled():
        work.exception()


class UowServicer(ugrpc.UowServiceServicer):
    """Senders, receivers and status queries of units of work."""

    def __init__(self, front: Uows, publications: Publications, named: Naming, guard: Guard,
                 store_of: Callable[[str], str] | None = None) -> None:
        self.front = front
        self.publications = publications
        self.named = named
        self.guard = guard
        """Who may call what: publish to send, subscribe to receive and settle (security/guard.py)."""
        self._store_of = store_of or (lambda destination: "")

    def _check(self, access: Access | None, action: SecurityAction, destination: str) -> None:
        """PermissionDenied unless the caller may do `action` on `destination`."""
        if access is not None:
            access.check(action, self._store_of(destination), destination)

    async def _may(self, context: Context, action: SecurityAction, destination: str) -> None:
        """End the call unless its caller may do `action` on `destination`."""
        await self.guard.require(context, action, destination=destination, store_of=self._store_of)

    async def Send(self, request: upb.UowSendRequest, context: Context) -> upb.UowSendResponse:
        await self._may(context, SecurityAction.PUBLISH, request.destination)
        try:
            out = await self.front.send(_send_request(request))
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return _send_response(request, out)

    async def SendStream(self, request_iterator: AsyncIterator[upb.UowSendRequest],
                         context: Context) -> AsyncIterator[upb.UowSendResponse]:
        # Each request goes to the front as it arrives, as a batch of one on a stream pinned to
        # this term (SendBatchStream's path): many commits share a group-commit round, requests
        # for one UOW run in order (an add pipelined behind its open waits for it), answers go
        # out in request order.
        try:
            stream = self.front.open_stream()
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        access = await self.guard.caller(context)
        pending: asyncio.Queue[tuple[upb.UowSendRequest, asyncio.Future[SendOutcome]] | None] = asyncio.Queue(
            STREAM_WINDOW)

        async def reader() -> None:
            try:
                async for request in request_iterator:
                    await pending.put((request, self._submit(stream, [request], access)[0]))
            finally:
                await pending.put(None)

        task = asyncio.create_task(reader())
        work: asyncio.Future[SendOutcome] | None = None
        try:
            while (item := await pending.get()) is not None:
                request, work = item
                await asyncio.wait([work])
                reply = upb.UowSendResponseBatch()
                _add_answer(reply, request, work, self.named)
                work = None
                yield reply.responses[0]
        finally:
            task.cancel()
            # As SendBatchStream: what was started runs on to its end, unheard.
            if work is not None:
                work.add_done_callback(_retrieve)
            while not pending.empty():
                item = pending.get_nowait()
                if item is not None:
                    item[1].add_done_callback(_retrieve)

    async def SendBatchStream(self, request_iterator: AsyncIterator[upb.UowSendBatch],
                              context: Context) -> AsyncIterator[upb.UowSendResponseBatch]:
        # Each batch's requests go to the front as the batch arrives, all at once and in order
        # (its whole UOWs' commits share a group-commit round); one answer batch per batch, in
        # order, once all its requests are answered.
        try:
            # A stream opened on a member that does not lead ends at once with NOT_LEADER and
            # the leader's address, as a unary call would; else it is pinned to this term.
            stream = self.front.open_stream()
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        access = await self.guard.caller(context)
        batches: asyncio.Queue[tuple[list[upb.UowSendRequest], list[asyncio.Future[SendOutcome]]] | None] = \
            asyncio.Queue()

        async def reader() -> None:
            try:
                async for batch in request_iterator:
                    requests = list(batch.requests)
                    batches.put_nowait((requests, self._submit(stream, requests, access)))
            finally:
                batches.put_nowait(None)

        task = asyncio.create_task(reader())
        started: list[asyncio.Future[SendOutcome]] = []
        try:
            while (item := await batches.get()) is not None:
                requests, started = item
                if started:
                    await asyncio.wait(started)
                reply = upb.UowSendResponseBatch()
                for request, work in zip(requests, started):
                    _add_answer(reply, request, work, self.named)
                started = []
                yield reply
        finally:
            task.cancel()
            # What was started runs on to its end, unheard: a commit queued for the log is
            # committed anyway, and cutting its bookkeeping short would lose what the leader
            # holds of it (a non-persistent UOW's messages).
            for work in started:
                work.add_done_callback(_retrieve)
            while not batches.empty():
                item = batches.get_nowait()
                for work in item[1] if item is not None else ():
                    work.add_done_callback(_retrieve)

    def _submit(self, stream: SenderStream, requests: list[upb.UowSendRequest],
                access: Access | None = None) -> list[asyncio.Future[SendOutcome]]:
        """A batch's requests, started in order: each as its domain request, or failed at once
        when it cannot be one (an unknown action) or its caller may not publish there."""
        domain: list[SendRequest] = []
        refused: dict[int, StrongroomError] = {}
        for i, request in enumerate(requests):
            try:
                self._check(access, SecurityAction.PUBLISH, request.destination)
                domain.append(_send_request(request))
            except StrongroomError as err:
                refused[i] = err
        started = self.front.submit(stream, domain)
        if not refused:
            return started
        work = iter(started)
        return [_failed(refused[i]) if i in refused else next(work) for i in range(len(requests))]

    def _send(self, request: upb.UowSendRequest) -> Awaitable[SendOutcome]:
        try:
            return self.front.send(_send_request(request))
        except StrongroomError as err:
            return _failed(err)

    async def Receive(self, request: upb.UowReceiveRequest, context: Context) -> upb.UowReceiveResponse:
        await self._may(context, SecurityAction.SUBSCRIBE, request.destination)
        try:
            got = await self.front.receive(request.destination, request.receiver, request.wait_seconds)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        if got is None:
            return upb.UowReceiveResponse(received=False)
        count = len(got.messages)
        return upb.UowReceiveResponse(
            received=True, uow_id=got.uow_id, destination=got.destination, backout_count=got.backouts,
            user_status=got.user_status,
            messages=[upb.UowMessage(index=i, count=count, message=m) for i, m in enumerate(got.messages, 1)])

    async def Settle(self, request: upb.UowSettleRequest, context: Context) -> upb.UowSettleResponse:
        access = await self.guard.caller(context)
        try:
            if access is not None:  # the UOW's destination: its receiver's permission
                self._check(access, SecurityAction.SUBSCRIBE, self.front.status(request.uow_id).destination)
            settlement = _SETTLEMENTS.get(request.settlement)
            if settlement is None:
                raise InvalidArgument("settlement is required: UOW_SETTLEMENT_COMMIT, _BACKOUT or _CANCEL")
            out = await self.front.settle(request.uow_id, request.receiver, settlement,
                                          request.user_status if request.HasField("user_status") else None)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return upb.UowSettleResponse(status=int(out.status), backout_count=out.backouts,
                                     dead_lettered_to=out.dead_lettered_to, log_index=out.log_index,
                                     duplicate=out.duplicate)

    async def Status(self, request: upb.UowStatusRequest, context: Context) -> upb.UowStatusResponse:
        access = await self.guard.caller(context)
        try:
            v = self.front.status(request.uow_id)
            if access is not None:
                access.check(SecurityAction.BROWSE, v.store)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return upb.UowStatusResponse(
            uow_id=v.uow_id, status=int(v.status), destination=v.destination, store=v.store, messages=v.messages,
            bytes=v.size, backout_count=v.backouts, user_status=v.user_status, receiver=v.receiver,
            options=upb.UowOptions(persistent=v.persistent, persistent_status=v.persistent_status,
                                   lifetime_seconds=v.lifetime, status_lifetime_multiple=v.status_lifetime_multiple),
            created_at=v.created_at, completed_at=v.completed_at, expires_at=v.expires_at, clock=v.clock,
            dead_lettered_from=v.dead_lettered_from, publication=v.publication,
            subscribers=[upb.UowSubscriberStatus(subscriber=r.subscriber, status=int(r.status),
                                                 backout_count=r.backouts) for r in v.subscribers])

    async def Subscribe(self, request: upb.UowSubscribeRequest, context: Context) -> upb.UowSubscribeResponse:
        await self._may(context, SecurityAction.SUBSCRIBE, request.topic)
        try:
            view, created = await self.publications.subscribe(request.topic, request.subscriber)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return upb.UowSubscribeResponse(subscription=_subscription(view), created=created)

    async def Unsubscribe(self, request: upb.UowUnsubscribeRequest, context: Context) -> upb.UowUnsubscribeResponse:
        await self._may(context, SecurityAction.SUBSCRIBE, request.topic)
        try:
            released = await self.publications.unsubscribe(request.topic, request.subscriber)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return upb.UowUnsubscribeResponse(released=released)

    async def ListSubscriptions(self, request: upb.UowListSubscriptionsRequest,
                                context: Context) -> upb.UowListSubscriptionsResponse:
        access = await self.guard.caller(context)
        try:
            if access is not None:
                access.check(SecurityAction.BROWSE, self._store_of(request.topic) if request.topic else None)
            views, clock = self.publications.subscriptions(request.topic)
        except StrongroomError as err:
            await abort_with(context, self.named(err))
        return upb.UowListSubscriptionsResponse(subscriptions=[_subscription(v) for v in views], clock=clock)
