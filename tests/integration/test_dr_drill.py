"""`strongroom drill dr --platform local` end to end: two real sites (etcds, realm services, six
members, the DR service), the whole primary site SIGKILLed under confirmed publishing, activation,
consumption at the new primary, the old site back fenced, its lost tail read from its log,
demotion and fail back. The drill's own invariants are checked again here from its JSON report."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_local_cluster import strongroom

pytestmark = pytest.mark.slow


def test_dr_drill_accounts_for_every_confirmed_message_and_fails_back_without_a_copy() -> None:
    # --lose-tail: the DR service is down while the drill's messages are published, so every
    # message confirmed at the old primary is lost at the new one and must be in its tail.
    result = strongroom("drill", "dr", "--platform", "local", "--messages", "400", "--ballast", "200",
                        "--failback-messages", "20", "--lose-tail", "--json", timeout=280)
    assert result.stdout.strip(), result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["failures"] == [], (report, result.stderr[-3000:])
    assert result.returncode == 0
    assert "drill: " in result.stderr and "DISASTER" in result.stderr  # progress lines

    # Every message published at either site, confirmed; none came twice.
    assert report["confirmed"] + report["disaster"]["unconfirmed_at_site_a"] == 400, report
    assert report["duplicated"] == 0
    assert report["received"] + report["lost"] == report["confirmed"]
    # The loss is the tail, exactly: every confirmed message lost is in the old primary's log after
    # the shared index, and the confirmed messages there are exactly the lost ones.
    tail = report["tail"]
    assert report["lost"] > 0, "the DR service was down: the standby lacked the tail"
    assert tail["lost_outside_tail"] == 0 and tail["lost_in_tail"] == report["lost"]
    assert tail["tail_confirmed"] == report["lost"] and tail["lost_equals_tail"] is True
    assert report["lost"] <= tail["messages"]
    act = report["activation"]
    assert act["generation"] == 1 and act["exact"] is False
    assert tail["from_index"] == act["standby_last_index"] + 1
    assert act["entries_lost_at_least"] <= tail["entries"]
    # The rest went to the new primary, and the first of them was accepted after the disaster.
    assert 0 < report["seconds_to_first_publish"] < 60
    assert report["unconfirmed_at_new_primary"] == 0
    # The old site came back fenced; fail back converged without a snapshot, shipping less than
    # the state it brought the old site to (the ballast stays where it was).
    assert report["fenced"] is True
    fb = report["failback"]
    assert fb["converged"] is True and fb["snapshots_shipped"] == 0 and fb["generation"] == 1
    assert fb["since_index"] == act["standby_last_index"]
    assert 0 < fb["bytes_shipped"] < fb["state_bytes"], fb
    assert fb["state_messages"] >= 200 + 20
