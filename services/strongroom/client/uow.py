"""Units of work from the client side: send, receive and settle, ask a status.

    uow = client.unit_of_work("orders.queue")          # a new UOW; its id is the client's
    uow.add(b"line 1"); uow.add(b"line 2", {"n": 2})
    result = await uow.commit()                        # every message visible at once
    got = await client.receive_uow("orders.queue", "worker-1", wait=5)
    ...
    await got.commit()                                 # or got.backout() / got.cancel()
    status = await client.uow_status(result.uow_id)

Durable publications: on a topic whose realm rule says `units_of_work: {durable: true}`, a UOW
is a publication every durable subscriber that subscribed before its commit receives, whole:

    await client.subscribe_publications("news.topic", "reader-1")    # once; it survives restarts
    pub = client.unit_of_work("news.topic"); pub.add(b"headline"); await pub.commit()
    got = await client.receive_uow("news.topic", "reader-1", wait=5)   # the subscriber's name
    await got.commit()                                  # settled for this subscriber only

A UOW's messages are sent with its commit, in one request that opens and commits it (one log
entry), under an id the client chose: a commit that fails with a retriable error (leader gone,
no quorum) or a broken connection is sent again with the same id, and the leader stores it
once (`duplicate` in the answer). A `Client`'s UOWs send that request on a `SendBatchStream`
the client shares per destination and options (`UowSender`); one made without a client, with
a unary `Send`. `open()` sends the opening alone, so the UOW is RECEIVED and
visible to status queries while messages are added with `send()`; such a UOW is lost when the
leader changes before its commit (`UowAborted`: send it again as a new UOW).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import uow_pb2 as upb
from strongroom.api.v1 import uow_pb2_grpc as ugrpc
from strongroom.client.connection import Connection
from strongroom.client.messages import fill_message

__all__ = ["STATUS_NAMES", "PublicationSubscription", "ReceivedUnitOfWork", "SubscriberStatus", "UnitOfWork",
           "UowResult", "UowStatusInfo", "list_subscriptions", "new_uow_id", "response_result", "subscribe",
           "unsubscribe", "uow_call", "uow_stub"]

STATUS_NAMES = {v.number: v.name.removeprefix("UOW_STATUS_") for v in upb.UowStatus.DESCRIPTOR.values}


def new_uow_id() -> str:
    """A client-chosen UOW id (32 hex digits)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class UowResult:
    """A sender's request answered."""

    uow_id: str
    status: str
    messages: int
    duplicate: bool = False
    log_index: int = 0


@dataclass(frozen=True)
class SubscriberStatus:
    """Where one eligible subscriber of a publication stands: ACCEPTED (still to receive it),
    DELIVERED (holds it), PROCESSED or CANCELLED (settled it)."""

    subscriber: str
    status: str
    backout_count: int


@dataclass(frozen=True)
class PublicationSubscription:
    """A durable subscription to a durable topic (times on the pseudo-clock)."""

    topic: str
    store: str
    subscriber: str
    subscribed_at: float
    last_used: float
    expires_at: float
    pending: int
    """Publications it has still to receive or settle."""

    @classmethod
    def from_proto(cls, s: upb.UowSubscription) -> PublicationSubscription:
        """From the API's message."""
        return cls(s.topic, s.store, s.subscriber, s.subscribed_at, s.last_used, s.expires_at, s.pending)


@dataclass(frozen=True)
class UowStatusInfo:
    """A UOW's status as the cluster reports it (see UowStatusResponse)."""

    uow_id: str
    status: str
    destination: str
    store: str
    messages: int
    bytes: int
    backout_count: int
    user_status: bytes
    receiver: str
    persistent: bool
    persistent_status: bool
    lifetime_seconds: float
    status_lifetime_multiple: int
    created_at: float
    completed_at: float
    expires_at: float
    clock: float
    dead_lettered_from: str
    publication: bool = False
    subscribers: tuple[SubscriberStatus, ...] = ()
    """A publication's eligible subscribers and where each stands."""

    def to_json(self) -> dict[str, object]:
        """For `--json`: the user status as text when it is UTF-8, else hex."""
        out = dict(self.__dict__)
        out["subscribers"] = [dict(s.__dict__) for s in self.subscribers]
        try:
            out["user_status"] = self.user_status.decode()
        except UnicodeDecodeError:
            out["user_status"] = self.user_status.hex()
        return out


def uow_stub(connection: Connection, address: str) -> ugrpc.UowServiceStub:
    """A UowService stub for one member."""
    return ugrpc.UowServiceStub(connection.channel(address))


