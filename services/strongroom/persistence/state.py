"""The deterministic state machine every member applies committed log entries to.

It holds the stores' messages, the durables with their pending (unacknowledged) messages, the
last-value slots, the publishers' deduplication windows and the origin marks of forwarded
messages. Applying the same entries in the same order gives the same state on every member, so
a follower that takes over already holds everything. The same class, fed directly instead of
through the log, keeps a leader's non-replicated stores.

Longer than 600 lines: the apply of every operation kind is one class on purpose. Determinism
rests on every member running exactly the same code over the same fields in the same order, and
`DiskStateMachine` overrides the storage of a handful of those fields while running the rest of
this code unchanged; spreading the operations over mixins would hide which code a member runs
for an entry.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from google.protobuf.unknown_fields import UnknownFieldSet

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import UnknownOperation
from strongroom.events.records import Record, RecordKind
from strongroom.events.schema import EventKind
from strongroom.observability.tallies import Tallies
from strongroom.persistence.dedup import DEDUP_WINDOW, ProducerWindow
from strongroom.persistence.matcher import Match, compile_matcher, key_of
from strongroom.persistence.swap import PayloadSource, PayloadStore
from strongroom.uow.model import OpKind as UowOpKind
from strongroom.uow.table import Uow, UowTable

__all__ = [
    "StateMachine",
    "StoredMessage",
    "OriginMark",
    "Durable",
    "PublishResult",
    "MapResult",
    "DeleteResult",
    "durable_key",
    "content_durable_key",
    "DEDUP_WINDOW",
]

KIND_STANDARD = cpb.DURABLE_KIND_STANDARD
KIND_SHARED = cpb.DURABLE_KIND_SHARED
KIND_LASTVALUE = cpb.DURABLE_KIND_LASTVALUE


def durable_key(destination: str, name: str) -> str:
    """The key of a durable: destination and name (a queue's own durable has the empty name)."""
    return f"{destination}\x00{name}"


def content_durable_key(store: str, name: str) -> str:
    """The key of a content durable (opened through an endpoint): store-wide, by name."""
    return f"\x01{store}\x00{name}"

def _unknown_field(op: rpb.Operation) -> str:
    """What an operation of an unknown kind carries: the numbers of its fields."""
    numbers = sorted({f.field_number for f in UnknownFieldSet(op)})
    return "field " + ", ".join(map(str, numbers)) if numbers else "no field set"


# Dead-letter copies carry these fields besides the original ones.
DEAD_LETTER_FROM = "sr.dead_letter.from"
DEAD_LETTER_DURABLE = "sr.dead_letter.durable"
DEAD_LETTER_DELIVERIES = "sr.dead_letter.deliveries"
DEAD_LETTER_SEQ = "sr.dead_letter.seq"


class StoredMessage:
    """A stored message and how many holders (durables, slots, retention) still keep it.

    The payload is read through `message`: it is held in memory, or (swapped, or kept by the
    indexes on disk) read back from its `PayloadSource` on each access.
    """

    __slots__ = ("seq", "store", "destination", "_message", "_source", "size", "refs", "queue", "content",
                 "published_at", "expires_at", "expires_clock", "retain_until", "retained", "_detached")

    def __init__(self, seq: int, store: str, destination: str, message: cpb.Message | None, size: int,
                 refs: int = 0, queue: bool = False, content: bool = False, published_at: float = 0.0,
                 expires_at: float = 0.0, expires_clock: float = 0.0, retain_until: float = 0.0,
                 retained: bool = False, source: PayloadSource | None = None) -> None:
        self.seq = seq
        self.store = store
        self.destination = destination
        self._message = message
        self._source = source
        self.size = size
        self.refs = refs
        self.queue = queue
        self.content = content
        self.published_at = published_at
        # Its time-to-live ends on one clock: the leader's wall clock (expires_at, unix seconds)
        # or the pseudo-clock (expires_clock); 0: no end on that clock.
        self.expires_at = expires_at
        self.expires_clock = expires_clock
        self.retain_until = retain_until
        # Holds a replay-retention reference until retain_until.
        self.retained = retained
        self._detached = False

    def detach(self) -> None:
        """Give the payload in memory a copy of its own. A message applied from a log entry is
        a view into that entry, which keeps the whole entry's memory (one protobuf arena: a
        batch of up to thousands of publishes) alive for as long as the message lives; a last
        value or a message kept for replay may live for days after the rest was acknowledged."""
        msg = self._message
        if msg is not None and not self._detached:  # once: a last value of two durables, retained too
            own = cpb.Message()
            own.CopyFrom(msg)
            self._message = own
            self._detached = True

    @property
    def message(self) -> cpb.Message:
        """The payload: from memory, else read back from where it was moved."""
        msg = self._message
        if msg is None:
            assert self._source is not None, f"message {self.seq} has no payload"
            return self._source.read(self)
        return msg

    def ttl_ended(self, now: float, clock: float) -> bool:
        """Its time-to-live ended by wall-clock time `now` or pseudo-clock time `clock`, on the
        clock it runs on."""
        return bool((self.expires_at and self.expires_at <= now) or
                    (self.expires_clock and self.expires_clock <= clock))

    @property
    def swapped(self) -> bool:
        """Whether the payload is not held in memory."""
        return self._message is None

    def swap_out(self, source: PayloadSource) -> None:
        """Drop the in-memory payload; later reads go to `source`."""
        self._source = source
        self._message = None

    def __repr__(self) -> str:
        return (f"StoredMessage(seq={self.seq}, store={self.store!r}, destination={self.destination!r}, "
                f"size={self.size}, refs={self.refs}, swapped={self.swapped})")


@dataclass
class Durable:
    """A durable: its interest and the messages it still wants, in order."""

    key: str
    store: str
    destination: str
    name: str
    kind: int
    queue: bool = False
    # Pending message sequences; a dict keeps insertion (= sequence) order with O(1) removal.
    pending: dict[int, None] = field(default_factory=dict)
    pending_bytes: int = 0
    last_value_seq: int = 0
    matcher: cpb.ContentMatcher = field(default_factory=cpb.ContentMatcher)
    key_field: str = ""
    content: bool = False
    ack_sync_mode: int = 0
    # Keyed last-value slots: key_of(field value) -> message sequence.
    last_values: dict[str, int] = field(default_factory=dict)
    # Its destination's rule no longer reaches it (SuspendDurablesOp): it takes no new
    # messages and keeps what it holds. It stays among its destination's durables, so an
    # expiry or a discard still finds it.
    suspended: bool = False
    # Its last use on the pseudo-clock (created, acknowledged, a subscriber attached or gone;
    # 0: not known, created before log format 5) and whether a subscriber was attached when the
    # leader last said: what durable expiry reads, the same on every member.
    last_used: float = 0.0
    attached: bool = False
    # Deliveries the leader recorded of pending messages (DeliveryCountsOp, log format 7):
    # message sequence -> deliveries so far; a message leaves it when it leaves the durable.
    delivery_counts: dict[int, int] = field(default_factory=dict)
    match: Match | None = field(default=None, repr=False)
    # Not suspended, no key field and no matcher: wants every message of its destination
    # (read per message).
    wants_all: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.match = compile_matcher(self.matcher)
        self._set_wants_all()

    def _set_wants_all(self) -> None:
        self.wants_all = not self.suspended and not self.key_field and self.match is None

    def suspend(self, suspended: bool) -> None:
        """Stop (or resume) taking new messages."""
        self.suspended = suspended
        self._set_wants_all()

    def idle(self, clock: float) -> float:
        """Pseudo-clock seconds it has been unused at `clock`: 0 while a subscriber is attached
        and while its last use is not known (durable expiry counts from what the log says)."""
        if self.attached or not self.last_used:
            return 0.0
        return max(0.0, clock - self.last_used)

    def wants(self, message: cpb.Message) -> bool:
        """Whether a message of its destination (or store) is of interest."""
        if self.suspended or (self.key_field and self.key_field not in message.fields):
            return False
        return self.match is None or self.match(message)


class PublishResult(NamedTuple):
    """Outcome of applying one publish: the message's sequence (0 if nobody wanted it). A named
    tuple: one is made per published message on every member."""

    message_seq: int
    duplicate: bool
    outside_window: bool = False
    # The store is at its limit and its policy rejects new messages: nothing was stored.
    rejected: bool = False
    limit: str = ""
    # The stored message's size in bytes (the store event log's rows read it here).
    size: int = 0
    # A forwarded message refused by the mark rule (ORIGIN_GAP): why; nothing was stored.
    gap: str = ""


@dataclass
class OriginMark:
    """The mark of one origin cluster and destination: the highest origin sequence of the
    messages forwarded from there that this state stored (or passed, nobody wanting them)."""

    store: str
    sequence: int
    stored_at: float
    """Unix seconds on the leader when the mark moved there (its entry's publish time)."""


class DeleteResult(NamedTuple):
    """Outcome of deleting a durable: its store and how many messages it released."""

    store: str
    released: int


@dataclass(frozen=True)
class MapResult:
    """Outcome of a map write: whether it took effect, and the key's entry afterwards."""

    swapped: bool
    found: bool
    value: bytes = b""
    version: int = 0


class _Timers:
    """Where lifetimes end on one clock, soonest first: a heap of (time, message sequence).
    Entries of messages already gone are dropped lazily (followers never run `due`), and the
    heap is rebuilt once most of it is such entries."""

    __slots__ = ("heap", "stale")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int]] = []
        self.stale = 0

    def __len__(self) -> int:
        return len(self.heap)

    def add(self, when: float, seq: int) -> None:
        """A lifetime of message `seq` ends at `when`."""
        heapq.heappush(self.heap, (when, seq))

    def load(self, items: list[tuple[float, int]]) -> None:
        """Take entries in any order (a state reopened from disk)."""
        self.heap.extend(items)
        heapq.heapify(self.heap)

    def gone(self, count: int, live: Container[int]) -> None:
        """`count` entries belong to a message that left (`live`: the messages still stored)."""
        self.stale += count
        if self.stale > 1024 and 2 * self.stale > len(self.heap):
            self.heap = [(when, seq) for when, seq in self.heap if seq in live]
            heapq.heapify(self.heap)
            self.stale = 0

    def next(self) -> float:
        """When the earliest lifetime ends (0: none)."""
        return self.heap[0][0] if self.heap else 0.0

    def due(self, until: float, ended: Callable[[int], bool], limit: int) -> list[int]:
        """Messages with an entry at or before `until` whose lifetime did end (`ended`), at most
        `limit`. Their entries stay until the expiry is applied; others at or before `until`
        (the message left, or its retention was released) are dropped."""
        out: list[int] = []
        keep: list[tuple[float, int]] = []
        heap = self.heap
        while heap and heap[0][0] <= until and len(out) < limit:
            item = heapq.heappop(heap)
            if ended(item[1]):
                out.append(item[1])
                keep.append(item)
        for item in keep:
            heapq.heappush(heap, item)
        return out


