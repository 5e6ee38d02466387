"""The PSTORE report of a running cluster (realm `persistent_store.report`;
docs/store-operations.md, "The store report"), with real etcd, member processes and RocksDB:
every log entry a member stores is a Created line with its type, messages and length, every
entry compaction removes a Deleted line, each restore point's snapshot a Master record created
(and deleted once dropped); the file follows the member's option, else the environment variable
(with {member}), else PSTORE.REPORT in the data directory."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from harness import Cluster, wait_for
from strongroom.client import Client
from strongroom.events.report_rows import ACTION_KINDS
from strongroom.events.schema import RECORDS_RUN_BIT
from strongroom.events.writer import last_published_index
from strongroom.persistence.pstore_report import ReportLine, read_report

REPORT_ON = "    persistent_store:\n      report: true\n"


def report_rows(events_dir: Path, member: str) -> list[tuple[int, int, str, str, str, int]]:
    """A member's PSTORE report rows in the store event log: (run, line, kind, detail, type,
    length), in order."""
    files = sorted(events_dir.glob("cluster=default/hour=*/records-*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist() if r["target"] == member]
    return sorted((r["epoch"], r["log_index"], r["kind"], r["detail"], r["reason"], r["size"]) for r in rows)


def as_row(line: ReportLine) -> tuple[str, str, str, int]:
    return ACTION_KINDS[line.action], f"{line.identifier} {line.elements}", line.record_type, line.length


async def test_members_report_the_records_they_create_and_delete(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    events_dir = tmp_path / "events"
    cluster: Cluster = make_cluster(cluster_extra=REPORT_ON + (
        f"    event_log:\n      directory: {events_dir}\n      interval_seconds: 1\n"), compact_after_entries=100)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    try:
        for i in range(250):
            assert (await client.publish("audit.queue", b"a%03d" % i)).confirmed
        lead = await cluster.status(leader)
        assert lead is not None

        async def applied_everywhere() -> bool:
            sts = [await cluster.status(m) for m in cluster.names]
            return all(st is not None and st.applied_index >= lead.commit_index for st in sts)

        await wait_for(applied_everywhere)
        still = await cluster.leader()
        for member in cluster.names:
            lines = read_report(cluster.data_dir(member) / "PSTORE.REPORT")
            created = {ln.identifier: ln for ln in lines if ln.action == "Created"}
            logs = [ln for ln in created.values() if ln.identifier.startswith("db:log:")]
            # One line per entry, a publication carrying its one message.
            published = [ln for ln in logs if ln.record_type == "Publication"]
            assert all(ln.elements == 1 for ln in published) and all(ln.length > 8 for ln in logs)
            total = sum(ln.elements for ln in published)
            if member == leader == still:
                # The leader throughout appended every entry itself: all 250 messages, and its
                # own no-op (a Cluster record).
                assert total == 250 and any(ln.record_type == "Cluster" for ln in logs)
            else:
                # A follower that fell behind a compaction got the leader's snapshot instead of
                # the entries before it: those it never stored, and the snapshot is its record.
                assert total <= 250
                if total < 250:
                    assert any(ident.startswith("db:meta:snapshot@~") for ident in created), (member, total)
            # Compaction at 100 entries: removed entries are Deleted lines (no length), the
            # snapshots Master records.
            deleted = [ln for ln in lines if ln.action == "Deleted"]
            assert deleted and all(ln.length == 0 and ln.elements == 0 for ln in deleted)
            assert {ln.identifier for ln in deleted if ln.identifier.startswith("db:log:")} <= set(created)
            snapshots = [ln for ln in created.values() if ln.identifier.startswith("db:meta:snapshot@~")]
            assert snapshots and all(ln.record_type == "Master" for ln in snapshots)
            # With one leader all along no entry is replaced: each index created once (after a
            # leader change a follower may cut entries the new leader does not have and store
            # others at their indexes: Deleted, then Created again).
            counts = Counter(ln.identifier for ln in lines if ln.action == "Created" and ln.identifier.startswith("db:log:"))
            if leader == still:
                assert max(counts.values()) == 1

        # With the cluster's event log on, each member's lines are rows of it too, in files of
        # their own: one run per member start, the lines in order, each as the text says.
        for member in cluster.names:
            want = len(read_report(cluster.data_dir(member) / "PSTORE.REPORT"))

            async def rows_caught_up(member: str = member, want: int = want) -> bool:
                return len(report_rows(events_dir, member)) >= want

            await wait_for(rows_caught_up, timeout=20)
            rows = report_rows(events_dir, member)
            lines = read_report(cluster.data_dir(member) / "PSTORE.REPORT")
            assert len({r[0] for r in rows}) == 1 and rows[0][0] & RECORDS_RUN_BIT, rows[:1]
            assert [r[1] for r in rows] == list(range(1, len(rows) + 1))
            assert [r[2:] for r in rows] == [as_row(ln) for ln in lines[:len(rows)]]
        # They are not events: a leader resumes after its newest events- file, never after a
        # report line's number (the leader's report has more lines than the log has entries).
        published: list[Any] = []

        async def events_published() -> bool:  # the publishes' events are in events- files
            published[:] = [await cluster.status(still)]
            return published[0] is not None and published[0].events_published_index >= published[0].applied_index

        await wait_for(events_published, timeout=20)
        now = published[0]
        assert max(r[1] for m in cluster.names for r in report_rows(events_dir, m)) > now.applied_index
        assert 0 < last_published_index(events_dir, "default") <= now.applied_index

        # The member's option, else the environment variable, names the file instead.
        followers = [m for m in cluster.names if m != leader]
        given, by_env = tmp_path / "given.report", tmp_path / "env-{member}.report"
        cluster.extra_args[followers[0]] = ["--pstore-report", str(given)]
        cluster.extra_env[followers[1]] = {"STRONGROOM_PSTORE_REPORT": str(by_env)}
        for member in followers:
            cluster.kill(member, signal.SIGTERM)
            cluster.start(member)
        for i in range(10):
            assert (await client.publish("audit.queue", b"b%03d" % i)).confirmed
        env_file = tmp_path / f"env-{followers[1]}.report"

        async def both_report() -> bool:
            return all(p.exists() and sum(ln.elements for ln in read_report(p) if ln.action == "Created") >= 10
                       for p in (given, env_file))

        await wait_for(both_report, timeout=30)
    finally:
        await client.close()
