"""Synthetic store event logs: what a busy cluster's leader would write, deterministic from a seed.

For the Spark jobs' tests and `strongroom bench metrics` (a cluster makes the same files, slower).
A run publishes to several stores and destinations (topics with two durables each, a queue, a
slow dashboard whose store discards its oldest messages at a limit, a topic whose messages
expire), delivers with some redeliveries, acknowledges most, dead-letters a few into a
dead-letter topic nobody drains, and loses its leader once half-way (a new epoch; the messages in
flight are delivered again, counting from 1, as a new leader does). Nothing here is random at run
time: the same `Scenario` gives the same files, byte for byte.

The rows follow `strongroom.events.schema` exactly (columns, kinds, key) and are written by the
members' own writer (`strongroom.events.writer.EventWriter`, see `WriterFiles`): the files are
laid out, encoded, named and published exactly as a cluster's leader publishes them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strongroom.events.schema import (
    NON_LOG_POSITION,
    SCHEMA,
    EventKind,
)
from strongroom.events.writer import EventWriter

__all__ = ["DESTINATIONS", "WRITER_EPOCH_KEY", "Scenario", "Summary", "WriterFiles", "event_tables", "write_event_log"]


@dataclass(frozen=True)
class Destination:
    """A destination of the synthetic realm and how its durables consume."""

    name: str
    store: str
    durables: tuple[str, ...]
    weight: float
    """Share of the publishes."""
    mean_size: int
    ttl_s: float = 0.0
    """Time-to-live (0: none): messages still pending then expire."""
    consumer_stops: float = 1.0
    """Fraction of the run after which its durables stop consuming (1: never)."""
    slow_ack_s: float = 0.4
    """Mean seconds from delivery to ack."""
    store_limit: int = 0
    """discard_oldest limit of its store in messages (0: none)."""


DESTINATIONS = (
    Destination("orders.eu", "orders", ("billing", "audit"), 0.30, 900),
    Destination("orders.us", "orders", ("billing", "audit"), 0.20, 1100, ttl_s=10.0, slow_ack_s=3.0),
    Destination("payments.queue", "payments", ("",), 0.25, 400),
    Destination("telemetry", "telemetry", ("dashboard",), 0.25, 200, consumer_stops=0.6, store_limit=500),
)
"""The synthetic realm. Messages dead-lettered (redelivery limit 3) go to DEAD_LETTER."""
DEAD_LETTER = Destination("orders.dlq", "orders", ("ops",), 0.0, 0, consumer_stops=0.0)
"""The dead-letter topic: its durable `ops` never consumes, so its backlog only grows."""
REDELIVERY_LIMIT = 3

# Kind codes: positions in this tuple (the dictionary of the `kind` column).
_KINDS = (EventKind.DURABLE_CREATED, EventKind.MESSAGE_STORED, EventKind.MESSAGE_PENDING,
          EventKind.MESSAGE_DELIVERED, EventKind.MESSAGE_ACKED, EventKind.MESSAGE_EXPIRED,
          EventKind.MESSAGE_DISCARDED, EventKind.MESSAGE_DEAD_LETTERED)
K_CREATED, K_STORED, K_PENDING, K_DELIVERED, K_ACKED, K_EXPIRED, K_DISCARDED, K_DEAD = range(len(_KINDS))
_EVENTS_PER_MESSAGE = 5.4
"""About how many events one publish makes in this realm (for sizing a run by events)."""


@dataclass(frozen=True)
class Scenario:
    """One synthetic run."""

    events: int = 100_000
    """About how many events to make (the run is sized in publishes from it)."""
    seed: int = 0
    cluster: str = "default"
    start: datetime = datetime(2026, 11, 20, 9, 40, tzinfo=UTC)
    rate: float = 200.0
    """Publishes per second (the run lasts about events / 5.4 / rate seconds)."""
    failover_at: float | None = 0.5
    """Fraction of the run at which the leader changes (None: never)."""
    epochs: tuple[int, int] = (7, 19)
    """Epochs of the first and second leader (etcd create revisions)."""
    file_events: int = 250_000
    """Rows per file at most (files also end at the hour)."""
    overlap_entries: int = 0
    """The new leader writes again the last this many log entries of the old one (same keys, a
    file of its own epoch), as a leader that took over before the old one's last file was
    known published does: readers must count them once."""


@dataclass(frozen=True)
class Summary:
    """What a run wrote, for the caller's checks."""

    events: int
    """Rows written (duplicates of `overlap_entries` included)."""
    files: list[Path]
    first_time: datetime
    last_time: datetime


