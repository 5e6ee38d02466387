"""Fail back, in-process over a real replica (a database of each storage driver in a temporary
directory): a demoted site's member cuts its log back to the last shared index and its state is
the state at that index again (also after a restart), for a state kept in memory and for indexes
on disk, also when the log was compacted past that index (a restore point before it: the
previous snapshot, or a checkpoint of the database); a member killed at any step of the roll back
restarts with the old log and state or the rolled-back ones, never a mix; the cut only takes
entries of an older generation; a member whose restore points all lie past the index cannot
rebuild there and says so, with its log and state gone. And the manifest of a lost tail: every
message with its id, every ack, sums per store."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_diskstate import observe

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.manifest import manifest_of
from strongroom.dr.record import DrRecord, DrRole, epoch_of
from strongroom.persistence import checkpoints
from strongroom.persistence.drsite import cut_back
from strongroom.persistence.replica import Replica
from strongroom.persistence.state import durable_key
from strongroom.persistence.snapshot_store import snapshot_key as _snapshot_key
from strongroom.persistence.storage import META_POINTS, META_SNAPSHOT, DiskStorage
from strongroom.realm.model import Cluster, parse_realm

SERVICES = Path(__file__).resolve().parents[2] / "services"


def _realm_yaml(indexes_on_disk: bool, driver: str = "rocksdb") -> str:
    return ("clusters:\n  - name: c1\n    compact_after_entries: 100\n"
            + ("    indexes_on_disk: true\n" if indexes_on_disk else "")
            + f"    persistent_store:\n      driver: {driver}\n"
            + "    members:\n      - name: m1\nstores:\n  - name: s\n    cluster: c1\n")


def _cluster(indexes_on_disk: bool, driver: str = "rocksdb") -> Cluster:
    cluster = parse_realm(_realm_yaml(indexes_on_disk, driver)).cluster("c1")
    assert cluster is not None
    return cluster


CLUSTER = _cluster(False)
KINDS = pytest.mark.parametrize("indexes_on_disk", [False, True], ids=["memory-state", "indexes-on-disk"])


async def _stored() -> None:
    pass


def _publish(i: int, producer: str = "p1") -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination="q.queue", queue=True, message=cpb.Message(
        body=f"b{i}".encode(), producer_id=producer, sequence=i), published_at=float(i)))


def _ops(i: int) -> list[rpb.Operation]:
    """Entry i publishes message i; every third entry also acks (deletes) an earlier message, so
    rolling back must bring deleted messages back."""
    ops = [_publish(i)]
    if i % 3 == 0:
        ops.append(rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key("q.queue", ""),
                                               message_seqs=[i - 2])))
    return ops


def _replica(path: Path, entries: int, epoch: int = 5, cluster: Cluster = CLUSTER) -> Replica:
    """A member that stored, committed and applied entries 1..`entries`, one at a time (so it
    compacts every 100 entries, as a member under load does)."""
    replica = Replica(lambda: cluster, "m1", path, _stored)
    replica.commit_index = max(replica.commit_index, min(entries, replica.log.last_index))
    replica.apply_committed()
    for i in range(replica.log.last_index + 1, entries + 1):
        replica.log.append_local(rpb.LogEntry(index=i, epoch=epoch, ops=_ops(i)))
        replica.commit_index = i
        replica.apply_committed()
    return replica


def _state_at(path: Path, index: int, indexes_on_disk: bool, driver: str = "rocksdb") -> dict[str, object]:
    """What a member that applied the log only up to `index` holds."""
    reference = _replica(path, index, cluster=_cluster(indexes_on_disk, driver))
    try:
        return observe(reference.state)
    finally:
        reference.close()


def test_a_demoted_member_cuts_the_old_generations_tail_and_its_state_is_the_shared_indexs(tmp_path: Path) -> None:
    replica = _replica(tmp_path, 10)
    assert replica.state.store_count["s"] == 7
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=6))
    assert replica.log.last_index == 6 and replica.state.applied_index == 6 and replica.commit_index == 6
    assert replica.state.store_count["s"] == 4
    assert replica.promised_epoch == 0  # the node promises the generation, not the cut
    replica.close()
    again = _replica(tmp_path, 6)
    assert again.log.last_index == 6 and again.state.store_count["s"] == 4
    again.close()


def test_entries_the_new_primary_shipped_are_never_cut(tmp_path: Path) -> None:
    replica = _replica(tmp_path, 6)
    for i in range(7, 10):  # shipped from the primary of generation 1 after the shared index
        replica.log.append_local(rpb.LogEntry(index=i, epoch=epoch_of(1, 3), ops=[_publish(i)]))
    replica.commit_index = 9
    replica.apply_committed()
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=6))
    assert replica.log.last_index == 9 and replica.state.store_count["s"] == 7
    cut_back(replica, DrRecord(DrRole.FENCED, generation=0, newer_generation=1, since_index=6))
    assert replica.log.last_index == 9  # only a demoted (standby) site cuts
    replica.close()


@KINDS
@pytest.mark.parametrize(("entries", "since", "point"), [(150, 60, 0), (250, 150, 100), (250, 230, 200)],
                         ids=["before-the-first-snapshot", "before-the-latest-snapshot", "after-the-latest-snapshot"])
def test_a_roll_back_across_a_compaction_rebuilds_the_state_at_the_shared_index(
        tmp_path: Path, indexes_on_disk: bool, entries: int, since: int, point: int, driver: str) -> None:
    cluster = _cluster(indexes_on_disk, driver)
    expected = _state_at(tmp_path / "reference", since, indexes_on_disk, driver)
    replica = _replica(tmp_path / "m1", entries, cluster=cluster)
    assert replica.log.snapshot_index == entries // 100 * 100
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=since))
    assert not replica.apply_stopped
    assert (replica.log.snapshot_index, replica.log.last_index, replica.commit_index) == (point, since, since)
    assert observe(replica.state) == expected
    # Not one of the cut entries is read again, and the log goes on from the shared index.
    for i in range(since + 1, since + 121):
        replica.log.append_local(rpb.LogEntry(index=i, epoch=epoch_of(1, 1), ops=[_publish(10_000 + i)]))
        replica.commit_index = i
        replica.apply_committed()
    assert replica.log.snapshot_index > since
    last = observe(replica.state)
    replica.close()
    # Restarted: the same log and state.
    again = Replica(lambda: cluster, "m1", tmp_path / "m1", _stored)
    again.commit_index = again.log.last_index
    again.apply_committed()
    assert again.log.last_index == since + 120 and observe(again.state) == last
    again.close()


@KINDS
def test_restore_points_keep_the_previous_snapshot_and_the_log_from_it(tmp_path: Path, indexes_on_disk: bool,
                                                                      driver: str) -> None:
    replica = _replica(tmp_path, 350, cluster=_cluster(indexes_on_disk, driver))
    storage = replica.storage
    assert isinstance(storage, DiskStorage)
    assert storage.restore_points() == [(200, 5), (300, 5)] and replica.log.snapshot_index == 300
    storage.read_entry(201)  # kept for a roll back, though the log starts after 300
    with pytest.raises(Exception, match="missing"):
        storage.read_entry(200)
    kept = sorted(p.name for p in (tmp_path / checkpoints.CHECKPOINTS).iterdir()) if indexes_on_disk else []
    assert kept == ([f"{200:020d}", f"{300:020d}"] if indexes_on_disk else [])
    # A snapshot installed from a leader replaces them all.
    index, epoch, data = replica.snapshot()
    replica.install(index, epoch, data)
    assert storage.restore_points() == [(350, 5)]
    if indexes_on_disk:
        assert [p.name for p in (tmp_path / checkpoints.CHECKPOINTS).iterdir()] == [f"{350:020d}"]
    replica.close()


@KINDS
def test_a_log_compacted_past_every_restore_point_cannot_be_rebuilt_there_and_says_so(
        tmp_path: Path, indexes_on_disk: bool, driver: str) -> None:
    cluster = _cluster(indexes_on_disk, driver)
    replica = _replica(tmp_path, 350, cluster=cluster)
    assert replica.log.snapshot_index == 300  # restore points at 200 and 300
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=160))
    assert replica.apply_stopped and "restart this member" in replica.apply_stopped
    assert replica.log.last_index == 0 and replica.commit_index == 0
    replica.close()
    # Restarted, it is an empty member (its state on disk too): it takes the standby leader's state.
    again = Replica(lambda: cluster, "m1", tmp_path, _stored)
    assert again.log.last_index == 0 and again.state.applied_index == 0 and not again.state.store_count.get("s")
    assert not again.state.messages
    again.close()


def test_data_of_a_version_before_restore_points_rolls_back_from_its_one_snapshot(tmp_path: Path) -> None:
    replica = _replica(tmp_path / "m1", 150)
    storage = replica.storage
    assert isinstance(storage, DiskStorage)
    # As that version left it: one snapshot under `snapshot`, no restore points, the log after it.
    parts = storage.snapshot_parts(100)
    assert parts is not None and len(parts) >= 1
    data = b"".join(parts)  # the parts joined are one serialised snapshot, as that version wrote it
    wb = storage.batch()
    wb.put(META_SNAPSHOT, data, storage._meta_h)
    wb.delete_range(_snapshot_key(100), _snapshot_key(101), storage._meta_h)
    wb.delete(META_POINTS, storage._meta_h)
    for i in range(1, 101):
        wb.delete(i.to_bytes(8, "big"), storage._log_h)
    storage.db.write(wb, sync=True)
    replica.close()
    expected = _state_at(tmp_path / "reference", 120, False)
    again = _replica(tmp_path / "m1", 150)
    assert again.log.snapshot_index == 100 and isinstance(again.storage, DiskStorage)
    assert again.storage.restore_points() == [(100, 5)]
    cut_back(again, DrRecord(DrRole.STANDBY, generation=1, since_index=120))
    assert again.log.last_index == 120 and observe(again.state) == expected
    again.close()
    # Its next compaction keeps that snapshot as the older restore point, under its index.
    later = _replica(tmp_path / "m1", 260)
    assert isinstance(later.storage, DiskStorage)
    assert later.storage.restore_points() == [(100, 5), (200, 5)]
    assert later.storage._meta.get(META_SNAPSHOT) is None and list(later.storage.snapshot_parts(100) or []) == [data]
    later.close()


# Where the member process dies during the roll back (`_CRASH` patches the step to exit at once),
# and what it must find when restarted: the old log and state, or the rolled-back ones.
_CRASHES = {
    "memory-state": {"before-the-write": "old", "after-the-write": "rolled back", "replaying": "rolled back"},
    "indexes-on-disk": {"building-the-copy": "old", "marked-complete": "rolled back",
                        "between-the-renames": "rolled back", "after-the-renames": "rolled back",
                        "replaying": "rolled back"},
}

_CRASH = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import strongroom.persistence.checkpoints as checkpoints
    from strongroom.dr.record import DrRecord, DrRole
    from strongroom.persistence.diskstate import DiskStateMachine
    from strongroom.persistence.drsite import cut_back
    from strongroom.persistence.log import ReplicatedLog
    from strongroom.persistence.replica import Replica
    from strongroom.persistence.state import StateMachine
    from strongroom.persistence.snapshot_store import snapshot_key as _snapshot_key
    from strongroom.persistence.storage import META_POINTS, META_SNAPSHOT, DiskStorage
    from strongroom.realm.model import parse_realm

    path, at, since, realm = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def die(*args, **kwargs):
        os._exit(9)

    def after(calls, real):
        count = [0]
        def step(*args, **kwargs):
            count[0] += 1
            if count[0] > calls:
                os._exit(9)
            return real(*args, **kwargs)
        return step

    cluster = parse_realm(realm).cluster("c1")
    replica = Replica(lambda: cluster, "m1", path, None)
    if at == "before-the-write":
        DiskStorage._commit = die
    elif at == "after-the-write":
        ReplicatedLog.reset = die
    elif at == "building-the-copy":
        checkpoints.fsync_tree = die
    elif at == "marked-complete":
        checkpoints._finish = die
    elif at == "between-the-renames":
        os.rename = after(1, os.rename)
    elif at == "after-the-renames":
        checkpoints.shutil.rmtree = die
    elif at == "replaying":
        for kind in (StateMachine, DiskStateMachine):
            kind.apply_entry = after(20, kind.apply_entry)
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=since))
    sys.exit("the roll back finished without reaching the step")
""")


