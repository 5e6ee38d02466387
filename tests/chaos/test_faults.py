"""The short chaos profile: each fault for a few seconds against a fresh real cluster, under the
full workload, judged by the history checker.

Every scenario must end with nothing lost, phantom, reordered, duplicated beyond the redelivery
rules or confirmed by a fenced member, and no unit of work partial, lost, delivered after its
sender saw it abort or again after a receiver's commit was confirmed; every consumer and UOW
receiver must have drained everything; every member must agree on the final state. `make chaos` runs the same scenarios longer and prints a table.

CHAOS_TEST_SECONDS sets the fault time per scenario (default 12).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strongroom.chaos.faults import FAULTS
from strongroom.chaos.runner import run_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

SECONDS = float(os.environ.get("CHAOS_TEST_SECONDS", "12"))

# `disk-full` (leader first) wedges the cluster until the leader restarts: see
# tests/integration/test_regressions.py::test_leader_with_a_full_disk_lets_the_others_commit.
# CI runs the follower variant; `make chaos` runs both.
CI_FAULTS = [name for name in FAULTS if name != "disk-full"]


@pytest.mark.parametrize("fault", CI_FAULTS)
async def test_fault(fault: str, tmp_path: Path) -> None:
    result = await run_scenario(fault, SECONDS, tmp_path / fault)
    if result.skipped is not None:
        pytest.skip(result.skipped)
    assert result.passed, result.describe() + "\n" + (tmp_path / fault / "logs").as_posix()
    assert result.check.confirmed > 0 and result.check.deliveries > 0
    assert result.check.uows_confirmed > 0 and result.check.uows_processed > 0
