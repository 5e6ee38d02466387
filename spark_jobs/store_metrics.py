"""store_metrics: per store and per durable, per minute: publish and ack rates, publish → ack
latency p50/p95/p99, expired / discarded / dead-lettered counts, the message size distribution and
redelivery counts.

    spark-submit spark_jobs/store_metrics.py --events DIR [--as-of T] [--out DIR] [--json]

Per store and minute (`stores`): messages published (`message_stored`) and their bytes, size
min / p50 / p95 / p99 / max, acks (every durable's), expired and discarded messages. Per durable and
minute (`durables`): messages made pending for it, acks, ack latency (ack time minus the message's
publish time) p50 / p95 / p99 over the acks of that minute, dead letters, deliveries and
redeliveries (deliveries with a count of 2 or more). Rates are per second over the part of the
minute the log covers (all of it but for the first and the last minute). Counts up to the as-of
time. `summary.json` has the same over the whole log (latency percentiles over
every ack) and a power-of-two histogram of message sizes per store.

Room for the later services: forwarding (`message_forwarded`) and DR (`message_shipped`) become
further per-store columns here, computed the same way from their kinds (their lag: the event's
time minus the message's publish time).
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a file by spark-submit: the repository root is the package's home
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.backlog import DURABLE_KEY, MINUTE
from spark_jobs.events import KIND, EventLog, deduplicated
from spark_jobs.output import Result, micros, rows_of, run_job

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["main", "store_metrics"]

PERCENTILES = (0.5, 0.95, 0.99)
ACCURACY = 2000
"""percentile_approx's accuracy: a percentile's rank is off by at most 1/2000 of the values."""


def _is(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("kind") == KIND[name]


def _count(name: str, extra: Column | None = None) -> Column:
    from pyspark.sql import functions as F

    cond = _is(name) if extra is None else _is(name) & extra
    return F.count(F.when(cond, 1))


def _store_aggregates() -> list[Column]:
    from pyspark.sql import functions as F

    stored = _is("MESSAGE_STORED")
    size = F.when(stored, F.col("size"))
    return [
        _count("MESSAGE_STORED").alias("published"),
        F.coalesce(F.sum(size), F.lit(0)).alias("published_bytes"),
        F.min(size).alias("size_min"),
        F.percentile_approx(size, list(PERCENTILES), ACCURACY).alias("size_pct"),
        F.max(size).alias("size_max"),
        _count("MESSAGE_ACKED").alias("acked"),
        _count("MESSAGE_EXPIRED").alias("expired"),
        _count("MESSAGE_DISCARDED").alias("discarded"),
        _count("MESSAGE_DEAD_LETTERED").alias("dead_lettered"),
    ]


def _durable_aggregates(latency: Column) -> list[Column]:
    from pyspark.sql import functions as F

    return [
        _count("MESSAGE_PENDING").alias("pending_added"),
        _count("MESSAGE_ACKED").alias("acked"),
        F.percentile_approx(F.when(_is("MESSAGE_ACKED"), latency), list(PERCENTILES), ACCURACY).alias("latency_pct"),
        _count("MESSAGE_DEAD_LETTERED").alias("dead_lettered"),
        _count("MESSAGE_DELIVERED").alias("delivered"),
        _count("MESSAGE_DELIVERED", F.col("deliveries") >= 2).alias("redelivered"),
    ]


def _flatten(df: DataFrame, column: str, prefix: str, scale: float) -> DataFrame:
    from pyspark.sql import functions as F

    names = [f"{prefix}_p{int(p * 100)}" for p in PERCENTILES]
    cols = [(F.col(column)[i] / scale).alias(n) for i, n in enumerate(names)]
    return df.select(*[c for c in df.columns if c != column], *cols)


def store_metrics(spark: SparkSession, events: DataFrame, log: EventLog, as_of: datetime | None) -> Result:
    """The job: per-minute tables and whole-log totals, collected (they are small).

    Two aggregations over the events, each with grouping sets: per minute and over the whole
    log (and, for stores, per size bucket) in one pass."""
    from pyspark.sql import functions as F

    # Percentiles are object aggregates: past 128 groups per task Spark would sort every row
    # instead of hashing (minutes x stores or durables are a few thousand groups).
    spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", str(1 << 20))
    bounds = events.agg(F.min("t"), F.max("t"), F.count(F.when(_is("MESSAGE_ACKED") & F.col("pub").isNull(), 1))).first()
    assert bounds is not None and bounds[0] is not None
    first, newest, acks_without_pub = int(bounds[0]), int(bounds[1]), int(bounds[2])
    at = micros(as_of) if as_of is not None else newest
    # Counts: each event once.
    ev = deduplicated(events, log).filter(F.col("t") <= at).withColumn(
        "minute", F.floor(F.col("t") / MINUTE) * MINUTE)
    store_ev = ev.filter(F.col("kind").isin([KIND[k] for k in (
        "MESSAGE_STORED", "MESSAGE_ACKED", "MESSAGE_EXPIRED", "MESSAGE_DISCARDED", "MESSAGE_DEAD_LETTERED")]))
    skey = ["cluster", "store"]
    per_store = _flatten(store_ev.groupingSets([[*skey, "minute"], skey], *skey, "minute")
                         .agg(*_store_aggregates(), F.grouping_id().alias("level")), "size_pct", "size", 1)
    histogram = (store_ev.filter(_is("MESSAGE_STORED") & (F.col("size") > 0))
                 .groupBy(*skey, F.pow(F.lit(2), F.ceil(F.log2("size"))).cast("long").alias("up_to")).count())
    # The publish time of an acked message: on its ack row, else from its message_stored row.
    durable_ev = ev.filter(F.col("durable").isNotNull() & F.col("kind").isin([KIND[k] for k in (
        "MESSAGE_PENDING", "MESSAGE_ACKED", "MESSAGE_DEAD_LETTERED", "MESSAGE_DELIVERED")]))
    # (Only when some ack lacks it: the join shuffles every stored message.)
    if acks_without_pub:
        no_pub = durable_ev.filter(_is("MESSAGE_ACKED") & F.col("pub").isNull()).drop("pub")
        pubs = ev.filter(_is("MESSAGE_STORED")).select("cluster", "store", "seq", "pub")
        durable_ev = durable_ev.filter(~(_is("MESSAGE_ACKED") & F.col("pub").isNull())).unionByName(
            no_pub.join(pubs, ["cluster", "store", "seq"], "left"))
    latency = F.col("t") - F.col("pub")
    dkey = list(DURABLE_KEY)
    per_durable = _flatten(durable_ev.groupingSets([[*dkey, "minute"], dkey], *dkey, "minute")
                           .agg(*_durable_aggregates(latency), F.grouping_id().alias("level")),
                           "latency_pct", "latency_ms", 1000.0)
    store_rows = rows_of(per_store.orderBy(*skey, "minute"))
    durable_rows = rows_of(per_durable.orderBy(*dkey, "minute"))
    buckets = rows_of(histogram.orderBy(*skey, "up_to"))
    span_s = max((at - first) / 1e6, 1e-6)
    # grouping_id: a bit per grouping column left out (stores: cluster, store, minute).
    def covered(minute: int) -> float:
        """Seconds of the minute the log covers (the first and the last minute: part of it)."""
        return max((min(minute + MINUTE, at) - max(minute, first)) / 1e6, 1e-6)

    minutes = [_rated({k: v for k, v in r.items() if k != "level"}, covered(r["minute"]))
               for r in store_rows if r["level"] == 0]
    stores = [_rated({k: v for k, v in r.items() if k not in ("level", "minute")}, span_s)
              for r in store_rows if r["level"] == 1]
    for s in stores:
        s["size_histogram"] = {f"<={r['up_to']}": r["count"] for r in buckets
                               if (r["cluster"], r["store"]) == (s["cluster"], s["store"])}
    durable_minutes = [_rated({k: v for k, v in r.items() if k != "level"}, covered(r["minute"]))
                       for r in durable_rows if r["level"] == 0]
    durables = [_rated({k: v for k, v in r.items() if k not in ("level", "minute")}, span_s)
                for r in durable_rows if r["level"] == 1]
    return Result(job="store_metrics", as_of=at, first=first, newest=newest, log=log,
                  tables={"stores": minutes, "durables": durable_minutes},
                  summary={"span_seconds": round(span_s, 3), "stores": stores, "durables": durables})


def _rated(row: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Rates per second over `seconds` (a minute's rows: the part of it the log covers)."""
    if "published" in row:
        row["publish_rate"] = row["published"] / seconds
    row["ack_rate"] = row["acked"] / seconds
    return row


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (the same options as `strongroom metrics store`)."""
    return run_job("store_metrics", {"store_metrics": store_metrics}, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