@pytest.mark.parametrize(("kind", "at"), [(k, a) for k, crashes in _CRASHES.items() for a in crashes])
def test_a_member_killed_during_the_roll_back_restarts_with_the_old_state_or_the_rolled_back_one(
        tmp_path: Path, kind: str, at: str, driver: str) -> None:
    indexes_on_disk = kind == "indexes-on-disk"
    cluster = _cluster(indexes_on_disk, driver)
    since, entries = 150, 250
    at_since = _state_at(tmp_path / "reference-since", since, indexes_on_disk, driver)
    at_last = _state_at(tmp_path / "reference-last", entries, indexes_on_disk, driver)
    _replica(tmp_path / "m1", entries, cluster=cluster).close()
    died = subprocess.run([sys.executable, "-c", _CRASH, str(tmp_path / "m1"), at, str(since),
                           _realm_yaml(indexes_on_disk, driver)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SERVICES)})
    assert died.returncode == 9, died.stdout + died.stderr  # killed at that step, not before, not after
    # Restarted: the log and state are wholly the old ones or wholly the rolled-back ones.
    again = Replica(lambda: cluster, "m1", tmp_path / "m1", _stored)
    if _CRASHES[kind][at] == "old":
        assert again.log.last_index == entries
        again.commit_index = entries  # (a leader tells it)
        again.apply_committed()
        assert observe(again.state) == at_last
    else:
        assert again.log.last_index == since and again.log.snapshot_index == 100
        again.apply_committed()  # the commit index it stored with the roll back
        assert again.commit_index == since and observe(again.state) == at_since
    assert not (tmp_path / "m1" / checkpoints.ROLLBACK).exists()
    # The member cuts back at start (`PersistenceNode.prepare`) as often as needed.
    cut_back(again, DrRecord(DrRole.STANDBY, generation=1, since_index=since))
    assert again.log.last_index == since and observe(again.state) == at_since and not again.apply_stopped
    again.close()


