"""Metrics benchmark: the Spark jobs over event logs of 1 and 10 million events, beside DuckDB
answering the same two questions over the same files (issue 19, Scale).

For each size:

1. An event log is written with `strongroom.events.synthetic` through the members' writer
   (`EventWriter`) into a temporary directory; its size on disk per event is measured.
   The write time is reported but is not the measurement.
2. Each job runs as its own process, `python -m spark_jobs.<job> --events DIR --out DIR --json`,
   and then both as one, `python -m spark_jobs.all` (what a user runs to get both answers: one
   JVM, both jobs' outputs written): Spark in local mode on every core, the JVM's start
   included in every wall time. "Spark, both" is that one process.
3. DuckDB (in a process of its own, start included) answers the same questions: the backlog of
   every durable as of the newest event (pending messages and bytes, oldest pending age, unacked,
   waiting for redelivery), and per store and durable per minute the publish / ack / expired /
   discarded / dead-letter counts, sizes and ack latency percentiles, each event once by its key.
   Its backlog is checked against Spark's from `spark_jobs.all` (pending messages and bytes per
   durable must agree).

Run: `strongroom bench metrics [--sizes 1000000,10000000] [--json]`; progress on stderr, the
table on stdout, the JSON in bench/results/metrics/<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results" / "metrics"
JOBS = ("backlog", "store_metrics")
BOTH = "all"
"""The module running both jobs in one Spark application (spark_jobs.all)."""
TARGET_SECONDS = 60.0
TARGET_BYTES_PER_EVENT = 40.0

DUCKDB_BACKLOG = """
WITH ev AS (
  SELECT cluster, epoch, kind, epoch_us("time") AS t, store, destination, durable, seq, size,
         epoch_us(published_at) AS pub
  FROM read_parquet({files}, hive_partitioning = false)),
per AS (
  SELECT cluster, store, destination, durable, seq,
         min(t) FILTER (kind = 'message_pending') AS start,
         min(t) FILTER (kind IN ('message_acked', 'message_dead_lettered')) AS settled,
         max(size) FILTER (kind = 'message_pending') AS size,
         min(pub) FILTER (kind = 'message_pending') AS pub,
         max(epoch) FILTER (kind = 'message_delivered') AS last_epoch
  FROM ev WHERE durable IS NOT NULL AND seq > 0 GROUP BY ALL),
removed AS (
  SELECT cluster, store, seq, min(t) AS removed FROM ev
  WHERE kind IN ('message_expired', 'message_discarded') GROUP BY ALL),
newest AS (SELECT cluster, max(epoch) AS epoch, max(t) AS t FROM ev GROUP BY cluster)
SELECT p.cluster, p.store, p.destination, p.durable, count(*) AS pending_messages,
       sum(p.size) AS pending_bytes, (max(n.t) - min(p.pub)) / 1e6 AS oldest_age_s,
       count(*) FILTER (p.last_epoch = n.epoch) AS unacked,
       count(*) FILTER (p.last_epoch < n.epoch) AS redelivery_waiting
FROM per p JOIN newest n USING (cluster) LEFT JOIN removed r USING (cluster, store, seq)
WHERE p.start IS NOT NULL AND p.settled IS NULL AND r.removed IS NULL
GROUP BY ALL ORDER BY ALL
"""

DUCKDB_STORE = """
CREATE TEMP TABLE ev AS
  SELECT DISTINCT ON (cluster, epoch, log_index, position)
         cluster, kind, epoch_us("time") AS t, epoch_us("time") // 60000000 * 60000000 AS minute, store,
         destination, durable, seq, size, epoch_us(published_at) AS pub, deliveries
  FROM read_parquet({files}, hive_partitioning = false);
SELECT cluster, store, minute, count(*) FILTER (kind = 'message_stored') AS published,
       count(*) FILTER (kind = 'message_acked') AS acked,
       count(*) FILTER (kind = 'message_expired') AS expired,
       count(*) FILTER (kind = 'message_discarded') AS discarded,
       count(*) FILTER (kind = 'message_dead_lettered') AS dead_lettered,
       approx_quantile(size, [0.5, 0.95, 0.99]) FILTER (kind = 'message_stored') AS size_pct
FROM ev GROUP BY ALL ORDER BY ALL;
SELECT cluster, store, destination, durable, minute, count(*) FILTER (kind = 'message_acked') AS acked,
       approx_quantile((t - pub) / 1000.0, [0.5, 0.95, 0.99]) FILTER (kind = 'message_acked') AS latency_ms,
       count(*) FILTER (kind = 'message_dead_lettered') AS dead_lettered,
       count(*) FILTER (kind = 'message_delivered') AS delivered,
       count(*) FILTER (kind = 'message_delivered' AND deliveries >= 2) AS redelivered
