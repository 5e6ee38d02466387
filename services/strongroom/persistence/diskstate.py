"""Indexes on disk: the state machine with its per-message state in the member's database.

Longer than 600 lines: it is one subclass of `StateMachine` that moves each piece of per-message
state into a column family, and each override sits next to the layout it reads and writes.

`DiskStateMachine` applies the same operations as `StateMachine` (it is a subclass and runs the
same code), but its message records (metadata and payload), the durables' pending sets and the
stores' sequence indexes live in column families of the member's own storage database, not in
Python objects (a database of the cluster's storage driver: RocksDB column families, or SQLite
tables). Everything one committed entry changes goes into one write batch, together with
the applied index, so after a restart the state is at its stored applied index and only the log
suffix after it is replayed: no backlog scan and no snapshot to deserialise.

Families (keys big-endian, so iteration is in sequence order):

| family     | key                         | value                                         |
|------------|-----------------------------|-----------------------------------------------|
| `msg`      | seq                         | refs, size, times, flags, store, destination  |
| `payload`  | seq                         | the serialised `Message`                      |
| `pending`  | durable id + seq            | (empty) a durable's pending set                |
| `storeseq` | store id + seq              | (empty) a store's messages, oldest first       |
| `lv`       | durable id + slot key       | seq of the keyed last-value slot               |
| `dedup`    | producer id, 0, position    | producer sequence, message seq, last index, use |
| `timers`   | time + seq; `c` + time + seq | (empty) wall-clock time-to-live and retention  |
|            |                             | ends; pseudo-clock time-to-live ends          |
| `sm`       | applied index, next seq, durable definitions and counters, store counters and
|            | configurations, map entries, origin marks (key `o:` origin cluster, 0,       |
|            | destination; value sequence, stored at, store)                              |

Held in memory, because they are small or bounded by something other than the backlog: the
durable definitions with their counters (pending count and bytes), store counters and
configurations, map entries, keyed last-value slots (one per distinct key), deduplication
windows (at most `DEDUP_WINDOW` per producer), origin marks (one per origin cluster and
destination) and the timer heap (messages with a time-to-live or retention). Each is written
through to its family as it changes and reloaded at start by iterating that family only.

Within an entry, message records read or created are cached and written back at its end; the
pending and store sets keep an overlay of additions and removals until then. Between entries
nothing per-message is cached: the leader's dispatcher reads pending sequences in pages
(`_DiskSeqSet.page`) and payloads one by one on delivery.

Catch-up: a peer that needs a snapshot gets its parts (`persistence/snapshots.py`), built by
iterating the families; installing one (`diskinstall.install_parts`) rewrites the
families a part at a time, in batches.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import DataCorruption
from strongroom.persistence.dedup import ProducerWindow
from strongroom.persistence.state import (
    Durable,
    OriginMark,
    StateMachine,
    StoredMessage,
)
from strongroom.persistence.storage import STATE_INSTALLING
from strongroom.persistence.swap import PayloadSource

if TYPE_CHECKING:
    from strongroom.persistence.drivers import Batch, Family
    from strongroom.persistence.storage import DiskStorage

__all__ = ["DiskStateMachine", "STATE_COLUMN_FAMILIES"]

STATE_COLUMN_FAMILIES = ("msg", "payload", "pending", "storeseq", "lv", "dedup", "timers", "sm")

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TWO = struct.Struct(">QQ")
_DEDUP = struct.Struct(">QQQd")
"""A `dedup` record: producer sequence, message seq, and the window's last index and last use
when it was written (log format 7; records of 16 bytes, `_TWO`, were written before)."""
_TIMER = struct.Struct(">dQ")
_MSG = struct.Struct(">QIdddB")
_DURABLE = struct.Struct(">IQQQ")
_STORE = struct.Struct(">IQQ")
_IDS = struct.Struct(">II")
_DOUBLE = struct.Struct(">d")
_CLOCK = struct.Struct(">dQ")
_MARK = struct.Struct(">Qd")

_QUEUE, _CONTENT, _RETAINED = 1, 2, 4
# The record's time-to-live end is on the pseudo-clock (`expires_clock`), not the wall clock.
# Records written before log format 5 never have it: their time-to-lives stay on the wall clock.
_CLOCK_TTL = 8
# Timer keys of pseudo-clock time-to-live ends (wall-clock ones are the bare time + seq).
_CLOCK_TIMER = b"c"

K_APPLIED = b"applied"
K_NEXT_SEQ = b"next_seq"
K_ACKED = b"acked_messages"
K_IDS = b"ids"
K_INSTALLING = STATE_INSTALLING
K_UOW_CLOCK = b"uow_clock"
P_UOW = b"u:"
P_UOW_GONE = b"g:"
P_UOW_SUBSCRIPTION = b"w:"
P_DURABLE = b"d:"
P_STORE = b"s:"
P_CONFIG = b"c:"
P_MAP = b"m:"
P_ORIGIN = b"o:"



class _DiskSeqSet:
    """An ordered set of sequences under a key prefix (a durable's pending set, a store's
    messages), with an overlay of the current entry's changes. Quacks like the `dict[int, None]`
    the memory state uses."""

    __slots__ = ("sm", "cf", "prefix", "count", "added", "removed", "owner")

    def __init__(self, sm: DiskStateMachine, cf: str, prefix: bytes, count: int, owner: Durable | None) -> None:
        self.sm = sm
        self.cf = cf
        self.prefix = prefix
        self.count = count
        self.added: set[int] = set()
        self.removed: set[int] = set()
        self.owner = owner

    def _on_disk(self, seq: int) -> bool:
        if seq in self.sm._created:
            return False  # a message of the entry being applied is nowhere on disk yet
        return self.sm._cf(self.cf).get(self.prefix + _U64.pack(seq)) is not None

    def __contains__(self, seq: object) -> bool:
        if seq in self.added:
            return True
        if seq in self.removed or not isinstance(seq, int):
            return False
        return self._on_disk(seq)

    def _changed(self) -> None:
        self.sm._dirty_sets[id(self)] = self
        if self.owner is not None:
            self.sm._dirty_durables[self.owner.key] = self.owner

    def __setitem__(self, seq: int, _value: None) -> None:
        if seq in self.removed:
            self.removed.discard(seq)
        elif seq in self.added or self._on_disk(seq):
            return
        else:
            self.added.add(seq)
        self.count += 1
        self._changed()

    def discard(self, seq: int) -> bool:
        """Remove a sequence; whether it was there."""
        if seq in self.added:
            self.added.discard(seq)
        elif seq in self.removed or not self._on_disk(seq):
            return False
        else:
            self.removed.add(seq)
        self.count -= 1
        self._changed()
        return True

    def __delitem__(self, seq: int) -> None:
        if not self.discard(seq):
            raise KeyError(seq)

    def pop(self, seq: int, default: None = None) -> None:
        """Remove a sequence if present (dict.pop)."""
        self.discard(seq)
        return default

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[int]:
        after = 0
        while True:
            page = self.page(after, 1024)
            if not page:
                return
            yield from page
            after = page[-1]

    def page(self, after: int, limit: int) -> list[int]:
        """Sequences above `after`, in order: at most `limit` (0: all)."""
        out: list[int] = []
        prefix = self.prefix
        plen = len(prefix)
        extra = sorted(s for s in self.added if s > after)
        i = 0
        removed = self.removed
        for key, _ in self.sm._cf(self.cf).scan(prefix + _U64.pack(after + 1), self._end()):
            seq = _U64.unpack_from(key, plen)[0]
            while i < len(extra) and extra[i] < seq:
                out.append(extra[i])
                i += 1
            if seq not in removed:
                out.append(seq)
            if limit and len(out) >= limit:
                return out[:limit]
        out.extend(extra[i:])
        return out[:limit] if limit else out

    def replace(self, seqs: dict[int, None]) -> None:
        """Make the set exactly `seqs` (a durable repositioned by replay)."""
        for seq in [s for s in self if s not in seqs]:
            self.discard(seq)
        for seq in seqs:
            self[seq] = None

    def _end(self) -> bytes:
        """The first key past this set's prefix."""
        return _U32.pack(_U32.unpack(self.prefix)[0] + 1)

    def flush(self, wb: Batch) -> None:
        """Write the entry's changes into its batch."""
        handle = self.sm._handle(self.cf)
        for seq in self.added:
            wb.put(self.prefix + _U64.pack(seq), b"", handle)
        for seq in self.removed:
            wb.delete(self.prefix + _U64.pack(seq), handle)
        self.added.clear()
        self.removed.clear()

    def wipe(self, wb: Batch) -> None:
        """Delete every member (durable dropped)."""
        wb.delete_range(self.prefix, self._end(), self.sm._handle(self.cf))


