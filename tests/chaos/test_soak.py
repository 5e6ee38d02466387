"""A short soak through its command (`python -m strongroom.chaos.soak`, what `make soak` runs):
real etcd, members, leader SIGKILLs and the history checker; its JSON verdict, memory.json and
memory.png, the backlog read beside memory, and the members' allocation reports (`--trace-memory`).
A run of a minute measures no memory trend (it is still warming up), so the growth bound is
lifted here: the hour-long run in the README is what judges memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_a_short_soak_kills_leaders_checks_the_history_and_plots_memory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "strongroom.chaos.soak", "--minutes", "1", "--kill-every", "15",
                           "--max-growth", "100", "--trace-memory", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["passed"] and result["converged"] and result["leader_kills"] >= 2, result
    assert result["confirmed"] > 100 and result["lost"] == 0 and result["duplicated"] == 0, result
    assert result["phantom"] == 0 and result["order"] == 0 and result["uow_violations"] == 0, result
    assert result["side_messages"] > 100 and result["rss_baseline_mib"] > 10, result
    assert "soak " in done.stdout and "leader kills" in done.stdout  # the periodic progress line
    samples = json.loads((tmp_path / "memory.json").read_text())
    assert {s["member"] for s in samples} == {"m1", "m2", "m3"} and all(s["rss_bytes"] >= 0 for s in samples)
    assert (tmp_path / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    backlog = json.loads((tmp_path / "backlog.json").read_text())
    assert len(backlog) >= 3 and all(n >= 0 for _, n in backlog), backlog
    assert not result["backlog_grew"] and "chaos.topic/std" in result["pending_at_end"], result
    for member in ("m1", "m2", "m3"):  # where each member's memory went, by allocation site
        report = (tmp_path / f"memory-top-{member}.txt").read_text()
        assert report.startswith("# traced ") and "strongroom/" in report, report[:500]
