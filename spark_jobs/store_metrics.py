"""store_metrics: per store and per durable, per minute: publish and ack rates, publish → ack
latency p50/p95/p99, expired / discarded / dead-lettered counts, the message size distribution and
redelivery counts.

    spark-submit spark_jobs/store_metrics.py --events DIR [--as-of T] [--out DIR] [--json]

Per store and minute (`stores`): messages published (`message_stored`) and their bytes, size
min / p50 / p95 / p99 / max, acks (every durable's), expired and discarded messages. Per durable and
minute (`durables`): messages made pending for it, acks, ack latency (ack time minus the message's
publish time) p50 / p95 / p99 over the acks of that minute, dead letters, deliveries and
redeliveries (deliveries with a count of 2 or more). Rates are per second over the minute. Counts
up to the as-of time. `summary.json` has the same over the whole log (latency percentiles over
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
from spark_jobs.events import KIND, EventLog
from spark_jobs.output import Result, micros, run_job

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["main", "store_metrics"]

PERCENTILES = (0.5, 0.95, 0.99)


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
        F.percentile_approx(size, list(PERCENTILES)).alias("size_pct"),
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
        F.percentile_approx(F.when(_is("MESSAGE_ACKED"), latency), list(PERCENTILES)).alias("latency_pct"),
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
    """The job: per-minute tables and whole-log totals, collected (they are small)."""
    from pyspark.sql import functions as F

    bounds = events.agg(F.min("t"), F.max("t")).first()
    assert bounds is not None
    first, newest = int(bounds[0]), int(bounds[1])
    at = micros(as_of) if as_of is not None else newest
    ev = events.filter(F.col("t") <= at)
    # The publish time of an acked message: on its ack row, else from its message_stored row.
    pubs = ev.filter(_is("MESSAGE_STORED")).select("cluster", "store", "seq", F.col("pub").alias("stored_pub"))
    durable_ev = (ev.filter(F.col("durable").isNotNull())
                  .join(pubs, ["cluster", "store", "seq"], "left")
                  .withColumn("latency_us", F.col("t") - F.coalesce("pub", "stored_pub")))
    latency = F.col("latency_us")
    minute = (F.floor(F.col("t") / MINUTE) * MINUTE).alias("minute")
    per_store = _flatten(ev.groupBy("cluster", "store", minute).agg(*_store_aggregates()), "size_pct", "size", 1)
    per_durable = _flatten(durable_ev.groupBy(*DURABLE_KEY, minute).agg(*_durable_aggregates(latency)),
                           "latency_pct", "latency_ms", 1000.0)
    per_store = per_store.withColumn("publish_rate", F.col("published") / 60).withColumn("ack_rate", F.col("acked") / 60)
    per_durable = per_durable.withColumn("ack_rate", F.col("acked") / 60)
    store_totals = _flatten(ev.groupBy("cluster", "store").agg(*_store_aggregates()), "size_pct", "size", 1)
    durable_totals = _flatten(durable_ev.groupBy(*DURABLE_KEY).agg(*_durable_aggregates(latency)),
                              "latency_pct", "latency_ms", 1000.0)
    histogram = (ev.filter(_is("MESSAGE_STORED") & (F.col("size") > 0))
                 .groupBy("cluster", "store", F.pow(F.lit(2), F.ceil(F.log2("size"))).cast("long").alias("up_to"))
                 .count())
    span_s = max((at - first) / 1e6, 1e-6)
    stores = [_with_rates(r, span_s) for r in _rows(store_totals.orderBy("cluster", "store"))]
    hist: dict[tuple[str, str], dict[str, int]] = {}
    for r in _rows(histogram.orderBy("up_to")):
        hist.setdefault((r["cluster"], r["store"]), {})[f"<={r['up_to']}"] = r["count"]
    for s in stores:
        s["size_histogram"] = hist.get((s["cluster"], s["store"]), {})
    durables = [_with_rates(r, span_s) for r in _rows(durable_totals.orderBy(*DURABLE_KEY))]
    return Result(
        job="store_metrics", as_of=at, first=first, newest=newest, log=log,
        tables={
            "stores": _rows(per_store.orderBy("cluster", "store", "minute")),
            "durables": _rows(per_durable.orderBy(*DURABLE_KEY, "minute")),
        },
        summary={"span_seconds": round(span_s, 3), "stores": stores, "durables": durables})


def _with_rates(row: dict[str, Any], span_s: float) -> dict[str, Any]:
    if "published" in row:
        row["publish_rate"] = row["published"] / span_s
    row["ack_rate"] = row["acked"] / span_s
    return row


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (the same options as `strongroom metrics store`)."""
    return run_job("store_metrics", store_metrics, argv)


if __name__ == "__main__":
    sys.exit(main())
