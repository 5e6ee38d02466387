"""`EventWriter`: store events into Parquet files in the event-log layout, published atomically.

Usable on its own (a benchmark, a tool that converts something into events) as well as by the
leader of a cluster (`strongroom.events.emitter`):

    from strongroom.events.writer import EventWriter

    with EventWriter("/data/events", "c1") as w:
        w.write({"epoch": [1, 1], "log_index": [7, 7], "position": [0, 1],
                 "kind": ["message_stored", "message_pending"], "time": [t, t],
                 "store": ["main", "main"], "seq": [42, 42], "durable": [None, ""]})
    # -> /data/events/cluster=c1/hour=<UTC hour of t>/events-...-00000000000000000007-<epoch>.parquet

`write` takes a `pyarrow.Table` / `RecordBatch` or a mapping of column name to values, with
the columns of `schema.SCHEMA` (missing nullable columns are null, a missing `cluster` is the
writer's). Rows are buffered and published as one file when:

- the buffered rows reach `max_rows` or `max_bytes` (Arrow bytes in memory), or
- the oldest buffered row was written `max_seconds` ago (checked on `write` and on
  `flush_due`, which an owner with a timer calls; the member calls it five times a second), or
- the next rows belong to another UTC hour (a file holds one hour's rows), or
- `flush` / `close`.

A file holds whole log entries: rows of one `log_index` are never split between files, so the
newest file's last index says which entries are published. Its `hour` is the UTC hour of the
`time` of the first row (in key order) of each log index. Rows are sorted by the key (epoch,
log_index, position) within a file; files are published in the order of their rows.

Publishing: the file is written under a hidden name (`.events-...`, readers skip it), fsynced,
renamed to its final name and the directory fsynced, so a reader never sees a partial file and
a published file survives a crash. Compact on disk: dictionary-encoded strings, delta-encoded
integers and times, zstd, one row group per file (see "Store event log" in the README for the
bytes per event).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strongroom.events.schema import (
    HIDDEN_PREFIX,
    SCHEMA,
    file_name,
    parse_file_name,
    partition_dir,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MAX_SECONDS",
    "EventWriter",
    "NotPublishing",
    "PublishedFile",
    "last_published_index",
    "remove_stale_hidden",
    "to_table",
]

DEFAULT_MAX_SECONDS = 10.0
"""A file is published at least this often while events flow."""
DEFAULT_MAX_ROWS = 1_000_000
"""Rows per file at most (whole log entries: a file may exceed it by one entry's rows)."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Arrow bytes buffered in memory before a file is published."""

_KEY_SORT = [("epoch", "ascending"), ("log_index", "ascending"), ("position", "ascending")]
# Integers and times that grow along the key: delta encoding (dictionary encoding would not
# shrink them and is turned off for them).
_DELTA = ("epoch", "log_index", "position", "time", "seq", "published_at")
_DICTIONARY = [f.name for f in SCHEMA if pa.types.is_dictionary(f.type)]
_US_PER_HOUR = 3_600_000_000


class NotPublishing(Exception):
    """The writer's `fence` said no just before a file would have been published (a leader
    whose lease may have expired): the file was not published."""


def last_published_index(root: str | Path, cluster: str) -> int:
    """The last log index of the newest published file of a cluster under `root` (0: none).
    Every hour directory is listed: a leader with a slower clock may have written to an
    earlier hour than its predecessor."""
    base = Path(root) / f"cluster={cluster}"
    last = 0
    try:
        hours = list(base.iterdir())
    except FileNotFoundError:
        return 0
    for hour in hours:
        if not hour.name.startswith("hour=") or not hour.is_dir():
            continue
        for f in hour.iterdir():
            parsed = parse_file_name(f.name)
            if parsed is not None and parsed[1] > last:
                last = parsed[1]
    return last


def remove_stale_hidden(root: str | Path, cluster: str, older_than: float) -> int:
    """Remove files being written (hidden) last touched more than `older_than` seconds ago: left
    by a writer that died mid-file. How many."""
    removed = 0
    now = time.time()
    for f in (Path(root) / f"cluster={cluster}").glob(f"hour=*/{HIDDEN_PREFIX}events-*"):
        try:
            if now - f.stat().st_mtime > older_than:
                f.unlink()
                removed += 1
        except FileNotFoundError:
            pass
    return removed


class PublishedFile:
    """A file the writer published: where, which log indexes, how many rows and bytes."""

    __slots__ = ("bytes", "first_index", "last_index", "path", "rows")

    def __init__(self, path: Path, first_index: int, last_index: int, rows: int, size: int) -> None:
        self.path = path
        self.first_index = first_index
        self.last_index = last_index
        self.rows = rows
        self.bytes = size

    def __repr__(self) -> str:
        return f"PublishedFile({self.path.name}, rows={self.rows}, bytes={self.bytes})"


def to_table(data: pa.Table | pa.RecordBatch | Mapping[str, Sequence[Any]], cluster: str) -> pa.Table:
    """Rows in the event schema: columns cast to their types, missing nullable ones null, a
    missing `cluster` filled with `cluster`. ValueError for an unknown column or a missing
    required one."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        names = data.column_names
        n = data.num_rows
        get: Callable[[str], Any] = data.column
    else:
        names = list(data)
        lengths = {len(v) for v in data.values()}
        if len(lengths) > 1:
            raise ValueError(f"event columns of different lengths: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        get = data.__getitem__
    unknown = set(names) - set(SCHEMA.names)
    if unknown:
        raise ValueError(f"not columns of the event schema: {', '.join(sorted(unknown))}")
    columns = []
    for f in SCHEMA:
        if f.name in names:
            values = get(f.name)
            if not isinstance(values, pa.Array | pa.ChunkedArray):
                plain = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
                values = pa.array(values, type=plain)
            column = values.cast(f.type)
        elif f.name == "cluster":
            column = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([cluster]))
        elif f.nullable:
            column = pa.nulls(n, f.type)
        else:
            raise ValueError(f"event column {f.name!r} is required")
        if not f.nullable and column.null_count:
            raise ValueError(f"event column {f.name!r} holds nulls")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EventWriter:
    """Writes one cluster's events under `root` in the event-log layout (`schema.py`),
    published atomically, rolled by size and by time. Not thread-safe: one owner calls it."""

    def __init__(self, root: str | Path, cluster: str, *, epoch: int = 0,
                 max_seconds: float = DEFAULT_MAX_SECONDS, max_rows: int = DEFAULT_MAX_ROWS,
                 max_bytes: int = DEFAULT_MAX_BYTES, compression_level: int = 1,
                 clock: Callable[[], float] = time.monotonic,
                 fence: Callable[[], bool] | None = None, prefix: str = "events") -> None:
        if max_seconds <= 0 or max_rows < 1 or max_bytes < 1:
            raise ValueError("max_seconds, max_rows and max_bytes must be positive")
        self.root = Path(root)
        self.cluster = cluster
        self.epoch = epoch
        """The writer's epoch: the last part of its files' names (the leader's epoch)."""
        self.max_seconds = max_seconds
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.compression_level = compression_level
        self._clock = clock
        # Asked just before each rename: False stops the publish (NotPublishing).
        self.fence = fence
        # The files' names start with it ("records": the PSTORE report's rows).
        self.prefix = prefix
        self._buffer: list[pa.Table] = []
        self._rows = 0
        self._bytes = 0
        self._hour: int | None = None
        self._since = 0.0
        self.published: list[PublishedFile] = []
        """Every file this writer published, in order."""
        self.published_through = 0
        """The last log index of the newest file this writer published (0: none yet)."""

    # --- writing --------------------------------------------------------------------------------

    def write(self, data: pa.Table | pa.RecordBatch | Mapping[str, Sequence[Any]]) -> list[PublishedFile]:
        """Buffer rows (see the module docstring for the columns); returns the files this call
        published (a roll by size, hour or time)."""
        table = to_table(data, self.cluster)
        out: list[PublishedFile] = []
        if table.num_rows:
            table = _in_key_order(table)
            for hour, run in _hour_runs(table):
                if self._hour is not None and hour != self._hour:
                    out += self.flush()
                self._append(hour, run, out)
        out += self.flush_due()
        return out

    def _append(self, hour: int, run: pa.Table, out: list[PublishedFile]) -> None:
        while run.num_rows:
            room = self.max_rows - self._rows
            if run.num_rows > room:
                cut = _entry_boundary(run, max(room, 1))
                if cut == 0:
                    out += self.flush()
                    continue
                head, run = run.slice(0, cut), run.slice(cut)
            else:
                head, run = run, run.slice(0, 0)
            if not self._buffer:
                self._since = self._clock()
            self._hour = hour
            self._buffer.append(head)
            self._rows += head.num_rows
            self._bytes += head.nbytes
            if self._rows >= self.max_rows or self._bytes >= self.max_bytes:
                out += self.flush()

    def flush_due(self) -> list[PublishedFile]:
        """Publish the buffered rows if the oldest of them were written `max_seconds` ago."""
        if self._buffer and self._clock() - self._since >= self.max_seconds:
            return self.flush()
        return []

    @property
    def buffered_rows(self) -> int:
        """Rows written and not yet published."""
        return self._rows

    def flush(self) -> list[PublishedFile]:
        """Publish everything buffered as one file (nothing when the buffer is empty)."""
        if not self._buffer:
            return []
        table = pa.concat_tables(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        hour = self._hour
        assert hour is not None
        self._buffer, self._rows, self._bytes, self._hour = [], 0, 0, None
        published = self._publish(_in_key_order(table).combine_chunks(), hour)
        self.published.append(published)
        self.published_through = max(self.published_through, published.last_index)
        return [published]

    def _publish(self, table: pa.Table, hour: int) -> PublishedFile:
        indexes = table.column("log_index")
        first, last = pc.min(indexes).as_py(), pc.max(indexes).as_py()
        label = datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m-%dT%H")
        directory = self.root / partition_dir(self.cluster, label)
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            _fsync_dir(directory.parent)
            _fsync_dir(directory.parent.parent)
        name = file_name(first, last, self.epoch, self.prefix)
        hidden = directory / f"{HIDDEN_PREFIX}{name}.{os.getpid()}.tmp"
        with open(hidden, "wb") as f:
            pq.write_table(table.replace_schema_metadata(SCHEMA.metadata), f, compression="zstd",
                           compression_level=self.compression_level, use_dictionary=_DICTIONARY,
                           column_encoding=dict.fromkeys(_DELTA, "DELTA_BINARY_PACKED"),
                           row_group_size=max(table.num_rows, 1), write_statistics=True)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        final = directory / name
        if self.fence is not None and not self.fence():
            hidden.unlink()
            raise NotPublishing(f"{name} not published: the writer may no longer publish")
        os.rename(hidden, final)
        _fsync_dir(directory)
        return PublishedFile(final, first, last, table.num_rows, size)

    def close(self) -> list[PublishedFile]:
        """Publish what is buffered."""
        return self.flush()

    def discard(self) -> int:
        """Drop the buffered rows unpublished (a leader that stopped leading); how many."""
        dropped = self._rows
        self._buffer, self._rows, self._bytes, self._hour = [], 0, 0, None
        return dropped

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_key_order(table: pa.Table) -> pa.Table:
    """`table` sorted by the key. Rows mostly come in key order already (a leader builds them
    entry by entry): then the table is returned as it is, which saves a copy of every column (the
    writer's largest cost)."""
    if table.num_rows < 2:
        return table
    order = pc.sort_indices(table, sort_keys=_KEY_SORT)
    if pc.all(pc.equal(order, pa.array(np.arange(table.num_rows, dtype=np.uint64)))).as_py():
        return table
    return table.take(order)


def _hour_runs(table: pa.Table) -> list[tuple[int, pa.Table]]:
    """A key-sorted table cut into runs of consecutive rows of one hour, the hour of a log
    index being that of its first row."""
    n = table.num_rows
    hours = pc.divide(table.column("time").cast(pa.int64()), _US_PER_HOUR).combine_chunks()
    if n == 1 or pc.min(hours).as_py() == pc.max(hours).as_py():
        return [(hours[0].as_py(), table)]
    indexes = table.column("log_index").combine_chunks()
    starts = pc.not_equal(indexes.slice(1), indexes.slice(0, n - 1))
    starts = pa.concat_arrays([pa.array([True]), starts])
    entry_hours = pc.fill_null_forward(pc.if_else(starts, hours, pa.scalar(None, pa.int64())))
    changes = pc.indices_nonzero(pc.not_equal(entry_hours.slice(1), entry_hours.slice(0, n - 1))).to_pylist()
    bounds = [0, *(i + 1 for i in changes), n]
    return [(entry_hours[a].as_py(), table.slice(a, b - a)) for a, b in itertools.pairwise(bounds)]


def _entry_boundary(table: pa.Table, at: int) -> int:
    """The first row at or after `at` that starts a log index (rows of one index stay in one
    file); the table's length when none does."""
    if at >= table.num_rows:
        return table.num_rows
    indexes = table.column("log_index").combine_chunks()
    before = indexes[at - 1].as_py()
    if indexes[at].as_py() != before:
        return at
    later = pc.index(pc.equal(indexes.slice(at), before), False).as_py()
    return table.num_rows if later < 0 else at + later
