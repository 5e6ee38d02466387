"""The values of units of work: statuses, operation kinds, the transitions each operation
allows, and the records the table keeps (a UOW or publication, a publication's reader, a durable
subscription). `table.py` applies them; its docstring is the transition table in words."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import uow_pb2
from strongroom.errors import StrongroomError, error_for_reason

__all__ = ["FINAL", "LIVE", "READER_OPS", "RECEIVER_OPS", "TRANSITIONS", "OpKind", "Reader", "Refused", "Subscribed",
           "Subscription", "Uow", "UowStatus", "status_name"]


class UowStatus(IntEnum):
    """A unit of work's status (the values of `strongroom.v1.UowStatus`)."""

    RECEIVED = uow_pb2.UOW_STATUS_RECEIVED
    ACCEPTED = uow_pb2.UOW_STATUS_ACCEPTED
    DELIVERED = uow_pb2.UOW_STATUS_DELIVERED
    PROCESSED = uow_pb2.UOW_STATUS_PROCESSED
    BACKEDOUT = uow_pb2.UOW_STATUS_BACKEDOUT
    TIMEOUT = uow_pb2.UOW_STATUS_TIMEOUT
    CANCELLED = uow_pb2.UOW_STATUS_CANCELLED
    DISCARDED = uow_pb2.UOW_STATUS_DISCARDED


FINAL = frozenset({UowStatus.PROCESSED, UowStatus.BACKEDOUT, UowStatus.TIMEOUT, UowStatus.CANCELLED,
                   UowStatus.DISCARDED})
LIVE = frozenset({UowStatus.RECEIVED, UowStatus.ACCEPTED, UowStatus.DELIVERED})


def status_name(status: int) -> str:
    """RECEIVED, ACCEPTED, ... for a status value."""
    try:
        return UowStatus(status).name
    except ValueError:
        return f"UNKNOWN({status})"


class OpKind(IntEnum):
    """What a UowOp does (the values of `strongroom.v1.UowOpKind`)."""

    OPEN = rpb.UOW_OP_KIND_OPEN
    COMMIT = rpb.UOW_OP_KIND_COMMIT
    SENDER_BACKOUT = rpb.UOW_OP_KIND_SENDER_BACKOUT
    ABANDON = rpb.UOW_OP_KIND_ABANDON
    SENDER_CANCEL = rpb.UOW_OP_KIND_SENDER_CANCEL
    DELIVER = rpb.UOW_OP_KIND_DELIVER
    RECEIVER_COMMIT = rpb.UOW_OP_KIND_RECEIVER_COMMIT
    RECEIVER_BACKOUT = rpb.UOW_OP_KIND_RECEIVER_BACKOUT
    RECEIVER_CANCEL = rpb.UOW_OP_KIND_RECEIVER_CANCEL
    RELEASE = rpb.UOW_OP_KIND_RELEASE
    TIMEOUT = rpb.UOW_OP_KIND_TIMEOUT
    DISCARD = rpb.UOW_OP_KIND_DISCARD
    FORGET = rpb.UOW_OP_KIND_FORGET
    USER_STATUS = rpb.UOW_OP_KIND_USER_STATUS
    SUBSCRIBE = rpb.UOW_OP_KIND_SUBSCRIBE
    UNSUBSCRIBE = rpb.UOW_OP_KIND_UNSUBSCRIBE
    EXPIRE_SUBSCRIPTIONS = rpb.UOW_OP_KIND_EXPIRE_SUBSCRIPTIONS


# The status a UOW must have for each operation on an existing UOW, and the one it gets
# (None: decided by the operation, see the module's table).
_S = UowStatus
TRANSITIONS: dict[OpKind, tuple[frozenset[UowStatus], UowStatus | None]] = {
    OpKind.COMMIT: (frozenset({_S.RECEIVED}), _S.ACCEPTED),
    OpKind.SENDER_BACKOUT: (frozenset({_S.RECEIVED}), _S.BACKEDOUT),
    OpKind.ABANDON: (frozenset({_S.RECEIVED}), _S.BACKEDOUT),
    OpKind.SENDER_CANCEL: (frozenset({_S.ACCEPTED}), _S.CANCELLED),
    OpKind.DELIVER: (frozenset({_S.ACCEPTED}), _S.DELIVERED),
    OpKind.TIMEOUT: (frozenset({_S.ACCEPTED}), _S.TIMEOUT),
    OpKind.RECEIVER_COMMIT: (frozenset({_S.DELIVERED}), _S.PROCESSED),
    OpKind.RECEIVER_BACKOUT: (frozenset({_S.DELIVERED}), None),
    OpKind.RELEASE: (frozenset({_S.DELIVERED}), None),
    OpKind.RECEIVER_CANCEL: (frozenset({_S.DELIVERED}), _S.CANCELLED),
    OpKind.DISCARD: (LIVE, _S.DISCARDED),
    OpKind.FORGET: (FINAL, None),
    OpKind.USER_STATUS: (frozenset(UowStatus), None),
}
# Operations that need the acting receiver to be the one holding the UOW.
RECEIVER_OPS = frozenset({OpKind.RECEIVER_COMMIT, OpKind.RECEIVER_BACKOUT, OpKind.RECEIVER_CANCEL})
# A publication's reader: what each receiver operation needs and makes of it (None: backed out).
READER_OPS: dict[OpKind, tuple[UowStatus, UowStatus | None]] = {
    OpKind.DELIVER: (_S.ACCEPTED, _S.DELIVERED),
    OpKind.RECEIVER_COMMIT: (_S.DELIVERED, _S.PROCESSED),
    OpKind.RECEIVER_BACKOUT: (_S.DELIVERED, None),
    OpKind.RECEIVER_CANCEL: (_S.DELIVERED, _S.CANCELLED),
}


