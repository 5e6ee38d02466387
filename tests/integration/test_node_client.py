"""examples/node, the Node.js client written from protos/ alone, against a real local cluster
(`strongroom up --detach` in a temporary data dir, stopped by pid): publish through a follower
(a NOT_LEADER redirect), a deduplicated retry, one bad input refused, subscribe with credit and
acks, nothing left pending. Skipped, with the reason, where node or npm is not installed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.local.launcher import live_pids, load_state, member_endpoints
from strongroom.local.leader import wait_for_leader
from strongroom.local.process import stop_processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node"
_MISSING = [tool for tool in ("node", "npm") if shutil.which(tool) is None]

pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"{' and '.join(_MISSING)} not installed: the Node.js "
                                                       f"example cannot run")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example in a directory of its own, its packages installed from its lock file."""
    where = tmp_path_factory.mktemp("node-example")
    for name in ("package.json", "package-lock.json", "client.js"):
        shutil.copy(EXAMPLE / name, where / name)
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=where, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return where


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """A detached local cluster's member addresses, a follower first; every process it started
    is stopped by pid afterwards."""
    data_dir = tmp_path_factory.mktemp("node-cluster")
    env = {k: v for k, v in os.environ.items() if k not in ("STRONGROOM_ENDPOINTS", "STRONGROOM_DATA_DIR")}
    try:
        up = subprocess.run([sys.executable, "-m", "strongroom.cli.main", "up", "--detach", "--data-dir",
                             str(data_dir)], capture_output=True, text=True, timeout=180, env=env, check=False)
        assert up.returncode == 0, up.stdout + up.stderr
        state = load_state(data_dir)
        assert state is not None
        members = member_endpoints(state)
        leader = asyncio.run(wait_for_leader(members, 30.0)).address
        yield sorted(members, key=lambda address: address == leader)  # the leader last
    finally:
        state = load_state(data_dir)
        if state is not None:
            stop_processes([pid for _, pid in live_pids(state)])


def test_the_node_client_publishes_through_redirects_and_consumes_with_credit(example: Path,
                                                                              endpoints: list[str]) -> None:
    run = subprocess.run(["node", "client.js", "--endpoints", ",".join(endpoints), "--count", "30"], cwd=example,
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "STRONGROOM_PROTOS": str(ROOT / "protos")})
    assert run.returncode == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)
    assert out["redirects"] >= 1 and out["leader"] == endpoints[-1]  # started on a follower
    assert out["published"] == 30
    assert out["retry"] == {"duplicate": True, "same_seq": True}
    assert out["bad_input"]["code"] == "INVALID_ARGUMENT" and out["bad_input"]["reason"] == "INVALID_ARGUMENT"
    assert out["received"] == [f"m{i}" for i in range(1, 31)]  # once each, in order, with credit 8
    assert out["delivery_counts"] == [1] * 30 and out["refusals"] == 0
    assert out["pending_after_acks"] == 0
