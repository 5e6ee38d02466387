"""Prometheus metrics and the statistics log of real members: each member's `/metrics` (the URL
its status names) scraped over HTTP after real publishes, acks and redeliveries, and compared
with `strongroom status --json` and with what the test did."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Cluster, drain, leader_client, realm_yaml, scrape, start_cluster, strongroom, value

STORE_LINES = """\
  - name: metered
    cluster: default
"""
DESTINATION_LINES = """\
  - name: "metered.*"
    store: metered
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three disk-sync members writing a statistics line every second."""
    before = os.environ.get("STRONGROOM_STATS_INTERVAL")
    os.environ["STRONGROOM_STATS_INTERVAL"] = "1"
    try:
        etcd, started = start_cluster(tmp_path_factory.mktemp("metrics"),
                                      realm_yaml(extra_stores=STORE_LINES, extra_destinations=DESTINATION_LINES))
    finally:
        if before is None:
            del os.environ["STRONGROOM_STATS_INTERVAL"]
        else:
            os.environ["STRONGROOM_STATS_INTERVAL"] = before
    try:
        deadline = time.monotonic() + 30  # every member answering (a test run alone comes first)
        while not all("error" not in st for st in _statuses(started)):
            assert time.monotonic() < deadline, _statuses(started)
            time.sleep(0.2)
        yield started
    finally:
        started.stop_all()
        etcd.stop()


def _statuses(cluster: Cluster) -> list[dict[str, Any]]:
    result = strongroom(",".join(cluster.addresses()), "status", "--json")
    return json.loads(result.stdout) if result.returncode == 0 else [{"error": result.stderr}]


def statuses(cluster: Cluster) -> list[dict[str, Any]]:
    out = _statuses(cluster)
    assert all("error" not in s for s in out), out
    return out


async def _work(cluster: Cluster) -> None:
    """50 messages on a topic with two durables: `acking` acks 20 of them; `dropping` receives 5
    and leaves without acking, then comes back and has them delivered again."""
    async with leader_client(cluster) as client:
        acking = await client.subscribe("metered.news", "acking", credit=20)
        dropping = await client.subscribe("metered.news", "dropping", credit=5)
        for i in range(50):
            await client.publish("metered.news", f"m{i}".encode())
        assert len(await drain(acking, 20)) == 20
        assert len(await drain(dropping, 5, ack=False)) == 5
        await acking.close()
        await dropping.close()
        again = await client.subscribe("metered.news", "dropping", credit=5)
        redelivered = await drain(again, 5, ack=False)
        assert [m.delivery_count for m in redelivered] == [2] * 5
        await again.close()


def test_each_member_metrics_match_its_status_and_the_work_done(cluster: Cluster) -> None:
    asyncio.run(_work(cluster))
    # Every member applied everything the leader committed.
    def settled() -> bool:
        st = statuses(cluster)
        return len({s["applied_index"] for s in st}) == 1 and len(st) == 3
    deadline = time.monotonic() + 20
    while not settled():
        assert time.monotonic() < deadline, statuses(cluster)
        time.sleep(0.2)
    before = {s["member"]: s for s in statuses(cluster)}
    scraped = {name: scrape(s["metrics_url"]) for name, s in before.items()}
    after = {s["member"]: s for s in statuses(cluster)}
    leaders = [name for name, s in after.items() if s["role"] == "leader"]
    assert len(leaders) == 1 and before[leaders[0]]["role"] == "leader", after
    leader = leaders[0]
    for name, samples in scraped.items():
        st = after[name]
        who = {"cluster": "default", "member": name}
        assert st["metrics_url"].startswith("http://127.0.0.1:") and st["metrics_url"].endswith("/metrics")
        assert value(samples, "strongroom_leader", **who) == (1 if name == leader else 0)
        assert value(samples, "strongroom_member_info", **who, role=st["role"], storage="disk-sync") == 1
        assert value(samples, "strongroom_epoch", **who) == int(st["epoch"])
        assert int(before[name]["commit_index"]) <= value(samples, "strongroom_commit_index", **who) \
            <= int(st["commit_index"])
        assert value(samples, "strongroom_synced", **who) == 1
        assert value(samples, "strongroom_disk_bytes", **who) > 0
        assert 0 < value(samples, "strongroom_database_memory_bytes", **who, kind="write_buffers") <= 32 * 2**20
        # Counted by applying the log, so the same on every member.
        assert value(samples, "strongroom_messages_stored_total", **who, store="metered") == 50
        assert value(samples, "strongroom_messages_acked_total", **who, store="metered") == 20
        assert value(samples, "strongroom_log_write_seconds_count", **who) > 0
        store = next(s for s in st["stores"] if s["name"] == "metered")
        assert value(samples, "strongroom_store_messages", **who, store="metered") == int(store["messages"])
        for durable in store["durables"]:
            labels = {**who, "store": "metered", "destination": "metered.news", "durable": durable["name"]}
            assert value(samples, "strongroom_durable_pending_messages", **labels) == \
                int(durable["pending_messages"])
            assert value(samples, "strongroom_durable_pending_bytes", **labels) == int(durable["pending_bytes"])
        assert {d["name"]: int(d["pending_messages"]) for d in store["durables"]} == \
            {"acking": 30, "dropping": 50}
    lead = scraped[leader]
    who = {"cluster": "default", "member": leader}
    acking = {**who, "store": "metered", "destination": "metered.news", "durable": "acking"}
    dropping = {**acking, "durable": "dropping"}
    assert value(lead, "strongroom_deliveries_total", **acking) >= 20
    assert value(lead, "strongroom_redeliveries_total", **acking) == 0
    assert value(lead, "strongroom_deliveries_total", **dropping) >= 10
    assert value(lead, "strongroom_redeliveries_total", **dropping) >= 5
    assert value(lead, "strongroom_commit_seconds_count", **who) > 0
    assert value(lead, "strongroom_group_commit_operations_sum", **who) >= 50
    # Lag per follower, both caught up.
    followers = sorted(n for n in scraped if n != leader)
    assert sorted(labels["peer"] for labels, _ in lead["strongroom_follower_lag_entries"]) == followers
    for peer in followers:
        assert value(lead, "strongroom_follower_reachable", **who, peer=peer) == 1
        # Deliveries are the leader's alone.
        assert "strongroom_deliveries_total" not in scraped[peer] or not scraped[peer]["strongroom_deliveries_total"]
    # The process's own metrics come with them.
    assert value(lead, "process_resident_memory_bytes") > 0


def test_status_names_each_members_metrics_url_and_the_stats_log_writes_lines(cluster: Cluster) -> None:
    st = statuses(cluster)
    text = strongroom(",".join(cluster.addresses()), "status")
    assert text.returncode == 0, text.stderr
    for s in st:
        assert f"{s['member']} {s['metrics_url']}" in text.stdout, text.stdout
    deadline = time.monotonic() + 10
    while "strongroom.stats: " not in cluster.logs():
        assert time.monotonic() < deadline, "no statistics line in the members' logs"
        time.sleep(0.2)
    line = next(x for x in cluster.logs().splitlines() if "strongroom.stats: " in x)
    assert "epoch" in line and "disk" in line and "pending" in line, line


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _trace_everywhere(cluster: Cluster, **what: Any) -> None:
    """Turn a trace filter on through every member: each applies it as it answers, so none misses
    the next message waiting for etcd's watch."""
    from strongroom.client import Client

    for address in cluster.addresses():
        async with Client([address], timeout=10) as one:
            settings = await one.set_message_trace(**what)
            assert any(f.destination == what.get("destination", "") and f.producer_id == what.get("producer_id", "")
                       for f in settings.filters), settings