R = TypeVar("R")


async def uow_call(connection: Connection, method: Callable[[ugrpc.UowServiceStub], Callable[..., Awaitable[R]]],
                   request: object, wait: float = 0.0) -> R:
    """One unary UowService call on the leader (`method` picks it from a stub): redirects and
    retries are `call_leader`'s; `wait`: seconds the call may wait on the server beyond the
    policy's timeout."""

    async def attempt(address: str) -> R:
        return await connection.unary(method(uow_stub(connection, address))(
            request, timeout=wait + connection.policy.timeout, metadata=connection.metadata))

    return await connection.call_leader(attempt)


def response_result(resp: upb.UowSendResponse) -> UowResult:
    """A sender's answer as a `UowResult`."""
    return UowResult(resp.uow_id, STATUS_NAMES.get(resp.status, str(resp.status)), resp.messages, resp.duplicate,
                     resp.log_index)


@dataclass
class UnitOfWork:
    """A UOW being sent: add messages, then commit (or back out)."""

    connection: Connection
    destination: str
    uow_id: str = field(default_factory=new_uow_id)
    persistent: bool | None = None
    persistent_status: bool | None = None
    lifetime: float | None = None
    status_lifetime_multiple: int | None = None
    user_status: bytes | None = None
    messages: list[cpb.Message] = field(default_factory=list)
    opened: bool = False
    commit_whole: Callable[[UnitOfWork], Awaitable[UowResult]] | None = field(default=None, repr=False,
                                                                              compare=False)
    """How a commit of a UOW never opened is sent (`Client`: on a shared stream); None: the
    unary `Send`. Either raises the same errors and retries the same way."""

    def add(self, body: bytes, fields: dict[str, object] | None = None) -> None:
        """Add a message (sent with the commit, or with the next `send`)."""
        msg = cpb.Message()
        fill_message(msg, body, fields, "", 0)
        self.messages.append(msg)

    def _options(self) -> upb.UowOptions:
        options = upb.UowOptions()
        if self.persistent is not None:
            options.persistent = self.persistent
        if self.persistent_status is not None:
            options.persistent_status = self.persistent_status
        if self.lifetime is not None:
            options.lifetime_seconds = self.lifetime
        if self.status_lifetime_multiple is not None:
            options.status_lifetime_multiple = self.status_lifetime_multiple
        return options

    def _request(self, action: int) -> upb.UowSendRequest:
        req = upb.UowSendRequest(destination=self.destination, uow_id=self.uow_id, open=not self.opened,
                                 messages=self.messages, action=action)  # type: ignore[arg-type]
        if not self.opened:
            req.options.CopyFrom(self._options())
        if self.user_status is not None:
            req.user_status = self.user_status
        return req

    def whole_request(self) -> upb.UowSendRequest:
        """The one request that opens it with every message added and commits it (one log
        entry), for a pipelined sender (`UowSender`)."""
        return self._request(upb.UOW_ACTION_COMMIT)

    async def _call(self, action: int) -> UowResult:
        resp = await uow_call(self.connection, lambda stub: stub.Send, self._request(action))
        self._sent()
        return response_result(resp)

    def _sent(self) -> None:
        """What was added is with the leader now."""
        self.opened = True
        self.messages = []
        self.user_status = None

    async def open(self) -> UowResult:
        """Open it now (RECEIVED), with the messages added so far."""
        return await self._call(upb.UOW_ACTION_UNSPECIFIED)

    async def send(self) -> UowResult:
        """Send the messages added since the last call to the open UOW (opening it first)."""
        return await self._call(upb.UOW_ACTION_UNSPECIFIED)

    async def commit(self) -> UowResult:
        """Commit: every message becomes visible at once (ACCEPTED)."""
        if self.opened or self.commit_whole is None:
            return await self._call(upb.UOW_ACTION_COMMIT)
        result = await self.commit_whole(self)
        self._sent()
        return result

    async def backout(self) -> UowResult:
        """Back out an open UOW: nothing of it is ever visible (BACKEDOUT)."""
        return await self._call(upb.UOW_ACTION_BACKOUT)

    async def cancel(self) -> UowResult:
        """Cancel a committed UOW no receiver holds (CANCELLED)."""
        self.opened = True
        return await self._call(upb.UOW_ACTION_CANCEL)