@dataclass(frozen=True)
class Refused:
    """An operation applied to a UOW whose state does not allow it: nothing changed.
    `reason` is the error's ErrorInfo reason (UNKNOWN_UOW, UOW_STATE, UOW_NOT_HELD, UOW_EXISTS,
    STORE_LIMIT_EXCEEDED, INVALID_ARGUMENT, NOT_SUBSCRIBED)."""

    reason: str
    message: str

    def error(self) -> StrongroomError:
        """The domain error of its reason (errors.py's table), to raise to the caller."""
        return error_for_reason(self.reason, self.message)


@dataclass
class Subscription:
    """A durable subscription to a topic (publications)."""

    store: str
    topic: str
    subscriber: str
    expiration: float
    subscribed_at: float
    last_used: float

    @property
    def key(self) -> tuple[str, str]:
        """(topic, subscriber)."""
        return self.topic, self.subscriber

    def expires_at(self) -> float:
        """When it ends unless used before."""
        return self.last_used + self.expiration

    def to_state(self) -> rpb.UowSubscriptionState:
        """As a snapshot record."""
        return rpb.UowSubscriptionState(store=self.store, topic=self.topic, subscriber=self.subscriber,
                                        expiration=self.expiration, subscribed_at=self.subscribed_at,
                                        last_used=self.last_used)

    @classmethod
    def from_state(cls, state: rpb.UowSubscriptionState) -> Subscription:
        """From a snapshot record."""
        return cls(state.store, state.topic, state.subscriber, state.expiration, state.subscribed_at,
                   state.last_used)


@dataclass(frozen=True)
class Subscribed:
    """What SUBSCRIBE did: the subscription, and whether it is new."""

    subscription: Subscription
    created: bool


@dataclass
class Reader:
    """One eligible subscriber of a publication."""

    status: UowStatus = UowStatus.ACCEPTED
    backouts: int = 0
    delivered_at: float = 0.0

    @property
    def live(self) -> bool:
        """Still to receive or settle it."""
        return self.status in (UowStatus.ACCEPTED, UowStatus.DELIVERED)


@dataclass
class Uow:
    """One unit of work (on a queue), or a publication (on a durable topic)."""

    id: str
    definition: rpb.UowDefinition
    status: UowStatus
    created_at: float
    messages: list[cpb.Message] | None = None
    """Its messages when they are persistent (in the log), else None: the leader holds them."""
    count: int = 0
    size: int = 0
    backouts: int = 0
    user_status: bytes | None = None
    receiver: str = ""
    completed_at: float = 0.0
    delivered_at: float = 0.0
    order: int = 0
    """Its place in its queue: commit order (a backed-out UOW keeps its place)."""
    dead_lettered_from: str = ""
    readers: dict[str, Reader] | None = None
    """A committed publication's eligible subscribers, by name (None: not a publication, or
    not committed yet)."""

    @property
    def publication(self) -> bool:
        """A publication on a durable topic."""
        return self.definition.publication

    def holders(self) -> list[str]:
        """The subscribers holding a publication (DELIVERED to them)."""
        readers = self.readers or {}
        return [name for name, r in readers.items() if r.status == UowStatus.DELIVERED]

    @property
    def store(self) -> str:
        """The store of its queue."""
        return self.definition.store

    @property
    def destination(self) -> str:
        """Its queue."""
        return self.definition.destination

    @property
    def final(self) -> bool:
        """Complete: processed, backed out, timed out, cancelled or discarded."""
        return self.status in FINAL

    def expires_at(self) -> float:
        """When its lifetime ends (live) or its status is deleted (complete)."""
        lifetime = self.definition.lifetime
        if self.final:
            return self.completed_at + lifetime * max(1, self.definition.status_lifetime_multiple)
        return self.created_at + lifetime
