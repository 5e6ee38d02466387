"""The backlog job against a plain-Python replay of the same event log, and its outputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from reference import MINUTE, read_events, replay, replay_minutes

from spark_jobs.backlog import backlog
from spark_jobs.events import find_event_log, load_events
from strongroom.events.synthetic import Summary
from strongroom.events.writer import EventWriter

pytestmark = pytest.mark.slow

FIELDS = ("pending_messages", "pending_bytes", "unacked", "redelivery_waiting", "oldest_published")


def _run(spark: Any, root: Path, as_of: datetime | None = None) -> Any:
    log = find_event_log(root)
    return backlog(spark, load_events(spark, log), log, as_of)


def _by_durable(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(r["cluster"], r["store"], r["destination"], r["durable"]): r for r in rows}


def _check_as_of(result: Any, events: list[dict[str, Any]], at: int) -> None:
    want = replay(events, at)
    got = _by_durable(result.tables["durables"])
    expected = want.durable_rows(at)
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        assert {f: got[key][f] for f in FIELDS} == {f: row[f] for f in FIELDS}, key
        if row["oldest_age_s"] is not None:
            assert got[key]["oldest_age_s"] == pytest.approx(row["oldest_age_s"], abs=1e-6)
    stores = {(r["cluster"], r["store"]): {"messages": r["messages"], "bytes": r["bytes"]}
              for r in result.tables["stores"]}
    assert stores == want.store_rows()


def test_as_of_newest_equals_a_replay_of_every_event(spark: Any, event_log: tuple[Path, Summary],
                                                     reference_events: list[dict[str, Any]]) -> None:
    result = _run(spark, event_log[0])
    newest = reference_events[-1]["t"]
    assert result.as_of == newest
    _check_as_of(result, reference_events, newest)
    rows = result.tables["durables"]
    # The scenario has a backlog everywhere the test means to look.
    assert sum(r["pending_messages"] for r in rows) > 500
    assert any(r["unacked"] for r in rows)


def test_as_of_just_after_the_failover_shows_messages_waiting_for_redelivery(
        spark: Any, event_log: tuple[Path, Summary], reference_events: list[dict[str, Any]]) -> None:
    epochs = sorted({r["epoch"] for r in reference_events})
    assert len(epochs) == 2
    failover = min(r["t"] for r in reference_events if r["epoch"] == epochs[1])
    at = failover + 200_000  # before the new leader's redeliveries (0.5 s after it began)
    result = _run(spark, event_log[0], datetime.fromtimestamp(at / 1e6, UTC))
    assert result.as_of == at
    _check_as_of(result, reference_events, at)
    assert sum(r["redelivery_waiting"] for r in result.tables["durables"]) > 0


def test_per_minute_series_equals_the_replay_at_every_minute_end(
        spark: Any, event_log: tuple[Path, Summary], reference_events: list[dict[str, Any]]) -> None:
    result = _run(spark, event_log[0])
    want = replay_minutes(reference_events, result.as_of)
    got: dict[int, dict[tuple[str, str, str, str], dict[str, Any]]] = {}
    for r in result.tables["durable_series"]:
        got.setdefault(r["minute"], {})[(r["cluster"], r["store"], r["destination"], r["durable"])] = r
    assert sorted(got) == sorted(want) and len(want) >= 6
    for minute, durables in want.items():
        for key, row in durables.items():
            mine = got[minute][key]
            # Pending counts, bytes and the oldest message are exact at every minute's end.
            assert (mine["pending_messages"], mine["pending_bytes"]) == (row["pending_messages"], row["pending_bytes"]), \
                (minute, key)
            if row["oldest_age_s"] is None:
                assert mine["oldest_age_s"] is None, (minute, key)
            else:
                assert mine["oldest_age_s"] == pytest.approx(row["oldest_age_s"], abs=1e-6), (minute, key)
    last = max(got)
    assert {k: v["pending_messages"] for k, v in got[last].items()} == {
        k: v["pending_messages"] for k, v in _by_durable(result.tables["durables"]).items()}


def test_an_as_of_before_the_log_counts_nothing_and_after_it_the_newest(
        spark: Any, event_log: tuple[Path, Summary]) -> None:
    newest = _run(spark, event_log[0])
    later = _run(spark, event_log[0], datetime.fromtimestamp(newest.as_of / 1e6, UTC) + timedelta(minutes=5))
    assert [r["pending_messages"] for r in later.tables["durables"]] == \
        [r["pending_messages"] for r in newest.tables["durables"]]
    assert later.tables["durable_series"][-1]["minute"] >= newest.tables["durable_series"][-1]["minute"] + 4 * MINUTE


def _write_log(root: Path, rows: list[tuple[str, str | None, int, int]], start: datetime) -> None:
    """A one-entry-per-row event log of store `s`, destination `t`: (kind, durable, seq, size),
    a second apart."""
    cols: dict[str, list[Any]] = {k: [] for k in ("epoch", "log_index", "position", "kind", "time", "store",
                                                   "destination", "durable", "seq", "size", "published_at")}
    for i, (kind, durable, seq, size) in enumerate(rows):
        t = start + timedelta(seconds=i)
        for k, v in (("epoch", 1), ("log_index", i + 1), ("position", 0), ("kind", kind), ("time", t),
                     ("store", "s"), ("destination", "t"), ("durable", durable), ("seq", seq),
                     ("size", size), ("published_at", t if seq else None)):
            cols[k].append(v)
    with EventWriter(root, "default", epoch=1) as writer:
        writer.write(cols)


def test_a_skipped_message_and_a_deleted_durable_release_what_they_held(spark: Any, tmp_path: Path) -> None:
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    _write_log(tmp_path, [
        ("durable_created", "a", 0, 0), ("durable_created", "b", 0, 0),
        *[row for seq in (1, 2, 3) for row in (("message_stored", None, seq, 10 * seq),
                                               ("message_pending", "a", seq, 10 * seq),
                                               ("message_pending", "b", seq, 10 * seq))],
        ("message_skipped", "a", 1, 0),  # a replay moved `a` past message 1
        ("durable_deleted", "b", 0, 0),  # `b` released 1, 2 and 3: nothing holds 1 any more
        ("durable_created", "b", 0, 0),  # another `b`
        ("message_stored", None, 4, 40), ("message_pending", "a", 4, 40), ("message_pending", "b", 4, 40),
    ], start)
    events = read_events(tmp_path)
    for seconds, durables, store in ((11.5, {"a": (2, 50), "b": (3, 60)}, (3, 60)),  # before the deletion
                                     (12.5, {"a": (2, 50)}, (2, 50)),  # `b` deleted
                                     (16, {"a": (3, 90), "b": (1, 40)}, (3, 90))):
        result = _run(spark, tmp_path, start + timedelta(seconds=seconds))
        got = {r["durable"]: (r["pending_messages"], r["pending_bytes"]) for r in result.tables["durables"]}
        assert got == durables, seconds
        assert [(r["messages"], r["bytes"]) for r in result.tables["stores"]] == [store], seconds
        _check_as_of(result, events, result.as_of)
