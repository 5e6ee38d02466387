"""Store events derived at apply (state machine notes + EventJournal + RowBuilder), in-process:
which rows an entry makes, their keys, and that two members derive the same rows."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.events.journal import EventJournal
from strongroom.events.publisher import EventPublisher
from strongroom.events.rows import RowBuilder
from strongroom.events.schema import NON_LOG_POSITION, SCHEMA
from strongroom.events.writer import EventWriter, last_published_index
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.state import StateMachine, durable_key
from strongroom.persistence.storage import DiskStorage
from strongroom.uow.table import OpKind

T0 = 1_763_900_000.0


def batch(dest: str, bodies: list[bytes], pid: str = "p", first: int = 1, queue: bool = False,
          at: float = T0, ttl: float = 0.0) -> rpb.Operation:
    head = rpb.PublishOp(store="s", destination=dest, queue=queue, published_at=at, expires_at=at + ttl if ttl else 0)
    msgs = [cpb.Message(body=b, producer_id=pid, sequence=first + i) for i, b in enumerate(bodies)]
    return rpb.Operation(publish_batch=rpb.PublishBatchOp(publish=head, messages=msgs))


def create(dest: str, name: str, kind: int = cpb.DURABLE_KIND_STANDARD, matcher: Any = None) -> rpb.Operation:
    op = rpb.CreateDurableOp(store="s", destination=dest, durable=name, kind=kind)
    if matcher is not None:
        op.matcher.CopyFrom(matcher)
    return rpb.Operation(create_durable=op)


def ack(dest: str, name: str, *seqs: int) -> rpb.Operation:
    return rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key(dest, name), message_seqs=seqs))


JOBS = rpb.UowDefinition(store="s", destination="jobs", persistent=True, persistent_status=True, lifetime=100,
                        status_lifetime_multiple=1, backout_threshold=1, dead_letter_store="s",
                        dead_letter_destination="jobs.dlq", conversation_timeout=30)


def uow(kind: OpKind, *ids: str, clock: float = 1.0, **fields: Any) -> rpb.Operation:
    return rpb.Operation(uow=rpb.UowOp(clock=clock, kind=int(kind), uow_ids=ids, **fields))


def uow_commit(uow_id: str, *bodies: bytes) -> rpb.Operation:
    """A whole UOW sent and committed (new -> ACCEPTED) on `jobs`."""
    msgs = [cpb.Message(body=b) for b in bodies]
    return uow(OpKind.COMMIT, uow_id, definition=JOBS, messages=msgs, message_count=len(msgs),
               message_bytes=sum(m.ByteSize() for m in msgs))


class Member:
    """A state machine with the event log on, applying entries as a member does."""

    def __init__(self, sm: StateMachine | None = None) -> None:
        self.sm = sm or StateMachine()
        self.sm.events = []
        self.journal = EventJournal("c1", 1)
        self.log: dict[int, rpb.LogEntry] = {}
        self.index = 0

    def apply(self, *ops: rpb.Operation, time: float = T0) -> list[object]:
        self.index += 1
        entry = rpb.LogEntry(index=self.index, epoch=2, time=time, ops=ops)
        # The log's round trip: a follower reads it back as bytes.
        entry = rpb.LogEntry.FromString(entry.SerializeToString())
        self.log[self.index] = entry
        results = self.sm.apply_entry(entry)
        noted, self.sm.events = self.sm.events, []
        self.journal.applied(entry, results, noted or [])
        return results

    def rows(self) -> list[dict[str, Any]]:
        self.journal.build(self.index, self.log.__getitem__)
        table = self.journal.rows_after(0)
        return table.to_pylist() if table is not None else []


def kinds(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["kind"] for r in rows)


def test_publish_to_queue_makes_created_stored_and_pending_rows_in_order() -> None:
    m = Member()
    m.apply(batch("q", [b"a", b"bb", b"ccc"], queue=True))
    rows = m.rows()
    assert [r["kind"] for r in rows] == ["durable_created"] + ["message_stored"] * 3 + ["message_pending"] * 3
    assert [r["position"] for r in rows] == list(range(7))
    assert {(r["log_index"], r["epoch"], r["cluster"], r["store"]) for r in rows} == {(1, 2, "c1", "s")}
    stored = [r for r in rows if r["kind"] == "message_stored"]
    assert [r["seq"] for r in stored] == [1, 2, 3] and [r["producer"] for r in stored] == ["p"] * 3
    assert [r["size"] for r in stored] == [cpb.Message(body=b, producer_id="p", sequence=i + 1).ByteSize()
                                          for i, b in enumerate([b"a", b"bb", b"ccc"])]
    pending = [r for r in rows if r["kind"] == "message_pending"]
    assert [(r["seq"], r["durable"], r["destination"]) for r in pending] == [(1, "", "q"), (2, "", "q"), (3, "", "q")]
    assert rows[1]["time"].timestamp() == T0 and rows[1]["published_at"].timestamp() == T0


def test_duplicates_and_unwanted_messages_make_no_rows() -> None:
    m = Member()
    m.apply(batch("q", [b"a", b"b"], queue=True, first=1))
    m.apply(batch("q", [b"a", b"b"], queue=True, first=1))  # a retry: duplicates
    m.apply(batch("topic-nobody-reads", [b"x"], first=10))
    assert kinds(m.rows()) == {"durable_created": 1, "message_stored": 2, "message_pending": 2}


def test_a_batch_of_several_producers_with_some_retried_messages_keeps_each_rows_own_values() -> None:
    m = Member()
    m.apply(create("t", "all"), create("t", "none", matcher=cpb.ContentMatcher()))
    m.apply(batch("t", [b"a"], pid="p", first=1))
    msgs = [cpb.Message(body=b * i, producer_id=pid, sequence=s)
            for i, (b, pid, s) in enumerate([(b"b", "q", 1), (b"c", "p", 1), (b"d", "p", 2), (b"e", "", 0),
                                             (b"f", "q", 2)], 1)]
    head = rpb.PublishOp(store="s", destination="t", published_at=T0 + 3)
    m.apply(rpb.Operation(publish_batch=rpb.PublishBatchOp(publish=head, messages=msgs)), time=T0 + 3)
    rows = [r for r in m.rows() if r["log_index"] == 3]
    stored = [r for r in rows if r["kind"] == "message_stored"]
    # (b"c", "p", 1) is a retry of the first entry's message: no row; the others keep their own producer and size.
    assert [(r["producer"], r["size"]) for r in stored] == [
        ("q", msgs[0].ByteSize()), ("p", msgs[2].ByteSize()), (None, msgs[3].ByteSize()), ("q", msgs[4].ByteSize())]
    assert [r["seq"] for r in stored] == [2, 3, 4, 5]
    pending = [r for r in rows if r["kind"] == "message_pending"]
    assert {r["durable"] for r in pending} == {"all", "none"}
    assert [r["seq"] for r in pending if r["durable"] == "all"] == [2, 3, 4, 5]
    assert all(r["producer"] is None and r["published_at"].timestamp() == T0 + 3 for r in pending)
    assert [r["position"] for r in rows] == list(range(len(rows)))


def test_topic_pending_rows_follow_each_durables_interest() -> None:
    m = Member()
    red = cpb.ContentMatcher()
    red.fields["color"].equals.string_value = "red"
    m.apply(create("t", "all"), create("t", "reds", matcher=red))
    msgs = [cpb.Message(body=b"1", fields={"color": cpb.FieldValue(string_value=c)}) for c in ("red", "blue", "red")]
    head = rpb.PublishOp(store="s", destination="t", published_at=T0)
    m.apply(rpb.Operation(publish_batch=rpb.PublishBatchOp(publish=head, messages=msgs)))
    rows = [r for r in m.rows() if r["kind"] == "message_pending"]
    assert sorted((r["durable"], r["seq"]) for r in rows) == [("all", 1), ("all", 2), ("all", 3), ("reds", 1),
                                                              ("reds", 3)]
    assert m.sm.durable("t", "reds") is not None and list(m.sm.durable("t", "reds").pending) == [1, 3]


def test_acks_only_of_pending_messages_expiry_discard_and_entry_time() -> None:
    m = Member()
    m.apply(batch("q", [b"a", b"b", b"c"], queue=True, ttl=5))
    m.apply(ack("q", "", 1, 1, 99), time=T0 + 1)  # one real ack; a repeat and an unknown seq are not events
    m.apply(ack("q", "", 1), time=T0 + 2)
    m.apply(rpb.Operation(expire=rpb.ExpireOp(message_seqs=[2, 3], now=T0 + 6)), time=T0 + 6.5)
    rows = m.rows()
    acked = [r for r in rows if r["kind"] == "message_acked"]
    assert [(r["seq"], r["durable"], r["log_index"]) for r in acked] == [(1, "", 2)]
    assert acked[0]["time"].timestamp() == T0 + 1
    expired = [r for r in rows if r["kind"] == "message_expired"]
    assert [(r["seq"], r["reason"]) for r in expired] == [(2, "time-to-live"), (3, "time-to-live")]
    assert expired[0]["time"].timestamp() == T0 + 6  # the ExpireOp's own time


def test_discard_oldest_at_a_limit_is_an_event() -> None:
    m = Member()
    m.apply(rpb.Operation(configure_store=rpb.ConfigureStoreOp(store="s", max_messages=2,
                                                               policy=cpb.LIMIT_POLICY_DISCARD_OLDEST)))
    m.apply(batch("q", [b"a", b"b", b"c"], queue=True))
    rows = m.rows()
    discarded = [r for r in rows if r["kind"] == "message_discarded"]
    assert [r["seq"] for r in discarded] == [1] and "limit of 2 messages" in discarded[0]["reason"]
    assert kinds(rows)["message_stored"] == 3 and len(m.sm.messages) == 2


def test_dead_letter_moves_the_message_and_stores_its_copy() -> None:
    m = Member()
    m.apply(batch("q", [b"a"], queue=True))
    m.apply(rpb.Operation(dead_letter=rpb.DeadLetterOp(
        durable_key=durable_key("q", ""), message_seq=1, deliveries=3, target_store="s", target_destination="dlq",
        target_queue=True, published_at=T0 + 9, reason="reached 3 deliveries")))
    rows = [r for r in m.rows() if r["log_index"] == 2]
    assert [r["kind"] for r in rows] == ["durable_created", "message_dead_lettered", "message_stored",
                                         "message_pending"]
    dl = rows[1]
    assert (dl["seq"], dl["deliveries"], dl["target"], dl["reason"]) == (1, 3, "dlq", "reached 3 deliveries")
    assert (rows[2]["seq"], rows[2]["destination"], rows[3]["durable"]) == (2, "dlq", "")


def test_replay_rows_say_what_became_pending_and_what_was_skipped() -> None:
    m = Member()
    m.apply(create("t", "d"))
    m.apply(batch("t", [b"1", b"2", b"3"]))
    m.apply(ack("t", "d", 1))
    m.apply(rpb.Operation(replay=rpb.ReplayOp(durable_key=durable_key("t", "d"), sequence=3)))
    rows = [r for r in m.rows() if r["log_index"] == 4]
    assert [(r["kind"], r["seq"]) for r in rows] == [("message_skipped", 2)]


def test_suspension_resumption_and_delete_of_a_durable_are_events() -> None:
    m = Member()
    key = durable_key("t", "a")
    m.apply(create("t", "a"), batch("t", [b"x"]))
    m.apply(rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=[key], suspended=True)))
    m.apply(rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=[key], suspended=True)))  # no change
    m.apply(rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=[key], suspended=False)))
    m.apply(rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=key)))
    rows = [r for r in m.rows() if r["kind"].startswith("durable_")]
    assert [(r["kind"], r["log_index"], r["durable"], r["destination"]) for r in rows] == [
        ("durable_created", 1, "a", "t"), ("durable_suspended", 2, "a", "t"), ("durable_resumed", 4, "a", "t"),
        ("durable_deleted", 5, "a", "t")]
    assert rows[-1]["reason"] == "deleted by an operator"


def test_every_uow_state_change_is_a_uow_state_row() -> None:
    m = Member()
    m.apply(uow_commit("u1", b"a", b"bb"))
    m.apply(uow(OpKind.DELIVER, "u1", receiver="r1"))
    m.apply(uow(OpKind.RECEIVER_BACKOUT, "u1", receiver="r1"))  # offered again: 1 backout
    m.apply(uow(OpKind.DELIVER, "u1", receiver="r2"))
    m.apply(uow(OpKind.RECEIVER_BACKOUT, "u1", receiver="r2"))  # past the threshold of 1: to jobs.dlq
    m.apply(uow(OpKind.DELIVER, "u1", receiver="r3"))
    m.apply(uow(OpKind.RECEIVER_COMMIT, "u1", receiver="r2"))  # refused (r3 holds it): no row
    m.apply(uow(OpKind.USER_STATUS, "u1", user_status=b"x"))  # no state change: no row
    m.apply(uow(OpKind.RECEIVER_COMMIT, "u1", receiver="r3"))
    m.apply(uow(OpKind.OPEN, "u2", definition=JOBS), uow(OpKind.SENDER_BACKOUT, "u2"))
    m.apply(uow_commit("u3", b"c"))
    m.apply(uow(OpKind.TIMEOUT, "u3", clock=300.0), time=T0 + 5)
    m.apply(uow(OpKind.FORGET, "u1", "u2", "u3", clock=500.0))  # their status lifetimes ended
    rows = [r for r in m.rows() if r["kind"] == "uow_state"]
    assert [(r["log_index"], r["position"], r["detail"], r["reason"], r["destination"], r["target"])
            for r in rows] == [
        (1, 0, "u1 ACCEPTED 2", "commit", "jobs", None),
        (2, 0, "u1 DELIVERED 2", "deliver", "jobs", None),
        (3, 0, "u1 ACCEPTED 2", "receiver_backout", "jobs", None),
        (4, 0, "u1 DELIVERED 2", "deliver", "jobs", None),
        (5, 0, "u1 ACCEPTED 2", "receiver_backout", "jobs", "jobs.dlq"),
        (6, 0, "u1 DELIVERED 2", "deliver", "jobs.dlq", None),
        (9, 0, "u1 PROCESSED 2", "receiver_commit", "jobs.dlq", None),
        (10, 0, "u2 RECEIVED 0", "open", "jobs", None),
        (10, 1, "u2 BACKEDOUT 0", "sender_backout", "jobs", None),
        (11, 0, "u3 ACCEPTED 1", "commit", "jobs", None),
        (12, 0, "u3 TIMEOUT 1", "timeout", "jobs", None),
        (13, 0, "u1 DELETED 2", "forget", "jobs.dlq", None),
        (13, 1, "u2 DELETED 0", "forget", "jobs", None),
        (13, 2, "u3 DELETED 1", "forget", "jobs", None)]
    two = sum(cpb.Message(body=b).ByteSize() for b in (b"a", b"bb"))
    assert [r["size"] for r in rows[:3]] == [two] * 3 and rows[7]["size"] == 0
    assert {r["store"] for r in rows} == {"s"}
    assert rows[0]["time"].timestamp() == T0 and rows[10]["time"].timestamp() == T0 + 5
    assert kinds(m.rows()) == {"uow_state": 14}  # a UOW's messages are no message rows


def test_a_durable_expired_unused_is_a_durable_expired_event() -> None:
    m = Member()
    key = durable_key("t", "a")
    m.apply(create("t", "a"), batch("t", [b"x"]))
    m.apply(rpb.Operation(durable_use=rpb.DurableUseOp(durable_keys=[key], clock=10.0, attached=False)))
    # Not unused long enough yet: nothing happens, no row.
    m.apply(rpb.Operation(delete_durable=rpb.DeleteDurableOp(
        durable_key=key, expiry=rpb.DurableExpiry(clock=11.0, unused_for=3.0))))
    m.apply(rpb.Operation(delete_durable=rpb.DeleteDurableOp(
        durable_key=key, expiry=rpb.DurableExpiry(clock=13.0, unused_for=3.0))), time=T0 + 5)
    rows = [r for r in m.rows() if r["kind"].startswith("durable_")]
    assert [(r["kind"], r["log_index"], r["durable"], r["destination"], r["reason"]) for r in rows] == [
        ("durable_created", 1, "a", "t", None), ("durable_expired", 4, "a", "t", "unused for 3 s")]
    assert rows[-1]["time"].timestamp() == T0 + 5


def test_two_members_derive_identical_rows_one_from_the_log_read_back() -> None:
    leader, follower = Member(), Member()
    follower.journal.keep_entries = False
    leader.journal.keep_entries = True
    for member in (leader, follower):
        member.apply(create("t", "a"), create("t", "b"))
        member.apply(batch("t", [b"x"] * 5), batch("q", [b"y"] * 3, queue=True, first=100))
        member.apply(ack("t", "a", 1, 2), ack("q", "", 7))
    assert leader.rows() == follower.rows() and len(leader.rows()) == 2 + 5 + 10 + 1 + 3 + 3 + 3


def test_disk_state_machine_notes_the_same_events(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path / "db", sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        disk, mem = Member(DiskStateMachine.open(storage)), Member()
        for member in (disk, mem):
            member.apply(create("t", "a"))
            member.apply(batch("t", [b"x"] * 4), batch("q", [b"y"] * 2, queue=True, first=50, ttl=1))
            member.apply(ack("t", "a", 2, 3))
            member.apply(rpb.Operation(expire=rpb.ExpireOp(message_seqs=[5, 6], now=T0 + 2)))
            member.apply(uow_commit("u1", b"x", b"y"), uow(OpKind.DELIVER, "u1", receiver="r"))
            member.apply(uow(OpKind.RECEIVER_COMMIT, "u1", receiver="r"))
        assert disk.rows() == mem.rows()
        assert kinds(disk.rows())["message_expired"] == 2 and kinds(disk.rows())["uow_state"] == 3
    finally:
        storage.close()


def test_journal_trim_keeps_only_what_is_not_published() -> None:
    m = Member()
    for _ in range(4):
        m.apply(batch("q", [b"a", b"b"], queue=True, first=m.index * 10 + 1))
    m.journal.build(2, m.log.__getitem__)  # entries 1-2 built, 3-4 lazy
    m.journal.trim(3)
    assert m.journal.first_index == 4
    m.journal.build(4, m.log.__getitem__)
    table = m.journal.rows_after(0)
    assert table is not None and set(table.column("log_index").to_pylist()) == {4}
    m.journal.reset(10)  # a snapshot past what it holds: nothing before 11 can be derived here
    assert m.journal.rows_after(0) is None and m.journal.first_index == 11


def test_deliveries_are_keyed_after_the_log_positions() -> None:
    b = RowBuilder("c1")
    d = StateMachine()._create_durable(rpb.CreateDurableOp(store="s", destination="q", durable=""))
    counters: dict[int, int] = {}
    b.add_deliveries(7, [(12, d, 3, "s", "q", 100, T0, 1, T0 + 1), (12, d, 4, "s", "q", 100, T0, 2, T0 + 1)],
                     counters)
    b.add_deliveries(7, [(12, d, 5, "s", "q", 100, T0, 1, T0 + 2)], counters)
    table = b.table()
    assert table is not None and table.schema.equals(SCHEMA)
    rows = table.to_pylist()
    assert [(r["epoch"], r["log_index"], r["position"] - NON_LOG_POSITION, r["deliveries"]) for r in rows] == [
        (7, 12, 0, 1), (7, 12, 1, 2), (7, 12, 2, 1)]
    assert isinstance(table.column("kind").type, pa.DictionaryType)


async def lead(m: Member, root: Path) -> tuple[EventPublisher, Any]:
    """`m` becomes leader (epoch 5): its publisher resumes from `root` and publishes one file."""
    pub = EventPublisher(m.journal, root, "c1", epoch=5, interval=60, applied_index=lambda: m.index,
                         entry_of=m.log.__getitem__, fence=lambda: True, tick=30)
    task = asyncio.create_task(pub.run())
    try:
        while not pub._ready:
            await asyncio.sleep(0.01)
        (f,) = await pub.flush(force=True)
    finally:
        task.cancel()
    return pub, f


async def test_a_new_leader_resumes_after_the_newest_published_file(tmp_path: Path) -> None:
    """The publisher reads the directory: what the previous leader published is not written
    again even when this member was not told (its journal still holds it)."""
    m = Member()
    for i in range(6):
        m.apply(batch("q", [b"a", b"b"], queue=True, first=i * 10 + 1))
    previous = Member()
    for i in range(4):
        previous.apply(batch("q", [b"a", b"b"], queue=True, first=i * 10 + 1))
    with EventWriter(tmp_path, "c1", epoch=2) as w:  # the previous leader published entries 1-4
        previous.journal.build(previous.index, previous.log.__getitem__)
        w.write(previous.journal.rows_after(0))
    pub, f = await lead(m, tmp_path)
    assert (f.first_index, f.last_index) == (5, 6) and pub.published == 6 and pub.missing is None
    assert last_published_index(tmp_path, "c1") == 6


async def test_a_new_leader_reports_events_it_cannot_derive(tmp_path: Path) -> None:
    m = Member()
    m.journal = EventJournal("c1", 4)  # started after entries 1-3 were applied elsewhere
    m.index = 3
    m.apply(batch("q", [b"a"], queue=True))
    pub, f = await lead(m, tmp_path)
    assert pub.missing == (1, 3) and (f.first_index, f.last_index) == (4, 4)


async def test_a_publish_that_fails_is_retried_with_every_row(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    m = Member()
    for i in range(3):
        m.apply(batch("q", [b"a", b"b"], queue=True, first=i * 10 + 1))
    blocker = tmp_path / "cluster=c1" / "hour=2025-11-23T12"  # a file where the hour's directory goes
    blocker.parent.mkdir()
    blocker.write_text("in the way")
    pub = EventPublisher(m.journal, tmp_path, "c1", epoch=5, interval=0.1, applied_index=lambda: m.index,
                         entry_of=m.log.__getitem__, fence=lambda: True, tick=0.05)
    task = asyncio.create_task(pub.run())
    try:
        await asyncio.sleep(0.5)
        assert last_published_index(tmp_path, "c1") == 0
        blocker.unlink()
        for _ in range(100):
            if last_published_index(tmp_path, "c1") == 3:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    (f,) = [p for p in tmp_path.rglob("*.parquet") if not p.name.startswith(".")]
    assert pq.read_metadata(f).num_rows == 1 + 3 * 4 and pub.published == 3
