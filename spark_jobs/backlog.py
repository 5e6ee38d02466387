"""backlog: for every store and durable, at an as-of time and as a per-minute series, messages
pending, bytes pending, the oldest pending message's age, messages delivered and unacknowledged,
and messages waiting for redelivery.

    spark-submit spark_jobs/backlog.py --events DIR [--as-of T] [--out DIR] [--json]

How a durable's backlog is read from the events (`strongroom.events.schema`):

- a message is pending for a durable from its `message_pending` row until the durable's
  `message_acked` or `message_dead_lettered` row, or the message's `message_expired` or
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
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a file by spark-submit: the repository root is the package's home
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.events import KIND, EventLog
from spark_jobs.output import Result, iso_time, micros, run_job

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DURABLE_KEY", "backlog", "intervals", "main"]

DURABLE_KEY = ("cluster", "store", "destination", "durable")
"""A durable: its store, the destination it was created on, its name ("" for a queue's)."""
MINUTE = 60_000_000
NEVER = 1 << 62
"""An open interval's end, in microseconds (far past any event)."""


@dataclass(frozen=True)
class Intervals:
    """A durable's pending messages and the store's stored messages, as time intervals."""

    durables: DataFrame
    """Per durable and message: start, end (null: still pending), size, pub, delivered_from
    (first delivery of the newest epoch that delivered it), waiting_from (when an epoch began
    after its last delivery)."""
    stores: DataFrame
    """Per stored message: start, end (null: still stored), size."""
    known: DataFrame
    """Every durable the log names (created or pending), deleted ones left out."""


def _kind(*names: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("kind").isin([KIND[n] for n in names])


def intervals(events: DataFrame) -> Intervals:
    """Pending intervals of each durable's messages, and stored intervals of each message."""
    from pyspark.sql import functions as F

    msg_key = ["cluster", "store", "seq"]
    stored = events.filter(_kind("MESSAGE_STORED")).groupBy(*msg_key).agg(
        F.min("t").alias("stored_at"), F.max("size").alias("stored_size"), F.min(F.coalesce("pub", "t")).alias("stored_pub"))
    removed = events.filter(_kind("MESSAGE_EXPIRED", "MESSAGE_DISCARDED")).groupBy(*msg_key).agg(
        F.min("t").alias("removed_at"))
    pending = _kind("MESSAGE_PENDING")
    settle = _kind("MESSAGE_ACKED", "MESSAGE_DEAD_LETTERED")
    delivered = _kind("MESSAGE_DELIVERED")
    per = events.filter(_kind("MESSAGE_PENDING", "MESSAGE_ACKED", "MESSAGE_DEAD_LETTERED", "MESSAGE_DELIVERED")) \
        .groupBy(*DURABLE_KEY, "seq").agg(
            F.min(F.when(pending, F.col("t"))).alias("start"),
            F.min(F.when(settle, F.col("t"))).alias("settled_at"),
            F.max(F.when(pending, F.col("size"))).alias("p_size"),
            F.min(F.when(pending, F.col("pub"))).alias("p_pub"),
            F.max(F.when(delivered, F.col("epoch"))).alias("last_epoch"),
            F.max(F.when(delivered, F.col("deliveries"))).alias("max_deliveries"),
            # First delivery per epoch is kept as (epoch, t) pairs; the newest epoch's is what counts.
            F.max(F.when(delivered, F.struct(F.col("epoch").alias("e"), (-F.col("t")).alias("nt")))).alias("newest_delivery"),
        ).filter(F.col("start").isNotNull())
    epochs = _epoch_starts(events)
    d = (per.join(removed, msg_key, "left").join(stored, msg_key, "left")
         .join(F.broadcast(epochs), (per["cluster"] == epochs["e_cluster"]) & (per["last_epoch"] == epochs["e_epoch"]), "left"))
    end = F.least(F.col("settled_at"), F.col("removed_at"))
    durables = d.select(
        *DURABLE_KEY, "seq", "start", end.alias("end"),
        F.coalesce("p_size", "stored_size", F.lit(0)).alias("size"),
        F.coalesce("p_pub", "stored_pub", "start").alias("pub"),
        (-F.col("newest_delivery.nt")).alias("delivered_from"),
        F.col("next_start").alias("waiting_from"), "max_deliveries")
    # Store level: a message is stored until removed, or until the last durable that had it
    # pending settled (a message no durable ever had pending stays: retention).
    per_msg = durables.groupBy(*msg_key).agg(
        F.count(F.lit(1)).alias("n"), F.count("end").alias("n_closed"), F.max("end").alias("last_end"))
    stores = stored.join(removed, msg_key, "left").join(per_msg, msg_key, "left").select(
        *msg_key, F.col("stored_at").alias("start"),
        F.least("removed_at", F.when(F.col("n") == F.col("n_closed"), F.col("last_end"))).alias("end"),
        F.coalesce("stored_size", F.lit(0)).alias("size"))
    named = events.filter(_kind("DURABLE_CREATED", "MESSAGE_PENDING")).select(*DURABLE_KEY).distinct()
    gone = events.filter(_kind("DURABLE_DELETED", "DURABLE_EXPIRED")).groupBy(*DURABLE_KEY).agg(F.max("t").alias("gone_at"))
    made = events.filter(_kind("DURABLE_CREATED")).groupBy(*DURABLE_KEY).agg(F.max("t").alias("made_at"))
    known = (named.join(gone, list(DURABLE_KEY), "left").join(made, list(DURABLE_KEY), "left")
             .filter(F.col("gone_at").isNull() | (F.col("made_at") > F.col("gone_at"))).select(*DURABLE_KEY))
    return Intervals(durables.persist(), stores.persist(), known.persist())


def _epoch_starts(events: DataFrame) -> DataFrame:
    """Per cluster and epoch, when the next epoch began (null for the newest): a tiny table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    starts = events.groupBy("cluster", "epoch").agg(F.min("t").alias("began"))
    w = Window.partitionBy("cluster").orderBy("epoch")
    return starts.select(F.col("cluster").alias("e_cluster"), F.col("epoch").alias("e_epoch"),
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
    durables = iv.known.join(agg, list(DURABLE_KEY), "full").na.fill(
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
    partial minute: at `as_of`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = iv.durables.sparkSession
    m0, m1 = first // MINUTE, as_of // MINUTE
    minutes = spark.range(m0, m1 + 1).select(F.col("id").alias("minute"))
    minute = lambda c: F.floor(F.col(c) / MINUTE)  # noqa: E731
    d = iv.durables
    stop_unacked = F.least("end", "waiting_from")
    deltas = (
        d.select(*DURABLE_KEY, minute("start").alias("minute"), F.lit(1).alias("dp"), F.col("size").alias("db"),
                 F.lit(0).alias("du"), F.lit(0).alias("dw"))
        .union(d.filter(F.col("end").isNotNull()).select(
            *DURABLE_KEY, minute("end"), F.lit(-1), -F.col("size"), F.lit(0), F.lit(0)))
        .union(d.filter(F.col("delivered_from").isNotNull()).select(
            *DURABLE_KEY, minute("delivered_from"), F.lit(0), F.lit(0), F.lit(1), F.lit(0)))
        .union(d.filter(F.col("delivered_from").isNotNull() & stop_unacked.isNotNull()).select(
            *DURABLE_KEY, F.floor(stop_unacked / MINUTE), F.lit(0), F.lit(0), F.lit(-1), F.lit(0)))
        .union(d.filter(F.col("waiting_from").isNotNull()).select(
            *DURABLE_KEY, minute("waiting_from"), F.lit(0), F.lit(0), F.lit(0), F.lit(1)))
        .union(d.filter(F.col("waiting_from").isNotNull() & F.col("end").isNotNull()).select(
            *DURABLE_KEY, minute("end"), F.lit(0), F.lit(0), F.lit(0), F.lit(-1)))
    ).groupBy(*DURABLE_KEY, "minute").agg(*(F.sum(c).alias(c) for c in ("dp", "db", "du", "dw")))
    grid = iv.known.union(d.select(*DURABLE_KEY)).distinct().crossJoin(minutes)
    w = Window.partitionBy(*DURABLE_KEY).orderBy("minute").rowsBetween(Window.unboundedPreceding, 0)
    oldest = _oldest(d, list(DURABLE_KEY), m1)
    at = F.least(F.lit(as_of), (F.col("minute") + 1) * MINUTE)
    durables = (grid.join(deltas, [*DURABLE_KEY, "minute"], "left").na.fill(0, ["dp", "db", "du", "dw"])
                .select(*DURABLE_KEY, "minute",
                        F.sum("dp").over(w).alias("pending_messages"), F.sum("db").over(w).alias("pending_bytes"),
                        F.sum("du").over(w).alias("unacked"), F.sum("dw").over(w).alias("redelivery_waiting"))
                .join(oldest, [*DURABLE_KEY, "minute"], "left")
                .select(*DURABLE_KEY, (F.col("minute") * MINUTE).alias("minute"), "pending_messages", "pending_bytes",
                        "unacked", "redelivery_waiting", ((at - F.col("oldest_pub")) / 1e6).alias("oldest_age_s")))
    s = iv.stores
    sdeltas = (s.select("cluster", "store", minute("start").alias("minute"), F.lit(1).alias("dm"), F.col("size").alias("db"))
               .union(s.filter(F.col("end").isNotNull()).select("cluster", "store", minute("end"), F.lit(-1), -F.col("size")))
               ).groupBy("cluster", "store", "minute").agg(F.sum("dm").alias("dm"), F.sum("db").alias("db"))
    sw = Window.partitionBy("cluster", "store").orderBy("minute").rowsBetween(Window.unboundedPreceding, 0)
    sgrid = iv.known.select("cluster", "store").union(s.select("cluster", "store")).distinct().crossJoin(minutes)
    stores = (sgrid.join(sdeltas, ["cluster", "store", "minute"], "left").na.fill(0, ["dm", "db"])
              .select("cluster", "store", (F.col("minute") * MINUTE).alias("minute"),
                      F.sum("dm").over(sw).alias("messages"), F.sum("db").over(sw).alias("bytes")))
    return durables, stores


def _oldest(d: DataFrame, key: list[str], last_minute: int) -> DataFrame:
    """Per key and minute, the publish time of the oldest message pending at the minute's end.

    A message is the oldest pending one from max(its start, the latest end of every message that
    started before it) until its own end: those spans do not overlap, so each minute falls in
    at most one of them and the spans are exploded to the minutes they cover."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*key).orderBy("start", "seq").rowsBetween(Window.unboundedPreceding, -1)
    end = F.coalesce(F.col("end"), F.lit(NEVER))
    spans = d.select(*key, "start", "seq", "pub", end.alias("e")).select(
        *key, "pub", "e", F.greatest(F.col("start"), F.coalesce(F.max("e").over(w), F.lit(0))).alias("b"))
    # Minute m holds the state after its events: a span [b, e) covers minutes floor(b)..floor(e)-1.
    first_m = F.floor(F.col("b") / MINUTE)
    last_m = F.least(F.floor(F.col("e") / MINUTE) - 1, F.lit(last_minute))
    return (spans.filter(first_m <= last_m)
            .select(*key, "pub", F.explode(F.sequence(first_m, last_m)).alias("minute"))
            .groupBy(*key, "minute").agg(F.min("pub").alias("oldest_pub")))


def backlog(spark: SparkSession, events: DataFrame, log: EventLog, as_of: datetime | None) -> Result:
    """The job: as-of rows and per-minute series, collected (they are small)."""
    from pyspark.sql import functions as F

    bounds = events.agg(F.min("t"), F.max("t")).first()
    assert bounds is not None
    first, newest = int(bounds[0]), int(bounds[1])
    at = micros(as_of) if as_of is not None else newest
    upto = events.filter(F.col("t") <= at)
    iv = intervals(upto)
    durables, stores = _as_of(iv, at)
    d_series, s_series = _series(iv, first, max(at, first))
    order = list(DURABLE_KEY)
    tables = {
        "durables": _rows(durables.orderBy(*order)),
        "stores": _rows(stores.orderBy("cluster", "store")),
        "durable_series": _rows(d_series.orderBy(*order, "minute")),
        "store_series": _rows(s_series.orderBy("cluster", "store", "minute")),
    }
    for frame in (iv.durables, iv.stores, iv.known):
        frame.unpersist()
    as_of_rows = [{**r, "oldest_published": iso_time(r["oldest_published"])} for r in tables["durables"]]
    return Result(job="backlog", as_of=at, first=first, newest=newest, log=log, tables=tables,
                  summary={"durables": as_of_rows, "stores": tables["stores"]})


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (the same options as `strongroom metrics backlog`)."""
    return run_job("backlog", backlog, argv)


if __name__ == "__main__":
    sys.exit(main())
