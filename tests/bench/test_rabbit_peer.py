"""The RabbitMQ peer of the benchmark (bench/rabbit.py): where the package is missing the runner
skips it with the line that says what to install (no failure, no column, no ratio); where it is
installed, three real nodes are clustered, every workload of the main table runs against quorum
queues, and everything the peer started is stopped and removed."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import rabbit
from bench.common import Progress
from bench.runner import QUICK_PARAMS, RATIOS, format_report, run_bench


async def test_a_machine_without_rabbitmq_skips_the_peer_and_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rabbit, "RABBIT_BIN", tmp_path / "no-rabbitmq")
    reason = rabbit.missing()
    assert reason is not None and "apt-get install rabbitmq-server" in reason
    lines: list[str] = []
    doc = await run_bench(runs=2, params=QUICK_PARAMS, work_dir=tmp_path, out=lines.append,
                          order=[("rabbitmq", rabbit.CONFIG)])
    assert doc["errors"] == [] and doc["skipped"] == {rabbit.CONFIG: reason}
    assert rabbit.CONFIG not in doc["summary"] and doc["ratios"] == []
    # Said once (not once a round), as a progress line.
    assert [line.split("] ", 1)[1] for line in lines if "] skipping " in line] == [
        f"skipping {rabbit.CONFIG}: {reason}"]
    assert f"skipped {rabbit.CONFIG}: {reason}" in format_report(doc)


def test_every_figure_of_the_main_table_has_a_ratio_against_rabbitmq() -> None:
    against = {fig for ours, peer, fig, _ in RATIOS if ours == "disk-sync" and peer == rabbit.CONFIG}
    assert against == {"confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                       "consume.msgs_per_s", "fanout.deliveries_per_s", "pipelined_x4.msgs_per_s",
                       "pipelined_x16.msgs_per_s"}


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_three_real_nodes_run_every_workload_and_leave_nothing_behind(tmp_path: Path) -> None:
    reason = rabbit.missing()
    if reason is not None:
        pytest.skip(reason)
    work = tmp_path / "rabbit"
    target = rabbit.RabbitTarget(rabbit.CONFIG, work, Progress(out=lambda _: None))
    await target.start()
    pids = [*target.server_pids, target.epmd.pid if target.epmd else 0]
    try:
        queues = await asyncio.to_thread(target._queues)
        # Quorum queues on all three nodes, their leaders where the client is connected.
        assert {q["name"] for q in queues} >= {"confirm", "pipe1", "pipe4", "pipe16", "fan0", "fan3"}
        assert all(len(q["members"]) == 3 and q["leader"] == "bench-r1@localhost" for q in queues)
        results = {"confirm": await target.confirm(50), "pipelined": await target.pipelined(400, 1),
                   "consume": await target.consume(400), "fanout": await target.fanout(100),
                   "pipelined_x4": await target.pipelined(400, 4)}
    finally:
        await target.stop()
    for workload, figures in results.items():
        for key, value in figures.items():
            assert math.isfinite(value) and value >= 0, f"{workload}.{key} = {value}"
    assert results["confirm"]["p50_ms"] <= results["confirm"]["p99_ms"]
    assert results["consume"]["msgs_per_s"] > 0 and results["fanout"]["deliveries_per_s"] > 0
    for pid in pids:  # every node and the port mapper stopped (and reaped)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not work.exists()
