"""Running a job and writing what it found: the options every job takes, a progress line, and the
outputs (Parquet tables, a JSON summary, PNG charts, a table on the terminal).

Outputs go to `<out>/<job>/`: written into a hidden staging directory beside it first and moved
into place once all are complete, so a job that fails (a bad event file found by Spark half-way)
leaves `--out` as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.events import BadEventLog, EventLog, find_event_log, load_events, spark_session
from spark_jobs.options import parser

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Progress", "Result", "default_events_dir", "execute", "iso_time", "micros", "rows_of", "run_job", "table_text"]

TIME_COLUMNS = {"minute", "oldest_published"}
"""Columns holding microseconds since the epoch, written as timestamps."""
Job = Callable[["SparkSession", "DataFrame", EventLog, "datetime | None"], "Result"]


@dataclass
class Result:
    """What a job found: small tables (rows as dicts), collected on the driver."""

    job: str
    as_of: int
    """Microseconds since the epoch."""
    first: int
    newest: int
    log: EventLog
    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any] = field(default_factory=dict)
    """Job-specific totals for summary.json."""
    seconds: float = 0.0


def rows_of(df: DataFrame) -> list[dict[str, Any]]:
    """A small result's rows, collected on the driver."""
    return [r.asDict() for r in df.collect()]


def micros(t: datetime) -> int:
    """A time as microseconds since the epoch."""
    return int(t.timestamp() * 1_000_000)


def iso_time(us: int | None) -> str | None:
    """Microseconds since the epoch as ISO 8601 UTC (None stays None)."""
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC).isoformat().replace("+00:00", "Z")


def default_events_dir() -> Path:
    """`$STRONGROOM_EVENTS`, else `events/` in the local cluster's data dir."""
    if os.environ.get("STRONGROOM_EVENTS"):
        return Path(os.environ["STRONGROOM_EVENTS"])
    return Path(os.environ.get("STRONGROOM_DATA_DIR", ".strongroom")) / "events"


