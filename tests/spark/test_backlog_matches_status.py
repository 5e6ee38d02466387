"""The backlog job against the cluster itself (issue 19, Correctness): a real 3-member cluster
with the store event log on; messages published to two stores, a topic with two durables (one
acks everything, one part), a queue, a destination whose messages expire unconsumed and one
whose messages are dead-lettered (naked past the redelivery limit, or terminated), the leader
killed with SIGKILL once during the publishing. Once everything has settled and the leader's
event log is published up to its applied index, the job's as-of-now backlog must equal
`strongroom status --json` field by field, and both must equal what the test left behind.

It lives with the Spark tests for the session's Spark (conftest.py); the cluster is the
harness's."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from harness import Cluster, realm_yaml, running_cluster, wait_for

from spark_jobs.compare import compare_with_status, status_of_leaders
from strongroom.cli.main import run
from strongroom.client import Client, Received
from strongroom.events.schema import parse_file_name
from strongroom.events.writer import last_published_index

pytestmark = pytest.mark.slow

STORES = """\
  - name: ledger
    cluster: default
"""
DESTINATIONS = """\
  - name: "orders.*"
    kind: topic
    store: ledger
  - name: "retry.*"
    kind: topic
    store: ledger
    redelivery_limit: 2
    dead_letter: dead.queue
  - name: "dead.*"
    kind: queue
    store: ledger
  - name: "ttl.*"
    kind: queue
    store: default
    ttl_seconds: 2