class WriterFiles:
    """The members' writer (`EventWriter`) as the sink: each table it is given is published as one
    file (a table larger than the writer's rows per file as several, cut between log entries), by a
    writer of the epoch of the leader that wrote it: the table's WRITER_EPOCH_KEY, else its rows'
    newest epoch. Encoding, layout, names and atomic publication are therefore the members' own."""

    def __init__(self, root: Path | str, cluster: str) -> None:
        self.root = Path(root)
        self.cluster = cluster
        self._writers: dict[int, EventWriter] = {}
        self.files: list[Path] = []

    def write(self, table: pa.Table) -> None:
        """Publish `table`'s rows."""
        marked = (table.schema.metadata or {}).get(WRITER_EPOCH_KEY)
        epoch = int(marked) if marked else int(pc.max(table.column("epoch")).as_py())
        writer = self._writers.get(epoch)
        if writer is None:
            # Rolled here, not by the clock: a big table may take longer than a publish interval.
            writer = self._writers[epoch] = EventWriter(self.root, self.cluster, epoch=epoch,
                                                        max_seconds=float("inf"))
        published = writer.write(table)
        published += writer.flush()
        self.files += [f.path for f in published]

    def close(self) -> None:
        """Publish whatever a writer still holds (nothing: each write ends with a flush)."""
        for writer in self._writers.values():
            self.files += [f.path for f in writer.close()]


WRITER_EPOCH_KEY = b"strongroom.synthetic.writer_epoch"
"""Table metadata: the epoch of the leader writing a table whose rows are of an older epoch."""

def _dict_array(codes: np.ndarray, names: list[str], valid: np.ndarray | None = None) -> pa.DictionaryArray:
    mask = None if valid is None else ~valid
    indices = pa.array(codes.astype(np.int32), type=pa.int32(), mask=mask)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, type=pa.string()))


