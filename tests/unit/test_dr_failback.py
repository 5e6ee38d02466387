"""Fail back, in-process over a real replica (RocksDB in a temporary directory): a demoted site's
member cuts its log back to the last shared index and its state is the state at that index again
(also after a restart); the cut only takes entries of an older generation; a member whose log was
compacted past the index cannot rebuild there and says so, with the tail gone from its log all the
same. And the manifest of a lost tail: every message with its id, every ack, sums per store."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.manifest import manifest_of
from strongroom.dr.record import DrRecord, DrRole, epoch_of
from strongroom.persistence.drsite import cut_back
from strongroom.persistence.replica import Replica
from strongroom.realm.model import parse_realm

REALM = parse_realm("clusters:\n  - name: c1\n    compact_after_entries: 100\n    members:\n      - name: m1\n"
                    "stores:\n  - name: s\n    cluster: c1\n")
CLUSTER = REALM.cluster("c1")


async def _stored() -> None:
    pass


def _publish(i: int, producer: str = "p1") -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination="q.queue", queue=True, message=cpb.Message(
        body=f"b{i}".encode(), producer_id=producer, sequence=i)))


def _replica(path: Path, entries: int, epoch: int = 5) -> Replica:
    assert CLUSTER is not None
    replica = Replica(lambda: CLUSTER, "m1", path, _stored)
    for i in range(replica.log.last_index + 1, entries + 1):
        replica.log.append_local(rpb.LogEntry(index=i, epoch=epoch, ops=[_publish(i)]))
    replica.commit_index = entries
    replica.apply_committed()
    return replica


def test_a_demoted_member_cuts_the_old_generations_tail_and_its_state_is_the_shared_indexs(tmp_path: Path) -> None:
    replica = _replica(tmp_path, 10)
    assert replica.state.store_count["s"] == 10
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=6))
    assert replica.log.last_index == 6 and replica.state.applied_index == 6 and replica.commit_index == 6
    assert replica.state.store_count["s"] == 6
    assert replica.promised_epoch == 0  # the node promises the generation, not the cut
    replica.close()
    again = _replica(tmp_path, 6)
    assert again.log.last_index == 6 and again.state.store_count["s"] == 6
    again.close()


def test_entries_the_new_primary_shipped_are_never_cut(tmp_path: Path) -> None:
    replica = _replica(tmp_path, 6)
    for i in range(7, 10):  # shipped from the primary of generation 1 after the shared index
        replica.log.append_local(rpb.LogEntry(index=i, epoch=epoch_of(1, 3), ops=[_publish(i)]))
    replica.commit_index = 9
    replica.apply_committed()
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=6))
    assert replica.log.last_index == 9 and replica.state.store_count["s"] == 9
    cut_back(replica, DrRecord(DrRole.FENCED, generation=0, newer_generation=1, since_index=6))
    assert replica.log.last_index == 9  # only a demoted (standby) site cuts
    replica.close()


def test_a_log_compacted_past_the_shared_index_cannot_be_rebuilt_there_and_says_so(tmp_path: Path) -> None:
    replica = _replica(tmp_path, 150)
    assert replica.log.snapshot_index > 100
    cut_back(replica, DrRecord(DrRole.STANDBY, generation=1, since_index=60))
    assert replica.apply_stopped and "restart this member" in replica.apply_stopped
    assert replica.log.last_index == 0 and replica.commit_index == 0
    replica.close()
    # Restarted, it is an empty member: it takes the standby leader's state.
    again = _replica(tmp_path, 0)
    assert again.log.last_index == 0 and again.state.applied_index == 0 and not again.state.store_count.get("s")
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
