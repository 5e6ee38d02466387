"""What senders and receivers of units of work ask and are answered, as domain values (the
servicer builds them from the requests; the front takes and returns them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.errors import StrongroomError
from strongroom.uow.model import UowStatus

__all__ = [
    "Action",
    "ReceivedUow",
    "SendOutcome",
    "SendRequest",
    "SenderStream",
    "SettleOutcome",
    "Settlement",
    "SubscriberView",
    "SubscriptionView",
    "UowChoices",
    "UowView",
]


# The longest a receiver may wait for a unit of work in one call (seconds).
MAX_WAIT_SECONDS = 60.0


class Action:
    """What a sender's request does after adding its messages."""

    NONE = "none"
    COMMIT = "commit"
    BACKOUT = "backout"
    CANCEL = "cancel"


class Settlement:
    """How a receiver settles a UOW."""

    COMMIT = "commit"
    BACKOUT = "backout"
    CANCEL = "cancel"




@dataclass(frozen=True)
class UowChoices:
    """A sender's choices for a new UOW; None takes the destination's default."""

    persistent: bool | None = None
    persistent_status: bool | None = None
    lifetime: float | None = None
    status_lifetime_multiple: int | None = None


@dataclass(frozen=True)
class SendRequest:
    """One sender request (see UowSendRequest in uow.proto)."""

    destination: str
    uow_id: str = ""
    open: bool = False
    messages: tuple[cpb.Message, ...] = ()
    action: str = Action.NONE
    choices: UowChoices = UowChoices()
    user_status: bytes | None = None


@dataclass(frozen=True)
class SendOutcome:
    """A sender request's result."""

    uow_id: str
    status: UowStatus
    messages: int
    duplicate: bool = False
    log_index: int = 0


class SenderStream:
    """What the front keeps of one stream of sender requests (`UowFront.submit`)."""

    __slots__ = ("broken", "epoch", "working")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        """The leadership epoch the stream is pinned to: a stream that outlives its term, even
        when this member leads again, is refused, so its client sends again in order on a new
        one."""
        self.broken: StrongroomError | None = None
        """The first retriable error: every later request of the stream fails with it (the
        client sends them again, in order, on a new stream)."""
        self.working: dict[str, asyncio.Future[SendOutcome]] = {}
        """The latest unfinished request per UOW id: the next one for that UOW waits for it."""

    def done(self, uow_id: str, work: asyncio.Future[SendOutcome]) -> None:
        """A request for `uow_id` finished."""
        if self.working.get(uow_id) is work:
            del self.working[uow_id]


@dataclass(frozen=True)
class ReceivedUow:
    """A UOW a receiver now holds."""

    uow_id: str
    destination: str
    messages: list[cpb.Message]
    backouts: int
    user_status: bytes


@dataclass(frozen=True)
class SettleOutcome:
    """A receiver's settlement's result."""

    status: UowStatus
    backouts: int
    dead_lettered_to: str = ""
    log_index: int = 0
    duplicate: bool = False
    """The receiver's same settlement had been applied already (a retry): nothing changed."""


@dataclass(frozen=True)
class UowView:
    """A UOW's status and facts (the status query)."""

    uow_id: str
    status: UowStatus
    destination: str
    store: str
    messages: int
    size: int
    backouts: int
    user_status: bytes
    receiver: str
    persistent: bool
    persistent_status: bool
    lifetime: float
    status_lifetime_multiple: int
    created_at: float
    completed_at: float
    expires_at: float
    clock: float
    dead_lettered_from: str
    publication: bool = False
    subscribers: tuple[SubscriberView, ...] = ()
    """A publication's eligible subscribers, by name."""


@dataclass(frozen=True)
class SubscriberView:
    """Where one eligible subscriber of a publication stands."""

    subscriber: str
    status: UowStatus
    backouts: int


@dataclass(frozen=True)
class SubscriptionView:
    """A durable subscription to a topic."""

    topic: str
    store: str
    subscriber: str
    subscribed_at: float
    last_used: float
    expires_at: float
    pending: int