@dataclass
class ReceivedUnitOfWork:
    """A UOW a receiver holds: settle it with commit, backout or cancel.

    A settlement whose answer is lost (the leader went down under the call, the connection
    broke) is sent again to the leader; if the first one was applied, the leader answers the
    repeat as done (`duplicate`), so a commit is never reported as failed once it took effect."""

    connection: Connection
    receiver: str
    uow_id: str
    destination: str
    messages: list[cpb.Message]
    backout_count: int
    user_status: bytes
    duplicate: bool = False
    """The last settlement was answered as a repeat of one applied before (it was retried)."""

    async def _settle(self, settlement: int, user_status: bytes | None) -> tuple[str, int, str]:
        req = upb.UowSettleRequest(uow_id=self.uow_id, receiver=self.receiver, settlement=settlement)  # type: ignore[arg-type]
        if user_status is not None:
            req.user_status = user_status
        resp = await uow_call(self.connection, lambda stub: stub.Settle, req)
        self.duplicate = resp.duplicate
        return STATUS_NAMES.get(resp.status, str(resp.status)), resp.backout_count, resp.dead_lettered_to

    async def commit(self, user_status: bytes | None = None) -> str:
        """Processed: its messages are deleted. Returns the new status."""
        return (await self._settle(upb.UOW_SETTLEMENT_COMMIT, user_status))[0]

    async def backout(self, user_status: bytes | None = None) -> tuple[str, int, str]:
        """Give it back: (status, backout count, dead-letter queue it moved to or '')."""
        return await self._settle(upb.UOW_SETTLEMENT_BACKOUT, user_status)

    async def cancel(self, user_status: bytes | None = None) -> str:
        """Discard it (CANCELLED)."""
        return (await self._settle(upb.UOW_SETTLEMENT_CANCEL, user_status))[0]


async def receive_uow(connection: Connection, destination: str, receiver: str,
                      wait: float = 0.0) -> ReceivedUnitOfWork | None:
    """Take the oldest committed UOW of a queue (waiting up to `wait` seconds); None if none."""
    req = upb.UowReceiveRequest(destination=destination, receiver=receiver, wait_seconds=wait)
    resp = await uow_call(connection, lambda stub: stub.Receive, req, wait)
    if not resp.received:
        return None
    return ReceivedUnitOfWork(connection, receiver, resp.uow_id, resp.destination,
                              [m.message for m in resp.messages], resp.backout_count, resp.user_status)


async def uow_status(connection: Connection, uow_id: str) -> UowStatusInfo:
    """A UOW's status by id."""
    r = await uow_call(connection, lambda stub: stub.Status, upb.UowStatusRequest(uow_id=uow_id))
    o = r.options
    return UowStatusInfo(r.uow_id, STATUS_NAMES.get(r.status, str(r.status)), r.destination, r.store, r.messages,
                         r.bytes, r.backout_count, r.user_status, r.receiver, o.persistent, o.persistent_status,
                         o.lifetime_seconds, o.status_lifetime_multiple, r.created_at, r.completed_at, r.expires_at,
                         r.clock, r.dead_lettered_from, r.publication,
                         tuple(SubscriberStatus(x.subscriber, STATUS_NAMES.get(x.status, str(x.status)), x.backout_count)
                               for x in r.subscribers))


async def subscribe(connection: Connection, topic: str, subscriber: str) -> tuple[PublicationSubscription, bool]:
    """Subscribe durably to a durable topic (again: mark it used); the subscription and whether
    it is new. Safe to retry."""
    resp = await uow_call(connection, lambda stub: stub.Subscribe,
                          upb.UowSubscribeRequest(topic=topic, subscriber=subscriber))
    return PublicationSubscription.from_proto(resp.subscription), resp.created


async def unsubscribe(connection: Connection, topic: str, subscriber: str) -> int:
    """End a durable subscription; how many publications it released. NotSubscribed when there
    is none (also when a retry after a failover finds the first attempt already ended it)."""
    resp = await uow_call(connection, lambda stub: stub.Unsubscribe,
                          upb.UowUnsubscribeRequest(topic=topic, subscriber=subscriber))
    return resp.released


async def list_subscriptions(connection: Connection, topic: str = "") -> tuple[list[PublicationSubscription], float]:
    """The durable subscriptions (of one topic, or all) and the pseudo-clock now."""
    resp = await uow_call(connection, lambda stub: stub.ListSubscriptions, upb.UowListSubscriptionsRequest(topic=topic))
    return [PublicationSubscription.from_proto(s) for s in resp.subscriptions], resp.clock