class StateMachine:
    """Stores, durables, maps and dedup windows; `apply` is the only way in for replicated stores."""

    def __init__(self, payloads: PayloadStore | None = None) -> None:
        # Where payloads go past the member's memory budget (None: always in memory).
        self.payloads = payloads
        self.applied_index = 0
        self.applied_epoch = 0
        self.next_seq = 1
        self.acked_messages = 0
        """Messages acknowledged so far (per durable), in log order: the same at every member at
        the same index (the DR lag and tail loss count them, persistence/committed.py)."""
        self.messages: dict[int, StoredMessage] = {}
        self.durables: dict[str, Durable] = {}
        self.by_destination: dict[str, list[Durable]] = {}
        # Content durables (opened through endpoints) by store: they see the whole store.
        self.content_durables: dict[str, list[Durable]] = {}
        self.producers: dict[str, ProducerWindow] = {}
        self._producers_peak = 0
        """The most windows since `producers` was last copied (when forgetting shrinks it)."""
        self.store_bytes: dict[str, int] = {}
        self.store_count: dict[str, int] = {}
        # Each store's message sequences, oldest first (discard-oldest and replay walk it).
        self.store_seqs: dict[str, dict[int, None]] = {}
        self.store_configs: dict[str, rpb.ConfigureStoreOp] = {}
        # (origin cluster, destination) -> its mark (forwarded messages, `_publish_forwarded`).
        self.origin_marks: dict[tuple[str, str], OriginMark] = {}
        # (store, map) -> key -> (value, version)
        self.maps: dict[tuple[str, str], dict[str, tuple[bytes, int]]] = {}
        # Where lifetimes end: on the wall clock (time-to-lives of `expires_at`, retentions) and
        # on the pseudo-clock (time-to-lives of `expires_clock`). Each member keeps its own copy;
        # only the leader reads them (`due`), and the log carries its decision.
        self._timers = _Timers()
        self._clock_timers = _Timers()
        # Messages stored with a time-to-live on the pseudo-clock (`timed`).
        self._clock_ttls = 0
        # Version of map writes for a state fed directly (non-replicated stores).
        self._local_writes = 0
        self._index = 0
        # Set by the leader's dispatcher: called with (durable, seq) when a message becomes
        # pending for a durable (or fills a last-value slot), and with (durable, 0) when a
        # durable is created.
        self.on_pending: Callable[[Durable, int], None] | None = None
        # Set by the leader's dispatcher: called with (durable key, sequences) when messages
        # leave a durable (acknowledged, expired, discarded, dead-lettered), so delivery
        # state follows without rescanning entries.
        self.on_acked: Callable[[str, list[int]], None] | None = None
        # Set by the leader's dispatcher: a durable was repositioned (replay) or resumed.
        self.on_reset: Callable[[Durable], None] | None = None
        # Set by the leader's dispatcher: a durable was suspended ("DURABLE_UNREACHABLE") or
        # deleted ("DURABLE_DELETED"); its subscriptions end with that reason.
        self.on_removed: Callable[[Durable, str], None] | None = None
        # The store event log (strongroom.events): while set, what an entry's apply decides
        # that the entry itself does not say (which durables held a publish's messages, what
        # an ack released, what expired ...) is noted here as small tuples, one per operation
        # or per message of a rare operation; never per published message. The replica takes
        # them after each entry; the rows are built later, off the apply.
        self.events: list[Record] | None = None
        self._op = 0
        # Units of work and the pseudo-clock (strongroom.uow).
        self.uows = UowTable()
        # The member's counters (its metrics): the replica sets its own, which outlives this.
        self.tallies = Tallies()

    @property
    def clock(self) -> float:
        """The pseudo-clock as applied: the highest value the log carried (`ClockOp`s and the
        operations that carry the leader's clock). Kept with the units of work, which began it."""
        return self.uows.clock

    def timed(self) -> bool:
        """Something is measured on the pseudo-clock (the leader then writes it every second):
        units of work, or messages whose time-to-live runs on it. Durable subscriptions alone do
        not count: their expirations are days, and the idle ticks (10 s) bound what a restart
        loses of them."""
        return bool(self.uows.uows or self.uows.gone) or self._clock_ttls > 0

    def advance_clock(self, clock: float) -> None:
        """The pseudo-clock moves on to `clock` (never back)."""
        self.uows.advance(clock)

    # --- applying ----------------------------------------------------------------------------

    def apply_entry(self, entry: rpb.LogEntry) -> list[object]:
        """Apply a committed entry's operations atomically; one result per operation, and one
        per message of a PublishBatchOp."""
        ops = entry.ops
        kinds = [op.WhichOneof("op") for op in ops]
        # All or nothing: an entry with an operation this version does not know is refused
        # before any of its operations changes the state.
        if None in kinds:
            i = kinds.index(None)
            raise UnknownOperation(f"log entry {entry.index} (epoch {entry.epoch}): operation {i} is of a kind "
                                   f"this version does not know ({_unknown_field(ops[i])})")
        self._index = entry.index
        results: list[object] = []
        add = results.append
        events = self.events
        for op_no, (op, which) in enumerate(zip(ops, kinds)):
            self._op = op_no
            # Publishes (nearly every operation) go straight to their method.
            if which == "publish_batch":
                results += self._publish_batch(op.publish_batch)
                if events is not None:
                    self._note_holders(events, op.publish_batch.publish)
            elif which == "publish":
                add(self._publish(op.publish))
                if events is not None:
                    self._note_holders(events, op.publish)
            else:
                add(self.apply_op(op))
        self.applied_index = entry.index
        self.applied_epoch = entry.epoch
        return results

    def _note_holders(self, events: list[Record], head: rpb.PublishOp) -> None:
        """Event log: the durables that could hold the messages of a publish operation just
        applied (its destination's, and the store's content durables), as they are now: the
        message rows are built later from the entry, the results and these."""
        events.append((self._op, RecordKind.HOLDERS, tuple(self.by_destination.get(head.destination, ())),
                       tuple(self.content_durables.get(head.store, ())) if head.content else ()))

    def apply_op(self, op: rpb.Operation) -> object:
        """Apply one operation (used directly for non-replicated stores)."""
        which = op.WhichOneof("op")
        if which == "publish":
            return self._publish(op.publish)
        if which == "publish_batch":
            return self._publish_batch(op.publish_batch)
        if which == "ack":
            return self._ack(op.ack)
        if which == "create_durable":
            return self._create_durable(op.create_durable)
        if which == "configure_store":
            cfg = rpb.ConfigureStoreOp()
            cfg.CopyFrom(op.configure_store)
            self.store_configs[cfg.store] = cfg
            return None
        if which == "expire":
            return self._expire(op.expire)
        if which == "dead_letter":
            return self._dead_letter(op.dead_letter)
        if which == "replay":
            durable = self.durables.get(op.replay.durable_key)
            if durable is None:
                return 0
            which_start = op.replay.WhichOneof("start")
            return self._replay(durable, op.replay.sequence if which_start == "sequence" else 0,
                                op.replay.time if which_start == "time" else 0.0)
        if which == "map":
            return self._map(op.map)
        if which == "suspend_durables":
            return self._suspend(op.suspend_durables)
        if which == "delete_durable":
            if op.delete_durable.HasField("expiry"):
                return self._expire_durable(op.delete_durable.durable_key, op.delete_durable.expiry)
            return self._delete_durable(op.delete_durable.durable_key)
        if which == "durable_use":
            self._use_durables(op.durable_use)
            return None
        if which == "uow":
            if self.events is not None:
                return self._apply_uow_noted(op.uow, self.events)
            return self.uows.apply(op.uow, self._uow_room)
        if which == "clock":
            self.advance_clock(op.clock.clock)
            return None
        if which == "forget_producers":
            return self._forget_producers(op.forget_producers)
        if which == "delivery_counts":
            return self._delivery_counts(op.delivery_counts)
        if which == "noop":
            return None
        raise UnknownOperation(f"operation of a kind this version does not know ({_unknown_field(op)})")

    def _create_durable(self, op: rpb.CreateDurableOp) -> Durable:
        if op.clock:
            self.advance_clock(op.clock)
        key = content_durable_key(op.store, op.durable) if op.content else durable_key(op.destination, op.durable)
        durable = self.durables.get(key)
        if durable is not None:
            return durable
        matcher = cpb.ContentMatcher()
        matcher.CopyFrom(op.matcher)
        durable = Durable(key=key, store=op.store, destination=op.destination, name=op.durable,
                          kind=op.kind, queue=op.queue, matcher=matcher, key_field=op.key_field,
                          content=op.content, ack_sync_mode=op.ack_sync_mode, last_used=op.clock)
        self._add_durable(durable)
        return durable

    def _suspend(self, op: rpb.SuspendDurablesOp) -> int:
        """Suspend or resume durables; how many changed."""
        changed = 0
        for key in op.durable_keys:
            durable = self.durables.get(key)
            if durable is None or durable.suspended == op.suspended:
                continue
            durable.suspend(op.suspended)
            changed += 1
            self.note_durable(durable, EventKind.DURABLE_SUSPENDED if op.suspended else EventKind.DURABLE_RESUMED,
                              "the realm no longer reaches it" if op.suspended else "the realm reaches it again")
            if op.suspended:
                if self.on_removed is not None:
                    self.on_removed(durable, "DURABLE_UNREACHABLE")
            elif self.on_reset is not None:
                self.on_reset(durable)
        return changed

    def _use_durables(self, op: rpb.DurableUseOp) -> None:
        """Durables in use (a subscriber attached) or no longer: their last use moves on."""
        self.advance_clock(op.clock)
        for key in op.durable_keys:
            durable = self.durables.get(key)
            if durable is not None:
                durable.last_used = max(durable.last_used, op.clock)
                durable.attached = op.attached

    def _expire_durable(self, key: str, expiry: rpb.DurableExpiry) -> DeleteResult | None:
        """The leader expires a durable: deleted only if it is still unused for that long (a use
        that reached the log before this operation wins); None: nothing changed."""
        self.advance_clock(expiry.clock)
        durable = self.durables.get(key)
        if durable is None or not expiry.unused_for or durable.idle(expiry.clock) < expiry.unused_for:
            return None
        return self._delete_durable(key, EventKind.DURABLE_EXPIRED, f"unused for {expiry.unused_for:g} s")

    def _delete_durable(self, key: str, kind: EventKind = EventKind.DURABLE_DELETED,
                        reason: str = "deleted by an operator") -> DeleteResult | None:
        """Remove a durable, releasing every message it holds (None: no such durable)."""
        durable = self.durables.get(key)
        if durable is None:
            return None
        released = len(self._release(durable, list(durable.pending)))
        slots = [seq for seq in (durable.last_value_seq, *durable.last_values.values()) if seq]
        durable.last_value_seq = 0
        for slot in list(durable.last_values):
            del durable.last_values[slot]
        for seq in slots:
            self._unref(seq)
        released += len(slots)
        # Its pending messages leave with it: a reader of the event log drops what it held.
        self.note_durable(durable, kind, reason)
        del self.durables[key]
        index = self.content_durables if durable.content else self.by_destination
        where = durable.store if durable.content else durable.destination
        rest = [d for d in index.get(where, ()) if d is not durable]
        if rest:
            index[where] = rest
        else:
            index.pop(where, None)
        self._removed(durable)
        if self.on_removed is not None:
            self.on_removed(durable, "DURABLE_DELETED")
        return DeleteResult(durable.store, released)

    def _removed(self, durable: Durable) -> None:
        """A durable is gone (a state on disk deletes its record)."""

    def _add_durable(self, durable: Durable) -> None:
        self.durables[durable.key] = durable
        if durable.content:
            self.content_durables.setdefault(durable.store, []).append(durable)
        else:
            self.by_destination.setdefault(durable.destination, []).append(durable)
        if self.on_pending is not None:
            self.on_pending(durable, 0)
        self.note_durable(durable, EventKind.DURABLE_CREATED)

    def note_durable(self, durable: Durable, kind: EventKind, reason: str = "") -> None:
        """The one place a change of a durable becomes a store event (created here; deleted,
        expired, suspended and resumed by the operations that do them): noted for the event
        log of the entry being applied, when the event log is on."""
        if self.events is not None:
            self.events.append((self._op, RecordKind.DURABLE, durable, kind, reason))

    def _holders(self, stored: StoredMessage) -> list[Durable]:
        """The durables that may hold a message: its destination's, and the store's content
        durables for a message published to an endpoint."""
        holders = list(self.by_destination.get(stored.destination, ()))
        if stored.content:
            holders.extend(self.content_durables.get(stored.store, ()))
        return holders

    def wants(self, store: str, destination: str, content: bool, msg: cpb.Message) -> bool:
        """Whether some durable of this state would take the message now (a read: nothing
        changes). A queue's own durable exists once its first message is stored."""
        return any(d.wants(msg) for d in self.by_destination.get(destination, ())) or (
            content and any(d.wants(msg) for d in self.content_durables.get(store, ())))

    def _wanting(self, store: str, destination: str, content: bool, msg: cpb.Message) -> list[Durable]:
        wanting = [d for d in self.by_destination.get(destination, ()) if d.wants(msg)]
        if content:
            wanting.extend(d for d in self.content_durables.get(store, ()) if d.wants(msg))
        return wanting

    def _over_limit(self, store: str, size: int) -> str:
        cfg = self.store_configs.get(store)
        if cfg is None:
            return ""
        if cfg.max_messages and self.store_count.get(store, 0) + 1 > cfg.max_messages:
            return f"store {store!r} holds its limit of {cfg.max_messages} messages"
        if cfg.max_bytes and self.store_bytes.get(store, 0) + size > cfg.max_bytes:
            return f"store {store!r} would exceed its limit of {cfg.max_bytes} bytes"
        return ""

    def _apply_uow_noted(self, op: rpb.UowOp, events: list[Record]) -> object:
        """A UowOp applied with the event log on: each unit of work it changed is noted with its
        new status (`RecordKind.UOW`), where it was before the operation and, when a backout
        moved it to a dead-letter queue, that queue. A refusal or a user status alone changes
        no state and is not noted."""
        table = self.uows
        before = {uow_id: (table.uows[uow_id].store, table.uows[uow_id].destination)
                  for uow_id in op.uow_ids if uow_id in table.uows}
        result = table.apply(op, self._uow_room)
        kind = UowOpKind(op.kind)
        # Subscriptions' operations answer subscriptions, not UOWs: no row (not events yet).
        answered = result if isinstance(result, list) else [result]
        changed = [] if kind == UowOpKind.USER_STATUS else [u for u in answered if isinstance(u, Uow)]
        for uow in changed:
            store, destination = before.get(uow.id, (uow.store, uow.destination))
            status = "DELETED" if kind == UowOpKind.FORGET else uow.status.name
            events.append((self._op, RecordKind.UOW, uow.id, store, destination, status, uow.count, uow.size,
                           kind.name.lower(), uow.destination if uow.destination != destination else None))
        return result

    def _uow_room(self, store: str, count: int, size: int) -> str:
        """Why a store cannot take a unit of work of `count` messages and `size` bytes ('' when
        it can): its limits count its messages and the messages its units of work hold."""
        cfg = self.store_configs.get(store)
        if cfg is None:
            return ""
        held = self.store_count.get(store, 0) + self.uows.store_count.get(store, 0)
        if cfg.max_messages and held + count > cfg.max_messages:
            return (f"store {store!r} holds {held} of its limit of {cfg.max_messages} messages; a unit of work "
                    f"of {count} does not fit")
        held_bytes = self.store_bytes.get(store, 0) + self.uows.store_bytes.get(store, 0)
        if cfg.max_bytes and held_bytes + size > cfg.max_bytes:
            return (f"store {store!r} would exceed its limit of {cfg.max_bytes} bytes with a unit of work of "
                    f"{size} bytes")
        return ""

    def _make_room(self, store: str, size: int) -> str:
        """Apply the store's limit policy for a new message of `size` bytes: '' when it may be
        stored (discarding the oldest messages if the policy says so), else why not."""
        if store not in self.store_configs:
            return ""  # no limits: checked first, as every message of such a store comes here
        why = self._over_limit(store, size)
        if not why:
            return ""
        cfg = self.store_configs[store]
        if cfg.policy != cpb.LIMIT_POLICY_DISCARD_OLDEST or (cfg.max_bytes and size > cfg.max_bytes):
            return why
        seqs = self.store_seqs.get(store, {})
        while self._over_limit(store, size) and seqs:
            self._drop(next(iter(seqs)), RecordKind.DISCARDED, why)
        return self._over_limit(store, size)

    def _publish(self, op: rpb.PublishOp) -> PublishResult:
        publish = self._publish_forwarded if op.forwarded else self._publish_message
        return publish(op.message, op.store, op.destination, op.queue, op.content, op.published_at,
                       op.expires_at, op.expires_clock, op.retain_until)

    def _publish_batch(self, op: rpb.PublishBatchOp) -> list[PublishResult]:
        """Each message as a PublishOp with the batch's shared fields, in order."""
        head = op.publish
        shared = (head.store, head.destination, head.queue, head.content, head.published_at, head.expires_at,
                  head.expires_clock, head.retain_until)
        # Whether the messages were forwarded is read once per operation, not per message.
        if head.forwarded:
            return self._publish_forwarded_run(op.messages, shared)
        publish = self._publish_message
        return [publish(msg, *shared) for msg in op.messages]

    def _publish_forwarded_run(self, messages: Sequence[cpb.Message],
                               shared: tuple[str, str, bool, bool, float, float, float, float]) -> list[PublishResult]:
        """Messages a router forwarded from other clusters, each under the mark of its origin
        cluster and destination: at or below the mark it is a duplicate (it was stored before:
        nothing changes); above it, it is published only if its `previous` is the mark (else a
        gap: nothing changes), and the mark moves to its sequence whether a durable stored it or
        none wanted it, but not when a store limit refused it (a retry must be able to store it).
        Not deduplicated by producer id: its origin did that. The marks the messages of one
        operation move are set once per origin, after the last (they are applied together, so
        nothing reads a mark in between)."""
        store, destination, published_at = shared[0], shared[1], shared[4]
        publish = self._publish_message
        marks = self.origin_marks
        at_of: dict[str, int] = {}  # origin cluster -> its mark as this operation moves it
        moved: set[str] = set()
        results: list[PublishResult] = []
        try:
            for msg in messages:
                origin = msg.origin
                cluster = origin.cluster
                at = at_of.get(cluster)
                if at is None:
                    mark = marks.get((cluster, destination))
                    at = at_of[cluster] = mark.sequence if mark is not None else 0
                sequence = origin.sequence
                if sequence <= at:
                    results.append(PublishResult(0, True))
                    continue
                if origin.previous != at:
                    results.append(PublishResult(0, False, gap=(
                        f"origin {cluster!r} sequence {sequence} on {destination!r} follows {origin.previous}, but "
                        f"this cluster holds that origin's messages up to {at}: the ones between are not stored "
                        f"yet")))
                    continue
                result = publish(msg, *shared, False)
                if not result.rejected:
                    at_of[cluster] = sequence
                    moved.add(cluster)
                results.append(result)
        finally:
            for cluster in moved:
                self._set_mark((cluster, destination), OriginMark(store, at_of[cluster], published_at))
        return results

    def _publish_forwarded(self, msg: cpb.Message, store: str, destination: str, queue: bool, content: bool,
                           published_at: float, expires_at: float, expires_clock: float,
                           retain_until: float) -> PublishResult:
        """A message a router forwarded from another cluster (`PublishOp.forwarded`): a run of
        one (`_publish_forwarded_run` owns the rule)."""
        return self._publish_forwarded_run([msg], (store, destination, queue, content, published_at, expires_at,
                                                   expires_clock, retain_until))[0]

    def _set_mark(self, key: tuple[str, str], mark: OriginMark) -> None:
        """An origin's mark moves (a state on disk writes it through)."""
        self.origin_marks[key] = mark

    def _publish_message(self, msg: cpb.Message, store: str, destination: str, queue: bool, content: bool,
                         published_at: float, expires_at: float, expires_clock: float,
                         retain_until: float, dedup: bool = True) -> PublishResult:
        # Runs once per message on every member: each proto field is read once. `dedup` False:
        # the producer id is not looked up nor recorded (a forwarded message).
        producer_id = msg.producer_id if dedup else ""
        window = self.producers.get(producer_id) if producer_id else None
        if window is not None:
            known = window.lookup(msg.sequence)
            if known == -1:
                return PublishResult(0, False, outside_window=True)
            if known is not None:
                return PublishResult(known, True)
        durables = self.by_destination.get(destination)
        # A refused publish leaves no trace: the queue's durable and the producer's window are
        # made only once the message is taken.
        new_queue = queue and durable_key(destination, "") not in self.durables
        if durables is not None and len(durables) == 1 and durables[0].wants_all and not content:
            wanting = [durables[0]]  # the common case (a queue's own durable): no per-message test
        else:
            wanting = self._wanting(store, destination, content, msg)
        seq = size = 0
        if wanting or new_queue or retain_until:
            size = msg.ByteSize()
            why = self._make_room(store, size)
            if why:
                # Not recorded in the dedup window: a retry once there is room stores it.
                return PublishResult(0, False, rejected=True, limit=why)
            if new_queue:
                own = Durable(key=durable_key(destination, ""), store=store, destination=destination,
                              name="", kind=KIND_SHARED, queue=True)
                self._add_durable(own)
                wanting.append(own)
            seq = self.next_seq
            self.next_seq = seq + 1
            stored = StoredMessage(seq, store, destination, msg, size, 0, queue, content, published_at,
                                   expires_at, expires_clock, retain_until)
            self._index_message(stored)
            if retain_until:
                stored.retained = True
                stored.refs += 1
                stored.detach()  # kept until retain_until: not a view into the entry
            for durable in wanting:
                self._hold(durable, stored)
            tracer = self.tallies.tracer
            if tracer is not None:
                tracer.committed(self._index, store, seq, destination, msg.producer_id, msg.sequence, msg.traceparent,
                                 len(wanting))
        if producer_id:
            if window is None:
                window = self.producers[producer_id] = self._new_window(producer_id)
            window.last_index = self._index
            window.last_used = self.uows.clock
            window.record(msg.sequence, seq)
        return PublishResult(seq, False, False, False, "", size)

    def _new_window(self, producer_id: str) -> ProducerWindow:
        """A new producer's deduplication window."""
        return ProducerWindow()

    def idle_producers(self, clock: float, idle_for: float) -> list[str]:
        """The producers whose windows took no sequence for `idle_for` pseudo-clock seconds by
        `clock` (the leader's ForgetProducersOp candidates)."""
        horizon = clock - idle_for
        return [pid for pid, window in self.producers.items() if window.last_used <= horizon]

    def _forget_producers(self, op: rpb.ForgetProducersOp) -> int:
        """Drop the named windows that took no sequence after `op.before_index`; how many."""
        self.advance_clock(op.clock)
        forgotten = 0
        self._producers_peak = max(self._producers_peak, len(self.producers))
        for pid in op.producer_ids:
            window = self.producers.get(pid)
            if window is not None and window.last_index <= op.before_index:
                self._drop_window(pid, window)
                forgotten += 1
        self.tallies.producers_forgotten += forgotten
        if 4 * len(self.producers) < self._producers_peak:
            # A dict keeps its table when entries go: copied, it is as large as what is left.
            self.producers = dict(self.producers)
            self._producers_peak = len(self.producers)
        return forgotten

    def _delivery_counts(self, op: rpb.DeliveryCountsOp) -> int:
        """Record the leader's delivery counts of a durable's pending messages (never lower);
        how many it holds for the durable afterwards."""
        durable = self.durables.get(op.durable_key)
        if durable is None:
            return 0
        counts = durable.delivery_counts
        pending = durable.pending
        for seq, count in zip(op.message_seqs, op.counts):
            if seq in pending and count > counts.get(seq, 0):
                counts[seq] = count
        self._durable_changed(durable)
        return len(counts)

    def _durable_changed(self, durable: Durable) -> None:
        """A durable's own fields changed in place (a state on disk writes it back)."""

    def _drop_window(self, producer_id: str, window: ProducerWindow) -> None:
        """A producer's deduplication window goes (a state on disk deletes its records too)."""
        del self.producers[producer_id]

    def _index_message(self, stored: StoredMessage) -> None:
        seq = stored.seq
        self.messages[seq] = stored
        self.store_bytes[stored.store] = self.store_bytes.get(stored.store, 0) + stored.size
        self.store_count[stored.store] = self.store_count.get(stored.store, 0) + 1
        self.tallies.stored[stored.store] += 1
        self.store_seqs.setdefault(stored.store, {})[seq] = None
        if stored.expires_at:
            self._timers.add(stored.expires_at, seq)
        if stored.expires_clock:
            self._clock_timers.add(stored.expires_clock, seq)
            self._clock_ttls += 1
        if stored.retain_until:
            self._timers.add(stored.retain_until, seq)
        if self.payloads is not None:
            self.payloads.admit(stored)

    def _hold(self, durable: Durable, stored: StoredMessage) -> None:
        """Make a stored message pending for a durable (or fill its last-value slot)."""
        seq = stored.seq
        if durable.kind == KIND_LASTVALUE:
            stored.detach()  # a last value outlives its entry's other messages
            if durable.key_field:
                slot = key_of(stored.message.fields[durable.key_field])
                old = durable.last_values.get(slot, 0)
                durable.last_values[slot] = seq
            else:
                old = durable.last_value_seq
                durable.last_value_seq = seq
            stored.refs += 1
            if old:
                self._unref(old)
        else:
            if seq in durable.pending:
                return
            durable.pending[seq] = None
            durable.pending_bytes += stored.size
            stored.refs += 1
        if self.on_pending is not None:
            self.on_pending(durable, seq)

    def _release(self, durable: Durable, seqs: list[int]) -> list[int]:
        """Remove messages from a durable's pending set; the ones it held."""
        released = []
        counts = durable.delivery_counts
        for seq in seqs:
            if seq in durable.pending:
                del durable.pending[seq]
                if counts and counts.pop(seq, None) is not None:
                    self._durable_changed(durable)
                stored = self.messages.get(seq)
                if stored is not None:
                    durable.pending_bytes -= stored.size
                self._unref(seq)
                released.append(seq)
        return released

    def _ack(self, op: rpb.AckOp) -> int:
        durable = self.durables.get(op.durable_key)
        if durable is None:
            return 0
        if op.clock:
            self.advance_clock(op.clock)
            durable.last_used = max(durable.last_used, op.clock)
        tracer = self.tallies.tracer
        if tracer is not None:  # before the release, which may delete the message (its last step)
            for seq in op.message_seqs:
                if seq in durable.pending:
                    tracer.step("acked", durable.store, seq, f"by durable {durable.name or '(the queue)'}", self._index)
        acked = self._release(durable, list(op.message_seqs))
        self.acked_messages += len(acked)
        if acked:
            self.tallies.acked[durable.store] += len(acked)
        if self.on_acked is not None:
            self.on_acked(op.durable_key, list(op.message_seqs))
        if acked and self.events is not None:
            self.events.append((self._op, RecordKind.ACKED, durable, acked))
        return len(acked)

    def _unref(self, seq: int) -> None:
        stored = self.messages.get(seq)
        if stored is None:
            return
        stored.refs -= 1
        if stored.refs <= 0:
            self._forget(stored)

    def _forget(self, stored: StoredMessage) -> None:
        del self.messages[stored.seq]
        if self.tallies.tracer is not None:
            self.tallies.tracer.deleted(stored.store, stored.seq, self._index)
        if self.payloads is not None:
            self.payloads.forget(stored)
        self.store_bytes[stored.store] -= stored.size
        self.store_count[stored.store] -= 1
        self.store_seqs[stored.store].pop(stored.seq, None)
        if stored.expires_at or stored.retain_until:
            self._timers.gone(bool(stored.expires_at) + bool(stored.retain_until), self.messages)
        if stored.expires_clock:
            self._clock_ttls -= 1
            self._clock_timers.gone(1, self.messages)

    def _drop(self, seq: int, kind: RecordKind, reason: str) -> None:
        """Remove a message from every holder at once (expired, or discarded at a limit)."""
        stored = self.messages.get(seq)
        if stored is None:
            return
        tally = self.tallies.expired if kind == RecordKind.EXPIRED else self.tallies.discarded
        tally[stored.store] += 1
        if self.tallies.tracer is not None:
            self.tallies.tracer.step("expired" if kind == RecordKind.EXPIRED else "discarded", stored.store, seq,
                                     reason, self._index)
        if self.events is not None:
            self.events.append((self._op, kind, seq, stored.store, stored.destination, stored.size, reason))
        for durable in self._holders(stored):
            if durable.kind == KIND_LASTVALUE:
                if durable.last_value_seq == seq:
                    durable.last_value_seq = 0
                fields = stored.message.fields if durable.key_field else None
                if fields is not None and durable.key_field in fields:
                    slot = key_of(fields[durable.key_field])
                    if durable.last_values.get(slot) == seq:
                        del durable.last_values[slot]
            elif seq in durable.pending:
                del durable.pending[seq]
                if durable.delivery_counts.pop(seq, None) is not None:
                    self._durable_changed(durable)
                durable.pending_bytes -= stored.size
                if self.on_acked is not None:
                    self.on_acked(durable.key, [seq])
        self._forget(stored)

    def _expire(self, op: rpb.ExpireOp) -> int:
        """Expire the listed messages whose time-to-live (or retention) ended by the leader's
        decision: its wall clock `now`, its pseudo-clock `clock` (which this state's moves on to)."""
        expired = 0
        if op.clock:
            self.advance_clock(op.clock)
        for seq in op.message_seqs:
            stored = self.messages.get(seq)
            if stored is None:
                continue
            if stored.ttl_ended(op.now, op.clock):
                self._drop(seq, RecordKind.EXPIRED, "time-to-live")
                expired += 1
            elif stored.retained and stored.retain_until <= op.now:
                stored.retained = False
                self._unref(seq)
                if seq not in self.messages:
                    self.tallies.expired[stored.store] += 1
                if self.events is not None and seq not in self.messages:
                    # Its retention held it last: it leaves the store.
                    self.events.append((self._op, RecordKind.EXPIRED, seq, stored.store, stored.destination,
                                        stored.size, "retention"))
        return expired

    def due(self, now: float, clock: float = 0.0, limit: int = 10000) -> list[int]:
        """Messages whose time-to-live or retention ended by wall-clock time `now`, or whose
        time-to-live on the pseudo-clock ended by `clock` (the leader turns them into an
        ExpireOp). The timers stay until the operation is applied, so a leader that loses its
        leadership in between leaves them for the next one."""
        messages = self.messages

        def wall_ended(seq: int) -> bool:
            stored = messages.get(seq)
            return stored is not None and bool((stored.expires_at and stored.expires_at <= now) or
                                               (stored.retained and stored.retain_until <= now))

        def clock_ended(seq: int) -> bool:
            stored = messages.get(seq)
            return stored is not None and bool(stored.expires_clock and stored.expires_clock <= clock)

        out = self._timers.due(now, wall_ended, limit)
        if clock:
            out += self._clock_timers.due(clock, clock_ended, limit)
        return sorted(set(out))[:limit]

    def next_timer(self) -> float:
        """When the earliest time-to-live or retention on the wall clock ends (0: none)."""
        return self._timers.next()

    def next_clock_timer(self) -> float:
        """When the earliest time-to-live on the pseudo-clock ends (0: none)."""
        return self._clock_timers.next()

    def _dead_letter(self, op: rpb.DeadLetterOp) -> bool:
        """Move a message past its redelivery limit out of the durable, into the dead-letter
        destination when there is one. False (nothing changes) when the target store rejects it."""
        durable = self.durables.get(op.durable_key)
        stored = self.messages.get(op.message_seq)
        if durable is None or stored is None or op.message_seq not in durable.pending:
            return False
        if op.target_destination:
            copy = cpb.Message()
            copy.CopyFrom(stored.message)
            # A copy is a new message: the original's id would make it a duplicate, and the
            # original's origin (a forwarded message) a duplicate or a gap.
            copy.producer_id = ""
            copy.sequence = 0
            copy.ClearField("origin")
            copy.fields[DEAD_LETTER_FROM].string_value = stored.destination
            copy.fields[DEAD_LETTER_DURABLE].string_value = durable.name
            copy.fields[DEAD_LETTER_DELIVERIES].int_value = op.deliveries
            copy.fields[DEAD_LETTER_SEQ].int_value = stored.seq
            result = self._publish(rpb.PublishOp(store=op.target_store, destination=op.target_destination,
                                                 message=copy, queue=op.target_queue,
                                                 published_at=op.published_at))
            if result.rejected:
                return False
        self.tallies.dead_lettered[stored.store] += 1
        if self.tallies.tracer is not None:
            self.tallies.tracer.step("dead_lettered", stored.store, stored.seq,
                                     f"from durable {durable.name or '(the queue)'} after {op.deliveries} deliveries"
                                     + (f", to {op.target_destination}" if op.target_destination else ""), self._index)
        if self.events is not None:
            self.events.append((self._op, RecordKind.DEAD_LETTERED, durable, stored.seq, stored.store,
                                stored.destination, stored.size))
            if op.target_destination and result.message_seq and not result.duplicate:
                self.events.append((self._op, RecordKind.STORED, result.message_seq, op.target_store,
                                    op.target_destination, copy.ByteSize(), "",
                                    tuple(self._wanting(op.target_store, op.target_destination, False, copy))))
        self._release(durable, [op.message_seq])
        if self.on_acked is not None:
            self.on_acked(durable.key, [op.message_seq])
        return True

    def _replay(self, durable: Durable, start_seq: int, start_time: float) -> int:
        """Reposition a durable: the stored messages of its destination (or store) from the
        start on that match its interest are pending, the ones before it are not."""
        if durable.kind == KIND_LASTVALUE:
            return 0
        wanted: list[StoredMessage] = []
        for seq in self.store_seqs.get(durable.store, {}):
            stored = self.messages[seq]
            if seq < start_seq or stored.published_at < start_time:
                continue
            mine = stored.destination == durable.destination if not durable.content else stored.content
            if mine and durable.wants(stored.message):
                wanted.append(stored)
        new = {stored.seq: stored for stored in wanted}
        added = []
        for stored in wanted:
            if stored.seq not in durable.pending:
                stored.refs += 1
                added.append(stored.seq)
        skipped = self._release(durable, [seq for seq in durable.pending if seq not in new])
        if self.events is not None and (added or skipped):
            self.events.append((self._op, RecordKind.REPLAYED, durable, added, skipped))
        durable.pending = dict.fromkeys(new)
        durable.pending_bytes = sum(stored.size for stored in wanted)
        durable.delivery_counts = {}  # delivered afresh, counted afresh
        if self.on_reset is not None:
            self.on_reset(durable)
        return len(wanted)

    def _map(self, op: rpb.MapOp) -> MapResult:
        # Looked up, not created: a refused compare-and-set or a delete of an absent key must
        # not leave an empty map behind (maps_of_store counts non-empty maps only).
        entries = self.maps.get((op.store, op.map), {})
        current = entries.get(op.key)
        if op.compare and (current[1] if current else 0) != op.expected_version:
            if current is None:
                return MapResult(False, False)
            return MapResult(False, True, current[0], current[1])
        if self._index:
            version = self._index
        else:
            self._local_writes += 1
            version = self._local_writes
        if op.WhichOneof("action") == "delete":
            if current is None:
                return MapResult(False, False)
            del entries[op.key]
            if not entries:
                del self.maps[(op.store, op.map)]
            return MapResult(True, False)
        self.maps.setdefault((op.store, op.map), entries)[op.key] = (op.put, version)
        return MapResult(True, True, op.put, version)

    def start_local_versions(self, base: int) -> None:
        """Map versions of a state fed directly continue above `base`. A leader seeds its
        non-replicated state with a value derived from its epoch, so a version a client saw
        under an earlier leadership is never reused (its compare-and-set cannot match a newer
        entry that happens to get the same counter value)."""
        self._local_writes = max(self._local_writes, base)

    # --- queries -----------------------------------------------------------------------------

    def durable(self, destination: str, name: str) -> Durable | None:
        """The durable, if it exists."""
        return self.durables.get(durable_key(destination, name))

    def message(self, seq: int) -> StoredMessage | None:
        """A stored message by sequence."""
        return self.messages.get(seq)

    def durables_of_store(self, store: str) -> Iterator[Durable]:
        """Every durable of a store."""
        return (d for d in self.durables.values() if d.store == store)

    def map_get(self, store: str, name: str, key: str) -> tuple[bytes, int] | None:
        """A map entry: (value, version), or None."""
        return self.maps.get((store, name), {}).get(key)

    def map_list(self, store: str, name: str, prefix: str, start_after: str, limit: int) -> tuple[list[tuple[str, bytes, int]], bool]:
        """Entries with the prefix after `start_after`, in key order; and whether more follow."""
        entries = self.maps.get((store, name), {})
        keys = sorted(k for k in entries if k.startswith(prefix) and k > start_after)
        page = [(k, *entries[k]) for k in keys[:limit]]
        return page, len(keys) > limit

    def maps_of_store(self, store: str) -> int:
        """How many non-empty maps a store has."""
        return sum(1 for s, _ in self.maps if s == store)

    # --- swap --------------------------------------------------------------------------------

    def swapped_messages(self, store: str) -> int:
        """How many of a store's messages have their payload swapped to disk."""
        return self.payloads.swapped_count.get(store, 0) if self.payloads is not None else 0

    def close(self) -> None:
        """The state machine is discarded: free its swap."""
        if self.payloads is not None:
            self.payloads.close()

