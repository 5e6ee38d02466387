"""The persistent-store report (docs/store-operations.md, "The store report"): one line per raw
record an instance unloaded or loaded, as a fixed-width text report modelled on EntireX's
PSTORE report, and the record-by-record comparison of two reports.

    Strongroom 0.1.0 PSTORE Report  cluster default member m1  2026-11-24 18:02:11  Page 1
    Identifier                                   Elements Total length Record Type   Date       Time         Action
    db:log:0000000000000017                             5         1148 Publication   2026-11-24 18:02:11.190 Unloaded

Columns: the record's identifier (`database:family:key`: the log index in 16 hex digits, a
printable key as text, any other key as its text prefix, `~` and the rest in hex, a key too long
for the column as a digest), the
messages it carries (elements), its total length (key and value bytes), its record type, the
date and time of the action, and the action. Lines are at most 121 characters (the seed's
record length); a page holds 60 lines under its two heading lines.

Record types, as the seed's, for Strongroom's records:

- `Unit of work`: a log entry whose first operation is a unit of work's (the seed's
  Conversation);
- `Publication`: a log entry that publishes or expires messages; a stored message, its payload
  or a last value (indexes on disk);
- `Subscription`: a log entry that creates, deletes, suspends or acknowledges on a durable; the
  pending messages of a durable (indexes on disk);
- `Cluster`: the cluster's own bookkeeping: no-ops, clock ticks, store settings, maps, producers'
  dedup windows, timers;
- `Master`: the store's management records: promised epoch, commit index, snapshots and restore
  points, the state machine's own records.

The report file (`report_path`): `--report FILE` on the command line, else the environment
variable STRONGROOM_PSTORE_REPORT, else `PSTORE.REPORT.<cluster>.<member>.UNLOAD` (or `.LOAD`)
in the current directory: the seed's names, with the member in them because a Strongroom
cluster migrates one store per member.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from google.protobuf.message import DecodeError

from strongroom.api.v1 import replication_pb2 as rpb

if TYPE_CHECKING:
    from strongroom.events.report_rows import ReportRows

__all__ = ["ENV", "ReportLine", "ReportWriter", "classify", "compare_reports", "read_report", "report_path"]

ENV = "STRONGROOM_PSTORE_REPORT"
CREATED, DELETED, LOADED, UNLOADED = "Created", "Deleted", "Loaded", "Unloaded"
LINE_LENGTH = 121
PAGE_LINES = 60
_ID_WIDTH = 44
_TEXT_KEY = re.compile(rb"[A-Za-z0-9._@-]+")
_TEXT_PREFIX = re.compile(rb"[A-Za-z0-9._@-]*")
_HEADINGS = (f"{'Identifier':<{_ID_WIDTH}} {'Elements':>8} {'Total length':>12} {'Record Type':<13} "
             f"{'Date':<10} {'Time':<12} Action")

UNIT_OF_WORK = "Unit of work"
PUBLICATION = "Publication"
SUBSCRIPTION = "Subscription"
CLUSTER = "Cluster"
MASTER = "Master"

_OP_TYPES = {
    "uow": UNIT_OF_WORK,
    "publish": PUBLICATION, "publish_batch": PUBLICATION, "expire": PUBLICATION,
    "create_durable": SUBSCRIPTION, "delete_durable": SUBSCRIPTION, "suspend_durables": SUBSCRIPTION,
    "durable_use": SUBSCRIPTION, "ack": SUBSCRIPTION, "replay": SUBSCRIPTION, "dead_letter": SUBSCRIPTION,
}
_STATE_TYPES = {"state_msg": PUBLICATION, "state_payload": PUBLICATION, "state_lv": PUBLICATION,
                "state_pending": SUBSCRIPTION, "state_dedup": CLUSTER, "state_timers": CLUSTER}


def _entry_messages(entry: rpb.LogEntry) -> int:
    count = 0
    for op in entry.ops:
        kind = op.WhichOneof("op")
        if kind == "publish":
            count += op.publish.HasField("message")
        elif kind == "publish_batch":
            count += len(op.publish_batch.messages)
        elif kind == "uow":
            count += len(op.uow.messages)
    return count


def classify(family: str, value: bytes) -> tuple[str, int]:
    """(record type, messages carried) of a raw record of `family`."""
    if family == "log":
        entry = rpb.LogEntry()
        try:
            entry.ParseFromString(value)
        except DecodeError:
            return MASTER, 0
        kind = entry.ops[0].WhichOneof("op") if entry.ops else None
        return _OP_TYPES.get(kind or "", CLUSTER), _entry_messages(entry)
    if family == "state_msg":
        return PUBLICATION, 1
    return _STATE_TYPES.get(family, MASTER), 0


def identifier(database: str, family: str, key: bytes) -> str:
    """The record's identifier in a report: unique per (database, family, key)."""
    db = database
    if database.startswith("checkpoints/"):
        db = "cp" + (database.rsplit("/", 1)[-1].lstrip("0") or "0")
    if family == "log" and len(key) == 8:
        text = key.hex().upper()
    elif _TEXT_KEY.fullmatch(key):
        text = key.decode()
    else:
        # A text prefix stays text (`snapshot@~00000000000000C8`); the rest in hex after `~`.
        prefix = _TEXT_PREFIX.match(key).group()  # type: ignore[union-attr]
        text = prefix.decode() + "~" + key[len(prefix):].hex().upper()
    ident = f"{db}:{family}:{text}"
    if len(ident) > _ID_WIDTH:
        ident = f"{db}:{family}:#{hashlib.blake2b(key, digest_size=8).hexdigest().upper()}"
    return ident


