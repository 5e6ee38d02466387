"""Rows of the store event log, built in bulk from applied entries (`Applied`) and deliveries.

Every member would build the same rows from the same entry: they depend only on the entry, the
apply's results and the notes the state machine took while applying it (`records.py`). The
columns are collected for many entries at once and turned into Arrow arrays once per batch: what
a publish operation repeats for each of its rows (epoch, index, time, store, kind, durable, ...)
as runs of one value, a message's own seq and size as lists.

Positions within an entry: operation by operation, in order. For a publish operation: first
the events its apply noted (a queue's own durable created, messages discarded to make room),
then one `message_stored` row per stored message, then, per durable that could hold them, one
`message_pending` row per stored message it wanted (so a message's pending rows come after its
stored row). Other operations: their notes in the order the apply made them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from strongroom.events.records import Applied, Record, RecordKind
from strongroom.events.schema import NON_LOG_POSITION, SCHEMA, EventKind

__all__ = ["Delivery", "RowBuilder"]

_KINDS = [k.value for k in EventKind]
_KIND_INDEX = {k: i for i, k in enumerate(EventKind)}
STORED = _KIND_INDEX[EventKind.MESSAGE_STORED]
PENDING = _KIND_INDEX[EventKind.MESSAGE_PENDING]
_US = 1_000_000
_SEQ = operator.itemgetter(0)
_DUPLICATE = operator.itemgetter(1)
_SIZE = operator.attrgetter("size")
_PRODUCER = operator.attrgetter("producer_id")

Delivery = tuple[int, Any, int, str, str, int, float, int, float]
"""(applied log index, durable, seq, store, destination, size, published_at, deliveries, time)."""


def _us(seconds: float) -> int:
    return int(seconds * _US)


class _Runs:
    """A column collected as runs of one value (value, count): the columns a publish operation
    repeats for every row (its epoch, index, time, store, ...) cost a comparison per operation,
    not a list element per row, and become Arrow with one `numpy.repeat`."""

    __slots__ = ("counts", "values")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.counts: list[int] = []

    def add(self, value: Any, count: int = 1) -> None:
        values = self.values
        if values and values[-1] == value:
            self.counts[-1] += count
        else:
            values.append(value)
            self.counts.append(count)

    def expand(self, dtype: type[np.integer[Any]]) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows' values and their null mask (None: no nulls)."""
        counts = np.array(self.counts, dtype=np.int64)
        values = self.values
        if any(v is None for v in values):
            valid = np.array([v is not None for v in values], dtype=bool)
            data = np.array([0 if v is None else v for v in values], dtype=dtype)
            return np.repeat(data, counts), ~np.repeat(valid, counts)
        return np.repeat(np.array(values, dtype=dtype), counts), None