class _Slots(dict[str, int]):
    """A durable's keyed last-value slots: in memory, written through to the `lv` family."""

    def __init__(self, sm: DiskStateMachine, ident: int, initial: dict[str, int]) -> None:
        super().__init__(initial)
        self.sm = sm
        self.prefix = _U32.pack(ident)

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        self.sm._dirty_slots[self.prefix + key.encode()] = value

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.sm._dirty_slots[self.prefix + key.encode()] = None


class _DiskDurable(Durable):
    """A durable whose pending set lives on disk; attribute changes mark it for write-back."""

    _sm: DiskStateMachine
    _id: int

    def __setattr__(self, name: str, value: object) -> None:
        sm = self.__dict__.get("_sm")
        if sm is not None:
            if name == "pending" and isinstance(value, dict):
                # Replay assigns a new pending set: rewrite the one on disk instead.
                self.__dict__["pending"].replace(value)
                return
            sm._dirty_durables[self.key] = self
        object.__setattr__(self, name, value)


class _DiskWindow(ProducerWindow):
    """A producer's deduplication window, written through to the `dedup` family in order."""

    __slots__ = ("first", "next", "prefix", "sm")

    def __init__(self, sm: DiskStateMachine, producer_id: str) -> None:
        super().__init__()
        self.sm = sm
        self.prefix = producer_id.encode() + b"\x00"
        self.first = 0
        self.next = 0

    def record(self, sequence: int, message_seq: int) -> None:
        handle = self.sm._handle("dedup")
        wb = self.sm._wb
        before = len(self)
        wb.put(self.prefix + _U64.pack(self.next), _DEDUP.pack(sequence, message_seq, self.last_index, self.last_used),
               handle)
        self.next += 1
        super().record(sequence, message_seq)
        evicted = before + 1 - len(self)
        for pos in range(self.first, self.first + evicted):
            wb.delete(self.prefix + _U64.pack(pos), handle)
        self.first += evicted


