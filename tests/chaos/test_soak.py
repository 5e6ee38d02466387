"""A short soak through its command (`python -m strongroom.chaos.soak`, what `make soak` runs):
real etcd, members, leader SIGKILLs and the history checker; its JSON verdict, memory.json and
memory.png, the backlog read beside memory, the members' allocation reports (`--trace-memory`),
and a run stopped early by SIGTERM.
A run of a minute measures no memory trend (it is still warming up), so the growth bound is
lifted here: the hour-long run in the README is what judges memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def _started_under(root: Path) -> list[int]:
    """The processes still running whose command line names `root` (members, etcd, DR)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in argv:
            found.append(int(entry.name))
    return found


def test_a_soak_stopped_with_sigterm_is_judged_on_what_ran_and_leaves_no_process(tmp_path: Path) -> None:
    """The first SIGTERM ends the faults early: the run still heals, drains, audits, reports
    and stops every process it started."""
    out = tmp_path / "soak"
    errors = tmp_path / "stderr.txt"
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "strongroom.chaos.soak", "--minutes", "10", "--kill-every",
                                 "15", "--max-growth", "100", "--out", str(out), "--json"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the first progress line: the faults have begun
            lines.append(line)
            if "soak " in line and "leader kills" in line:
                break
        time.sleep(30)  # past the first leader kill
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            for pid in _started_under(out):  # what the killed run could not stop
                os.kill(pid, signal.SIGKILL)
    stdout = "".join(lines) + rest
    assert proc.returncode == 0, stdout[-4000:] + errors.read_text()[-4000:]
    assert "soak stopped at" in stdout and "stopped early" in stdout, stdout[-2000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["stopped_early"] and result["minutes"] < 5 and result["leader_kills"] >= 1, result
    assert result["passed"] and result["converged"] and result["lost"] == 0 and result["duplicated"] == 0, result
    assert result["confirmed"] > 100, result
    assert _started_under(out) == [], "the soak left processes running"
