"""The pure parts of the chaos `dr` scenario: what a lost tail undid, read from serialised log
entries as the fenced old primary streams them; how the checker allows exactly that; the realm
of a DR pair; and the workload's clients pointed at the activated site. No processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_checker import TOPIC, Builder, clean, uow_bodies, uows_clean

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.chaos.checker import check
from strongroom.chaos.cluster import ClusterSpec, realm_text
from strongroom.chaos.drsite import DrCluster
from strongroom.chaos.history import INFO, History
from strongroom.chaos.losttail import (
    LOST_TAIL,
    TAIL_ACKED,
    TAIL_PUBLISHED,
    TAIL_UOW_COMMITTED,
    TAIL_UOW_PROCESSED,
    LostTail,
    ack_id,
    lost_tail,
    lost_tail_events,
)
from strongroom.chaos.workload import Workload, WorkloadConfig
from strongroom.realm.model import parse_realm


def entry(epoch: int, *ops: rpb.Operation) -> bytes:
    return rpb.LogEntry(epoch=epoch, ops=list(ops)).SerializeToString()


def publish(producer: str, seq: int, dest: str = "chaos.q") -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="default", destination=dest, message=cpb.Message(
        body=b"x", producer_id=producer, sequence=seq)))


def uow_op(kind: int, *ids: str) -> rpb.Operation:
    return rpb.Operation(uow=rpb.UowOp(kind=kind, uow_ids=list(ids)))  # type: ignore[arg-type]


def old_log() -> list[tuple[int, bytes]]:
    batch = rpb.Operation(publish_batch=rpb.PublishBatchOp(
        publish=rpb.PublishOp(store="default", destination="chaos.topic"),
        messages=[cpb.Message(body=b"b", producer_id="S", sequence=s) for s in (7, 8)]))
    ack = rpb.Operation(ack=rpb.AckOp(store="default", durable_key="chaos.topic\x00std", message_seqs=[41, 42]))
    queue_ack = rpb.Operation(ack=rpb.AckOp(store="default", durable_key="chaos.q\x00", message_seqs=[43]))
    return [
        (10, entry(5, publish("U", 1), uow_op(rpb.UOW_OP_KIND_COMMIT, "shipped"))),  # the standby has it
        (11, entry(5, publish("U", 2), batch)),
        (12, entry(5, ack, queue_ack, rpb.Operation(noop=rpb.Noop(leader="m1")))),
        (13, entry(5, uow_op(rpb.UOW_OP_KIND_COMMIT, "U-a"), uow_op(rpb.UOW_OP_KIND_DELIVER, "U-b"),
                   uow_op(rpb.UOW_OP_KIND_RECEIVER_COMMIT, "U-c", "U-d"))),
    ]


def test_the_lost_tail_lists_every_message_ack_and_uow_commit_after_the_shared_index() -> None:
    tail = lost_tail("default", 10, old_log())
    assert (tail.from_index, tail.to_index, tail.entries) == (11, 13, 3)
    assert tail.published == {"U:2", "S:7", "S:8"}  # not U:1: at the shared index
    assert tail.acked == {ack_id("chaos.topic/std", 41), ack_id("chaos.topic/std", 42), ack_id("chaos.q/", 43)}
    assert tail.uows_committed == {"U-a"} and tail.uows_processed == {"U-c", "U-d"}
    assert "entries 11-13 (3): 3 messages, 3 acks" in tail.describe()


def test_an_empty_tail_allows_nothing() -> None:
    tail = lost_tail("default", 13, old_log())
    assert tail.entries == 0 and not (tail.published or tail.acked or tail.uows_committed or tail.uows_processed)


def test_the_tail_is_recorded_as_history_events_and_read_back(tmp_path: Path) -> None:
    history = History(tmp_path / "h.jsonl")
    events = lost_tail_events(history, lost_tail("default", 10, old_log()))
    history.close()
    kinds = {e.kind: set(e.messages or []) for e in events}
    assert all(e.f == LOST_TAIL for e in events)
    assert kinds[TAIL_PUBLISHED] == {"U:2", "S:7", "S:8"} and kinds[TAIL_UOW_COMMITTED] == {"U-a"}
    assert kinds[TAIL_UOW_PROCESSED] == {"U-c", "U-d"} and len(kinds[TAIL_ACKED]) == 3


def tail_of(b: Builder, published: set[str] = frozenset(), acked: set[str] = frozenset(),  # type: ignore[assignment]
            committed: set[str] = frozenset(), processed: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    lost_tail_events(b.h, LostTail(20, 30, 11, set(published), set(acked), set(committed), set(processed)))


def test_a_confirmed_message_lost_is_allowed_only_when_the_tail_published_it() -> None:
    b = clean()
    b.publish("P", 4)
    b.publish("P", 5)
    tail_of(b, published={"P:4"})
    res = check(b.events())
    assert len(res.lost_allowed) == 1 and "P:4" in res.lost_allowed[0] and "lost tail" in res.lost_allowed[0]
    assert res.lost_messages == 1 and res.lost[0].startswith("P:5")


def test_a_delivery_again_after_a_confirmed_ack_is_allowed_only_when_the_tail_held_the_ack() -> None:
    b = clean()  # P:1-3 delivered and acked (confirmed) on m1-5-sub-1
    b.subscribed("s2-1099511627780-sub-1")  # the activated site's leader
    b.deliver("P", 1, sub="s2-1099511627780-sub-1")
    b.deliver("P", 2, sub="s2-1099511627780-sub-1")
    tail_of(b, acked={ack_id(f"{TOPIC}/d", 1)})
    res = check(b.events())
    assert len(res.ack_redelivered_allowed) == 1 and "P:1" in res.ack_redelivered_allowed[0]
    assert len(res.duplicated) == 1 and "P:2" in res.duplicated[0], res.summary()


def test_a_uow_lost_or_received_again_is_allowed_only_when_the_tail_held_its_commit() -> None:
    b = uows_clean()  # U1 committed by r1
    b.uow_send("U6")
    b.uow_send("U7")
    b.uow_receive("U1", uow_bodies("U1", 3), proc="r2")  # after r1's confirmed commit
    tail_of(b, committed={"U6"}, processed={"U1"})
    res = check(b.events())
    assert sorted(line.split(":")[0].split(" ")[0] for line in res.uow_allowed) == ["U1", "U6"], res.summary()
    assert len(res.uow_lost) == 1 and res.uow_lost[0].startswith("U7:") and not res.uow_redelivered


def test_a_loss_outside_any_tail_fails_the_run() -> None:
    b = clean()
    b.publish("P", 4)
    b.h.record("nemesis", INFO, LOST_TAIL, kind=TAIL_PUBLISHED, messages=["Q:4"], detail="entries 5-6")
    assert not check(b.events()).ok


def test_the_realm_without_a_standby_is_unchanged_and_a_dr_pair_names_both_sites(tmp_path: Path) -> None:
    spec = ClusterSpec()
    assert realm_text(spec) == realm_text(spec, "")
    assert "standby" not in realm_text(spec)
    pair = DrCluster(tmp_path, ClusterSpec(standby=True))
    realm = parse_realm(pair.realm())
    cluster = realm.cluster("default")
    assert cluster is not None and cluster.standby is not None
    assert [m.name for m in cluster.members] == ["m1", "m2", "m3"]
    assert [(m.name, m.address) for m in cluster.standby.members] == [
        (n, pair.standby.direct(n)) for n in ("s1", "s2", "s3")]
    assert cluster.standby.primary == pair.endpoints()
    assert pair.serving() is pair
    pair.standby.activated = True
    assert pair.serving() is pair.standby
    assert pair.member_of(pair.standby.direct("s2")) == "s2" and pair.member_of(pair.direct("m1")) == "m1"


async def test_the_workload_points_its_clients_at_the_activated_site() -> None:
    workload = Workload(["a:1", "a:2", "a:3"], History(), WorkloadConfig(), lambda _: "?")
    client = workload._client("p")
    workload.repoint(["b:1", "b:2", "b:3"])
    assert client.endpoints == ["b:1", "b:2", "b:3"] and workload.endpoints == ["b:1", "b:2", "b:3"]
    assert workload._client("later").endpoints == ["b:1", "b:2", "b:3"]
    with pytest.raises(ValueError):
        workload.repoint(["c:1"])
    workload.confirmed = {"chaos.q": {"P:1", "P:2"}}
    workload.uows.confirmed = {"U1", "U2"}
    workload.excuse({"P:2"}, {"U2"})
    assert workload.confirmed == {"chaos.q": {"P:1"}} and workload.uows.confirmed == {"U1"}
    await workload.close()