def report_path(option: str | None, mode_suffix: str, cluster: str, member: str, directory: Path = Path()) -> Path:
    """Where a report goes: the command line's file, else $STRONGROOM_PSTORE_REPORT, else
    PSTORE.REPORT.<cluster>.<member>.<suffix> (a running member: PSTORE.REPORT, suffix "") in
    `directory` (the current one; a member's: its data directory). `{cluster}` and `{member}` in
    the option or the variable are replaced (one variable for every member `strongroom up`
    starts)."""
    given = option or os.environ.get(ENV)
    if given:
        return Path(given.replace("{cluster}", cluster).replace("{member}", member))
    if not mode_suffix:
        return directory / "PSTORE.REPORT"
    return directory / f"PSTORE.REPORT.{cluster}.{member}.{mode_suffix}"


@dataclass(frozen=True)
class ReportLine:
    """One record of a report."""

    identifier: str
    elements: int
    length: int
    record_type: str
    when: str
    action: str

    @property
    def record(self) -> tuple[str, int, int, str]:
        """What two reports compare: identifier, elements, length and type."""
        return self.identifier, self.elements, self.length, self.record_type


class ReportWriter:
    """A fixed-width report being written (line-buffered: a killed instance leaves what it did)."""

    def __init__(self, path: Path, version: str, cluster: str, member: str, append: bool = False) -> None:
        """A new report (`append`: continued after what the file holds, as a restarted member
        does; its pages count from 1 again under a new title line)."""
        self.path = path
        self.title = f"Strongroom {version} PSTORE Report  cluster {cluster} member {member}"
        self._file: TextIO = open(path, "a" if append else "w", buffering=1)  # noqa: SIM115 - closed by close()
        self._lines = 0
        self._page = 0
        self.rows: ReportRows | None = None
        """The same lines as rows of the cluster's store event log, when it is on
        (`strongroom.events.report_rows`)."""

    def add(self, database: str, family: str, key: bytes, value: bytes, action: str,
            record_type: str | None = None, elements: int | None = None, at: float | None = None,
            length: int | None = None) -> None:
        """One line for a record (its type and messages classified here unless given; its length
        that of key and value unless given)."""
        if record_type is None or elements is None:
            found_type, found_elements = classify(family, value)
            record_type = found_type if record_type is None else record_type
            elements = found_elements if elements is None else elements
        if length is None:
            length = len(key) + len(value)
        now = time.time() if at is None else at
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        if self._lines % PAGE_LINES == 0:
            self._page += 1
            date = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            head = f"{self.title}  {date}  Page {self._page}"
            self._file.write(("\f" if self._page > 1 else "") + head[:LINE_LENGTH] + "\n" + _HEADINGS + "\n")
        ident = identifier(database, family, key)
        line = f"{ident:<{_ID_WIDTH}} {elements:>8} {length:>12} {record_type:<13} {stamp:<23} {action}"
        self._file.write(line[:LINE_LENGTH] + "\n")
        self._lines += 1
        if self.rows is not None:
            self.rows.add(now, action, ident, record_type, elements, length)

    def created(self, family: str, key: bytes, value: bytes) -> None:
        """A running member stored a record of its live database."""
        self.add("db", family, key, value, CREATED)

    def deleted(self, family: str, key: bytes, value: bytes) -> None:
        """A running member deleted a record of its live database: no elements, no length, as
        the seed's Deleted lines (the type from the value it had)."""
        self.add("db", family, key, value, DELETED, elements=0, length=0)

    def close(self) -> None:
        self._file.close()
        if self.rows is not None:
            self.rows.close()


def read_report(path: Path) -> list[ReportLine]:
    """The record lines of a report (headings and page breaks skipped). ValueError with
    file:line on a line that is not a report line."""
    out = []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n").lstrip("\f")
            if not line or line.startswith("Strongroom ") or line == _HEADINGS:
                continue
            try:
                ident = line[:_ID_WIDTH].rstrip()
                elements = int(line[_ID_WIDTH + 1:_ID_WIDTH + 9])
                length = int(line[_ID_WIDTH + 10:_ID_WIDTH + 22])
                rtype = line[_ID_WIDTH + 23:_ID_WIDTH + 36].rstrip()
                when = line[_ID_WIDTH + 37:_ID_WIDTH + 60]
                action = line[_ID_WIDTH + 61:].strip()
            except ValueError:
                raise ValueError(f"{path}:{number}: not a line of a PSTORE report: {line[:60]!r}") from None
            if not ident or not action:
                raise ValueError(f"{path}:{number}: not a line of a PSTORE report: {line[:60]!r}")
            out.append(ReportLine(ident, elements, length, rtype, when, action))
    return out


@dataclass
class Comparison:
    """Two reports compared record by record (the last line of each identifier on each side)."""

    records: tuple[int, int]
    only_first: list[ReportLine]
    only_second: list[ReportLine]
    different: list[tuple[ReportLine, ReportLine]]

    @property
    def equal(self) -> bool:
        return not (self.only_first or self.only_second or self.different)


def compare_reports(first: Iterable[ReportLine], second: Iterable[ReportLine]) -> Comparison:
    """Compare identifiers, elements, lengths and record types (not dates, times, actions)."""
    a = {line.identifier: line for line in first}
    b = {line.identifier: line for line in second}
    return Comparison((len(a), len(b)), [line for ident, line in a.items() if ident not in b],
                      [line for ident, line in b.items() if ident not in a],
                      [(line, b[ident]) for ident, line in a.items() if ident in b and line.record != b[ident].record])