class _DiskMessages:
    """The message records, as the mapping the memory state uses (seq -> StoredMessage)."""

    def __init__(self, sm: DiskStateMachine) -> None:
        self.sm = sm

    def get(self, seq: int, default: StoredMessage | None = None) -> StoredMessage | None:
        sm = self.sm
        hit = sm._touched.get(seq)
        if hit is not None:
            return hit
        if seq in sm._deleted:
            return default
        raw = sm._cf("msg").get(_U64.pack(seq))
        if raw is None:
            return default
        stored = sm._decode(seq, raw)
        if sm._in_entry:
            sm._touched[seq] = stored
        return stored

    def __getitem__(self, seq: int) -> StoredMessage:
        stored = self.get(seq)
        if stored is None:
            raise KeyError(seq)
        return stored

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.get(seq) is not None

    def __setitem__(self, seq: int, stored: StoredMessage) -> None:
        sm = self.sm
        sm._touched[seq] = stored
        sm._deleted.discard(seq)
        sm._created.add(seq)

    def __delitem__(self, seq: int) -> None:
        sm = self.sm
        sm._touched.pop(seq, None)
        sm._created.discard(seq)
        sm._deleted.add(seq)

    def __len__(self) -> int:
        return sum(self.sm.store_count.values())

    def __bool__(self) -> bool:
        return len(self) > 0

    def values(self) -> Iterator[StoredMessage]:
        """Every message record, in sequence order (snapshots)."""
        for key, value in self.sm._cf("msg").scan():
            yield self.sm._decode(_U64.unpack(key)[0], value)


class _StoreSeqs(dict[str, _DiskSeqSet]):
    """store -> its on-disk sequence set, created on first use."""

    def __init__(self, sm: DiskStateMachine) -> None:
        super().__init__()
        self.sm = sm

    def __missing__(self, store: str) -> _DiskSeqSet:
        ident = self.sm._store_ids.get(store)
        if ident is None:
            ident = self.sm._store_ids[store] = self.sm._next_store_id
            self.sm._next_store_id += 1
            self.sm._ids_dirty = True
        seqs = self[store] = _DiskSeqSet(self.sm, "storeseq", _U32.pack(ident), self.sm.store_count.get(store, 0), None)
        return seqs

    def get(self, store: str, default: object = None) -> _DiskSeqSet:  # type: ignore[override]
        return self[store]

    def setdefault(self, store: str, default: object = None) -> _DiskSeqSet:  # type: ignore[override]
        return self[store]