def _int_array(values: np.ndarray, kind: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    return pa.array(values, type=kind, mask=None if valid is None else ~valid)


def _time_array(us: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    return pa.array(us.astype("datetime64[us]"), type=pa.timestamp("us", tz="UTC"),
                    mask=None if valid is None else ~valid)


class _Rows:
    """Columns of events being collected, as lists of numpy arrays."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, **cols: np.ndarray | int) -> None:
        n = next(len(v) for v in cols.values() if isinstance(v, np.ndarray))
        for name in ("kind", "time", "dest", "durable", "seq_ref", "size", "published", "producer",
                     "deliveries", "reason", "target", "order"):
            value = cols.get(name, -1)
            array = value if isinstance(value, np.ndarray) else np.full(n, value, dtype=np.int64)
            self.parts.setdefault(name, []).append(array.astype(np.int64))

    def columns(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.parts.items()}


def _consume(rows: _Rows, rng: np.random.Generator, dest: Destination, di: int, mine: np.ndarray,
             pub: np.ndarray, size: np.ndarray, t0: int, span: int, t_fail: int, durables: list[int],
             dead_times: list[np.ndarray], dead_refs: list[np.ndarray]) -> None:
    """The pending, delivered, acked and dead-lettered rows of one destination's messages for
    each of its durables, and the store-wide expiry and discard rows."""
    m = len(mine)
    never = np.int64(1 << 62)
    stop = t0 + int(span * dest.consumer_stops)
    consumed = pub < stop
    plans = []
    for _ in durables:
        first = pub + rng.exponential(0.05e6, m).astype(np.int64) + 1000
        tries = np.where(rng.random(m) < 0.08, np.where(rng.random(m) < 0.25, 3, 2), 1)
        gaps = (5e6 + rng.exponential(1e6, (m, 3))).astype(np.int64)
        at = [first, first + gaps[:, 0], first + gaps[:, 0] + gaps[:, 1]]
        dead = (tries == 3) & (rng.random(m) < 0.5)
        last = np.choose(tries - 1, at)
        settle = np.where(dead, at[2] + gaps[:, 2], last + rng.exponential(dest.slow_ack_s * 1e6, m).astype(np.int64) + 1000)
        # The old leader's deliveries die with it: what it had in flight at the failover the new
        # leader delivers again, counting from 1, and that delivery is the one acknowledged.
        crossed = consumed & (first < t_fail) & (settle >= t_fail)
        redo = t_fail + 500_000 + rng.integers(0, 200_000, m)
        settle = np.where(crossed, redo + rng.exponential(dest.slow_ack_s * 1e6, m).astype(np.int64) + 1000, settle)
        dead &= ~crossed
        settle = np.where(consumed, settle, never)
        plans.append((at, tries, dead, settle, crossed, redo))
    # The store-wide ends: expiry (a durable had not settled by then) and discard_oldest.
    removed = np.full(m, never)
    reason = 1
    if dest.ttl_s:
        expire = pub + int(dest.ttl_s * 1e6)
        late = np.zeros(m, dtype=bool)
        for plan in plans:
            late |= plan[3] > expire
        removed = np.where(late, expire, never)
    if dest.store_limit:
        waiting = np.flatnonzero(~consumed)
        if len(waiting) > dest.store_limit:
            gone = waiting[:-dest.store_limit]
            removed[gone] = pub[waiting[dest.store_limit:]]
        reason = 2
    for dn, (at, tries, dead, settle, crossed, redo) in zip(durables, plans, strict=True):
        rows.add(kind=np.full(m, K_PENDING), time=pub, dest=di, durable=dn, seq_ref=mine, size=size,
                 published=pub, order=mine * 8 + 1)
        for k in range(3):
            sel = consumed & (tries > k) & (at[k] < removed) & ~(crossed & (at[k] >= t_fail))
            rows.add(kind=np.full(sel.sum(), K_DELIVERED), time=at[k][sel], dest=di, durable=dn,
                     seq_ref=mine[sel], size=size[sel], published=pub[sel], deliveries=k + 1,
                     order=mine[sel] * 8 + 2)
        again = crossed & (redo < removed)
        rows.add(kind=np.full(again.sum(), K_DELIVERED), time=redo[again], dest=di, durable=dn,
                 seq_ref=mine[again], size=size[again], published=pub[again], deliveries=1, order=mine[again] * 8 + 2)
        settled = settle < removed
        ok = settled & ~dead
        rows.add(kind=np.full(ok.sum(), K_ACKED), time=settle[ok], dest=di, durable=dn, seq_ref=mine[ok],
                 size=size[ok], published=pub[ok], order=mine[ok] * 8 + 3)
        dl = settled & dead
        rows.add(kind=np.full(dl.sum(), K_DEAD), time=settle[dl], dest=di, durable=dn, seq_ref=mine[dl],
                 size=size[dl], published=pub[dl], deliveries=REDELIVERY_LIMIT, reason=0, target=0,
                 order=mine[dl] * 8 + 4)
        dead_times.append(settle[dl])
        dead_refs.append(mine[dl])
    gone = removed < never
    rows.add(kind=np.full(gone.sum(), K_EXPIRED if reason == 1 else K_DISCARDED), time=removed[gone], dest=di,
             seq_ref=mine[gone], size=size[gone], published=pub[gone], reason=reason, order=mine[gone] * 8 + 5)


def _simulate(s: Scenario) -> tuple[dict[str, np.ndarray], list[Destination], list[str], int]:
    """Every event of the run, unsorted: (columns, destinations, durable names, failover time)."""
    rng = np.random.default_rng(s.seed)
    dests = [*DESTINATIONS, DEAD_LETTER]
    durable_names = sorted({d for dest in dests for d in dest.durables})
    n = max(1, int(s.events / _EVENTS_PER_MESSAGE))
    t0 = int(s.start.timestamp() * 1e6)
    span = int(n / s.rate * 1e6)
    t_fail = t0 + int(span * s.failover_at) if s.failover_at is not None else 1 << 62
    rows = _Rows()
    # Every durable exists from the start (one entry).
    for di, dest in enumerate(dests):
        for name in dest.durables:
            rows.add(kind=np.array([K_CREATED]), time=np.array([t0 - 1000]), dest=di,
                     durable=durable_names.index(name), order=-1)
    weights = np.array([d.weight for d in DESTINATIONS])
    dest_of = rng.choice(len(DESTINATIONS), size=n, p=weights / weights.sum())
    published = t0 + np.sort(rng.integers(0, span, size=n))
    msg_id = np.arange(n)
    size = np.zeros(n, dtype=np.int64)
    for di, dest in enumerate(DESTINATIONS):
        mine = dest_of == di
        size[mine] = np.clip(rng.lognormal(np.log(dest.mean_size), 0.6, mine.sum()), 16, 64_000).astype(np.int64)
    producer = rng.integers(0, 12, size=n)
    rows.add(kind=np.full(n, K_STORED), time=published, dest=dest_of, seq_ref=msg_id, size=size,
             published=published, producer=producer, order=msg_id * 8)
    dead_times: list[np.ndarray] = []
    dead_refs: list[np.ndarray] = []
    for di, dest in enumerate(DESTINATIONS):
        mine = np.flatnonzero(dest_of == di)
        if len(mine):
            _consume(rows, rng, dest, di, mine, published[mine], size[mine], t0, span, t_fail,
                     [durable_names.index(d) for d in dest.durables], dead_times, dead_refs)
    # Dead letters become new messages of the dead-letter topic, pending for `ops` forever.
    if dead_times:
        dt = np.concatenate(dead_times)
        refs = np.concatenate(dead_refs)
        dl_ids = n + np.arange(len(dt))
        di = len(dests) - 1
        dsize = size[refs] + 120  # the original plus the sr.dead_letter.* fields
        rows.add(kind=np.full(len(dt), K_STORED), time=dt + 1, dest=di, seq_ref=dl_ids, size=dsize,
                 published=dt + 1, producer=-1, order=refs * 8 + 6)
        rows.add(kind=np.full(len(dt), K_PENDING), time=dt + 1, dest=di, durable=durable_names.index("ops"),
                 seq_ref=dl_ids, size=dsize, published=dt + 1, order=refs * 8 + 7)
    return rows.columns(), dests, durable_names, t_fail


def event_tables(s: Scenario) -> Iterator[pa.Table]:
    """The run's events as tables of SCHEMA, in log order, each at most `file_events` rows of
    one UTC hour (what one file holds)."""
    cols, dests, durable_names, t_fail = _simulate(s)
    kind, time = cols["kind"], cols["time"]
    # Events past the run's end have not happened yet.
    keep = time <= int(s.start.timestamp() * 1e6) + int(max(1, s.events / _EVENTS_PER_MESSAGE) / s.rate * 1e6)
    cols = {k: v[keep] for k, v in cols.items()}
    kind, time = cols["kind"], cols["time"]
    order = np.lexsort((cols["order"], time))
    cols = {k: v[order] for k, v in cols.items()}
    kind, time = cols["kind"], cols["time"]
    stores = sorted({d.store for d in dests})
    store_of_dest = np.array([stores.index(d.store) for d in dests])
    # Store sequences: per store, in publish order (dead letters included).
    seq = np.zeros(len(kind), dtype=np.int64)
    stored = kind == K_STORED
    ref_store = store_of_dest[cols["dest"]]
    n_refs = int(cols["seq_ref"].max()) + 1 if len(kind) else 0
    seq_of_ref = np.zeros(n_refs + 1, dtype=np.int64)
    for si in range(len(stores)):
        mine = np.flatnonzero(stored & (ref_store == si))
        seq_of_ref[cols["seq_ref"][mine]] = np.arange(1, len(mine) + 1)
    about = cols["seq_ref"] >= 0
    seq[about] = seq_of_ref[cols["seq_ref"][about]]
    # Log entries: the log events of each 5 ms group-commit round; deliveries are not in the log.
    logged = kind != K_DELIVERED
    log_at = np.flatnonzero(logged)
    rounds = time[log_at] // 5000
    new_entry = np.r_[True, rounds[1:] != rounds[:-1]]
    entry = np.cumsum(new_entry) + 100  # the log starts after a no-op and the realm's limits
    entry_start = np.flatnonzero(new_entry)
    start_of = np.repeat(entry_start, np.diff(np.r_[entry_start, len(log_at)]))
    log_index = np.zeros(len(kind), dtype=np.int64)
    position = np.zeros(len(kind), dtype=np.int64)
    log_index[log_at] = entry
    position[log_at] = np.arange(len(log_at)) - start_of
    # A delivery carries the index applied when it happened and positions from NON_LOG_POSITION.
    deliv = np.flatnonzero(~logged)
    applied = np.searchsorted(time[log_at], time[deliv], side="right") - 1
    log_index[deliv] = np.where(applied >= 0, entry[np.maximum(applied, 0)], 100)
    if len(deliv):
        grp = log_index[deliv]
        new_grp = np.r_[True, grp[1:] != grp[:-1]]
        starts = np.flatnonzero(new_grp)
        start_of_d = np.repeat(starts, np.diff(np.r_[starts, len(deliv)]))
        position[deliv] = NON_LOG_POSITION + np.arange(len(deliv)) - start_of_d
    epoch = np.where(time < t_fail, s.epochs[0], s.epochs[1])
    # A log entry's events carry the epoch of the entry (the same on every member).
    # A file holds one hour of one leader's rows.
    hours = time // 3_600_000_000
    cut = np.r_[0, np.flatnonzero((hours[1:] != hours[:-1]) | (epoch[1:] != epoch[:-1])) + 1, len(kind)]
    bounds: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(cut):
        bounds.extend((x, min(x + s.file_events, b)) for x in range(a, b, s.file_events))
    overlap_from = None
    if s.overlap_entries and t_fail < (1 << 62):
        old = log_at[time[log_at] < t_fail]
        if len(old):
            last_entry = log_index[old[-1]]
            overlap_from = np.flatnonzero((log_index > last_entry - s.overlap_entries) & (log_index <= last_entry)
                                          & logged & (time < t_fail))
    kinds = [k.value for k in _KINDS]
    producers = [f"p{i:02d}" for i in range(12)]
    reasons = ["redelivery_limit", "ttl", "max_messages"]
    targets = [DEAD_LETTER.name]

    def table(idx: np.ndarray, epochs: np.ndarray) -> pa.Table:
        k = kind[idx]
        about_msg = cols["seq_ref"][idx] >= 0
        has_durable = cols["durable"][idx] >= 0
        return pa.table({
            "cluster": _dict_array(np.zeros(len(idx), dtype=np.int32), [s.cluster]),
            "epoch": _int_array(epochs, pa.uint64()),
            "log_index": _int_array(log_index[idx], pa.uint64()),
            "position": _int_array(position[idx], pa.uint32()),
            "kind": _dict_array(k, kinds),
            "time": _time_array(time[idx]),
            "store": _dict_array(store_of_dest[cols["dest"][idx]], stores),
            "destination": _dict_array(cols["dest"][idx], [d.name for d in dests]),
            "durable": _dict_array(np.maximum(cols["durable"][idx], 0), durable_names, has_durable),
            "seq": _int_array(seq[idx], pa.uint64()),
            "size": _int_array(np.maximum(cols["size"][idx], 0), pa.uint32(), about_msg),
            "published_at": _time_array(cols["published"][idx], about_msg),
            "producer": _dict_array(np.maximum(cols["producer"][idx], 0), producers, cols["producer"][idx] >= 0),
            "deliveries": _int_array(np.maximum(cols["deliveries"][idx], 0), pa.uint32(), cols["deliveries"][idx] >= 0),
            "reason": _dict_array(np.maximum(cols["reason"][idx], 0), reasons, cols["reason"][idx] >= 0),
            "target": _dict_array(np.maximum(cols["target"][idx], 0), targets, cols["target"][idx] >= 0),
            "detail": _dict_array(np.zeros(len(idx), dtype=np.int32), [""], np.zeros(len(idx), dtype=bool)),
        }, schema=SCHEMA)

    for a, b in bounds:
        idx = np.arange(a, b)
        if overlap_from is not None and time[idx[0]] >= t_fail:
            # The new leader's first file repeats the old one's last entries (same keys).
            yield table(overlap_from, epoch[overlap_from]).replace_schema_metadata(
                {**SCHEMA.metadata, WRITER_EPOCH_KEY: str(s.epochs[1]).encode()})
            overlap_from = None
        yield table(idx, epoch[idx])


def write_event_log(root: Path | str, scenario: Scenario) -> Summary:
    """Write a synthetic run's event log under `root` (the cluster's event-log directory)."""
    sink = WriterFiles(root, scenario.cluster)
    rows = 0
    first = last = None
    try:
        for t in event_tables(scenario):
            sink.write(t)
            rows += t.num_rows
            times = t.column("time")
            lo, hi = pc.min(times).as_py(), pc.max(times).as_py()
            first = lo if first is None or lo < first else first
            last = hi if last is None or hi > last else last
    finally:
        sink.close()
    files = sorted(Path(root).rglob("events-*.parquet"))
    assert first is not None and last is not None, "a scenario makes at least one event"
    return Summary(events=rows, files=files, first_time=first, last_time=last)