class _Positions:
    """Positions as runs of consecutive numbers (start, count): one run per entry, mostly."""

    __slots__ = ("counts", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.counts: list[int] = []

    def add(self, start: int, count: int = 1) -> None:
        if self.starts and self.starts[-1] + self.counts[-1] == start:
            self.counts[-1] += count
        else:
            self.starts.append(start)
            self.counts.append(count)

    def expand(self) -> np.ndarray:
        counts = np.array(self.counts, dtype=np.int64)
        begins = np.cumsum(counts) - counts
        starts = np.array(self.starts, dtype=np.int64)
        return (np.repeat(starts - begins, counts) + np.arange(int(counts.sum()), dtype=np.int64)).astype(np.uint32)


class RowBuilder:
    """Collects rows column by column; `table()` hands them over as one Arrow table. String
    columns are collected as dictionary indices (a Python int per row costs a tenth of a
    string to convert); columns a publish repeats per row as runs (`_Runs`); only a message's
    own values (seq, size) as a list per row."""

    _RUNS = ("epoch", "log_index", "kind", "time", "store", "destination", "durable", "published_at", "producer",
             "deliveries", "reason", "target", "detail")
    _LISTS = ("seq", "size")
    _STRINGS = ("store", "destination", "durable", "producer", "reason", "target", "detail")

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._clear()
        self._last_time = 0

    def _clear(self) -> None:
        self.runs: dict[str, _Runs] = {name: _Runs() for name in self._RUNS}
        self.lists: dict[str, list[Any]] = {name: [] for name in self._LISTS}
        self.positions = _Positions()
        self.dicts: dict[str, dict[str, int]] = {name: {} for name in self._STRINGS}

    def _code(self, column: str, value: str | None) -> int | None:
        """The dictionary index of a string value of a column (None stays null)."""
        if value is None:
            return None
        d = self.dicts[column]
        code = d.get(value)
        if code is None:
            code = d[value] = len(d)
        return code

    def __len__(self) -> int:
        return len(self.lists["seq"])

    # --- one row at a time (rare events) -----------------------------------------------------------

    def _row(self, epoch: int, index: int, position: int, kind: EventKind, time_us: int, store: str | None,
             destination: str | None, durable: str | None = None, seq: int | None = None,
             size: int | None = None, published_at: int | None = None, producer: str | None = None,
             deliveries: int | None = None, reason: str | None = None, target: str | None = None,
             detail: str | None = None) -> None:
        r = self.runs
        code = self._code
        for name, value in (("epoch", epoch), ("log_index", index), ("kind", _KIND_INDEX[kind]), ("time", time_us),
                            ("store", code("store", store)), ("destination", code("destination", destination)),
                            ("durable", code("durable", durable)), ("published_at", published_at),
                            ("producer", code("producer", producer)), ("deliveries", deliveries),
                            ("reason", code("reason", reason)), ("target", code("target", target)),
                            ("detail", code("detail", detail))):
            r[name].add(value)
        self.positions.add(position)
        self.lists["seq"].append(seq)
        self.lists["size"].append(size)

    # --- entries -----------------------------------------------------------------------------------

    def add_entries(self, applied: Iterable[Applied], entry_of: Callable[[int], Any]) -> None:
        """The rows of applied entries (`entry_of(index)` reads an entry the journal does not hold)."""
        for a in applied:
            entry = a.entry if a.entry is not None else entry_of(a.index)
            self._add_entry(a, entry)

    def _add_entry(self, a: Applied, entry: Any) -> None:
        if a.time:
            self._last_time = _us(a.time)
        # An entry of a leader before the `time` field: the last time seen (deterministic).
        t = self._last_time
        by_op: dict[int, list[Record]] = {}
        for rec in a.records:
            by_op.setdefault(rec[0], []).append(rec)
        position = 0
        at = 0
        results = a.results
        for op_no, op in enumerate(entry.ops):
            which = op.WhichOneof("op")
            notes = by_op.get(op_no, ())
            if which == "publish_batch":
                n = len(op.publish_batch.messages)
                position = self._add_publish(a, op.publish_batch.publish, op.publish_batch.messages,
                                             results[at:at + n], notes, position, t)
                at += n
                continue
            if which == "publish":
                position = self._add_publish(a, op.publish, [op.publish.message], results[at:at + 1], notes,
                                             position, t)
            else:
                for rec in notes:
                    position = self._add_note(a, op, rec, position, t)
            at += 1

    def _add_publish(self, a: Applied, head: Any, messages: Any, results: list[Any], notes: Iterable[Record],
                     position: int, t: int) -> int:
        holders: tuple[Any, ...] = ()
        for rec in notes:
            if rec[1] == RecordKind.HOLDERS:
                holders = rec[2] + rec[3]
            else:
                position = self._add_note(a, None, rec, position, t)
        seqs = list(map(_SEQ, results))
        if 0 in seqs or any(map(_DUPLICATE, results)):
            kept = [(r, m) for r, m in zip(results, messages) if r.message_seq and not r.duplicate]
            if not kept:
                return position
            results = [r for r, _ in kept]
            messages = [m for _, m in kept]
            seqs = list(map(_SEQ, results))
        sizes = list(map(_SIZE, results))
        code = self._code
        producers = [(code("producer", p or None), len(list(run)))
                     for p, run in itertools.groupby(map(_PRODUCER, messages))]
        n = len(seqs)
        if all(d.wants_all for d in holders) and not head.content:
            pending = [(d, seqs, sizes) for d in holders]
        else:
            pending = []
            for d in holders:
                mine = [(r.message_seq, r.size) for r, m in zip(results, messages) if d.wants(m)]
                if mine:
                    pending.append((d, [s for s, _ in mine], [z for _, z in mine]))
        rows = n + sum(len(p[1]) for p in pending)
        r = self.runs
        published = _us(head.published_at)
        r["epoch"].add(a.epoch, rows)
        r["log_index"].add(a.index, rows)
        self.positions.add(position, rows)
        r["time"].add(published, rows)
        r["store"].add(code("store", head.store), rows)
        r["published_at"].add(published, rows)
        r["kind"].add(STORED, n)
        r["destination"].add(code("destination", head.destination), n)
        r["durable"].add(None, n)
        seq_list, size_list = self.lists["seq"], self.lists["size"]
        seq_list += seqs
        size_list += sizes
        for producer, count in producers:
            r["producer"].add(producer, count)
        for d, ps, zs in pending:
            k = len(ps)
            r["kind"].add(PENDING, k)
            r["destination"].add(code("destination", d.destination), k)
            r["durable"].add(code("durable", d.name), k)
            seq_list += ps
            size_list += zs
            r["producer"].add(None, k)
        for name in ("deliveries", "reason", "target", "detail"):
            r[name].add(None, rows)
        return position + rows

    def _add_note(self, a: Applied, op: Any, rec: Record, position: int, t: int) -> int:
        kind = rec[1]
        e, i = a.epoch, a.index
        if kind == RecordKind.DURABLE:
            d = rec[2]
            self._row(e, i, position, rec[3], t, d.store, d.destination, d.name, reason=rec[4] or None)
            return position + 1
        if kind == RecordKind.ACKED:
            d = rec[2]
            for seq in rec[3]:
                self._row(e, i, position, EventKind.MESSAGE_ACKED, t, d.store, d.destination, d.name, seq)
                position += 1
            return position
        if kind in (RecordKind.EXPIRED, RecordKind.DISCARDED):
            _, _, seq, store, destination, size, reason = rec
            expired = kind == RecordKind.EXPIRED
            when = _us(op.expire.now) if expired and op is not None and op.expire.now else t
            self._row(e, i, position, EventKind.MESSAGE_EXPIRED if expired else EventKind.MESSAGE_DISCARDED, when,
                      store, destination, None, seq, size, reason=reason)
            return position + 1
        if kind == RecordKind.DEAD_LETTERED:
            _, _, d, seq, store, destination, size = rec
            dl = op.dead_letter
            self._row(e, i, position, EventKind.MESSAGE_DEAD_LETTERED, _us(dl.published_at) or t, store,
                      d.destination, d.name, seq, size, deliveries=dl.deliveries, reason=dl.reason or None,
                      target=dl.target_destination)
            return position + 1
        if kind == RecordKind.STORED:
            _, _, seq, store, destination, size, producer, wanting = rec
            when = _us(op.dead_letter.published_at) if op is not None and op.dead_letter.published_at else t
            self._row(e, i, position, EventKind.MESSAGE_STORED, when, store, destination, None, seq, size, when,
                      producer or None)
            position += 1
            for d in wanting:
                self._row(e, i, position, EventKind.MESSAGE_PENDING, when, store, d.destination, d.name, seq, size,
                          when)
                position += 1
            return position
        if kind == RecordKind.REPLAYED:
            _, _, d, added, skipped = rec
            for seqs, ev in ((skipped, EventKind.MESSAGE_SKIPPED), (added, EventKind.MESSAGE_PENDING)):
                for seq in seqs:
                    self._row(e, i, position, ev, t, d.store, d.destination, d.name, seq)
                    position += 1
            return position
        if kind == RecordKind.UOW:
            _, _, uow_id, store, destination, status, count, size, operation, target = rec
            self._row(e, i, position, EventKind.UOW_STATE, t, store, destination, size=size, reason=operation,
                      target=target, detail=f"{uow_id} {status} {count}")
            return position + 1
        raise AssertionError(f"unknown event record {rec[:2]}")

    # --- deliveries ----------------------------------------------------------------------------------

    def add_deliveries(self, epoch: int, deliveries: Iterable[Delivery], counters: dict[int, int]) -> None:
        """Deliveries by the leader of `epoch`: keyed by the log index applied when each was
        made and positions from NON_LOG_POSITION up (`counters`: the next one per log index,
        kept by the caller across calls)."""
        for index, d, seq, store, destination, size, published_at, count, now in deliveries:
            n = counters.get(index, 0)
            counters[index] = n + 1
            self._row(epoch, index, NON_LOG_POSITION + n, EventKind.MESSAGE_DELIVERED, _us(now), store, destination,
                      d.name, seq, size, _us(published_at), deliveries=count)

    # --- out -------------------------------------------------------------------------------------------

    def table(self) -> pa.Table | None:
        """The rows collected since the last call, as a table in the event schema (None: none)."""
        n = len(self)
        if not n:
            return None
        runs, lists, positions, dicts = self.runs, self.lists, self.positions, self.dicts
        self._clear()
        arrays: list[pa.Array] = []
        for f in SCHEMA:
            name = f.name
            if name == "cluster":
                arrays.append(pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                                             pa.array([self.cluster])))
            elif name == "position":
                arrays.append(pa.array(positions.expand(), pa.uint32()))
            elif name in lists:
                arrays.append(pa.array(lists[name], f.type))
            elif name == "kind" or name in dicts:
                codes, mask = runs[name].expand(np.int32)
                names = _KINDS if name == "kind" else list(dicts[name])
                arrays.append(pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=mask),
                                                             pa.array(names, pa.string())))
            elif pa.types.is_timestamp(f.type):
                data, mask = runs[name].expand(np.int64)
                arrays.append(pa.array(data, pa.int64(), mask=mask).cast(f.type))
            else:
                data, mask = runs[name].expand(np.uint64 if f.type == pa.uint64() else np.int64)
                arrays.append(pa.array(data, f.type, mask=mask))
        return pa.Table.from_arrays(arrays, schema=SCHEMA)
