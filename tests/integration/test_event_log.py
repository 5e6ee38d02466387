"""The store event log on a real cluster (real etcd, real member processes): what the files hold
after publishing, acknowledging, expiry, and a leader killed with SIGKILL under load: every
stored message exactly once, every acknowledgment exactly once, every expiry exactly once, by
key, with the new leader continuing where the last published file ended; and a unit of work's
state changes."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import Cluster, wait_for

from strongroom.client import Client
from strongroom.events.schema import KEY_COLUMNS, SCHEMA_VERSION, VERSION_KEY, parse_file_name

pytestmark = pytest.mark.slow

DESTINATIONS = """\
  - name: "ttl.*"
    kind: queue
    store: default
    ttl_seconds: 1
"""


def read_events(root: Path) -> tuple[pa.Table, list[Path]]:
    """Every published file of the cluster (hidden ones skipped, as a reader does)."""
    files = sorted(p for p in root.glob("cluster=default/hour=*/*.parquet") if not p.name.startswith("."))
    tables = []
    for f in files:
        assert pq.read_metadata(f).metadata[VERSION_KEY] == str(SCHEMA_VERSION).encode(), f
        tables.append(pq.read_table(f))
    return (pa.concat_tables(tables).unify_dictionaries() if tables else None), files  # type: ignore[return-value]


def rows_of(table: pa.Table, kind: str, destination: str) -> list[dict[str, Any]]:
    return [r for r in table.to_pylist() if r["kind"] == kind and r["destination"] == destination]


async def test_events_exact_by_key_across_a_leader_killed_under_load(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    events_dir = tmp_path / "events"
    cluster: Cluster = make_cluster(extra_destinations=DESTINATIONS, cluster_extra=(
        f"    event_log:\n      directory: {events_dir}\n      interval_seconds: 1\n"))
    old = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    total = 3000
    stored: list[int] = []
    publisher = client.publisher("orders.queue", window=64)

    async def published_some() -> bool:
        return any(events_dir.rglob("events-*.parquet"))

    try:
        futures = []
        for i in range(total):
            futures.append(await publisher.send(str(i).encode()))
            if i == total // 3:
                # The old leader has published a file (it does every second) ...
                await wait_for(published_some, 20)
            if i == total // 3 + 600:
                # ... and is killed under load, with entries applied that it has not published.
                cluster.kill(old, signal.SIGKILL)
        await publisher.flush()
        for f in futures:
            result = f.result()
            assert result.confirmed and not result.duplicate
            stored.append(result.message_seq)
    finally:
        await publisher.close()
    assert len(set(stored)) == total
    new = await cluster.leader(exclude=old)
    # Some messages expire (time-to-live 1 s, nobody consumes them).
    expiring = [(await client.publish("ttl.queue", b"short-lived")).message_seq for _ in range(20)]
    # Every order is consumed and acknowledged on the new leader.
    sub = await client.subscribe("orders.queue", "", ack="explicit", credit=256)
    got = 0
    while got < total:
        msg = await sub.next(timeout=20)
        await sub.ack(msg)
        got += 1
    await sub.acks_written()
    await sub.close()
    # A unit of work sent, received and committed: each state it went through is a row.
    job = client.unit_of_work("jobs.queue", uow_id="job-1")
    job.add(b"line 1")
    job.add(b"line 2")
    await job.commit()
    got = await client.receive_uow("jobs.queue", "worker", wait=10)
    assert got is not None and await got.commit() == "PROCESSED"
    job_bytes = (await client.uow_status("job-1")).bytes

    async def complete() -> bool:
        table, _ = read_events(events_dir)
        if table is None:
            return False
        acked = rows_of(table, "message_acked", "orders.queue")
        expired = [r for r in table.to_pylist() if r["kind"] == "message_expired"]
        return len(acked) >= total and len(expired) >= len(expiring) and len(rows_of(table, "uow_state",
                                                                                     "jobs.queue")) >= 3

    await wait_for(complete, timeout=60, interval=0.5)
    await asyncio.sleep(2.5)  # files published late would show up as duplicates now
    table, files = read_events(events_dir)
    await client.close()

    keys = list(zip(*(table.column(k).to_pylist() for k in KEY_COLUMNS)))
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} keys twice, e.g. {duplicates[:3]}"
    # Both leaders wrote files: the new one continued where the old one's last file ended, and
    # published events of entries of the old leader's epoch it had not published (derived by
    # the new leader while it followed).
    writers = sorted({parse_file_name(f.name)[2] for f in files})
    assert len(writers) >= 2, f"files of one epoch only: {[f.name for f in files]}"
    old_epoch, new_epoch = writers[0], writers[-1]
    by_new = pa.concat_tables([pq.read_table(f) for f in files if parse_file_name(f.name)[2] == new_epoch])
    assert old_epoch in set(by_new.column("epoch").to_pylist()), "the new leader published no event of " \
        "an entry the old leader applied: the kill did not test the hand-over"
    ranges = sorted(parse_file_name(f.name)[:2] for f in files)
    log_rows = [r for r in table.to_pylist() if r["position"] < 1 << 31]
    indexes = sorted({r["log_index"] for r in log_rows})
    # Each stored message exactly once, each pending exactly once, each ack exactly once.
    stored_rows = Counter(r["seq"] for r in rows_of(table, "message_stored", "orders.queue"))
    assert sorted(stored_rows) == sorted(stored) and set(stored_rows.values()) == {1}, ranges
    pending_rows = Counter(r["seq"] for r in rows_of(table, "message_pending", "orders.queue"))
    assert sorted(pending_rows) == sorted(stored) and set(pending_rows.values()) == {1}
    acked = rows_of(table, "message_acked", "orders.queue")
    acked_rows = Counter(r["seq"] for r in acked)
    assert sorted(acked_rows) == sorted(stored) and set(acked_rows.values()) == {1}
    assert {r["durable"] for r in acked} == {""}
    expired_rows = Counter(r["seq"] for r in table.to_pylist() if r["kind"] == "message_expired")
    assert sorted(expired_rows) == sorted(expiring) and set(expired_rows.values()) == {1}
    created = [r for r in table.to_pylist() if r["kind"] == "durable_created"]
    assert sorted(r["destination"] for r in created) == ["orders.queue", "ttl.queue"]
    # Every delivery the new leader made is there once (deliveries: at most once across failover).
    delivered = rows_of(table, "message_delivered", "orders.queue")
    assert len(delivered) >= total and {r["seq"] for r in delivered} == set(stored)
    assert indexes[0] >= 1 and len(log_rows) + len(delivered) <= table.num_rows
    job_rows = sorted(rows_of(table, "uow_state", "jobs.queue"), key=lambda r: (r["log_index"], r["position"]))
    assert [(r["detail"], r["reason"], r["store"], r["size"]) for r in job_rows] == [
        ("job-1 ACCEPTED 2", "commit", "default", job_bytes),
        ("job-1 DELIVERED 2", "deliver", "default", job_bytes),
        ("job-1 PROCESSED 2", "receiver_commit", "default", job_bytes)]
    assert job_bytes > 0 and len({r["log_index"] for r in job_rows}) == 3
    st = await cluster.status(new)
    assert st is not None and st.role == "leader"

    # The quiet leader still applies entries that make no rows (its pseudo-clock, every 10 s).
    # They count as published once every row before them is: the published index Status
    # reports reaches the applied index, past the newest file, so a reader can tell the log
    # complete up to the state it compares with.
    def newest_file() -> int:
        return max(parse_file_name(f.name)[1] for f in read_events(events_dir)[1])

    async def ticked() -> bool:
        st = await cluster.status(new)
        return st is not None and st.applied_index > newest_file()

    await wait_for(ticked, timeout=30, interval=0.5)

    async def published_to_applied() -> bool:
        st = await cluster.status(new)
        return st is not None and st.events_published_index >= st.applied_index

    await wait_for(published_to_applied, timeout=10, interval=0.2)
    st = await cluster.status(new)
    assert st is not None and st.events_published_index > newest_file(), "the published index stopped at the " \
        "newest file"