def _trace(cluster: Cluster, *argv: str) -> tuple[int, Any]:
    result = strongroom(",".join(cluster.addresses()), "trace", *argv, "--json")
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else result.stderr


async def _traced_work(cluster: Cluster) -> tuple[str, int, str]:
    """Two messages to a traced destination (the first with a traceparent) and one to another,
    each received and acked by a durable; a malformed traceparent refused. (producer id and
    sequence of the first message, the leader's name.)"""
    from strongroom.errors import InvalidArgument

    await _trace_everywhere(cluster, destination="metered.traced", seconds=300)
    async with leader_client(cluster) as client:
        leader = next(s.member for s in await client.status() if s.role == "leader")
        watcher = await client.subscribe("metered.traced", "watcher")
        other = await client.subscribe("metered.untraced", "watcher")
        pub = client.publisher("metered.traced")
        first = await (await pub.send(b"traced", traceparent=TRACEPARENT))
        await (await pub.send(b"plain"))
        await client.publish("metered.untraced", b"not traced")
        got = await drain(watcher, 2)
        assert [(m.body, m.traceparent) for m in got] == [(b"traced", TRACEPARENT), (b"plain", "")]
        assert got[0].seq == first.message_seq
        assert [m.body for m in await drain(other, 1)] == [b"not traced"]
        url = next(s.metrics_url for s in await client.status() if s.role == "leader")

        async def stored() -> float:  # messages the leader ever stored in the store: only a store moves it
            return value(await asyncio.to_thread(scrape, url), "strongroom_messages_stored_total", store="metered")
        before = await stored()
        for bad in ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "not a trace"):
            with pytest.raises(InvalidArgument, match="traceparent"):
                await client.publish("metered.traced", b"bad", traceparent=bad)
        assert await stored() == before
        await watcher.close()
        await other.close()
        return pub.producer_id, got[0].sequence, leader