class Progress:
    """One progress line on stderr: the step and, while Spark works, its active stage's tasks.
    On a terminal it is rewritten in place; otherwise each step is one line."""

    def __init__(self, job: str, stream: IO[str] | None = None, quiet: bool = False) -> None:
        self.job = job
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.step_text = ""
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.spark: SparkSession | None = None

    def step(self, text: str) -> None:
        """A new step of the job."""
        self.step_text = text
        if self.quiet:
            return
        if self.tty:
            self._draw("")
        else:
            print(f"{self.job}: {text}", file=self.stream, flush=True)

    def watch(self, spark: SparkSession) -> None:
        """Show Spark's active stages on the line (terminal only)."""
        self.spark = spark
        if self.tty and not self.quiet and self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="progress")
            self._thread.start()

    def done(self, text: str) -> None:
        """The last step: ends the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if self.quiet:
            return
        if self.tty:
            self._draw("")
            print(f"\r\x1b[K{self.job}: {text} ({time.monotonic() - self.started:.1f} s)", file=self.stream, flush=True)
        else:
            print(f"{self.job}: {text} ({time.monotonic() - self.started:.1f} s)", file=self.stream, flush=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            tasks = ""
            try:
                tracker = self.spark.sparkContext.statusTracker() if self.spark else None
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()] if tracker else []
                done = sum(s.numCompletedTasks for s in stages if s)
                total = sum(s.numTasks for s in stages if s)
                if total:
                    tasks = f" [{done}/{total} tasks]"
            except Exception:  # the session is stopping: no stage to show
                pass
            self._draw(tasks)

    def _draw(self, tasks: str) -> None:
        line = f"{self.job}: {self.step_text}{tasks} {time.monotonic() - self.started:.0f} s"
        print(f"\r\x1b[K{line}", end="", file=self.stream, flush=True)


def execute(jobs: Mapping[str, Job], events_dir: Path, as_of: datetime | None, out: Path,
            progress: Progress, master: str | None = None) -> list[Result]:
    """Check the event log, run the jobs (name -> job) one after the other on one Spark session
    and, once all have their answers, write each one's outputs under `out/<name>/`. A job's
    `seconds` run from the start to its answer (the check and Spark's start included). Raises
    `BadEventLog` (nothing written) when the log cannot be read."""
    started = time.monotonic()
    progress.step(f"checking {events_dir}")
    log = find_event_log(events_dir)
    progress.step(f"starting Spark for {len(log.files)} file(s), {log.rows:,} events")
    spark = spark_session(f"strongroom-{progress.job}", master)
    progress.watch(spark)
    events = load_events(spark, log)
    results = []
    for name, job in jobs.items():
        progress.step("computing" if len(jobs) == 1 else f"computing {name}")
        try:
            result = job(spark, events, log, as_of)
        except Exception as exc:
            raise _read_error(exc, log) from exc
        result.seconds = time.monotonic() - started
        results.append(result)
    for name, result in zip(jobs, results, strict=True):
        progress.step(f"writing {out / name}")
        write_outputs(result, out / name)
    written = ", ".join(str(out / name) for name in jobs)
    progress.done(f"{log.rows:,} events, as of {iso_time(results[0].as_of)}, written to {written}")
    return results


def _read_error(exc: Exception, log: EventLog) -> Exception:
    """A file Spark could not read (its footer read, a page did not) as `BadEventLog`."""
    text = str(exc)
    named = next((str(f) for f in log.files if str(f) in text), None)
    if named is None and not any(w in text for w in ("Parquet", "parquet", "FAILED_READ_FILE")):
        return exc
    first = next((ln for ln in text.splitlines() if ln.strip()), text)[:400]
    return BadEventLog(f"{named or log.root}: Spark could not read it: {first}")


def write_outputs(result: Result, target: Path) -> None:
    """Tables, summary.json and charts into `target`, replacing what an earlier run left."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for name, rows in result.tables.items():
            pq.write_table(_arrow(rows), staging / f"{name}.parquet")
        (staging / "summary.json").write_text(json.dumps(summary(result), indent=2) + "\n")
        from spark_jobs.charts import draw

        draw(result, staging)
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        if target.exists():
            target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    if not rows:
        return pa.table({})
    table = pa.Table.from_pylist(rows)
    for i, name in enumerate(table.column_names):
        if name in TIME_COLUMNS:
            table = table.set_column(i, name, table.column(name).cast(pa.int64()).cast(pa.timestamp("us", tz="UTC")))
    return table


def summary(result: Result) -> dict[str, Any]:
    """The JSON summary: when, from what, and the job's answer at the as-of time."""
    return {
        "job": result.job,
        "as_of": iso_time(result.as_of),
        "events": {"root": str(result.log.root), "files": len(result.log.files), "rows": result.log.rows,
                   "bytes": result.log.bytes, "first": iso_time(result.first), "newest": iso_time(result.newest)},
        "seconds": round(result.seconds, 2),
        **result.summary,
    }


def table_text(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Rows as an aligned text table: (key, heading) per column; numbers right-aligned."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v) if v != "" else '""'

    cells = [[cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, (_, h) in enumerate(columns)]
    numeric = [all(isinstance(r.get(k), int | float) or r.get(k) is None for r in rows) and rows for k, _ in columns]
    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))).rstrip()
    return "\n".join([line([h for _, h in columns]), *(line(c) for c in cells)])


def run_job(name: str, jobs: Mapping[str, Job], argv: Sequence[str] | None, doc: str | None) -> int:
    """A spark-submit entry running `jobs` (name -> job) on one Spark application, described by
    the first paragraph of `doc`: exit status 0 done, 2 bad input (nothing written)."""
    from spark_jobs.report import show_results

    args = parser(name, (doc or "").split("\n\n")[0]).parse_args(argv)
    # spark-submit hands the job's stderr to its own stdout: with --json, stdout is the JSON only.
    progress = Progress(name, quiet=args.json)
    try:
        results = execute(jobs, args.events or default_events_dir(), args.as_of, args.out, progress)
    except BadEventLog as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(show_results(results, args.json))
    return 0
