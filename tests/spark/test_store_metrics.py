"""store_metrics against counts and percentiles computed in plain Python from the same log;
duplicate rows (a new leader writing an old one's entries again) are counted once."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reference import MINUTE

from spark_jobs.backlog import backlog
from spark_jobs.events import find_event_log, load_events
from spark_jobs.store_metrics import store_metrics
from strongroom.events.synthetic import Scenario, Summary, write_event_log

pytestmark = pytest.mark.slow

COUNTED = {"message_stored": "published", "message_acked": "acked", "message_expired": "expired",
           "message_discarded": "discarded", "message_dead_lettered": "dead_lettered"}


def _run(spark: Any, root: Path, job: Any = store_metrics) -> Any:
    log = find_event_log(root)
    return job(spark, load_events(spark, log), log, None)


def test_per_store_minute_counts_equal_the_events(spark: Any, event_log: tuple[Path, Summary],
                                                  reference_events: list[dict[str, Any]]) -> None:
    result = _run(spark, event_log[0])
    want: Counter[tuple[str, int, str]] = Counter()
    for r in reference_events:
        if r["kind"] in COUNTED:
            want[(r["store"], r["t"] // MINUTE * MINUTE, COUNTED[r["kind"]])] += 1
    got: Counter[tuple[str, int, str]] = Counter()
    for row in result.tables["stores"]:
        for name in COUNTED.values():
            if row[name]:
                got[(row["store"], row["minute"], name)] = row[name]
        # Per second over the minute, or over the part of it the log covers at either end.
        start, end = max(row["minute"], result.first), min(row["minute"] + MINUTE, result.as_of)
        assert row["publish_rate"] == pytest.approx(row["published"] / ((end - start) / 1e6))
        assert (end - start == MINUTE) == (result.first <= row["minute"] and row["minute"] + MINUTE <= result.as_of)
    assert got == want
    assert {k[2] for k in want} == set(COUNTED.values())  # every kind occurs in the scenario


def _rank_error(values: list[float], estimate: float, q: float) -> float:
    """How far (as a fraction of the values) the estimate's rank is from the q-quantile's."""
    ordered = np.sort(np.asarray(values))
    rank = np.searchsorted(ordered, estimate, side="right") / len(ordered)
    return abs(rank - q)


def test_latency_and_size_percentiles_are_those_of_the_events(spark: Any, event_log: tuple[Path, Summary],
                                                              reference_events: list[dict[str, Any]]) -> None:
    result = _run(spark, event_log[0])
    latencies: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    sizes: dict[str, list[float]] = defaultdict(list)
    for r in reference_events:
        if r["kind"] == "message_acked":
            latencies[(r["store"], r["destination"], r["durable"])].append((r["t"] - r["pub"]) / 1000)
        elif r["kind"] == "message_stored":
            sizes[r["store"]].append(r["size"])
    durables = {(d["store"], d["destination"], d["durable"]): d for d in result.summary["durables"]}
    assert {k for k, v in durables.items() if v["acked"]} == set(latencies)
    for key, values in latencies.items():
        assert durables[key]["acked"] == len(values)
        for q in (0.5, 0.95, 0.99):
            # percentile_approx: within 1 % of the rank (its accuracy, 1/2000, is finer).
            assert _rank_error(values, durables[key][f"latency_ms_p{int(q * 100)}"], q) <= 0.01, (key, q)
    stores = {s["store"]: s for s in result.summary["stores"]}
    for store, values in sizes.items():
        assert stores[store]["published"] == len(values)
        assert stores[store]["size_min"] == min(values) and stores[store]["size_max"] == max(values)
        assert _rank_error(values, stores[store]["size_p50"], 0.5) <= 0.01
        assert sum(stores[store]["size_histogram"].values()) == len(values)


def test_rewritten_entries_are_counted_once(spark: Any, tmp_path: Path) -> None:
    base = Scenario(events=8_000, seed=11, rate=40.0, file_events=1_500)
    plain, doubled = tmp_path / "plain", tmp_path / "doubled"
    a = write_event_log(plain, base)
    b = write_event_log(doubled, Scenario(**{**base.__dict__, "overlap_entries": 40}))
    assert b.events > a.events + 40  # the new leader's first file repeats rows the old one wrote
    for job in (store_metrics, backlog):
        once, twice = _run(spark, plain, job), _run(spark, doubled, job)
        assert twice.tables == once.tables, job.__name__
