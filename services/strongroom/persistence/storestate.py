"""The persistent store's state: the record in etcd, the operators' transitions, the capacity.

A cluster's persistent store (EntireX's PSTORE) is its replicated log and the state every member
applies from it. Operators change what it may be used for (docs/store-operations.md):

    available ──disconnect──▶ unavailable ──connect──▶ no new units of work ──allow-new──▶ available
        │                        ▲                         │
        └──over its capacity─────┼────────────────────────▶│ (by itself)
                                 └────────disconnect───────┘

- **available**: everything is served.
- **unavailable** (an operator disconnected it): nothing that needs persistence is served;
  commands on it fail at once with PSTORE_UNAVAILABLE, and no timeout runs on it.
- **no new units of work** (connected again, or over its capacity): only commands that consume
  are served; producing ones get NO_NEW_UOW until an operator allows new units of work, which is
  refused while the store is still over its capacity.

The state lives in the cluster's etcd (`keys.pstore_key`, a JSON `StoreRecord`), not in the log:
a store that is not to be used cannot carry the decision, and the state must be readable and
changeable while the store is unavailable. Every write is a compare-and-swap on the revision read,
so two operators (or an operator and the leader noticing its capacity) cannot both win. This
module is pure apart from `read_record` / `write_record`; `pstore.py` follows and enforces it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from enum import Enum

from strongroom.errors import NoNewUow, PersistenceUnavailable, StoreStateError
from strongroom.etcd import EtcdClient
from strongroom.keys import pstore_key
from strongroom.persistence.state import StateMachine
from strongroom.realm.model import PersistentStore

__all__ = [
    "AVAILABLE_RECORD",
    "StoreAction",
    "StoreCause",
    "StoreRecord",
    "StoreState",
    "StoreView",
    "Usage",
    "after",
    "by_capacity",
    "no_new_error",
    "over_capacity",
    "read_record",
    "unavailable_error",
    "usage_of",
    "write_record",
]


class StoreState(str, Enum):
    """What the cluster's persistent store may be used for."""

    AVAILABLE = "available"
    """Everything is served."""
    UNAVAILABLE = "unavailable"
    """Disconnected: nothing that needs persistence is served, no timeout runs on it."""
    NO_NEW_UOW = "no-new-uow"
    """Only commands that consume are served."""


class StoreCause(str, Enum):
    """What put the store in its state."""

    NONE = ""
    """Never changed: available since the cluster began."""
    OPERATOR = "operator"
    """An operator's store operation."""
    CAPACITY = "capacity"
    """The store exceeded its capacity (the leader wrote it)."""
    DISK = "disk"
    """Fewer than a majority of the members could write their storage, or a majority can again
    (the leader wrote it; `storehealth.py`)."""


class StoreAction(str, Enum):
    """An operator's store operation (`strongroom store ...`)."""

    DISCONNECT = "disconnect"
    CONNECT = "connect"
    ALLOW_NEW = "allow-new"


@dataclass(frozen=True)
class StoreRecord:
    """The cluster's persistent-store state as its etcd keeps it."""

    state: StoreState = StoreState.AVAILABLE
    since: float = 0.0
    """Unix seconds it has been in this state (0: never changed)."""
    reason: str = ""
    """Why, in words: the operator's reason, or the capacity it exceeded."""
    cause: StoreCause = StoreCause.NONE
    changed_by: str = ""
    """The member that wrote it."""
    revision: int = field(default=0, compare=False)
    """etcd mod_revision it was read at (0: no record in etcd). Not stored."""

    def to_bytes(self) -> bytes:
        return json.dumps({"state": self.state.value, "since": self.since, "reason": self.reason,
                           "cause": self.cause.value, "changed_by": self.changed_by}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, revision: int = 0) -> StoreRecord:
        data = json.loads(raw)
        return cls(state=StoreState(data["state"]), since=float(data.get("since", 0.0)),
                   reason=str(data.get("reason", "")), cause=StoreCause(data.get("cause", "")),
                   changed_by=str(data.get("changed_by", "")), revision=revision)

    def describe(self) -> str:
        """The state, since when and why, in words (logs, errors, the CLI)."""
        words = {StoreState.AVAILABLE: "available", StoreState.UNAVAILABLE: "unavailable",
                 StoreState.NO_NEW_UOW: "taking no new units of work"}[self.state]
        if not self.since:
            return words
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.since))
        return f"{words} since {when}" + (f" ({self.reason})" if self.reason else "")


AVAILABLE_RECORD = StoreRecord()
"""The state of a cluster whose etcd holds no record: available."""


@dataclass(frozen=True)
class Usage:
    """What the replicated stores hold: the messages the capacity counts."""

    messages: int
    bytes: int


@dataclass(frozen=True)
class StoreView:
    """The persistent store as a member answers for it (status, `GetPersistentStore`)."""

    cluster: str
    record: StoreRecord
    usage: Usage
    capacity: PersistentStore
    over_capacity: str
    """Why it is over its capacity now ("": it is not, or has none)."""
    member: str
    """The answering member."""
    enforced: bool
    """The answering member leads and enforces this state now."""
    cannot_store: tuple[tuple[str, str, float], ...] = ()
    """(member, why, since) of the members that cannot write their storage: the answering member,
    and when it leads, the followers that said so."""


def usage_of(state: StateMachine) -> Usage:
    """The messages (and their bytes) held by the replicated state's stores, the messages held by
    its units of work included: the persistent store's contents as the capacity counts them."""
    uows = state.uows
    return Usage(sum(state.store_count.values()) + sum(uows.store_count.values()),
                 sum(state.store_bytes.values()) + sum(uows.store_bytes.values()))


