"""`strongroom metrics backlog|store|all`: outputs on good input; exit 2, the file named and nothing
written on bad input. In-process, on the session's Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strongroom.cli.main import run
from strongroom.events.schema import SCHEMA, VERSION_KEY
from strongroom.events.synthetic import Summary

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_backlog_writes_tables_summary_and_chart_and_prints_a_table(
        spark: Any, event_log: tuple[Path, Summary], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(["metrics", "backlog", "--events", str(event_log[0]), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "STORE" in captured.out and "PENDING" in captured.out and "telemetry" in captured.out
    assert "backlog: computing" in captured.err and "written to" in captured.err  # the progress line
    made = sorted(p.name for p in (out / "backlog").iterdir())
    assert made == ["backlog.png", "durable_series.parquet", "durables.parquet", "store_series.parquet",
                    "stores.parquet", "summary.json"]
    assert (out / "backlog" / "backlog.png").read_bytes().startswith(PNG)
    durables = pq.read_table(out / "backlog" / "durables.parquet")
    assert durables.schema.field("oldest_published").type == pa.timestamp("us", tz="UTC")
    summary = json.loads((out / "backlog" / "summary.json").read_text())
    assert summary["events"]["rows"] == event_log[1].events
    assert {d["durable"] for d in summary["durables"]} == set(durables.column("durable").to_pylist())
    assert [d["pending_messages"] for d in summary["durables"]] == durables.column("pending_messages").to_pylist()


@pytest.mark.slow
def test_store_json_prints_the_summary(spark: Any, event_log: tuple[Path, Summary], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(["metrics", "store", "--events", str(event_log[0]), "--out", str(out), "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    summary = json.loads(captured.out)
    assert summary["job"] == "store_metrics"
    assert summary == json.loads((out / "store_metrics" / "summary.json").read_text())
    assert sorted(p.name for p in (out / "store_metrics").iterdir()) == [
        "durables.parquet", "rates.png", "stores.parquet", "summary.json"]


@pytest.mark.slow
def test_all_writes_what_each_job_writes_alone(spark: Any, event_log: tuple[Path, Summary], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    alone, both = tmp_path / "alone", tmp_path / "both"
    for job in ("backlog", "store"):
        assert run(["metrics", job, "--events", str(event_log[0]), "--out", str(alone), "--quiet"]) == 0
    capsys.readouterr()
    assert run(["metrics", "all", "--events", str(event_log[0]), "--out", str(both), "--json", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(printed) == ["backlog", "store_metrics"]
    for job in ("backlog", "store_metrics"):
        assert sorted(p.name for p in (both / job).iterdir()) == sorted(p.name for p in (alone / job).iterdir())
        for table in (both / job).glob("*.parquet"):
            assert pq.read_table(table).equals(pq.read_table(alone / job / table.name)), (job, table.name)
        written = json.loads((both / job / "summary.json").read_text())
        assert printed[job] == written
        mine = json.loads((alone / job / "summary.json").read_text())
        assert {k: v for k, v in written.items() if k != "seconds"} == {k: v for k, v in mine.items() if k != "seconds"}


def test_all_on_bad_input_writes_neither_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(["metrics", "all", "--events", str(tmp_path / "nowhere"), "--out", str(out), "--quiet"]) == 2
    assert f"events directory {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    assert not out.exists()


def _bad(tmp_path: Path, capsys: pytest.CaptureFixture[str], events: Path) -> str:
    out = tmp_path / "out"
    code = run(["metrics", "backlog", "--events", str(events), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not out.exists(), "nothing is written to --out on bad input"
    return err


def test_a_missing_events_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, capsys, tmp_path / "nowhere")
    assert f"events directory {tmp_path / 'nowhere'} does not exist" in err


def test_a_directory_without_events_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = tmp_path / "events" / "cluster=default" / "hour=2026-11-20T09"
    events.mkdir(parents=True)
    # A file still being written (hidden) is not an event file.
    (events / ".events-00000000000000000001-00000000000000000002-7.parquet").write_bytes(b"PAR1")
    err = _bad(tmp_path, capsys, tmp_path / "events")
    assert "holds no event files" in err


def _copy(event_log: tuple[Path, Summary], tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "events"
    shutil.copytree(event_log[0], root)
    victim = sorted(root.rglob("events-*.parquet"))[1]
    return root, victim


def test_a_file_of_another_schema_version_is_named(event_log: tuple[Path, Summary], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root, victim = _copy(event_log, tmp_path)
    table = pq.read_table(victim)
    pq.write_table(table.replace_schema_metadata({**SCHEMA.metadata, VERSION_KEY: b"2"}), victim)
    err = _bad(tmp_path, capsys, root)
    assert f"{victim}: schema version 2, this reader reads version 1" in err


def test_a_truncated_file_is_named(event_log: tuple[Path, Summary], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    root, victim = _copy(event_log, tmp_path)
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    err = _bad(tmp_path, capsys, root)
    assert f"{victim}: not a readable Parquet file (truncated or corrupt?)" in err


def test_a_parquet_file_that_is_not_an_event_file_is_named(event_log: tuple[Path, Summary], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root, victim = _copy(event_log, tmp_path)
    pq.write_table(pa.table({"x": [1, 2]}), victim)
    err = _bad(tmp_path, capsys, root)
    assert f"{victim}: no schema version" in err


def test_bad_input_leaves_an_earlier_output_as_it_was(event_log: tuple[Path, Summary], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "backlog").mkdir(parents=True)
    (out / "backlog" / "summary.json").write_text("{}")
    code = run(["metrics", "backlog", "--events", str(tmp_path / "nowhere"), "--out", str(out), "--quiet"])
    assert code == 2
    assert [p.name for p in out.rglob("*")] == ["backlog", "summary.json"]
    assert (out / "backlog" / "summary.json").read_text() == "{}"


def test_a_bad_as_of_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["metrics", "backlog", "--as-of", "yesterday", "--events", str(tmp_path)])
    assert exit_.value.code == 2
    assert "'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