def test_the_manifest_lists_every_message_with_its_id_and_every_ack_and_sums_them_per_store() -> None:
    batch = rpb.Operation(publish_batch=rpb.PublishBatchOp(
        publish=rpb.PublishOp(store="s", destination="t"),
        messages=[cpb.Message(body=b"x", producer_id="p2", sequence=s) for s in (4, 5, 7)]))
    ack = rpb.Operation(ack=rpb.AckOp(store="s", durable_key="t/d", message_seqs=[1, 2]))
    entries = [(3, rpb.LogEntry(index=3, epoch=9, ops=[_publish(3)]).SerializeToString()),
               (4, rpb.LogEntry(index=4, epoch=9, ops=[_publish(4), batch]).SerializeToString()),
               (5, rpb.LogEntry(index=5, epoch=9, ops=[ack, rpb.Operation(noop=rpb.Noop(leader="m1"))]).SerializeToString())]
    manifest = manifest_of("c1", 4, entries)
    assert (manifest.from_index, manifest.to_index, manifest.entries) == (4, 5, 2)
    assert manifest.messages == 4 and manifest.acks == 2
    out = io.StringIO()
    manifest.write(out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows[0]["stores"]["s"]["producers"] == {"p1": [[4, 4]], "p2": [[4, 5], [7, 7]]}
    published = [r for r in rows[1:] if r["op"] == "publish"]
    assert [base64.b64decode(r["message"]["body"]) for r in published] == [b"b4", b"x", b"x", b"x"]
    assert published[1]["destination"] == "t" and published[1]["message"]["producer_id"] == "p2"
    assert [r["op"] for r in rows[1:]] == ["publish"] * 4 + ["ack", "noop"]
    assert rows[-2]["seqs"] == [1, 2]
