"""The store event log's schema and file layout: the one contract between the members that
write events and the jobs (`spark_jobs/`, `strongroom metrics`) that read them.

Every change a store goes through is one row. Rows are written as Parquet files:

    <root>/cluster=<cluster>/hour=<YYYY-MM-DDTHH>/events-<first index:020d>-<last index:020d>-<epoch>.parquet

- `root` is the event-log directory of the cluster (the realm or the member names it);
- `hour` is the UTC hour of the `time` of each log entry's first row: a file holds whole log
  entries (the rows of one log index never span two files) of one hour;
- a file is published atomically: written under a name starting with `.` (which readers skip)
  and renamed to its final name once complete, so a reader never sees half a file.

The key of an event is (cluster, log_index, position): the log entry whose apply made the
change and the event's position among that entry's events. Entries are applied in the same order
on every member, so every member would derive the same rows from the same entry; the leader
writes them, and a new leader continues after the last `log_index` of the newest published
file. Events that do not come from a log entry (deliveries, which only the leader's dispatcher
sees) carry the applied index at the time and positions from `NON_LOG_POSITION` up, with the
leader's `epoch`, so their key (cluster, epoch, log_index, position) is unique too. The `epoch`
of a log entry's events is the entry's own epoch (every member derives the same key); the
`epoch` in a file's name is that of the leader that wrote it.

Schema versions: `SCHEMA_VERSION` is stored in each file's metadata (`strongroom.events.version`).
A reader refuses files of another version by name. Adding a kind or a nullable column is not a
new version; renaming, removing or changing the meaning of a column is.
"""

from __future__ import annotations

import re
from enum import Enum

import pyarrow as pa

__all__ = [
    "HIDDEN_PREFIX",
    "KEY_COLUMNS",
    "NON_LOG_POSITION",
    "SCHEMA",
    "SCHEMA_VERSION",
    "VERSION_KEY",
    "EventKind",
    "RECORDS_PREFIX",
    "RECORDS_RUN_BIT",
    "file_name",
    "is_records_file",
    "parse_file_name",
    "partition_dir",
    "records_file_name",
]

SCHEMA_VERSION = 1
VERSION_KEY = b"strongroom.events.version"
"""Parquet key-value metadata holding the schema version of a file."""

NON_LOG_POSITION = 1 << 31
"""Positions from here up are events not made by a log entry's apply (deliveries)."""

HIDDEN_PREFIX = "."
"""Files being written start with this; readers skip them."""

KEY_COLUMNS = ("cluster", "epoch", "log_index", "position")


class EventKind(str, Enum):
    """What happened. Later services add kinds (not a new schema version)."""

    MESSAGE_STORED = "message_stored"
    """A message was stored (seq, size, published_at, producer; destination: where it was sent;
    durable null: which durables want it follows as `message_pending` rows)."""
    MESSAGE_PENDING = "message_pending"
    """A stored message became pending for a durable (durable set; one row per durable that
    wants it, after its `message_stored` row (size set), and again for each message a replay makes
    pending that was not; for a last-value durable: it now holds the message in its slot,
    replacing the previous one)."""
    MESSAGE_SKIPPED = "message_skipped"
    """A replay repositioned a durable past a message that was pending on it: it left the durable
    unacknowledged (durable set). A replay's newly pending messages are `message_pending` rows;
    messages pending before and after it get no row."""
    MESSAGE_DELIVERED = "message_delivered"
    """The leader sent a message to a subscriber of a durable (deliveries: the count so far)."""
    MESSAGE_ACKED = "message_acked"
    """A durable's subscriber acknowledged a message (durable set)."""
    MESSAGE_EXPIRED = "message_expired"
    """A message's time-to-live or retention ended; it left the store and every durable."""
    MESSAGE_DISCARDED = "message_discarded"
    """A store limit with `discard_oldest` removed the message (reason: the limit)."""
    MESSAGE_DEAD_LETTERED = "message_dead_lettered"
    """A message left a durable past its redelivery limit or terminated by its subscriber
    (target: the dead-letter destination, empty when discarded; reason: why)."""
    DURABLE_CREATED = "durable_created"
    DURABLE_DELETED = "durable_deleted"
    DURABLE_EXPIRED = "durable_expired"
    DURABLE_SUSPENDED = "durable_suspended"
    """A realm change left the durable unreachable: it takes no new messages, keeps its backlog."""
    DURABLE_RESUMED = "durable_resumed"
    # Kinds of later services (units of work write uow_state; the others are reserved names of
    # services still to come: readers must accept them).
    MESSAGE_FORWARDED = "message_forwarded"
    """Routing: a message was forwarded to another cluster (target: the cluster)."""
    MESSAGE_SHIPPED = "message_shipped"
    """DR: a log entry reached a standby site (target: the site)."""
    UOW_STATE = "uow_state"
    """Units of work: a unit of work changed state, one row per UOW a UowOp changed (detail:
    `<uow id> <status> <messages>`, space-separated: the status it has now, `DELETED` once its
    status lifetime ended, and how many messages it holds; reason: the operation, lower case:
    `open`, `commit`, `deliver`, `receiver_commit`, `receiver_backout`, `release`, `timeout`,
    `abandon`, `discard`, `sender_backout`, `sender_cancel`, `receiver_cancel`, `forget`; store
    and destination: where it was when the operation applied; size: its messages' bytes; target:
    the dead-letter queue a backout moved it to). A refused operation or a user status alone
    changes no state: no row."""
    RECORDS_CREATED = "records_created"
    """The PSTORE report (docs/store-operations.md, "The store report"): a member created a
    record of its persistent store. One row per line of the report, in files of their own
    (`records_file_name`): epoch the report's run (`RECORDS_RUN_BIT` set), log_index the line's
    number in the run, position 0, time the action's, target the member, reason the record type,
    size the record's total length, detail `<identifier> <elements>` (the messages it carries)."""
    RECORDS_DELETED = "records_deleted"
    """The PSTORE report: a member deleted a record (as `records_created`; size and elements 0)."""
    RECORDS_LOADED = "records_loaded"
    """The PSTORE report: a migration's load instance wrote a record (as `records_created`)."""
    RECORDS_UNLOADED = "records_unloaded"
    """The PSTORE report: a migration's unload instance read and sent a record."""


