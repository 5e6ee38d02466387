"""The DR drill's pure parts: its realm, the tail's indexes from a manifest, the loss against the
tail, the invariants that decide `ok`, the printed report and the command line (the drill itself
runs in tests/integration/test_dr_drill.py)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.cli.drill_cmd import cmd_drill_dr, dr_report_lines
from strongroom.cli.main import build_parser
from strongroom.dr.manifest import manifest_of
from strongroom.drill import body_for
from strongroom.drill_dr import DR_CLUSTER, DR_DESTINATION, drill_realm, judge, manifest_indexes, tail_check
from strongroom.realm.model import parse_realm

PRIMARY = ["127.0.0.1:20001", "127.0.0.1:20002", "127.0.0.1:20003"]
STANDBY = ["127.0.0.1:20011", "127.0.0.1:20012", "127.0.0.1:20013"]


def test_the_realm_has_a_standby_set_reading_the_primary_members() -> None:
    realm = parse_realm(drill_realm(PRIMARY, STANDBY, compact_after_entries=50000), "<test>")
    cluster = realm.cluster(DR_CLUSTER)
    assert cluster is not None and cluster.standby is not None
    assert [m.address for m in cluster.members] == PRIMARY
    assert [m.address for m in cluster.standby.members] == STANDBY
    assert list(cluster.standby.primary) == PRIMARY
    assert cluster.compact_after_entries == 50000 and cluster.storage == "disk-sync"


def _row(index: int, destination: str, body: bytes) -> dict[str, Any]:
    return {"index": index, "op": "publish", "store": "drill", "destination": destination,
            "message": {"body": base64.b64encode(body).decode()}}


def test_manifest_indexes_are_the_drill_messages_of_its_queue() -> None:
    rows = [_row(9, DR_DESTINATION, body_for(3)), _row(9, DR_DESTINATION, body_for(4)),
            _row(10, "other.queue", body_for(5)), _row(10, DR_DESTINATION, b"not a drill body"),
            {"index": 11, "op": "ack", "store": "drill", "durable": "d", "seqs": [1]}, {"index": 12, "op": "noop"}]
    assert manifest_indexes(rows) == {3, 4}


def test_manifest_indexes_read_a_real_manifest() -> None:
    entry = rpb.LogEntry(epoch=5)
    op = entry.ops.add()
    op.publish.store = "drill"
    op.publish.destination = DR_DESTINATION
    op.publish.message.body = body_for(42)
    manifest = manifest_of(DR_CLUSTER, 7, [(7, entry.SerializeToString())])
    out = io.StringIO()
    manifest.write(out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()[1:]]
    assert manifest_indexes(manifest.rows) == manifest_indexes(rows) == {42}


def test_tail_check_accepts_a_loss_that_is_the_tail() -> None:
    confirmed = set(range(10))
    check = tail_check(confirmed, delivered=range(6), tail={6, 7, 8, 9, 10})  # 10: in the tail, never confirmed
    assert check == {"lost_in_tail": 4, "lost_outside_tail": 0, "tail_messages": 5, "tail_confirmed": 4,
                     "lost_equals_tail": True}


def test_tail_check_names_a_loss_outside_the_tail_and_a_tail_message_received() -> None:
    check = tail_check(set(range(10)), delivered=[0, 1, 2, 3, 4, 5, 6], tail={6, 8, 9})
    assert check["lost_outside_tail"] == 1 and check["lost_outside_tail_sample"] == [7]
    assert check["lost_equals_tail"] is False and check["tail_received_sample"] == [6]


def _passing() -> dict[str, Any]:
    return {"confirmed": 10, "received": 6, "lost": 4, "duplicated": 0, "seconds_to_first_publish": 0.5,
            "unconfirmed_at_new_primary": 0, "fenced": True,
            "tail": tail_check(set(range(10)), range(6), {6, 7, 8, 9}),
            "failback": {"converged": True, "snapshots_shipped": 0, "bytes_shipped": 100}}


def test_judge_passes_a_loss_exactly_the_tail() -> None:
    assert judge(_passing()) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"duplicated": 2}, "came twice"),
    ({"tail": tail_check(set(range(10)), range(6), {6, 7, 8})}, "outside the old primary's tail"),
    ({"tail": tail_check(set(range(10)), range(7), {6, 7, 8, 9})}, "the tail holds 4 confirmed messages"),
    ({"fenced": False}, "did not come back fenced"),
    ({"failback": {"converged": False, "snapshots_shipped": 0}}, "fail back did not converge"),
    ({"failback": {"converged": True, "snapshots_shipped": 1}}, "a full copy"),
    ({"seconds_to_first_publish": None}, "no publish was accepted"),
    ({"unconfirmed_at_new_primary": 3}, "not confirmed"),
    ({"problem": "DrillAborted: no leader"}, "did not finish"),
])
def test_judge_names_each_broken_invariant(change: dict[str, Any], words: str) -> None:
    failures = judge({**_passing(), **change})
    assert len(failures) >= 1 and any(words in f for f in failures), failures


def test_the_report_for_people() -> None:
    report = {**_passing(), "platform": "local", "messages": 10, "ok": True, "fenced_seconds": 2.0,
              "activation": {"generation": 1, "seconds": 0.2, "entries_lost_at_least": 0, "primary_commit_index": 0,
                             "standby_last_index": 8},
              "failback": {"converged": True, "seconds": 1.0, "entries": 8, "bytes_shipped": 8680,
                           "snapshots_shipped": 0, "state_messages": 250, "state_bytes": 215113,
                           "member_disk_bytes": 300000}}
    text = "\n".join(dr_report_lines(report))
    assert text.startswith("dr drill (local, 10 messages): OK")
    assert "lost 4" in text and "0.5 s" in text and "8680 bytes and 0 snapshots shipped" in text
    assert "lost outside it 0" in text and "old site fenced: True" in text
    failed = "\n".join(dr_report_lines({**report, "ok": False, "failures": judge({**report, "duplicated": 1})}))
    assert "FAILED" in failed and "failed: 1 messages came twice" in failed


def test_the_command_line() -> None:
    args = build_parser().parse_args(["drill", "dr", "--platform", "local"])
    assert (args.drill, args.messages, args.ballast, args.lose_tail, args.failback_messages, args.json) == (
        "dr", 1000, 1000, False, 50, False)
    assert args.func is cmd_drill_dr
    args = build_parser().parse_args(["drill", "dr", "--platform", "kubernetes", "--release", "sr",
                                      "--standby-release", "sr-standby", "--standby-namespace", "b", "--dry-run"])
    assert (args.release, args.standby_release, args.standby_namespace, args.dry_run) == ("sr", "sr-standby", "b",
                                                                                          True)


def test_kubernetes_needs_both_releases(capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom.cli.common import CliError

    args = build_parser().parse_args(["drill", "dr", "--platform", "kubernetes", "--release", "sr"])
    with pytest.raises(CliError, match="--standby-release"):
        cmd_drill_dr(args)