def over_capacity(usage: Usage, capacity: PersistentStore) -> str:
    """Why `usage` exceeds the realm's `capacity`, in words ("": it does not, or there is none)."""
    if capacity.capacity_messages and usage.messages > capacity.capacity_messages:
        return f"{usage.messages} messages held, over the capacity of {capacity.capacity_messages}"
    if capacity.capacity_bytes and usage.bytes > capacity.capacity_bytes:
        return f"{usage.bytes} message bytes held, over the capacity of {capacity.capacity_bytes}"
    return ""


def after(record: StoreRecord, action: StoreAction, cluster: str, member: str, reason: str = "",
          over: str = "", now: float | None = None) -> StoreRecord:
    """The record an operator's `action` leaves (`over`: why the store exceeds its capacity now,
    "" when it does not), or StoreStateError when the state does not allow it."""
    state = record.state
    lift = f"`strongroom store allow-new --cluster {cluster}`"
    if action is StoreAction.DISCONNECT:
        if state is StoreState.UNAVAILABLE:
            raise _refused(cluster, record, f"it is disconnected already; `strongroom store connect --cluster "
                                            f"{cluster}` makes it available again")
        to, words = StoreState.UNAVAILABLE, "disconnected by an operator"
    elif action is StoreAction.CONNECT:
        if state is not StoreState.UNAVAILABLE:
            raise _refused(cluster, record, "only a disconnected store is connected" + (
                f"; {lift} lifts the state" if state is StoreState.NO_NEW_UOW else ""))
        to, words = StoreState.NO_NEW_UOW, "connected by an operator, taking no new units of work"
    elif action is StoreAction.ALLOW_NEW:
        if state is StoreState.UNAVAILABLE:
            raise _refused(cluster, record, f"connect it first (`strongroom store connect --cluster {cluster}`), "
                                            f"then allow new units of work")
        if state is StoreState.AVAILABLE:
            raise _refused(cluster, record, "it takes new units of work already")
        if over:
            raise _refused(cluster, record, f"it is still over its capacity ({over}); let consumers drain it "
                                            f"below, or raise the realm's persistent_store capacity, first")
        to, words = StoreState.AVAILABLE, "new units of work allowed by an operator"
    else:  # pragma: no cover - an Enum member this version does not know
        raise ValueError(action)
    return StoreRecord(to, time.time() if now is None else now, f"{words}: {reason}" if reason else words,
                       StoreCause.OPERATOR, member, record.revision)


def by_capacity(record: StoreRecord, over: str, member: str, now: float | None = None) -> StoreRecord | None:
    """The record of a store that exceeded its capacity (`over` says how): an available store
    takes no new units of work from now on. None when nothing changes (within its capacity, or
    in another state already)."""
    if not over or record.state is not StoreState.AVAILABLE:
        return None
    return StoreRecord(StoreState.NO_NEW_UOW, time.time() if now is None else now, f"capacity exceeded: {over}",
                       StoreCause.CAPACITY, member, record.revision)


def _refused(cluster: str, record: StoreRecord, why: str) -> StoreStateError:
    return StoreStateError(f"the persistent store of cluster {cluster} is {record.describe()}: {why}; nothing "
                           f"changed", {"state": record.state.value})


def _metadata(record: StoreRecord) -> dict[str, str]:
    return {"state": record.state.value, "since": f"{record.since:.3f}", "cause": record.cause.value}


def unavailable_error(cluster: str, record: StoreRecord) -> PersistenceUnavailable:
    """What a command that needs persistence gets while the store is unavailable."""
    until = ("a majority of its members can write their storage again (then it takes no new units of work "
             f"until `strongroom store allow-new --cluster {cluster}`)") if record.cause is StoreCause.DISK else \
        f"an operator connects it (`strongroom store connect --cluster {cluster}`)"
    return PersistenceUnavailable(f"the persistent store of cluster {cluster} is {record.describe()}: commands "
                                  f"that need persistence are refused until {until}", _metadata(record))


def no_new_error(cluster: str, record: StoreRecord) -> NoNewUow:
    """What a producing command gets while the store takes no new units of work."""
    return NoNewUow(f"the persistent store of cluster {cluster} is {record.describe()}: only commands that "
                    f"consume (receive, acknowledge, settle) are served; an operator lifts it with "
                    f"`strongroom store allow-new --cluster {cluster}`", _metadata(record))


async def read_record(etcd: EtcdClient, cluster: str) -> StoreRecord:
    """The cluster's record, or `AVAILABLE_RECORD` when none was written."""
    return (await read_record_at(etcd, cluster))[0]


async def read_record_at(etcd: EtcdClient, cluster: str) -> tuple[StoreRecord, int]:
    """The cluster's record (`AVAILABLE_RECORD` when none was written) and the etcd revision it
    was read at: what a member that also follows the record orders it by (a read that found no
    record and a watch event of the first write can arrive in either order)."""
    kv, at = await etcd.get_at(pstore_key(cluster))
    return (AVAILABLE_RECORD if kv is None else StoreRecord.from_bytes(kv.value, kv.mod_revision)), at


async def write_record(etcd: EtcdClient, cluster: str, record: StoreRecord) -> StoreRecord | None:
    """Store `record` if the cluster's record is still at `record.revision` (the one it was made
    from; 0: none); the record as stored, or None when someone wrote it in between (read it again
    and decide again)."""
    revision = await etcd.put_at_revision(pstore_key(cluster), record.to_bytes(), record.revision)
    return replace(record, revision=revision) if revision else None
