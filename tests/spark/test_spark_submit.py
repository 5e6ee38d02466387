"""The jobs as spark-submit runs them: a file of the repository, its own Spark (a JVM of its own),
the same options, outputs and exit statuses as `strongroom metrics`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from strongroom.events.synthetic import Summary

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _spark_submit(*args: str) -> subprocess.CompletedProcess[str]:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run([str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_spark_submit_runs_the_backlog_job_file(event_log: tuple[Path, Summary], tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = _spark_submit("spark_jobs/backlog.py", "--events", str(event_log[0]), "--out", str(out), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    printed = json.loads(run.stdout)
    assert printed == json.loads((out / "backlog" / "summary.json").read_text())
    assert printed["events"]["rows"] == event_log[1].events
    assert sum(d["pending_messages"] for d in printed["durables"]) > 0
    assert (out / "backlog" / "durable_series.parquet").exists()


def test_spark_submit_refuses_a_truncated_file_with_status_2(event_log: tuple[Path, Summary], tmp_path: Path) -> None:
    root = tmp_path / "events"
    shutil.copytree(event_log[0], root)
    victim = sorted(root.rglob("events-*.parquet"))[-1]
    victim.write_bytes(victim.read_bytes()[:100])
    out = tmp_path / "out"
    run = _spark_submit("spark_jobs/store_metrics.py", "--events", str(root), "--out", str(out))
    assert run.returncode == 2, run.stderr[-3000:]
    # spark-submit passes the job's stderr on through its own stdout.
    assert f"error: {victim}: not a readable Parquet file" in run.stdout + run.stderr
    assert not out.exists()
