"""One real Spark session (local mode) for every Spark test, and synthetic event logs.

Spark starts once per test session (a JVM start costs seconds); the jobs and `strongroom
metrics` run in-process pick it up as the active session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is a dev dependency (the metrics extra)")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import read_events

from spark_jobs.events import spark_session
from strongroom.events.synthetic import Scenario, Summary, write_event_log

SCENARIO = Scenario(events=40_000, seed=3, rate=15.0, file_events=6_000,
                    start=datetime(2026, 11, 20, 9, 52, tzinfo=UTC))
"""About 8 minutes of traffic crossing an hour boundary, a failover half-way."""


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's Spark, stopped at the end."""
    session = spark_session("strongroom-tests", "local[2]")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def event_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    """A synthetic event log (the same one for every test)."""
    root = tmp_path_factory.mktemp("events")
    return root, write_event_log(root, SCENARIO)


@pytest.fixture(scope="session")
def reference_events(event_log: tuple[Path, Summary]) -> list[dict[str, Any]]:
    """The log's events, deduplicated and in order, for the plain-Python reference."""
    return read_events(event_log[0])
