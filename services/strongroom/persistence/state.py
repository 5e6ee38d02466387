"""The deterministic state machine every member applies committed log entries to.

It holds the stores' messages, the durables with their pending (unacknowledged) messages, the
last-value slots and the publishers' deduplication windows. Applying the same entries in the
same order gives the same state on every member, so a follower that takes over already holds
everything. The same class, fed directly instead of through the log, keeps a leader's
non-replicated stores.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb

__all__ = [
    "StateMachine",
    "StoredMessage",
    "Durable",
    "PublishResult",
    "durable_key",
    "DEDUP_WINDOW",
]

# Sequences per producer remembered for deduplication. A sequence older than the window
# cannot be judged any more: it is refused (neither stored nor reported as a duplicate).
DEDUP_WINDOW = 65536

KIND_STANDARD = cpb.DURABLE_KIND_STANDARD
KIND_SHARED = cpb.DURABLE_KIND_SHARED
KIND_LASTVALUE = cpb.DURABLE_KIND_LASTVALUE


def durable_key(destination: str, name: str) -> str:
    """The key of a durable: destination and name (a queue's own durable has the empty name)."""
    return f"{destination}\x00{name}"


@dataclass
class StoredMessage:
    """A stored message and how many durables still hold it."""

    seq: int
    store: str
    destination: str
    message: cpb.Message
    size: int
    refs: int = 0


@dataclass
class Durable:
    """A durable: the messages it still wants, in order."""

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


@dataclass(frozen=True)
class PublishResult:
    """Outcome of applying one publish: the message's sequence (0 if nobody wanted it)."""

    message_seq: int
    duplicate: bool
    outside_window: bool = False


@dataclass
class _ProducerWindow:
    max_seq: int = 0
    order: deque[int] = field(default_factory=deque)
    seqs: dict[int, int] = field(default_factory=dict)

    def lookup(self, sequence: int) -> int | None:
        """The message sequence stored for this id, -1 if too old to tell, None if new."""
        if sequence in self.seqs:
            return self.seqs[sequence]
        if self.max_seq and sequence + DEDUP_WINDOW <= self.max_seq:
            return -1
        return None

    def record(self, sequence: int, message_seq: int) -> None:
        self.seqs[sequence] = message_seq
        self.order.append(sequence)
        self.max_seq = max(self.max_seq, sequence)
        while len(self.order) > DEDUP_WINDOW:
            self.seqs.pop(self.order.popleft(), None)


class StateMachine:
    """Stores, durables and dedup windows; `apply` is the only way in for replicated stores."""

    def __init__(self) -> None:
        self.applied_index = 0
        self.applied_epoch = 0
        self.next_seq = 1
        self.messages: dict[int, StoredMessage] = {}
        self.durables: dict[str, Durable] = {}
        self.by_destination: dict[str, list[Durable]] = {}
        self.producers: dict[str, _ProducerWindow] = {}
        self.store_bytes: dict[str, int] = {}
        self.store_count: dict[str, int] = {}
        # Set by the leader's dispatcher: called with (durable, seq) when a message becomes
        # pending for a durable, and with (durable, 0) when a durable is created.
        self.on_pending: Callable[[Durable, int], None] | None = None
        # Set by the leader's dispatcher: called with (durable key, sequences) for every applied
        # acknowledgment, so delivery state follows without rescanning entries.
        self.on_acked: Callable[[str, list[int]], None] | None = None

    # --- applying ----------------------------------------------------------------------------

    def apply_entry(self, entry: rpb.LogEntry) -> list[object]:
        """Apply a committed entry's operations atomically; one result per operation."""
        results = [self.apply_op(op) for op in entry.ops]
        self.applied_index = entry.index
        self.applied_epoch = entry.epoch
        return results

    def apply_op(self, op: rpb.Operation) -> object:
        """Apply one operation (used directly for non-replicated stores)."""
        which = op.WhichOneof("op")
        if which == "publish":
            return self._publish(op.publish)
        if which == "ack":
            return self._ack(op.ack)
        if which == "create_durable":
            return self._create_durable(op.create_durable)
        return None

    def _create_durable(self, op: rpb.CreateDurableOp) -> Durable:
        key = durable_key(op.destination, op.durable)
        durable = self.durables.get(key)
        if durable is not None:
            return durable
        durable = Durable(key=key, store=op.store, destination=op.destination, name=op.durable,
                          kind=op.kind, queue=op.queue)
        self._add_durable(durable)
        return durable

    def _add_durable(self, durable: Durable) -> None:
        self.durables[durable.key] = durable
        self.by_destination.setdefault(durable.destination, []).append(durable)
        if self.on_pending is not None:
            self.on_pending(durable, 0)

    def _publish(self, op: rpb.PublishOp) -> PublishResult:
        msg = op.message
        window = None
        if msg.producer_id:
            window = self.producers.get(msg.producer_id)
            if window is None:
                window = self.producers[msg.producer_id] = _ProducerWindow()
            known = window.lookup(msg.sequence)
            if known == -1:
                return PublishResult(0, False, outside_window=True)
            if known is not None:
                return PublishResult(known, True)
        if op.queue and durable_key(op.destination, "") not in self.durables:
            self._add_durable(Durable(key=durable_key(op.destination, ""), store=op.store,
                                      destination=op.destination, name="", kind=KIND_SHARED, queue=True))
        wanting = self.by_destination.get(op.destination, ())
        seq = 0
        if wanting:
            seq = self.next_seq
            self.next_seq += 1
            size = msg.ByteSize()
            stored = StoredMessage(seq=seq, store=op.store, destination=op.destination, message=msg, size=size)
            self.messages[seq] = stored
            self.store_bytes[op.store] = self.store_bytes.get(op.store, 0) + size
            self.store_count[op.store] = self.store_count.get(op.store, 0) + 1
            for durable in wanting:
                if durable.kind == KIND_LASTVALUE:
                    old = durable.last_value_seq
                    durable.last_value_seq = seq
                    stored.refs += 1
                    if old:
                        self._unref(old)
                else:
                    durable.pending[seq] = None
                    durable.pending_bytes += size
                    stored.refs += 1
                if self.on_pending is not None:
                    self.on_pending(durable, seq)
        if window is not None:
            window.record(msg.sequence, seq)
        return PublishResult(seq, False)

    def _ack(self, op: rpb.AckOp) -> int:
        durable = self.durables.get(op.durable_key)
        if durable is None:
            return 0
        acked = 0
        for seq in op.message_seqs:
            if seq in durable.pending:
                del durable.pending[seq]
                stored = self.messages.get(seq)
                if stored is not None:
                    durable.pending_bytes -= stored.size
                self._unref(seq)
                acked += 1
        if self.on_acked is not None:
            self.on_acked(op.durable_key, list(op.message_seqs))
        return acked

    def _unref(self, seq: int) -> None:
        stored = self.messages.get(seq)
        if stored is None:
            return
        stored.refs -= 1
        if stored.refs <= 0:
            del self.messages[seq]
            self.store_bytes[stored.store] -= stored.size
            self.store_count[stored.store] -= 1

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

    # --- snapshots ---------------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        """Serialise the whole state (catch-up and compaction)."""
        snap = rpb.StateSnapshot(applied_index=self.applied_index, applied_epoch=self.applied_epoch,
                                 next_seq=self.next_seq)
        for stored in self.messages.values():
            snap.messages.append(rpb.StoredMessage(seq=stored.seq, store=stored.store,
                                                   destination=stored.destination, message=stored.message))
        for d in self.durables.values():
            snap.durables.append(rpb.DurableState(key=d.key, store=d.store, destination=d.destination,
                                                  name=d.name, kind=d.kind, pending=list(d.pending),
                                                  last_value_seq=d.last_value_seq, queue=d.queue))
        for pid, window in self.producers.items():
            seqs = list(window.order)
            snap.producers.append(rpb.ProducerState(producer_id=pid, sequences=seqs,
                                                    message_seqs=[window.seqs[s] for s in seqs]))
        return snap.SerializeToString()

    @classmethod
    def from_snapshot(cls, data: bytes) -> StateMachine:
        """Rebuild a state machine from `to_snapshot` output."""
        snap = rpb.StateSnapshot.FromString(data)
        sm = cls()
        sm.applied_index = snap.applied_index
        sm.applied_epoch = snap.applied_epoch
        sm.next_seq = snap.next_seq
        for m in snap.messages:
            size = m.message.ByteSize()
            sm.messages[m.seq] = StoredMessage(seq=m.seq, store=m.store, destination=m.destination,
                                               message=m.message, size=size)
            sm.store_bytes[m.store] = sm.store_bytes.get(m.store, 0) + size
            sm.store_count[m.store] = sm.store_count.get(m.store, 0) + 1
        for ds in snap.durables:
            d = Durable(key=ds.key, store=ds.store, destination=ds.destination, name=ds.name,
                        kind=ds.kind, queue=ds.queue, last_value_seq=ds.last_value_seq)
            for seq in ds.pending:
                d.pending[seq] = None
                stored = sm.messages.get(seq)
                if stored is not None:
                    stored.refs += 1
                    d.pending_bytes += stored.size
            if d.last_value_seq and d.last_value_seq in sm.messages:
                sm.messages[d.last_value_seq].refs += 1
            sm.durables[d.key] = d
            sm.by_destination.setdefault(d.destination, []).append(d)
        for p in snap.producers:
            window = _ProducerWindow()
            for s, m in zip(p.sequences, p.message_seqs):
                window.record(s, m)
            sm.producers[p.producer_id] = window
        return sm
