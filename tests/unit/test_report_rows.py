"""The PSTORE report's lines as rows of the store event log (`events/report_rows.py`): files of
their own beside the event files, keys that never meet an event's, skipped by the member's
resume point and by the message jobs' reader."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from spark_jobs.events import find_event_log
from strongroom.events.report_rows import ReportRows
from strongroom.events.schema import KEY_COLUMNS, RECORDS_RUN_BIT, is_records_file, parse_file_name
from strongroom.events.writer import EventWriter, last_published_index
from strongroom.persistence.pstore_report import CREATED, DELETED, ReportWriter, read_report


def records(root: Path) -> list[dict[str, object]]:
    files = sorted(root.glob("cluster=c1/hour=*/records-*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def test_each_line_is_a_row_with_a_key_of_its_own_run(tmp_path: Path) -> None:
    report = ReportWriter(tmp_path / "PSTORE.REPORT", "0.1.0", "c1", "m1")
    report.rows = ReportRows(tmp_path / "events", "c1", "m1", interval=60)
    report.created("log", (7).to_bytes(8, "big"), b"\x08\x01")
    report.deleted("meta", b"commit_index", b"\x00" * 8)
    report.close()
    lines = read_report(tmp_path / "PSTORE.REPORT")
    rows = records(tmp_path / "events")
    assert [(r["kind"], r["detail"], r["reason"], r["size"], r["target"]) for r in rows] == [
        ("records_" + ln.action.lower(), f"{ln.identifier} {ln.elements}", ln.record_type, ln.length, "m1")
        for ln in lines]
    assert [ln.action for ln in lines] == [CREATED, DELETED]
    run = rows[0]["epoch"]
    assert isinstance(run, int) and run & RECORDS_RUN_BIT
    assert [(r["epoch"], r["log_index"], r["position"]) for r in rows] == [(run, 1, 0), (run, 2, 0)]


def test_a_second_run_has_other_keys_and_parts_of_a_run_other_names(tmp_path: Path) -> None:
    first = ReportRows(tmp_path, "c1", "m1", interval=60, max_rows=3)
    for i in range(7):  # 3 + 3 published at max_rows, 1 at close
        first.add(time.time(), "Unloaded", f"db:log:{i:016X}", "Publication", 1, 100 + i)
    first.close()
    time.sleep(0.002)
    second = ReportRows(tmp_path, "c1", "m1", interval=60)
    second.add(time.time(), "Loaded", "db:log:0000000000000000", "Publication", 1, 100)
    second.close()
    assert [(f.first_index, f.last_index, f.rows) for f in first.published] == [(1, 3, 3), (4, 6, 3), (7, 7, 1)]
    assert first.run != second.run
    rows = records(tmp_path)
    keys = [tuple(r[k] for k in KEY_COLUMNS) for r in rows]
    assert len(set(keys)) == len(keys) == 8


def test_a_quiet_runs_lines_are_published_once_due(tmp_path: Path) -> None:
    rows = ReportRows(tmp_path, "c1", "m1", interval=0.3)
    rows.add(time.time(), "Created", "db:meta:commit_index", "Master", 0, 20)
    deadline = time.monotonic() + 5
    while not rows.published and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(rows.published) == 1 and len(records(tmp_path)) == 1
    rows.close()


def test_the_resume_point_and_the_jobs_reader_skip_report_rows(tmp_path: Path) -> None:
    with EventWriter(tmp_path, "c1", epoch=5) as events:
        events.write({"epoch": [5], "log_index": [12], "position": [0], "kind": ["message_stored"],
                      "time": [int(time.time() * 1e6)], "store": ["s"], "seq": [1]})
    report = ReportRows(tmp_path, "c1", "m1", interval=60)
    for i in range(40):  # line numbers well past the events' last index
        report.add(time.time(), "Created", f"db:log:{i:016X}", "Publication", 1, 50)
    report.close()
    names = [p.name for p in tmp_path.rglob("*.parquet")]
    assert sum(map(is_records_file, names)) == 1 and sum(parse_file_name(n) is not None for n in names) == 1
    assert last_published_index(tmp_path, "c1") == 12
    log = find_event_log(tmp_path)
    assert [p.name for p in log.files] == [n for n in names if not is_records_file(n)] and log.rows == 1