def _timer_keys(stored: StoredMessage) -> list[bytes]:
    """The `timers` family's keys of a message's lifetime ends."""
    keys = []
    if stored.expires_at:
        keys.append(_TIMER.pack(stored.expires_at, stored.seq))
    if stored.expires_clock:
        keys.append(_CLOCK_TIMER + _TIMER.pack(stored.expires_clock, stored.seq))
    if stored.retain_until:
        keys.append(_TIMER.pack(stored.retain_until, stored.seq))
    return keys


class DiskStateMachine(StateMachine, PayloadSource):
    """The state machine with messages, pending sets and store indexes in the member's database."""

    def __init__(self, storage: DiskStorage) -> None:
        super().__init__(None)
        self.storage = storage
        self.messages = _DiskMessages(self)  # type: ignore[assignment]
        self.store_seqs = _StoreSeqs(self)  # type: ignore[assignment]
        self._store_ids: dict[str, int] = {}
        self._next_store_id = 1
        self._next_durable_id = 1
        self._ids_dirty = False
        self._in_entry = False
        self._wb = storage.batch()
        self._touched: dict[int, StoredMessage] = {}
        self._created: set[int] = set()
        self._deleted: set[int] = set()
        self._dirty_sets: dict[int, _DiskSeqSet] = {}
        self._dirty_durables: dict[str, Durable] = {}
        self._dirty_slots: dict[bytes, int | None] = {}
        self._dirty_stores = False
        self.uows.track_changes()
        # The (pseudo-clock, UOW order) last written: an entry that moves neither writes no key.
        self._uow_mark: tuple[float, int] | None = None

    # --- storage access ----------------------------------------------------------------------

    def _cf(self, name: str) -> Family:
        return self.storage.state_cf(name)

    def _handle(self, name: str) -> object:
        return self.storage.state_handle(name)

    # --- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, storage: DiskStorage) -> DiskStateMachine:
        """The state stored in `storage`: reads only the small families, never the backlog."""
        sm = cls(storage)
        meta = sm._cf("sm")
        if meta.get(K_INSTALLING) is not None:  # DiskStorage moves such a store aside when it opens it
            raise DataCorruption("a snapshot install was interrupted; the indexes on disk are incomplete. "
                                 "Empty this member's data directory so it catches up from the leader")
        raw = meta.get(K_APPLIED)
        if raw:
            sm.applied_index, sm.applied_epoch = _TWO.unpack(raw)
        raw = meta.get(K_NEXT_SEQ)
        if raw:
            sm.next_seq = _U64.unpack(raw)[0]
        raw = meta.get(K_ACKED)
        if raw:
            sm.acked_messages = _U64.unpack(raw)[0]
        raw = meta.get(K_IDS)
        if raw:
            sm._next_durable_id, sm._next_store_id = _IDS.unpack(raw)
        slots: dict[int, dict[str, int]] = {}
        for key, value in sm._cf("lv").scan():
            slots.setdefault(_U32.unpack_from(key)[0], {})[key[4:].decode()] = _U64.unpack(value)[0]
        uows: list[rpb.UowState] = []
        for key, value in meta.scan():
            if key.startswith(P_DURABLE):
                ident, count, pbytes, lvs = _DURABLE.unpack_from(value)
                ds = rpb.DurableState.FromString(value[_DURABLE.size:])
                d = Durable(key=ds.key, store=ds.store, destination=ds.destination, name=ds.name, kind=ds.kind,
                            queue=ds.queue, matcher=ds.matcher, key_field=ds.key_field, content=ds.content,
                            ack_sync_mode=ds.ack_sync_mode, pending_bytes=pbytes, last_value_seq=lvs,
                            suspended=ds.suspended, last_used=ds.last_used, attached=ds.attached,
                            delivery_counts=dict(ds.delivery_counts))
                sm._adopt(d, ident, count, slots.get(ident, {}))
                sm._register(d)
            elif key.startswith(P_STORE):
                store = key[len(P_STORE):].decode()
                ident, nbytes, count = _STORE.unpack(value)
                sm._store_ids[store] = ident
                sm.store_bytes[store] = nbytes
                sm.store_count[store] = count
                sm.store_seqs[store]  # creates the store's on-disk sequence set
            elif key.startswith(P_CONFIG):
                cfg = rpb.ConfigureStoreOp.FromString(value)
                sm.store_configs[cfg.store] = cfg
            elif key.startswith(P_MAP):
                store, name, mkey = key[len(P_MAP):].decode().split("\x00", 2)
                sm.maps.setdefault((store, name), {})[mkey] = (value[8:], _U64.unpack_from(value)[0])
            elif key.startswith(P_UOW):
                uows.append(rpb.UowState.FromString(value))
            elif key.startswith(P_UOW_GONE):
                sm.uows.gone[key[len(P_UOW_GONE):].decode()] = _DOUBLE.unpack(value)[0]
            elif key.startswith(P_UOW_SUBSCRIPTION):
                sm.uows.restore_subscription(rpb.UowSubscriptionState.FromString(value))
            elif key == K_UOW_CLOCK:
                sm.uows.clock, sm.uows.order = _CLOCK.unpack(value)
            elif key.startswith(P_ORIGIN):
                cluster, destination = key[len(P_ORIGIN):].decode().split("\x00", 1)
                sequence, stored_at = _MARK.unpack_from(value)
                sm.origin_marks[(cluster, destination)] = OriginMark(value[_MARK.size:].decode(), sequence, stored_at)
        for state in sorted(uows, key=lambda s: s.order):
            sm.uows.restore(state)
        for key, value in sm._cf("dedup").scan():
            pid = key[:-9].decode()
            pos = _U64.unpack(key[-8:])[0]
            window = sm.producers.get(pid)
            if window is None:
                window = sm.producers[pid] = _DiskWindow(sm, pid)
                window.first = pos
            if len(value) == _TWO.size:  # written before log format 7: used at the clock as loaded
                seq, mseq = _TWO.unpack(value)
                window.last_used = sm.uows.clock
            else:
                seq, mseq, window.last_index, window.last_used = _DEDUP.unpack(value)
            ProducerWindow.record(window, seq, mseq)
            window.next = pos + 1
        wall: list[tuple[float, int]] = []
        pseudo: list[tuple[float, int]] = []
        for key, _ in sm._cf("timers").scan():
            if key.startswith(_CLOCK_TIMER):
                pseudo.append(_TIMER.unpack_from(key, len(_CLOCK_TIMER)))
            else:
                wall.append(_TIMER.unpack(key))
        sm._timers.load(wall)
        sm._clock_timers.load(pseudo)
        # Each stored message with a pseudo-clock time-to-live has exactly one such key.
        sm._clock_ttls = len(pseudo)
        sm._dirty_durables.clear()
        sm._dirty_sets.clear()
        sm._dirty_slots.clear()
        return sm

    def _adopt(self, durable: Durable, ident: int | None, count: int, slots: dict[str, int]) -> None:
        """Give a durable its on-disk pending set and write-back of its attributes."""
        if ident is None:
            ident = self._next_durable_id
            self._next_durable_id += 1
            self._ids_dirty = True
        d = durable.__dict__
        d["_id"] = ident
        d["pending"] = _DiskSeqSet(self, "pending", _U32.pack(ident), count, durable)
        d["last_values"] = _Slots(self, ident, slots)
        durable.__class__ = _DiskDurable
        d["_sm"] = self
        self._dirty_durables[durable.key] = durable

    def _register(self, durable: Durable) -> None:
        self.durables[durable.key] = durable
        if durable.content:
            self.content_durables.setdefault(durable.store, []).append(durable)
        else:
            self.by_destination.setdefault(durable.destination, []).append(durable)

    # --- applying ------------------------------------------------------------------------------

    def apply_entry(self, entry: rpb.LogEntry) -> list[object]:
        """Apply an entry and write everything it changed, with the applied index, in one batch."""
        self._in_entry = True
        try:
            results = super().apply_entry(entry)
            self._commit()
        finally:
            self._in_entry = False
        return results

    def apply_op(self, op: rpb.Operation) -> object:
        if not self._in_entry:
            self._in_entry = True
            try:
                result = self.apply_op(op)
                self._commit()
            finally:
                self._in_entry = False
            return result
        result = super().apply_op(op)
        if op.WhichOneof("op") == "configure_store":
            cfg = op.configure_store
            self._wb.put(P_CONFIG + cfg.store.encode(), cfg.SerializeToString(), self._handle("sm"))
        return result

    def _add_durable(self, durable: Durable) -> None:
        self._adopt(durable, None, 0, {})
        super()._add_durable(durable)

    def _removed(self, durable: Durable) -> None:
        # Its pending set and slots were emptied through their write-through; now its record.
        self._dirty_durables.pop(durable.key, None)
        self._wb.delete(P_DURABLE + _U32.pack(durable._id), self._handle("sm"))  # type: ignore[attr-defined]

    def _new_window(self, producer_id: str) -> ProducerWindow:
        return _DiskWindow(self, producer_id)

    def _durable_changed(self, durable: Durable) -> None:
        self._dirty_durables[durable.key] = durable

    def _drop_window(self, producer_id: str, window: ProducerWindow) -> None:
        assert isinstance(window, _DiskWindow)
        handle = self._handle("dedup")
        for pos in range(window.first, window.next):
            self._wb.delete(window.prefix + _U64.pack(pos), handle)
        super()._drop_window(producer_id, window)

    def _set_mark(self, key: tuple[str, str], mark: OriginMark) -> None:
        super()._set_mark(key, mark)
        self._wb.put(P_ORIGIN + f"{key[0]}\x00{key[1]}".encode(),
                     _MARK.pack(mark.sequence, mark.stored_at) + mark.store.encode(), self._handle("sm"))

    def _index_message(self, stored: StoredMessage) -> None:
        stored._source = self
        super()._index_message(stored)
        self._dirty_stores = True
        if stored.expires_at or stored.expires_clock or stored.retain_until:
            handle = self._handle("timers")
            for key in _timer_keys(stored):
                self._wb.put(key, b"", handle)

    def _forget(self, stored: StoredMessage) -> None:
        super()._forget(stored)
        self._dirty_stores = True
        if stored.expires_at or stored.expires_clock or stored.retain_until:
            handle = self._handle("timers")
            for key in _timer_keys(stored):
                self._wb.delete(key, handle)

    def _map(self, op: rpb.MapOp) -> object:
        result = super()._map(op)
        key = P_MAP + f"{op.store}\x00{op.map}\x00{op.key}".encode()
        current = self.maps.get((op.store, op.map), {}).get(op.key)
        if current is None:
            self._wb.delete(key, self._handle("sm"))
        else:
            self._wb.put(key, _U64.pack(current[1]) + current[0], self._handle("sm"))
        return result

    # --- records -------------------------------------------------------------------------------

    def _decode(self, seq: int, raw: bytes) -> StoredMessage:
        refs, size, published_at, expires, retain_until, flags = _MSG.unpack_from(raw)
        store, destination = raw[_MSG.size:].decode().split("\x00", 1)
        on_clock = flags & _CLOCK_TTL
        return StoredMessage(seq=seq, store=store, destination=destination, message=None, size=size, refs=refs,
                             queue=bool(flags & _QUEUE), content=bool(flags & _CONTENT), published_at=published_at,
                             expires_at=0.0 if on_clock else expires, expires_clock=expires if on_clock else 0.0,
                             retain_until=retain_until, retained=bool(flags & _RETAINED), source=self)

    @staticmethod
    def _encode(stored: StoredMessage) -> bytes:
        # One time-to-live end per message (its clock in the flags): the record keeps its layout.
        flags = (_QUEUE if stored.queue else 0) | (_CONTENT if stored.content else 0) | \
            (_RETAINED if stored.retained else 0) | (_CLOCK_TTL if stored.expires_clock else 0)
        return _MSG.pack(stored.refs, stored.size, stored.published_at, stored.expires_clock or stored.expires_at,
                         stored.retain_until, flags) + f"{stored.store}\x00{stored.destination}".encode()

    def read(self, stored: StoredMessage) -> cpb.Message:
        """A payload, from the `payload` family."""
        raw = self._cf("payload").get(_U64.pack(stored.seq))
        if raw is None:
            raise DataCorruption(f"payload of message {stored.seq} is missing")
        return cpb.Message.FromString(raw)

    def _commit(self) -> None:
        """Write the current entry's changes (and the applied index) in one batch."""
        wb = self._wb
        msg_h, payload_h, sm_h = self._handle("msg"), self._handle("payload"), self._handle("sm")
        for seq, stored in self._touched.items():
            key = _U64.pack(seq)
            wb.put(key, self._encode(stored), msg_h)
            if seq in self._created:
                message = stored._message
                assert message is not None
                wb.put(key, message.SerializeToString(), payload_h)
                # From now on the payload is read back from disk.
                stored._message = None
        for seq in self._deleted:
            key = _U64.pack(seq)
            wb.delete(key, msg_h)
            wb.delete(key, payload_h)
        for seqs in self._dirty_sets.values():
            seqs.flush(wb)
        for d in self._dirty_durables.values():
            wb.put(P_DURABLE + _U32.pack(d._id), self._encode_durable(d), sm_h)  # type: ignore[attr-defined]
        lv_h = self._handle("lv")
        for key, value in self._dirty_slots.items():
            if value is None:
                wb.delete(key, lv_h)
            else:
                wb.put(key, _U64.pack(value), lv_h)
        if self._dirty_stores:
            for store, ident in self._store_ids.items():
                wb.put(P_STORE + store.encode(), _STORE.pack(ident, self.store_bytes.get(store, 0),
                                                             self.store_count.get(store, 0)), sm_h)
        if self._ids_dirty:
            wb.put(K_IDS, _IDS.pack(self._next_durable_id, self._next_store_id), sm_h)
        self._write_uows(wb, sm_h)
        wb.put(K_APPLIED, _TWO.pack(self.applied_index, self.applied_epoch), sm_h)
        wb.put(K_NEXT_SEQ, _U64.pack(self.next_seq), sm_h)
        wb.put(K_ACKED, _U64.pack(self.acked_messages), sm_h)
        self.storage.write_state(wb)
        self._wb = self.storage.batch()
        self._touched.clear()
        self._created.clear()
        self._deleted.clear()
        self._dirty_sets.clear()
        self._dirty_durables.clear()
        self._dirty_slots.clear()
        self._dirty_stores = self._ids_dirty = False

    def _write_uows(self, wb: Batch, sm_h: object) -> None:
        """The units of work and subscriptions the entry changed, and the pseudo-clock."""
        table = self.uows
        changed, subscriptions = table.take_changes()
        for topic, subscriber in subscriptions:
            key = f"{topic}\x00{subscriber}".encode()
            subscription = table.subscriptions.get((topic, subscriber))
            if subscription is not None:
                wb.put(P_UOW_SUBSCRIPTION + key, subscription.to_state().SerializeToString(), sm_h)
            else:
                wb.delete(P_UOW_SUBSCRIPTION + key, sm_h)
        for uow_id in changed:
            key = uow_id.encode()
            uow = table.uows.get(uow_id)
            if uow is not None:
                wb.put(P_UOW + key, table.to_state(uow).SerializeToString(), sm_h)
            else:
                wb.delete(P_UOW + key, sm_h)
            until = table.gone.get(uow_id)
            if until is not None:
                wb.put(P_UOW_GONE + key, _DOUBLE.pack(until), sm_h)
            else:
                wb.delete(P_UOW_GONE + key, sm_h)
        mark = (table.clock, table.order)
        if mark != self._uow_mark:
            wb.put(K_UOW_CLOCK, _CLOCK.pack(*mark), sm_h)
            self._uow_mark = mark

    @staticmethod
    def _encode_durable(d: Durable) -> bytes:
        ds = rpb.DurableState(key=d.key, store=d.store, destination=d.destination, name=d.name, kind=d.kind,
                              queue=d.queue, matcher=d.matcher, key_field=d.key_field, content=d.content,
                              ack_sync_mode=d.ack_sync_mode, suspended=d.suspended, last_used=d.last_used,
                              attached=d.attached, delivery_counts=d.delivery_counts)
        return _DURABLE.pack(d._id, len(d.pending), d.pending_bytes, d.last_value_seq) + \
            ds.SerializeToString()  # type: ignore[attr-defined]

    # --- paging ---------------------------------------------------------------------------------

    def pending_page(self, durable: Durable, after: int, limit: int) -> list[int]:
        """A durable's pending sequences above `after`, at most `limit` (the dispatcher's cursor)."""
        return durable.pending.page(after, limit)  # type: ignore[attr-defined]

