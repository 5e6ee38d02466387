"""backlog: for every store and durable, at an as-of time and as a per-minute series, messages
pending, bytes pending, the oldest pending message's age, messages delivered and unacknowledged,
and messages waiting for redelivery.

    spark-submit spark_jobs/backlog.py --events DIR [--as-of T] [--out DIR] [--json]

How a durable's backlog is read from the events (`strongroom.events.schema`):

- a message is pending for a durable from its `message_pending` row until the durable's
  `message_acked`, `message_dead_lettered` or `message_skipped` row (a replay moved it past the
  message), the durable's first `durable_deleted` (or `durable_expired`) row after it (the
  durable released everything it held), or the message's `message_expired` or
  `message_discarded` row (which remove it from every durable);
- `unacked`: pending messages delivered (a `message_delivered` row) in the current leader's epoch
  and not settled: status's `unacked` (in flight to subscribers, leader state);
- `redelivery_waiting`: pending messages delivered by an earlier leader and not yet again by the
  current one (delivery counts are leader state: a new leader delivers them again, from 1);
- the oldest pending message's age: as-of time minus its publish time.

Column names follow `strongroom status --json` (`DurableStatus`: pending_messages, pending_bytes,
unacked; `StoreStatus`: messages, bytes), so `spark_jobs.compare` can set them side by side.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a file by spark-submit: the repository root is the package's home
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.events import KIND, EventLog
from spark_jobs.output import Result, iso_time, micros, rows_of, run_job

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DURABLE_KEY", "backlog", "intervals", "main", "time_bounds"]

DURABLE_KEY = ("cluster", "store", "destination", "durable")
"""A durable: its store, the destination it was created on, its name ("" for a queue's)."""
_KIND_GONE = ("DURABLE_DELETED", "DURABLE_EXPIRED")
"""A durable's end: it released every message it held."""
MINUTE = 60_000_000
NEVER = 1 << 62
"""An open interval's end, in microseconds (far past any event)."""


@dataclass(frozen=True)
class Intervals:
    """A durable's pending messages and the store's stored messages, as time intervals."""

    durables: DataFrame
    """Per durable and message: start, end (null: still pending), size, pub, delivered_from
    (its first delivery; when a later leader delivered it again, when that leader began),
    waiting_from (when an epoch began after the newest one that delivered it)."""
    stores: DataFrame
    """Per stored message: start, end (null: still stored), size."""
    known: DataFrame
    """Every durable the log names (created or pending), deleted ones left out."""
    lifecycle: DataFrame
    """Per durable created or deleted: when it was last created, last deleted, every deletion."""
    rows: DataFrame
    """The cached rows `durables` and `stores` are read from (a row per message and durable)."""


def _kind(*names: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("kind").isin([KIND[n] for n in names])


def intervals(events: DataFrame) -> Intervals:
    """Pending intervals of each durable's messages, and stored intervals of each message.

    The message events are shuffled once, by message (store, seq), and aggregated once per
    message and durable (a message's own events: the group without a durable). Everything after
    that runs within those partitions: the per-message values are the minima and maxima of its
    groups, the store rows a grouping of the same cached rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = events.sparkSession
    msg = ["cluster", "store", "seq"]
    dur = [*DURABLE_KEY, "seq"]
    stored, pending, delivered = _kind("MESSAGE_STORED"), _kind("MESSAGE_PENDING"), _kind("MESSAGE_DELIVERED")
    settle = _kind("MESSAGE_ACKED", "MESSAGE_DEAD_LETTERED", "MESSAGE_SKIPPED")
    removal = _kind("MESSAGE_EXPIRED", "MESSAGE_DISCARDED")
    about = events.filter(F.col("seq") > 0).repartition(int(spark.conf.get("spark.sql.shuffle.partitions")), *msg)
    groups = about.groupBy(*dur).agg(
        F.min(F.when(stored, F.col("t"))).alias("g_stored_at"), F.max(F.when(stored, F.col("size"))).alias("g_stored_size"),
        F.min(F.when(stored, F.coalesce("pub", "t"))).alias("g_stored_pub"),
        F.min(F.when(removal, F.col("t"))).alias("g_removed_at"),
        F.min(F.when(pending, F.col("t"))).alias("start"),
        F.min(F.when(settle, F.col("t"))).alias("settled_at"),
        F.max(F.when(pending, F.col("size"))).alias("p_size"),
        F.min(F.when(pending, F.col("pub"))).alias("p_pub"),
        # The first and newest epochs that delivered it, and its first delivery (plain longs:
        # a struct here would make Spark sort every row instead of hashing).
        F.min(F.when(delivered, F.col("epoch"))).alias("first_epoch"),
        F.max(F.when(delivered, F.col("epoch"))).alias("last_epoch"),
        F.min(F.when(delivered, F.col("t"))).alias("first_delivery"),
    )
    # A message's own values over all its groups (its rows with and without a durable), on every
    # group: a window within the partitions the groups are in already (a self-join would read
    # and shuffle the events a second time).
    whole = Window.partitionBy(*msg)
    rows = groups.select(
        *dur, "start", "settled_at", "p_size", "p_pub", "first_epoch", "last_epoch", "first_delivery",
        F.min("g_stored_at").over(whole).alias("stored_at"), F.max("g_stored_size").over(whole).alias("stored_size"),
        F.min("g_stored_pub").over(whole).alias("stored_pub"), F.min("g_removed_at").over(whole).alias("removed_at"))
    epochs = _epoch_starts(events)
    gone = _KIND_GONE
    # Tiny (a row per durable created or deleted), used twice.
    lifecycle = events.filter(_kind("DURABLE_CREATED", *gone)).groupBy(*DURABLE_KEY).agg(
        F.max(F.when(_kind("DURABLE_CREATED"), F.col("t"))).alias("made_at"),
        F.max(F.when(_kind(*gone), F.col("t"))).alias("gone_at"),
        F.collect_list(F.when(_kind(*gone), F.col("t"))).alias("gone_times")).persist()
    # Every message, with a row per durable that had it pending (and one for its own events).
    d = (rows
         .join(F.broadcast(epochs), (F.col("cluster") == epochs["e_cluster"]) & (F.col("last_epoch") == epochs["e_epoch"]), "left")
         .join(F.broadcast(lifecycle.select(*DURABLE_KEY, "gone_times")), list(DURABLE_KEY), "left"))
    # A durable deleted after the message became pending released it then (its first deletion
    # after the start: a durable of the same name created again later is another one).
    # (Higher-order functions run interpreted: only for the few durables ever deleted.)
    released = F.when(F.col("gone_times").isNotNull(),
                      F.array_min(F.filter("gone_times", lambda x: x >= F.col("start"))))
    end = F.least(F.col("settled_at"), F.col("removed_at"), released)
    rows = d.select(
        *dur, "start", end.alias("end"),
        F.coalesce("p_size", "stored_size", F.lit(0)).alias("size"),
        F.coalesce("p_pub", "stored_pub", "start").alias("pub"),
        # Unacked since its first delivery; delivered again by a later leader: since that
        # leader began (its own first delivery of it is a moment later).
        F.when(F.col("first_epoch") == F.col("last_epoch"), F.col("first_delivery"))
        .otherwise(F.greatest("began", "first_delivery")).alias("delivered_from"),
        # Waiting only if still pending when the next leader began.
        F.when(end.isNull() | (F.col("next_start") < end), F.col("next_start")).alias("waiting_from"),
        "stored_at", "stored_size", "removed_at").persist()
    durables = rows.filter(F.col("durable").isNotNull() & F.col("start").isNotNull()).drop(
        "stored_at", "stored_size", "removed_at")
    # Store level: a message is stored until removed, or until the last durable that had it
    # pending settled (a message no durable ever had pending stays: retention). Grouped within
    # the partitions the rows are in already (by message).
    has = F.col("durable").isNotNull() & F.col("start").isNotNull()
    stores = rows.filter(F.col("stored_at").isNotNull()).groupBy(*msg).agg(
        F.min("stored_at").alias("start"), F.min("removed_at").alias("removed_at"),
        F.count(F.when(has, 1)).alias("n"), F.count(F.when(has, F.col("end"))).alias("n_closed"),
        F.max(F.when(has, F.col("end"))).alias("last_end"), F.max("stored_size").alias("stored_size"),
    ).select(*msg, "start", F.least("removed_at", F.when(F.col("n") == F.col("n_closed"), F.col("last_end"))).alias("end"),
             F.coalesce("stored_size", F.lit(0)).alias("size"))
    named = lifecycle.select(*DURABLE_KEY).union(durables.select(*DURABLE_KEY)).distinct()
    known = (named.join(lifecycle, list(DURABLE_KEY), "left")
             .filter(F.col("gone_at").isNull() | (F.col("made_at") > F.col("gone_at"))).select(*DURABLE_KEY))
    return Intervals(durables, stores.persist(), known.persist(), lifecycle, rows)


def _epoch_starts(events: DataFrame) -> DataFrame:
    """Per cluster and epoch, when it and the next epoch began (null for the newest): a tiny table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    starts = events.groupBy("cluster", "epoch").agg(F.min("t").alias("began"))
    w = Window.partitionBy("cluster").orderBy("epoch")
    return starts.select(F.col("cluster").alias("e_cluster"), F.col("epoch").alias("e_epoch"), "began",
                         F.lead("began").over(w).alias("next_start"))


def _as_of(iv: Intervals, as_of: int) -> tuple[DataFrame, DataFrame]:
    """Durable and store rows at `as_of` (the intervals were built from events up to it)."""
    from pyspark.sql import functions as F

    open_ = iv.durables.filter(F.col("end").isNull())
    waiting = F.col("waiting_from").isNotNull()
    agg = open_.groupBy(*DURABLE_KEY).agg(
        F.count(F.lit(1)).alias("pending_messages"), F.sum("size").alias("pending_bytes"),
        F.min("pub").alias("oldest_published"),
        F.count(F.when(F.col("delivered_from").isNotNull() & ~waiting, 1)).alias("unacked"),
        F.count(F.when(waiting, 1)).alias("redelivery_waiting"))
    durables = iv.known.join(agg, list(DURABLE_KEY), "left").na.fill(
        0, ["pending_messages", "pending_bytes", "unacked", "redelivery_waiting"]).select(
        *DURABLE_KEY, "pending_messages", "pending_bytes", "unacked", "redelivery_waiting", "oldest_published",
        ((F.lit(as_of) - F.col("oldest_published")) / 1e6).alias("oldest_age_s"))
    stores = iv.stores.filter(F.col("end").isNull()).groupBy("cluster", "store").agg(
        F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"), F.min("start").alias("oldest_stored"))
    all_stores = iv.known.select("cluster", "store").union(iv.stores.select("cluster", "store")).distinct()
    stores = all_stores.join(stores, ["cluster", "store"], "left").na.fill(0, ["messages", "bytes"]).select(
        "cluster", "store", "messages", "bytes", ((F.lit(as_of) - F.col("oldest_stored")) / 1e6).alias("oldest_age_s"))
    return durables, stores


def _series(iv: Intervals, first: int, as_of: int) -> tuple[DataFrame, DataFrame]:
    """Per durable (and per store) and minute, the state at the end of the minute (the last,
    partial minute: at `as_of`).

    Intervals are first counted by the minutes they start and end in (and, for unacked and
    waiting, the minutes those begin and end): a few rows per durable and minute, whatever the
    message count. Each minute then sums the groups open at its end: an interval that starts in
    minute a and ends in minute b is open at the end of minutes a..b-1."""
    from pyspark.sql import functions as F

    spark = iv.durables.sparkSession
    m0, m1 = first // MINUTE, as_of // MINUTE
    minutes = F.broadcast(spark.range(m0, m1 + 1).select(F.col("id").alias("minute")))

    def minute(c: Column | str) -> Column:
        return F.coalesce(F.floor((F.col(c) if isinstance(c, str) else c) / MINUTE), F.lit(NEVER))

    groups = iv.durables.groupBy(
        *DURABLE_KEY, minute("start").alias("sm"), minute("end").alias("em"), minute("delivered_from").alias("dm"),
        minute(F.least("end", "waiting_from")).alias("um"), minute("waiting_from").alias("wm"),
    ).agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"), F.min("pub").alias("p"))
    m = F.col("minute")
    is_pending = (F.col("sm") <= m) & (m < F.col("em"))
    is_unacked = (F.col("dm") <= m) & (m < F.col("um"))
    is_waiting = (F.col("wm") <= m) & (m < F.col("em"))
    at = F.least(F.lit(as_of), (m + 1) * MINUTE)
    grid = iv.known.crossJoin(minutes)
    counted = groups.join(minutes, is_pending | is_unacked | is_waiting).groupBy(*DURABLE_KEY, "minute").agg(
        F.sum(F.when(is_pending, F.col("n")).otherwise(0)).alias("pending_messages"),
        F.sum(F.when(is_pending, F.col("b")).otherwise(0)).alias("pending_bytes"),
        F.sum(F.when(is_unacked, F.col("n")).otherwise(0)).alias("unacked"),
        F.sum(F.when(is_waiting, F.col("n")).otherwise(0)).alias("redelivery_waiting"),
        F.min(F.when(is_pending, F.col("p"))).alias("oldest_pub"))
    durables = (grid.join(counted, [*DURABLE_KEY, "minute"], "left")
                .na.fill(0, ["pending_messages", "pending_bytes", "unacked", "redelivery_waiting"])
                .select(*DURABLE_KEY, (m * MINUTE).alias("minute"), "pending_messages", "pending_bytes", "unacked",
                        "redelivery_waiting", ((at - F.col("oldest_pub")) / 1e6).alias("oldest_age_s")))
    sgroups = iv.stores.groupBy("cluster", "store", minute("start").alias("sm"), minute("end").alias("em")).agg(
        F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"))
    scounted = sgroups.join(minutes, is_pending).groupBy("cluster", "store", "minute").agg(
        F.sum("n").alias("messages"), F.sum("b").alias("bytes"))
    sgrid = iv.known.select("cluster", "store").union(iv.stores.select("cluster", "store")).distinct().crossJoin(minutes)
    stores = (sgrid.join(scounted, ["cluster", "store", "minute"], "left").na.fill(0, ["messages", "bytes"])
              .select("cluster", "store", (m * MINUTE).alias("minute"), "messages", "bytes"))
    return durables, stores


def time_bounds(events: DataFrame) -> tuple[int, int]:
    """The first and newest event's time (duplicates change neither)."""
    from pyspark.sql import functions as F

    bounds = events.agg(F.min("t"), F.max("t")).first()
    assert bounds is not None and bounds[0] is not None
    return int(bounds[0]), int(bounds[1])


def backlog(spark: SparkSession, events: DataFrame, log: EventLog, as_of: datetime | None) -> Result:
    """The job: as-of rows and per-minute series, collected (they are small).

    It needs no deduplication: every interval is built from minima and maxima of the events of
    one message and durable, which an event seen twice does not change."""
    from pyspark.sql import functions as F

    first, newest = time_bounds(events)
    at = micros(as_of) if as_of is not None else newest
    upto = events.filter(F.col("t") <= at)
    iv = intervals(upto)
    durables, stores = _as_of(iv, at)
    d_series, s_series = _series(iv, first, max(at, first))
    order = list(DURABLE_KEY)
    tables = {
        "durables": rows_of(durables.orderBy(*order)),
        "stores": rows_of(stores.orderBy("cluster", "store")),
        "durable_series": rows_of(d_series.orderBy(*order, "minute")),
        "store_series": rows_of(s_series.orderBy("cluster", "store", "minute")),
    }
    for frame in (iv.rows, iv.stores, iv.known, iv.lifecycle):
        frame.unpersist()
    as_of_rows = [{**r, "oldest_published": iso_time(r["oldest_published"])} for r in tables["durables"]]
    return Result(job="backlog", as_of=at, first=first, newest=newest, log=log, tables=tables,
                  summary={"durables": as_of_rows, "stores": tables["stores"]})


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (the same options as `strongroom metrics backlog`)."""
    return run_job("backlog", {"backlog": backlog}, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