FROM ev WHERE durable IS NOT NULL GROUP BY ALL ORDER BY ALL;
"""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _duckdb(question: str, events: Path) -> list[dict[str, Any]]:
    """Run in a child process: one question over the event log, the last statement's rows."""
    import duckdb

    files = sorted(str(p) for p in events.rglob("events-*.parquet") if not p.name.startswith("."))
    sql = (DUCKDB_BACKLOG if question == "backlog" else DUCKDB_STORE).format(files=files)
    con = duckdb.connect()
    statements = [s for s in sql.split(";") if s.strip()]
    for s in statements[:-1]:
        con.execute(s)
    if question != "backlog":
        # The store question is two result sets (stores, durables); both are computed.
        rows = []
        for s in statements[1:]:
            cur = con.execute(s)
            cols = [d[0] for d in cur.description]
            rows += [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        return rows
    cur = con.execute(statements[-1])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout


def run_size(events_n: int, work: Path, seed: int) -> dict[str, Any]:
    """Write one event log and answer both questions with Spark and with DuckDB."""
    from strongroom.events.synthetic import Scenario, write_event_log

    root = work / f"events-{events_n}"
    _say(f"metrics bench: writing {events_n:,} events")
    started = time.monotonic()
    summary = write_event_log(root, Scenario(events=events_n, seed=seed))
    write_s = time.monotonic() - started
    disk = sum(f.stat().st_size for f in summary.files)
    row: dict[str, Any] = {
        "events": summary.events, "files": len(summary.files), "bytes_on_disk": disk,
        "bytes_per_event": disk / summary.events,
        "write_seconds": round(write_s, 2), "span": [summary.first_time.isoformat(), summary.last_time.isoformat()],
        "spark": {}, "duckdb": {}}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    spark_backlog: list[dict[str, Any]] = []
    for job in (*JOBS, BOTH):
        _say(f"metrics bench: {events_n:,} events, Spark {job}")
        seconds, out = _timed([sys.executable, "-m", f"spark_jobs.{job}", "--events", str(root), "--out",
                               str(work / job), "--json"], env)
        row["spark"][job] = {"seconds": round(seconds, 2), "events_per_second": round(summary.events / seconds)}
        if job == BOTH:
            spark_backlog = json.loads(out)["backlog"]["durables"]
    for job, question in (("backlog", "backlog"), ("store_metrics", "store")):
        _say(f"metrics bench: {events_n:,} events, DuckDB {job}")
        code = (f"import json, sys; from pathlib import Path; from bench.metrics import _duckdb; "
                f"print(json.dumps(_duckdb({question!r}, Path({str(root)!r})), default=str))")
        seconds, out = _timed([sys.executable, "-c", code], {**env, "PYTHONPATH": str(Path(__file__).parents[1])})
        row["duckdb"][job] = {"seconds": round(seconds, 2), "events_per_second": round(summary.events / seconds)}
        if job == "backlog":
            theirs = {(r["store"], r["destination"], r["durable"]): (r["pending_messages"], r["pending_bytes"])
                      for r in json.loads(out)}
            ours = {(r["store"], r["destination"], r["durable"]): (r["pending_messages"], r["pending_bytes"])
                    for r in spark_backlog if r["pending_messages"]}
            row["backlog_agrees"] = theirs == ours
    row["spark"]["both_seconds"] = row["spark"][BOTH]["seconds"]
    row["duckdb"]["both_seconds"] = round(sum(row["duckdb"][j]["seconds"] for j in JOBS), 2)
    shutil.rmtree(root, ignore_errors=True)
    return row


def _machine() -> dict[str, Any]:
    import duckdb
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "pyspark": pyspark.__version__, "duckdb": duckdb.__version__, "java": java[0] if java else "",
            "load_average_at_start": list(os.getloadavg())}


def format_report(doc: dict[str, Any]) -> str:
    """The results as a table."""
    lines = ["events      files  bytes/event  Spark backlog  Spark store  Spark both  DuckDB backlog  DuckDB store"
             "  agree"]
    for r in doc["sizes"]:
        s, d = r["spark"], r["duckdb"]
        lines.append(f"{r['events']:>10,}  {r['files']:>5}  {r['bytes_per_event']:>11.1f}  "
                     f"{s['backlog']['seconds']:>11.1f} s  {s['store_metrics']['seconds']:>9.1f} s  "
                     f"{s['both_seconds']:>8.1f} s  {d['backlog']['seconds']:>12.1f} s  "
                     f"{d['store_metrics']['seconds']:>10.1f} s  {'yes' if r['backlog_agrees'] else 'NO'}")
    lines.append(f"targets: both jobs on 10 M events under {TARGET_SECONDS:.0f} s; at most "
                 f"{TARGET_BYTES_PER_EVENT:.0f} bytes per event on disk")
    return "\n".join(lines)


def run_cli(sizes: list[int], as_json: bool, results_dir: Path | None = None, seed: int = 0) -> int:
    """`strongroom bench metrics`: run every size, write the JSON, print the report."""
    doc: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "machine": _machine(), "sizes": []}
    work = Path(tempfile.mkdtemp(prefix="strongroom-bench-metrics-"))
    try:
        for n in sizes:
            doc["sizes"].append(run_size(n, work, seed))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc["machine"]["load_average_at_end"] = list(os.getloadavg())
    target = (results_dir or RESULTS_DIR)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    doc["results_file"] = str(path)
    print(json.dumps(doc, indent=1) if as_json else f"{format_report(doc)}\n\nresults: {path}")
    return 0 if all(r["backlog_agrees"] for r in doc["sizes"]) else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.metrics`."""
    p = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000,10000000", help="event counts, comma-separated")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    return run_cli([int(s) for s in args.sizes.split(",")], args.json)


if __name__ == "__main__":
    sys.exit(main())
