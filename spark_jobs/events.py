"""Reading a store event log: finding its files, refusing bad ones by name, the Spark session, and
the events as one deduplicated DataFrame. Shared by every job.

The layout and the columns are `strongroom.events.schema`'s. A file is refused (`BadEventLog`,
exit status 2 from the command line) when it is not Parquet or is cut short (its footer does not
read), when its schema version is not ours, or when a column the jobs read is missing. All of
that is checked on every file's footer before Spark starts, so a bad file stops the job before
anything is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from strongroom.events.schema import (
    HIDDEN_PREFIX,
    KEY_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    VERSION_KEY,
    EventKind,
    is_records_file,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BadEventLog", "EventLog", "deduplicated", "find_event_log", "load_events", "spark_session"]

NEEDED_COLUMNS = ("cluster", "epoch", "log_index", "position", "kind", "time", "store", "destination",
                  "durable", "seq", "size", "published_at", "deliveries")
"""The columns the jobs read (a file may have more: later nullable columns)."""
LOG4J = Path(__file__).with_name("log4j2.properties")
"""Spark's own logging: errors only, so the terminal shows the job's lines."""


class BadEventLog(Exception):
    """The events directory cannot be read as a store event log; the message names the file."""


@dataclass(frozen=True)
class EventLog:
    """The published files of an event-log directory, checked."""

    root: Path
    files: list[Path]
    rows: int
    """Rows in all files (before deduplication)."""
    bytes: int
    """Bytes of the files on disk."""
    shared: list[tuple[str | None, int, int]] | None = None
    """Log index ranges (cluster, first, last) that more than one file holds rows of: the only
    rows that can be duplicates. None: unknown (a file without statistics), any row can be."""


def find_event_log(root: Path | str) -> EventLog:
    """Every published event file under `root` (hidden files being written and the PSTORE
    report's `records-` files are skipped), each one's footer read and its schema version checked. Raises `BadEventLog` naming the problem."""
    root = Path(root)
    if not root.is_dir():
        raise BadEventLog(f"events directory {root} does not exist" if not root.exists()
                          else f"events directory {root} is not a directory")
    # The PSTORE report's rows (`records-*.parquet`) sit beside the events and are not events.
    files = sorted(Path(d) / f for d, dirs, names in os.walk(root)
                   for f in names if f.endswith(".parquet") and not f.startswith((HIDDEN_PREFIX, "_"))
                   and not is_records_file(f)
                   and not any(part.startswith(HIDDEN_PREFIX) for part in Path(d).relative_to(root).parts))
    if not files:
        raise BadEventLog(f"events directory {root} holds no event files (*.parquet under cluster=*/hour=*/)")
    rows = size = 0
    spans: list[tuple[str | None, int, int]] | None = []
    for f in files:
        try:
            meta = pq.read_metadata(f)
            schema = pq.read_schema(f)
        except Exception as exc:  # pyarrow says ArrowInvalid/OSError for a cut or foreign file
            raise BadEventLog(f"{f}: not a readable Parquet file (truncated or corrupt?): {exc}") from None
        version = (meta.metadata or {}).get(VERSION_KEY)
        if version is None:
            raise BadEventLog(f"{f}: no schema version ({VERSION_KEY.decode()} missing): not a Strongroom event file")
        if version != str(SCHEMA_VERSION).encode():
            raise BadEventLog(f"{f}: schema version {version.decode(errors='replace')}, this reader reads "
                              f"version {SCHEMA_VERSION}")
        missing = [c for c in NEEDED_COLUMNS if c not in schema.names]
        if missing:
            raise BadEventLog(f"{f}: missing column(s) {', '.join(missing)}")
        rows += meta.num_rows
        size += f.stat().st_size
        span = _index_span(f, meta, schema.names.index("log_index"))
        if spans is not None and meta.num_rows:
            spans = None if span is None else [*spans, span]
    if rows == 0:
        raise BadEventLog(f"events directory {root} holds no events ({len(files)} empty file(s), e.g. {files[0]})")
    return EventLog(root, files, rows, size, None if spans is None else _shared(spans))


def _index_span(path: Path, meta: pq.FileMetaData, column: int) -> tuple[str | None, int, int] | None:
    """(cluster, lowest, highest log index) of a file from its footer statistics; the cluster
    from its `cluster=` directory (None: not in the layout). None without statistics."""
    low = high = None
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if low is None or high is None:
        return None
    parent = path.parent.parent.name
    return (parent.partition("=")[2] if parent.startswith("cluster=") else None, int(low), int(high))


def _shared(spans: list[tuple[str | None, int, int]]) -> list[tuple[str | None, int, int]]:
    """The index ranges two or more files overlap in (per cluster; a file outside the layout
    counts for every cluster)."""
    out: list[tuple[str | None, int, int]] = []
    clusters = {c for c, _, _ in spans}
    if None in clusters:  # a file outside the layout: its rows could be of any cluster
        spans, clusters = [(None, lo, hi) for _, lo, hi in spans], {None}
    for cluster in clusters:
        mine = sorted((lo, hi) for c, lo, hi in spans if c == cluster)
        reach = None
        for lo, hi in mine:
            if reach is not None and lo <= reach:
                out.append((cluster, lo, min(hi, reach)))
            reach = hi if reach is None else max(reach, hi)
    return sorted(set(out), key=lambda s: (s[0] or "", s[1], s[2]))



def spark_session(app: str, master: str | None = None) -> SparkSession:
    """The running Spark session, or a new one: local mode on every core unless `master` (or
    spark-submit's --master) says otherwise; UTC; quiet."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    # Under spark-submit the JVM started first and its --master and --conf hold; here only the
    # settings of a JVM this process starts itself (local mode, the CLI and the tests).
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        for key, value in {
            "spark.master": master or "local[*]",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "8",
            "spark.driver.memory": os.environ.get("STRONGROOM_SPARK_DRIVER_MEMORY", "3g"),
            "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{LOG4J}",
        }.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load_events(spark: SparkSession, log: EventLog) -> DataFrame:
    """The events as read, with times in microseconds since the epoch (`t`, `pub`) and wide
    integers as longs. A row that more than one file holds (a new leader wrote an entry's events
    again) appears as often: a job that counts rows takes `deduplicated(...)`."""
    from pyspark.sql import functions as F

    paths = [str(p) for p in log.files]
    # recursiveFileLookup: no partition discovery (cluster is a column of the files already).
    raw = spark.read.option("recursiveFileLookup", "true").schema(_spark_schema()).parquet(*paths)
    return raw.select(
        F.col("cluster"), F.col("epoch").cast("long").alias("epoch"), F.col("log_index").cast("long").alias("log_index"),
        F.col("position").cast("long").alias("position"), F.col("kind"),
        F.unix_micros("time").alias("t"), F.col("store"), F.col("destination"), F.col("durable"),
        F.col("seq").cast("long").alias("seq"), F.col("size").cast("long").alias("size"),
        F.unix_micros("published_at").alias("pub"), F.col("deliveries").cast("long").alias("deliveries"),
    )


MAX_SHARED_INDEXES = 2_000_000
"""Past this many shared log indexes, deduplicate every row instead of the shared ones only."""


def deduplicated(events: DataFrame, log: EventLog) -> DataFrame:
    """Each event once by its key (cluster, epoch, log_index, position).

    Only rows whose log index two files both cover can be duplicates, and the footers say which
    those are (`EventLog.shared`: mostly single indexes where consecutive files meet). Those
    rows alone are shuffled to drop duplicates; the rest pass as they are."""
    from pyspark.sql import functions as F

    shared = log.shared
    if shared is not None and not shared:
        return events
    if shared is None or sum(hi - lo + 1 for _, lo, hi in shared) > MAX_SHARED_INDEXES:
        return events.dropDuplicates(list(KEY_COLUMNS))
    spark = events.sparkSession
    pairs = spark.createDataFrame([(c or "", i) for c, lo, hi in shared for i in range(lo, hi + 1)],
                                  "s_cluster string, s_index long").distinct()
    match = (F.col("log_index") == F.col("s_index")) & (
        (F.col("cluster") == F.col("s_cluster")) | (F.col("s_cluster") == ""))
    alone = events.join(F.broadcast(pairs), match, "left_anti")
    shared_rows = events.join(F.broadcast(pairs), match, "left_semi").dropDuplicates(list(KEY_COLUMNS))
    return alone.unionByName(shared_rows)


def _spark_schema() -> str:
    """The Spark DDL of the columns read (unsigned Parquet integers read as wider types)."""
    kinds = {"cluster": "string", "epoch": "decimal(20,0)", "log_index": "decimal(20,0)", "position": "bigint",
             "kind": "string", "time": "timestamp", "store": "string", "destination": "string", "durable": "string",
             "seq": "decimal(20,0)", "size": "bigint", "published_at": "timestamp", "deliveries": "bigint"}
    assert set(kinds) == set(NEEDED_COLUMNS) and set(kinds) <= set(SCHEMA.names)
    return ", ".join(f"{c} {kinds[c]}" for c in NEEDED_COLUMNS)


KIND = {k.name: k.value for k in EventKind}
"""Kind names as they appear in the files."""
