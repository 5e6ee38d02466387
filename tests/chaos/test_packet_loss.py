"""Packet loss and duplication inside TCP connections: the `packet-loss` chaos scenario, run in
a network namespace of its own (`unshare -n`, loopback up) so that its iptables rules touch
nothing else of the machine, under the full workload and judged by the history checker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

SECONDS = float(os.environ.get("CHAOS_TEST_SECONDS", "9"))
SERVICES = Path(__file__).resolve().parents[2] / "services"


def _unavailable() -> str | None:
    for tool in ("unshare", "ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if os.geteuid() != 0:
        return "a network namespace of its own needs root"
    return None


def test_packet_loss_and_duplication_lose_nothing(tmp_path: Path) -> None:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "chaos"
    inner = (f"ip link set lo up && exec {sys.executable} -m strongroom.chaos --faults packet-loss "
             f"--seconds {SECONDS} --json --out {out}")
    env = {**os.environ, "PYTHONPATH": f"{SERVICES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(["unshare", "-n", "sh", "-c", inner], capture_output=True, text=True, env=env, timeout=280)
    assert "[" in done.stdout, done.stdout + done.stderr
    results = json.loads(done.stdout[done.stdout.index("\n[") + 1:done.stdout.index("\nhistories")])
    assert len(results) == 1 and results[0]["fault"] == "packet-loss", results
    result = results[0]
    assert result["skipped"] is None, result
    assert result["passed"] is True and done.returncode == 0, done.stdout[-6000:] + (out / "packet-loss").as_posix()
    assert result["confirmed"] > 0 and result["uows_confirmed"] > 0
    history = (out / "packet-loss" / "history.jsonl").read_text()
    assert "dropped" in history and "packets healed" in history
