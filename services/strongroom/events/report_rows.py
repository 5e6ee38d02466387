"""`ReportRows`: the PSTORE report's lines as rows of the store event log.

A report (`persistence/pstore_report.py`) is written as fixed-width text and, when the cluster's
event log is on, also as rows of that log, one per line, in files of their own beside the event
files:

    <root>/cluster=<cluster>/hour=<YYYY-MM-DDTHH>/records-<first line:020d>-<last line:020d>-<run>.parquet

Each run of a report (a running member from its start, an unload or a load instance) has an id,
`run`: its start in microseconds with `RECORDS_RUN_BIT` set. It is the rows' `epoch`; the line's
number in the run is their `log_index` (position 0), so their keys are unique among themselves and
never meet an event's (no leader's epoch has that bit). The columns (`schema.EventKind`,
`records_*`): kind the action, time the action's, target the member, reason the record type,
size the record's total length, detail `<identifier> <elements>`.

The files are published as event files are (hidden name, fsync, rename): at least every
`interval` seconds while lines come (checked on each line and by `flush_due`), at `max_rows`, and
at `close`. The member's resume point (`last_published_index`) and the message jobs
(`spark_jobs`) skip them by name: they are the report, not store events.

Thread-safe: a member's storage writes its report lines from the threads that write the store.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pyarrow as pa

from strongroom.events.schema import RECORDS_PREFIX, RECORDS_RUN_BIT, EventKind
from strongroom.events.writer import DEFAULT_MAX_SECONDS, EventWriter, PublishedFile

__all__ = ["ACTION_KINDS", "ReportRows"]

ACTION_KINDS = {"Created": EventKind.RECORDS_CREATED.value, "Deleted": EventKind.RECORDS_DELETED.value,
                "Loaded": EventKind.RECORDS_LOADED.value, "Unloaded": EventKind.RECORDS_UNLOADED.value}
"""The event kind of each report action."""

log = logging.getLogger("strongroom.pstore")

_MAX_ROWS = 100_000


class ReportRows:
    """One report run's lines, written as event-log rows under `root`."""

    def __init__(self, root: str | Path, cluster: str, member: str, interval: float = DEFAULT_MAX_SECONDS,
                 max_rows: int = _MAX_ROWS) -> None:
        self.member = member
        self.run = RECORDS_RUN_BIT | time.time_ns() // 1000
        self._writer = EventWriter(root, cluster, epoch=self.run, max_seconds=interval, max_rows=max_rows,
                                   prefix=RECORDS_PREFIX)
        self._lines = 0
        self._columns: dict[str, list[object]] = {c: [] for c in (
            "log_index", "time", "kind", "reason", "size", "detail")}
        self._lock = threading.Lock()
        self._since = 0.0
        # A quiet member's lines are published once due too, by this thread (stopped by close).
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._publish_when_due, name="report-rows", daemon=True)
        self._timer.start()

    def _publish_when_due(self) -> None:
        while not self._closed.wait(min(1.0, self._writer.max_seconds / 2)):
            self.flush_due()

    def _try_publish(self) -> None:
        """Publish, and on a disk full or a directory gone keep the lines for the next try: the
        report's rows never fail the store write that made the line."""
        try:
            self._publish()
        except OSError as exc:
            log.error("PSTORE report rows: cannot publish to %s: %s", self._writer.root, exc)

    @property
    def published(self) -> list[PublishedFile]:
        """The files published so far, in order."""
        return self._writer.published

    def add(self, at: float, action: str, identifier: str, record_type: str, elements: int, length: int) -> None:
        """One line of the report (`at`: seconds since the epoch)."""
        with self._lock:
            self._lines += 1
            columns = self._columns
            if not columns["log_index"]:
                self._since = time.monotonic()
            columns["log_index"].append(self._lines)
            columns["time"].append(int(at * 1_000_000))
            columns["kind"].append(ACTION_KINDS[action])
            columns["reason"].append(record_type)
            columns["size"].append(length)
            columns["detail"].append(f"{identifier} {elements}")
            if len(columns["log_index"]) >= self._writer.max_rows or self._due():
                self._try_publish()

    def flush_due(self) -> None:
        """Publish the lines held if the oldest waited `interval` seconds (an owner's timer)."""
        with self._lock:
            if self._columns["log_index"] and self._due():
                self._try_publish()

    def _due(self) -> bool:
        """The oldest line held waited the writer's interval."""
        return time.monotonic() - self._since >= self._writer.max_seconds

    def close(self) -> None:
        """Publish what is held; no more timer."""
        self._closed.set()
        with self._lock:
            self._try_publish()

    def _publish(self) -> None:
        columns = self._columns
        n = len(columns["log_index"])
        if not n:
            return
        table = {"epoch": [self.run] * n, "position": [0] * n, "target": [self.member] * n, **columns,
                 "time": pa.array(columns["time"], pa.timestamp("us", tz="UTC"))}
        self._writer.write(table)
        self._writer.flush()
        self._columns = {c: [] for c in columns}
