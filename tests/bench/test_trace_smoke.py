"""Smoke test of `python -m bench.trace`: a short traced confirm run on a real cluster must see
every step of a round in the client, the leader and the followers. Nothing depends on timing:
only that the steps were recorded, in the order a round makes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_traced_confirm_run_sees_every_step_of_a_round() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    out = subprocess.run([sys.executable, "-m", "bench.trace", "--config", "disk-sync", "--workload", "confirm",
                          "--messages", "200", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    steps = summary["steps_us"]
    assert summary["figures"]["msgs_per_s"] > 0
    followers = {key.split(":")[0] for key in steps if key.startswith("F")}
    assert len(followers) == 2, steps
    # The order of one round: client write, leader accepts, appends out, a follower stores,
    # the leader applies, the client reads the confirmation.
    order = ["client:cwrite>", "leader:submit>", "leader:xchg>", "leader:lwrite<", "leader:apply>", "client:cread<"]
    assert all(key in steps for key in order), steps
    assert [steps[key] for key in order] == sorted(steps[key] for key in order), steps
    for follower in followers:
        assert steps["leader:xchg>"] < steps[f"{follower}:fappend>"] < steps["leader:apply>"], steps
