"""Smoke test of the backlog benchmark (bench/backlog.py) on a small backlog, both settings of
indexes on disk: a member restarts on a built state, then a member with an empty disk catches up
from the two that hold it while a publisher confirms one message at a time. The run itself
checks what matters (the first message intact, the fresh member holding exactly the leader's
messages, every publish confirmed); here every figure must be there and no point may fail.
Nothing depends on timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import backlog

pytestmark = pytest.mark.slow


def test_a_fresh_member_catches_up_from_a_restarted_backlog_with_and_without_indexes_on_disk(tmp_path: Path) -> None:
    results = backlog.run([3000], [False, True], tmp_path, baseline_seconds=1.0)

    assert [r["indexes_on_disk"] for r in results] == [False, True]
    for r in results:
        assert "error" not in r, r.get("error", "") + "\n" + r.get("member_log_tail", "")
        assert r["messages"] == 3000 and r["leader_seconds"] > 0 and r["rss_mib"] > 0
        assert r["catchup_seconds"] > 0 and r["fresh_rss_mib"] > 0
        # The fresh member stored the state it was sent (at least the backlog's bodies).
        assert r["fresh_data_bytes"] > 3000 * backlog.MESSAGE_BYTES
        for window in ("confirm_before", "confirm_during"):
            assert r[window]["confirms"] > 0 and 0 < r[window]["p50_ms"] <= r[window]["p99_ms"] <= r[window]["max_ms"]
    text = backlog.table(results)
    assert text.count("\n") == 3 and "failed" not in text