def test_a_traced_message_is_followed_across_every_member(cluster: Cluster) -> None:
    producer, sequence, leader = asyncio.run(_traced_work(cluster))
    members = sorted(s["member"] for s in statuses(cluster))
    deadline = time.monotonic() + 20
    while True:  # the followers apply the ack and the deletion a moment after the leader
        code, steps = _trace(cluster, "show", "--producer", producer, "--sequence", str(sequence))
        assert code == 0, steps
        if sorted(s["member"] for s in steps if s["step"] == "deleted") == members:
            break
        assert time.monotonic() < deadline, steps
        time.sleep(0.2)
    by_step: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        by_step.setdefault(s["step"], []).append(s)
        assert (s["producer_id"], int(s["sequence"]), s["destination"], s["traceparent"]) == \
            (producer, sequence, "metered.traced", TRACEPARENT), s
    assert sorted(by_step) == ["acked", "committed", "deleted", "delivered", "received"], steps
    assert [s["member"] for s in by_step["received"]] == [leader]
    assert [s["member"] for s in by_step["delivered"]] == [leader]
    assert "durable watcher, delivery 1" in by_step["delivered"][0]["detail"]
    for step in ("committed", "acked", "deleted"):
        assert sorted(s["member"] for s in by_step[step]) == members, (step, steps)
    # One log index per step on every member, and one store sequence throughout.
    assert len({int(s["log_index"]) for s in by_step["committed"]}) == 1
    assert len({int(s["message_seq"]) for s in steps if s["step"] != "received"}) == 1
    # On the leader, in the order they happened.
    on_leader = [s["step"] for s in steps if s["member"] == leader]
    assert on_leader == ["received", "committed", "delivered", "acked", "deleted"], on_leader
    # Another destination left untraced; the other message of the traced one traced without a traceparent.
    code, none = _trace(cluster, "show", "--destination", "metered.untraced")
    assert code == 1 and none == []
    code, both = _trace(cluster, "show", "--destination", "metered.traced", "--producer", producer)
    assert {int(s["sequence"]) for s in both} == {sequence, sequence + 1}
    assert {s["traceparent"] for s in both if int(s["sequence"]) == sequence + 1} == {""}


def test_tracing_is_turned_off_for_every_member_and_bad_requests_change_nothing(cluster: Cluster) -> None:
    code, on = _trace(cluster, "on", "--producer", "p-off", "--for", "60")
    assert code == 0 and {f["producer_id"] for f in on["filters"]} >= {"p-off"}, on
    code, refused = _trace(cluster, "on", "--destination", "metered.x", "--for", "100000")
    assert code == 1 and "86400" in refused, refused
    code, off = _trace(cluster, "off")
    assert code == 0 and off == {"filters": []}, off
    deadline = time.monotonic() + 10

    async def publish_after_off() -> None:
        async with leader_client(cluster) as client:
            await client.subscribe("metered.traced", "after-off")
            await client.publish("metered.traced", b"after off")

    # Every member follows the etcd key: once off there, nothing more is traced anywhere.
    while True:
        before = _trace(cluster, "show", "--destination", "metered.traced")[1]
        time.sleep(0.5)
        asyncio.run(publish_after_off())
        after = _trace(cluster, "show", "--destination", "metered.traced")[1]
        if len(after) == len(before):
            break
        assert time.monotonic() < deadline, "tracing did not stop"
