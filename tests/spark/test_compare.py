"""The backlog rows against `strongroom status --json`, field by field (the end-to-end test on a
real cluster is test_backlog_matches_status.py; here: status as a cluster holding the same state
would report it, built from a replay of a synthetic log)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from reference import replay

from spark_jobs.backlog import backlog
from spark_jobs.compare import compare_with_status
from spark_jobs.events import find_event_log, load_events
from strongroom.events.synthetic import Summary


def _status(events: list[dict[str, Any]], at: int) -> list[dict[str, Any]]:
    """What the leader's `status --json` says for the replayed state (a follower answers too)."""
    state = replay(events, at)
    durables = state.durable_rows(at)
    stores = []
    for (cluster, store), row in sorted(state.store_rows().items()):
        stores.append({"name": store, "messages": row["messages"], "bytes": row["bytes"], "durables": [
            {"name": d[3], "destination": d[2], "pending_messages": v["pending_messages"],
             "pending_bytes": v["pending_bytes"], "unacked": v["unacked"], "refused": 0, "subscribers": 1}
            for d, v in sorted(durables.items()) if d[1] == store]})
    leader = {"endpoint": "127.0.0.1:7101", "cluster": "default", "member": "m1", "role": "leader",
              "epoch": 19, "commit_index": 9, "stores": stores}
    follower = {**copy.deepcopy(leader), "member": "m2", "role": "follower", "endpoint": "127.0.0.1:7102"}
    for s in follower["stores"]:
        for d in s["durables"]:
            d["unacked"] = 0  # leader state
    return [follower, leader, {"endpoint": "127.0.0.1:7103", "error": "connection refused"}]


@pytest.fixture(scope="module")
def job_rows(spark: Any, event_log: tuple[Path, Summary]) -> dict[str, list[dict[str, Any]]]:
    log = find_event_log(event_log[0])
    result = backlog(spark, load_events(spark, log), log, None)
    return {"durables": result.tables["durables"], "stores": result.tables["stores"], "as_of": result.as_of}


@pytest.mark.slow
def test_the_job_agrees_with_status_field_by_field(job_rows: dict[str, Any], reference_events: list[dict[str, Any]]) -> None:
    status = _status(reference_events, job_rows["as_of"])
    assert compare_with_status(job_rows["durables"], job_rows["stores"], status,
                               durable_fields=("pending_messages", "pending_bytes", "unacked")) == []


@pytest.mark.slow
def test_each_disagreement_is_reported_by_field(job_rows: dict[str, Any], reference_events: list[dict[str, Any]]) -> None:
    status = _status(reference_events, job_rows["as_of"])
    leader = status[1]
    billing = next(d for s in leader["stores"] for d in s["durables"] if d["name"] == "billing"
                   and d["destination"] == "orders.eu")
    billing["pending_bytes"] += 1
    telemetry = next(s for s in leader["stores"] if s["name"] == "telemetry")
    telemetry["messages"] -= 1
    leader["stores"][0]["durables"].append({"name": "ghost", "destination": "orders.eu", "pending_messages": 3,
                                            "pending_bytes": 30, "unacked": 0})
    found = [str(d) for d in compare_with_status(job_rows["durables"], job_rows["stores"], status)]
    pending_bytes = next(r["pending_bytes"] for r in job_rows["durables"] if r["durable"] == "billing"
                         and r["destination"] == "orders.eu")
    messages = next(r["messages"] for r in job_rows["stores"] if r["store"] == "telemetry")
    assert found == [
        f"default/telemetry: messages: backlog {messages}, status {messages - 1}",
        "default/orders orders.eu/ghost: present: backlog False, status True",
        f"default/orders orders.eu/billing: pending_bytes: backlog {pending_bytes}, status {pending_bytes + 1}",
    ] or sorted(found) == sorted([
        f"default/telemetry: messages: backlog {messages}, status {messages - 1}",
        "default/orders orders.eu/ghost: present: backlog False, status True",
        f"default/orders orders.eu/billing: pending_bytes: backlog {pending_bytes}, status {pending_bytes + 1}",
    ])


def test_an_empty_durable_missing_on_one_side_is_no_disagreement() -> None:
    ours = [{"cluster": "c", "store": "s", "destination": "d", "durable": "x", "pending_messages": 0, "pending_bytes": 0}]
    assert compare_with_status(ours, [], [{"cluster": "c", "role": "leader", "stores": []}]) == []
    ours[0]["pending_messages"] = 2
    assert [d.field for d in compare_with_status(ours, [], [{"cluster": "c", "role": "leader", "stores": []}])] == ["present"]