"""
ORDERS = 240
"""Published to orders.t, the leader killed half-way. Its durables: `all` acks every order,
`part` some, `late` none (a replay at the end moves it past all but the last LATE: they leave it
as skipped), `gone` none (deleted at the end: what only it held leaves the store)."""
KILL_AT = 120
LATE = 40
JOBS, JOBS_ACKED = 40, 25
"""Published to / acknowledged on jobs.queue."""
TTL = 12
"""Published to ttl.queue and never consumed: all expire."""
RETRY = 10
NAKED = {1, 4}
TERMED = {2, 7}
"""Of the messages to retry.t (by index): naked until dead-lettered, terminated at once."""
DEAD_ACKED = 1
"""Dead letters acknowledged on dead.queue (the others stay pending)."""


def part_keeps(i: int) -> bool:
    """The orders `part` leaves unacknowledged (by index)."""
    return i % 3 == 0


def body(kind: str, i: int) -> bytes:
    return f"{kind}-{i:04d}".encode().ljust(40, b".")


def status_json(cluster: Cluster) -> list[dict[str, Any]]:
    """`strongroom status --json`, the real command."""
    cli = Path(sys.executable).with_name("strongroom")
    out = subprocess.run([str(cli), "status", "--json", "-s", ",".join(cluster.running())],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def leader_of(status: list[dict[str, Any]]) -> dict[str, Any]:
    leader = status_of_leaders(status)["default"]
    assert leader["role"] == "leader", status
    return dict(leader)


def durable_of(leader: dict[str, Any], destination: str, name: str) -> dict[str, Any]:
    return next(d for s in leader["stores"] for d in s["durables"] if d["destination"] == destination
                and d["name"] == name)


def store_of(leader: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in leader["stores"] if s["name"] == name)


async def drain_all(sub: Any, n: int) -> list[Received]:
    """Exactly `n` messages of a subscription, not acknowledged."""
    return [await sub.next(timeout=20) for _ in range(n)]


async def test_the_backlog_job_equals_status_after_a_leader_was_killed(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events_dir = tmp_path / "events"
    text = realm_yaml(extra_stores=STORES, extra_destinations=DESTINATIONS, cluster_extra=(
        f"    event_log:\n      directory: {events_dir}\n      interval_seconds: 1\n"))
    with running_cluster(tmp_path / "cluster", text) as cluster:
        old = await cluster.leader()
        client = Client(cluster.addresses(), timeout=30)
        try:
            # The topic's durables exist before anything is published to it.
            for dest, name in (("orders.t", "all"), ("orders.t", "part"), ("orders.t", "late"),
                               ("orders.t", "gone"), ("retry.t", "worker")):
                await (await client.subscribe(dest, name)).close()
            for i in range(JOBS):
                await client.publish("jobs.queue", body("job", i))
            for i in range(TTL):
                await client.publish("ttl.queue", body("ttl", i))
            jobs = await client.subscribe("jobs.queue", credit=JOBS)
            for m in await drain_all(jobs, JOBS):
                if int(m.body[4:8]) < JOBS_ACKED // 2:
                    await jobs.ack(m)
            await jobs.close()

            async def published_some() -> bool:
                return any(events_dir.rglob("events-*.parquet"))

            await wait_for(published_some, 20)
            publisher = client.publisher("orders.t", window=16)
            futures = []
            try:
                for i in range(ORDERS):
                    futures.append(await publisher.send(body("order", i)))
                    if i == KILL_AT:
                        cluster.kill(old, signal.SIGKILL)
                await publisher.flush()
            finally:
                await publisher.close()
            seqs = [f.result().message_seq for f in futures]
            assert len(set(seqs)) == ORDERS and all(f.result().confirmed for f in futures)
            new = await cluster.leader(exclude=old)
            assert new != old

            # After the failover: the rest of the acks, the dead letters.
            jobs = await client.subscribe("jobs.queue", credit=JOBS)
            rest = await drain_all(jobs, JOBS - JOBS_ACKED // 2)
            for m in rest[:JOBS_ACKED - JOBS_ACKED // 2]:
                await jobs.ack(m)
            await jobs.close()
            for name, keep in (("all", lambda i: False), ("part", part_keeps)):
                sub = await client.subscribe("orders.t", name, credit=ORDERS)
                got = await drain_all(sub, ORDERS)
                assert sorted(m.seq for m in got) == sorted(seqs)
                for m in got:
                    if not keep(int(m.body[6:10])):
                        await sub.ack(m)
                await sub.close()
            worker = await client.subscribe("retry.t", "worker")
            for i in range(RETRY):
                await client.publish("retry.t", body("retry", i))
            settled: set[int] = set()
            retry_seq: dict[int, int] = {}
            while len(settled) < RETRY:
                m = await worker.next(timeout=20)
                i = int(m.body[6:10])
                retry_seq[i] = m.seq
                if i in TERMED:
                    await m.term()
                    settled.add(i)
                elif i in NAKED:
                    await m.nak()
                    if m.delivery_count == 2:  # the next delivery would pass the limit
                        settled.add(i)
                else:
                    await m.ack()
                    settled.add(i)
            await worker.close()
            dead = await client.subscribe("dead.queue")
            letters = await drain_all(dead, len(NAKED) + len(TERMED))
            assert sorted(m.fields["sr.dead_letter.seq"] for m in letters) == sorted(  # type: ignore[type-var]
                retry_seq[i] for i in NAKED | TERMED)
            for m in letters[:DEAD_ACKED]:
                await dead.ack(m)
            await dead.close()
            late = await client.subscribe("orders.t", "late", replay_from_seq=sorted(seqs)[-LATE], credit=ORDERS)
            assert sorted(m.seq for m in await drain_all(late, LATE)) == sorted(seqs)[-LATE:]
            await late.close()
            assert (await client.delete_durable("orders.t", "gone"))[1] == ORDERS
        finally:
            await client.close()

        dead_left = len(NAKED) + len(TERMED) - DEAD_ACKED
        part_left = sum(part_keeps(i) for i in range(ORDERS))
        held = {seqs[i] for i in range(ORDERS) if part_keeps(i)} | set(sorted(seqs)[-LATE:])
        ledger_left = len(held) + dead_left
        expected = {("jobs.queue", ""): JOBS - JOBS_ACKED, ("ttl.queue", ""): 0, ("orders.t", "all"): 0,
                    ("orders.t", "part"): part_left, ("orders.t", "late"): LATE, ("retry.t", "worker"): 0,
                    ("dead.queue", ""): dead_left}

        # Settled: every ack committed, every expiry applied, nothing in flight (all closed).
        async def settled_state() -> bool:
            leader = leader_of(await asyncio.to_thread(status_json, cluster))
            return all(durable_of(leader, d, n)["pending_messages"] == v for (d, n), v in expected.items()) and all(
                d["unacked"] == 0 for s in leader["stores"] for d in s["durables"])

        try:
            await wait_for(settled_state, 60, 0.5)
        except TimeoutError:
            pass  # the assertions below say what differs
        # ... and the leader's event log published up to its applied index (entries that made no
        # rows, such as its pseudo-clock ticks, count once every row before them is): the files
        # say everything.
        status: list[dict[str, Any]] = []

        async def published() -> bool:
            status[:] = await asyncio.to_thread(status_json, cluster)
            leader = leader_of(status)
            return int(leader.get("events_published_index", 0)) >= int(leader["applied_index"])

        await wait_for(published, 60, 0.5)
        applied = int(leader_of(status)["applied_index"])
        assert last_published_index(events_dir, "default") <= applied

        now = datetime.now(UTC).isoformat()
        assert run(["metrics", "backlog", "--events", str(events_dir), "--out", str(tmp_path / "out"),
                    "--as-of", now, "--json", "--quiet"]) == 0
        summary = json.loads(capsys.readouterr().out)

    # Both leaders published files: the job read a log that crossed the failover.
    files = sorted(events_dir.rglob("events-*.parquet"))
    writers = {name[2] for name in map(parse_file_name, (f.name for f in files)) if name is not None}
    assert len(writers) >= 2, writers
    # The log holds the kinds the scenario means to test.
    kinds = Counter((r["kind"], r["destination"]) for f in files
                    for r in pq.read_table(f, columns=["kind", "destination"]).to_pylist())
    assert kinds[("message_expired", "ttl.queue")] == TTL
    assert kinds[("message_dead_lettered", "retry.t")] == len(NAKED) + len(TERMED)
    assert kinds[("message_skipped", "orders.t")] == ORDERS - LATE
    assert kinds[("durable_deleted", "orders.t")] == 1
    differences = compare_with_status(summary["durables"], summary["stores"], status)
    assert not differences, "\n".join(map(str, differences))
    # Both sides equal what the test left behind, not merely each other.
    leader = leader_of(status)
    ours = {(r["destination"], r["durable"]): r for r in summary["durables"]}
    for key, pending in expected.items():
        assert ours[key]["pending_messages"] == pending, key
        assert durable_of(leader, *key)["pending_messages"] == pending, key
    # A message's size is its encoded form (body, producer, times): more than its body.
    assert ours[("orders.t", "part")]["pending_bytes"] > part_left * len(body("order", 0))
    ledger = next(r for r in summary["stores"] if r["store"] == "ledger")
    assert ledger["messages"] == ledger_left == store_of(leader, "ledger")["messages"]
    assert ("orders.t", "gone") not in ours
    assert all(d["name"] != "gone" for d in store_of(leader, "ledger")["durables"])
    default = next(r for r in summary["stores"] if r["store"] == "default")
    assert default["messages"] == JOBS - JOBS_ACKED == store_of(leader, "default")["messages"]