_TS = pa.timestamp("us", tz="UTC")
_DICT = pa.dictionary(pa.int32(), pa.string())

SCHEMA = pa.schema(
    [
        pa.field("cluster", _DICT, nullable=False),
        pa.field("epoch", pa.uint64(), nullable=False),
        pa.field("log_index", pa.uint64(), nullable=False),
        pa.field("position", pa.uint32(), nullable=False),
        pa.field("kind", _DICT, nullable=False),
        # The leader's clock when the change was decided (a publish: its publish time).
        pa.field("time", _TS, nullable=False),
        pa.field("store", _DICT),
        # The destination or endpoint (a durable's: the one it was created on).
        pa.field("destination", _DICT),
        # The durable's name ("" for a queue's own durable); null for store-wide events.
        pa.field("durable", _DICT),
        # The message's store sequence (0: not about one message).
        pa.field("seq", pa.uint64()),
        # The message's size in bytes (a unit of work: its messages' bytes).
        pa.field("size", pa.uint32()),
        pa.field("published_at", _TS),
        pa.field("producer", _DICT),
        # Deliveries of the message to the durable so far (delivered, dead-lettered).
        pa.field("deliveries", pa.uint32()),
        # Why (discarded: the limit; dead-lettered: limit or terminated; deleted: by whom; a unit
        # of work's state: the operation).
        pa.field("reason", _DICT),
        # Where to (dead letters, a unit of work moved to a dead-letter queue: the destination;
        # later: a cluster or a DR site).
        pa.field("target", _DICT),
        # Kind-specific text (uow_state: `<uow id> <status> <messages>`).
        pa.field("detail", _DICT),
    ],
    metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()},
)


def partition_dir(cluster: str, hour: str) -> str:
    """The directory (relative to the event-log root) of a cluster's files of one UTC hour
    (`YYYY-MM-DDTHH`)."""
    return f"cluster={cluster}/hour={hour}"


def file_name(first_index: int, last_index: int, epoch: int, prefix: str = "events") -> str:
    """The published name of a file holding the events of log entries first..last, written by
    the leader of `epoch` (`prefix` "records": the PSTORE report's rows, `records_file_name`)."""
    return f"{prefix}-{first_index:020d}-{last_index:020d}-{epoch}.parquet"


RECORDS_PREFIX = "records"
RECORDS_RUN_BIT = 1 << 63
"""Set in the `epoch` of every row of a PSTORE report: no leader's epoch has it, so the rows' keys
never meet an event's."""


def records_file_name(first_line: int, last_line: int, run: int) -> str:
    """The name of a file of PSTORE report rows: lines first..last of the report run `run` (the
    run's epoch). Not an `events-` name: the member's resume point and the message jobs skip it."""
    return file_name(first_line, last_line, run, RECORDS_PREFIX)


def is_records_file(name: str) -> bool:
    """A published file of PSTORE report rows."""
    return name.startswith(RECORDS_PREFIX + "-") and name.endswith(".parquet")


_FILE_NAME = re.compile(r"events-(\d{20})-(\d{20})-(\d+)\.parquet")


def parse_file_name(name: str) -> tuple[int, int, int] | None:
    """(first index, last index, epoch) of a published file's name; None for any other name
    (hidden files being written included)."""
    m = _FILE_NAME.fullmatch(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None
