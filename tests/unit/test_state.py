"""The state machine and the log, in-process: determinism, dedup, refcounts, consistency check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import DEDUP_WINDOW, StateMachine, durable_key
from strongroom.persistence.storage import DiskStorage, MemoryStorage


def publish(dest: str, body: bytes, pid: str = "p", seq: int = 0, queue: bool = False) -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination=dest, queue=queue,
                                               message=cpb.Message(body=body, producer_id=pid, sequence=seq)))


def create(dest: str, name: str, kind: int = cpb.DURABLE_KIND_STANDARD) -> rpb.Operation:
    return rpb.Operation(create_durable=rpb.CreateDurableOp(store="s", destination=dest, durable=name, kind=kind))


def ack(dest: str, name: str, *seqs: int) -> rpb.Operation:
    return rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key(dest, name), message_seqs=seqs))


def test_topic_message_kept_until_every_durable_acked() -> None:
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[create("t", "a"), create("t", "b")]))
    (res,) = sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[publish("t", b"x", seq=1)]))
    assert res.message_seq == 1 and sm.store_count["s"] == 1
    sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[ack("t", "a", 1)]))
    assert sm.store_count["s"] == 1
    sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[ack("t", "b", 1)]))
    assert sm.store_count["s"] == 0 and not sm.messages and sm.store_bytes["s"] == 0


def test_topic_without_durable_stores_nothing_queue_stores() -> None:
    sm = StateMachine()
    (r1,) = sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[publish("t", b"x", seq=1)]))
    (r2,) = sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[publish("q", b"y", seq=2, queue=True)]))
    assert r1.message_seq == 0 and r2.message_seq > 0
    assert list(sm.durable("q", "").pending) == [r2.message_seq]


def test_dedup_within_and_beyond_window() -> None:
    sm = StateMachine()
    ops = [publish("q", b"a", seq=5, queue=True), publish("q", b"a", seq=5, queue=True)]
    first, again = sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=ops))
    assert not first.duplicate and again.duplicate and again.message_seq == first.message_seq
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[publish("q", b"z", seq=5 + DEDUP_WINDOW + 10, queue=True)]))
    (old,) = sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[publish("q", b"b", seq=6, queue=True)]))
    assert old.outside_window and not old.duplicate  # too old to tell: refused, not "confirmed"
    assert len(sm.durable("q", "").pending) == 2


def test_lastvalue_keeps_only_latest() -> None:
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[create("p", "lv", cpb.DURABLE_KIND_LASTVALUE)]))
    for i in range(5):
        sm.apply_entry(rpb.LogEntry(index=2 + i, epoch=1, ops=[publish("p", f"{i}".encode(), seq=i + 1)]))
    d = sm.durable("p", "lv")
    assert d is not None and sm.messages[d.last_value_seq].message.body == b"4"
    assert len(sm.messages) == 1


def test_snapshot_round_trip_is_identical() -> None:
    sm = StateMachine()
    ops = [create("t", "a"), create("p", "lv", cpb.DURABLE_KIND_LASTVALUE)]
    ops += [publish("t", f"{i}".encode(), seq=i + 1) for i in range(10)]
    ops += [publish("p", b"v", seq=100), publish("q", b"queued", seq=101, queue=True), ack("t", "a", 1, 2)]
    sm.apply_entry(rpb.LogEntry(index=7, epoch=3, ops=ops))
    copy = restore_bytes(snapshot_bytes(sm))
    assert snapshot_bytes(copy) == snapshot_bytes(sm)
    assert copy.store_count == sm.store_count and copy.store_bytes == sm.store_bytes
    (dup,) = copy.apply_entry(rpb.LogEntry(index=8, epoch=3, ops=[publish("t", b"3", seq=3)]))
    assert dup.duplicate  # the dedup window travels with the snapshot


def entry(index: int, epoch: int) -> rpb.LogEntry:
    return rpb.LogEntry(index=index, epoch=epoch, ops=[rpb.Operation(noop=rpb.Noop(leader="x"))])


def test_append_consistency_check_and_conflict_truncation(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=True, driver=driver)
    lg = ReplicatedLog(storage, storage.load())
    assert lg.append_from_leader(0, 0, [entry(1, 1), entry(2, 1), entry(3, 1)]).ok
    # Wrong prev epoch: refused, nothing changes.
    out = lg.append_from_leader(3, 2, [entry(4, 2)])
    assert not out.ok and lg.last_index == 3
    # Beyond our end: refused.
    assert not lg.append_from_leader(5, 1, [entry(6, 1)]).ok
    # A new leader overwrites an uncommitted suffix from index 3.
    assert lg.append_from_leader(2, 1, [entry(3, 2), entry(4, 2)]).ok
    assert [(e.index, e.epoch) for e in lg.entries] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    storage.close()
    # What is on disk is what was acknowledged.
    storage = DiskStorage(tmp_path, sync=True, driver=driver)
    loaded = storage.load()
    assert [(e.index, e.epoch) for e in loaded.entries] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    storage.close()


def test_compaction_keeps_suffix_and_snapshot(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    lg = ReplicatedLog(storage, storage.load())
    for i in range(1, 11):
        lg.append_local(entry(i, 1))
    lg.compact(6, 1, [b"state-at-6"])
    assert lg.first_index == 7 and lg.last_index == 10 and lg.epoch_at(6) == 1 and lg.epoch_at(5) is None
    # An append overlapping the compacted prefix is accepted for its new part.
    assert lg.append_from_leader(4, 1, [entry(5, 1), entry(6, 1), entry(7, 1), entry(8, 1)]).ok
    assert lg.last_index == 10
    storage.close()
    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    loaded = storage.load()
    assert list(loaded.snapshot or []) == [b"state-at-6"] and loaded.snapshot_index == 6
    assert [e.index for e in loaded.entries] == [7, 8, 9, 10]
    storage.close()


def _publish_entry(index: int, epoch: int) -> rpb.LogEntry:
    op = rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                             message=cpb.Message(body=b"m%d" % index)))
    return rpb.LogEntry(index=index, epoch=epoch, ops=[op])


def test_applied_entries_leave_memory_and_are_read_back_from_storage(tmp_path: Path, driver: str) -> None:
    from strongroom.persistence.log import KEEP_APPLIED

    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    lg = ReplicatedLog(storage, storage.load())
    sent = [_publish_entry(i, 1 if i <= 20 else 2) for i in range(1, 41)]
    for e in sent[:30]:
        lg.append_local(e)
    # A follower's append: stored as the leader serialised it.
    raws = [e.SerializeToString() for e in sent[30:]]
    assert lg.append_from_leader(30, 2, [rpb.LogEntry.FromString(r) for r in raws], raws=raws).ok
    lg.release(40)
    dropped = 40 - KEEP_APPLIED
    assert all(e is None for e in lg.entries[:dropped]) and all(r is None for r in lg.raws[:dropped])
    assert all(e is not None for e in lg.entries[dropped:])
    # Everything still answers, from storage where memory no longer has it.
    assert [lg.entry(i) for i in range(1, 41)] == sent
    assert lg.slice(1, 100) == sent
    assert lg.raw_slice(1, 100) == [e.SerializeToString() for e in sent]
    assert [lg.epoch_at(i) for i in (0, 1, 20, 21, 40, 41)] == [0, 1, 1, 2, 2, None]
    assert (lg.last_index, lg.last_epoch) == (40, 2)
    # Releasing again, or less, changes nothing; entries past the applied ones stay.
    lg.release(30)
    assert lg.entries[dropped] is not None
    # A new leader's truncation and compaction keep the indexes in step.
    lg.truncate_after(35)
    assert (lg.last_index, lg.last_epoch) == (35, 2) and lg.slice(34, 10) == sent[33:35]
    lg.compact(10, 1, [b"state-at-10"])
    assert lg.first_index == 11 and lg.entry(11) == sent[10] and lg.epoch_at(10) == 1
    assert lg.raw_slice(11, 100) == [e.SerializeToString() for e in sent[10:35]]
    lg.release(35)
    assert lg.entries[35 - KEEP_APPLIED - 10 - 1] is None and lg.entry(12) == sent[11]
    storage.close()


def test_memory_storage_keeps_applied_entries_in_memory() -> None:
    """Mode `memory` stores nothing: releasing must not drop what nothing else holds."""
    lg = ReplicatedLog(MemoryStorage(), MemoryStorage().load())
    sent = [_publish_entry(i, 1) for i in range(1, 41)]
    for e in sent:
        lg.append_local(e)
    lg.release(40)
    assert all(e is not None for e in lg.entries)
    assert lg.slice(1, 100) == sent


def test_memory_storage_keeps_nothing() -> None:
    storage = MemoryStorage()
    lg = ReplicatedLog(storage, storage.load())
    lg.append_local(entry(1, 1))
    assert storage.load().empty and lg.last_index == 1


def test_a_leader_entry_that_cannot_be_stored_leaves_the_log() -> None:
    """The leader adds a round's entry in memory (the followers are sent it) and then stores it;
    if storing fails, the log must not keep an entry its storage does not hold."""

    class Full(MemoryStorage):
        def append(self, *args: object, **kwargs: object) -> None:
            raise OSError(28, "No space left on device")

    lg = ReplicatedLog(MemoryStorage(), MemoryStorage().load())
    lg.append_local(entry(1, 1))
    lg.storage = Full()
    lg.add_local(entry(2, 1))
    assert lg.last_index == 2
    with pytest.raises(OSError):
        lg.store_last()
    assert lg.last_index == 1 and len(lg.raws) == 1


def test_spliced_append_request_parses_as_the_real_message() -> None:
    from strongroom.persistence.transport import encode_append

    entries = [entry(i, 3) for i in range(1, 4)]
    entries.append(rpb.LogEntry(index=4, epoch=3, ops=[publish("q", b"x" * 300, seq=9, queue=True)]))
    head = rpb.AppendRequest(epoch=3, leader="m1", prev_index=0, prev_epoch=0, commit_index=2)
    wire = encode_append(head, [e.SerializeToString() for e in entries])
    expected = rpb.AppendRequest(epoch=3, leader="m1", prev_index=0, prev_epoch=0, commit_index=2, entries=entries)
    assert rpb.AppendRequest.FromString(wire) == expected


def _as_batches(entry: rpb.LogEntry) -> rpb.LogEntry:
    """The same entry with each run of publishes sharing every field but the message as one
    PublishBatchOp (what a leader writes in log format 2)."""
    out = rpb.LogEntry(index=entry.index, epoch=entry.epoch)
    for op in entry.ops:
        if op.WhichOneof("op") == "publish":
            head = rpb.PublishOp()
            head.CopyFrom(op.publish)
            head.ClearField("message")
            last = out.ops[-1] if out.ops else None
            if last is not None and last.WhichOneof("op") == "publish_batch" and last.publish_batch.publish == head:
                last.publish_batch.messages.append(op.publish.message)
                continue
            out.ops.add(publish_batch=rpb.PublishBatchOp(publish=head, messages=[op.publish.message]))
        else:
            out.ops.append(op)
    return out


def test_an_entry_with_an_operation_of_an_unknown_kind_is_refused_whole() -> None:
    """An operation this version does not know is never skipped: the entry holding it is
    refused before any of its operations changes the state (publishes before and after it
    included), and the state and its applied index stay those of the entry before."""
    from strongroom.errors import UnknownOperation

    def pub(body: bytes) -> rpb.Operation:
        return rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True, published_at=5.0,
                                                   message=cpb.Message(body=body)))

    unknown = rpb.Operation.FromString(bytes([0x9A, 0x06, 0x00]))  # field 99, as a newer version writes
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[pub(b"before")]))
    before = snapshot_bytes(sm)
    with pytest.raises(UnknownOperation, match=r"log entry 2 \(epoch 1\): operation 1 .* \(field 99\)"):
        sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[pub(b"first"), unknown, pub(b"last")]))
    assert snapshot_bytes(sm) == before and sm.applied_index == 1
    with pytest.raises(UnknownOperation, match=r"field 99"):
        sm.apply_op(unknown)
    assert snapshot_bytes(sm) == before
    # A no-op is known and changes nothing.
    assert sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(noop=rpb.Noop(leader="m1"))])) == [None]


def test_a_publish_batch_applies_as_its_publishes_one_by_one() -> None:
    """Log format 2 must give every member the state format 1 gives: same results, same
    snapshot, through dedup, a store limit (discard-oldest), expiry and retention."""
    def pub(dest: str, body: bytes, seq: int, queue: bool = False, **kw: float) -> rpb.Operation:
        return rpb.Operation(publish=rpb.PublishOp(
            store="lim" if dest.startswith("lim") else "s", destination=dest, queue=queue, published_at=5.0,
            message=cpb.Message(body=body, producer_id="p", sequence=seq), **kw))

    limits = rpb.Operation(configure_store=rpb.ConfigureStoreOp(store="lim", max_messages=3,
                                                                policy=cpb.LIMIT_POLICY_DISCARD_OLDEST))
    entries = [
        rpb.LogEntry(index=1, epoch=1, ops=[create("t", "a"), create("t", "b"), limits]),
        rpb.LogEntry(index=2, epoch=1, ops=[pub("q", b"%d" % i, i, queue=True) for i in range(1, 6)]
                     + [pub("t", b"t1", 6), pub("t", b"t2", 7), pub("q", b"q6", 8, queue=True)]),
        # Duplicates within a batch and of an earlier one.
        rpb.LogEntry(index=3, epoch=1, ops=[pub("q", b"again", 2, queue=True), pub("q", b"new", 9, queue=True),
                                            pub("q", b"dup", 9, queue=True)]),
        rpb.LogEntry(index=4, epoch=1, ops=[pub("lim", b"l%d" % i, 10 + i, queue=True) for i in range(5)]
                     + [pub("t", b"ttl", 20, expires_at=9.0), pub("t", b"kept", 21, retain_until=50.0)]),
        rpb.LogEntry(index=5, epoch=1, ops=[ack("t", "a", 6, 7), pub("q", b"late", DEDUP_WINDOW + 30, queue=True),
                                            pub("q", b"old", 1, queue=True)]),
    ]
    one, batched = StateMachine(), StateMachine()
    converted = [_as_batches(e) for e in entries]
    assert any(op.WhichOneof("op") == "publish_batch" and len(op.publish_batch.messages) > 1
               for e in converted for op in e.ops)
    for plain, as_batch in zip(entries, converted):
        assert one.apply_entry(plain) == batched.apply_entry(as_batch)
    assert snapshot_bytes(one) == snapshot_bytes(batched)
    assert one.due(10.0) == batched.due(10.0) and one.due(10.0)
    # The scenario did what it says: the limit discarded, the re-sent sequences were duplicates.
    assert one.store_count["lim"] == 3
    assert [s.message.body for s in one.messages.values()][-3:] == [b"ttl", b"kept", b"late"]
    assert [r.duplicate for r in batched.apply_entry(_as_batches(rpb.LogEntry(index=6, epoch=1, ops=[
        pub("q", b"again", 2, queue=True), pub("q", b"new", 22, queue=True)])))] == [True, False]


def forget(*pids: str, before: int, clock: float = 0.0) -> rpb.Operation:
    return rpb.Operation(forget_producers=rpb.ForgetProducersOp(producer_ids=pids, before_index=before, clock=clock,
                                                                idle_for=60.0))


def test_a_forgotten_producer_window_is_gone_and_a_resend_is_stored_again() -> None:
    """The documented consequence: once a producer's window is forgotten, a re-send of one of
    its old messages is a new message."""
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[publish("q", b"a", pid="old", seq=1, queue=True),
                                                       publish("q", b"b", pid="busy", seq=1, queue=True)]))
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=100.0))]))
    assert sm.idle_producers(100.0, 50.0) == ["old", "busy"]  # both used at clock 0
    # The leader decided at index 2; "busy" published again at index 3, before the forget applies.
    sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[publish("q", b"c", pid="busy", seq=2, queue=True)]))
    assert sm.producers["busy"].last_index == 3 and sm.producers["busy"].last_used == 100.0
    (forgotten,) = sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[forget("old", "busy", "never", before=2,
                                                                             clock=101.0)]))
    assert forgotten == 1 and set(sm.producers) == {"busy"} and sm.clock == 101.0
    assert sm.tallies.producers_forgotten == 1
    (again,) = sm.apply_entry(rpb.LogEntry(index=5, epoch=1, ops=[publish("q", b"a", pid="old", seq=1, queue=True)]))
    assert not again.duplicate and again.message_seq > 0  # stored a second time
    (dup,) = sm.apply_entry(rpb.LogEntry(index=6, epoch=1, ops=[publish("q", b"c", pid="busy", seq=2, queue=True)]))
    assert dup.duplicate  # the producer that kept publishing keeps its window
    assert len(sm.durable("q", "").pending) == 4


def test_idle_producers_are_those_unused_for_the_whole_time() -> None:
    sm = StateMachine()
    for index, (clock, pid) in enumerate([(10.0, "a"), (50.0, "b"), (90.0, "c")], 1):
        sm.apply_entry(rpb.LogEntry(index=index * 2, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=clock))]))
        sm.apply_entry(rpb.LogEntry(index=index * 2 + 1, epoch=1, ops=[publish("t", b"x", pid=pid, seq=1)]))
    assert sm.idle_producers(100.0, 50.0) == ["a", "b"]
    assert sm.idle_producers(100.0, 50.01) == ["a"]
    assert sm.idle_producers(100.0, 200.0) == []


def test_a_window_keeps_its_last_use_through_a_snapshot_and_an_older_snapshot_counts_it_used_then() -> None:
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=7.0))]))
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[publish("t", b"x", pid="p", seq=1)]))
    sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=500.0))]))
    copy = restore_bytes(snapshot_bytes(sm))
    assert (copy.producers["p"].last_index, copy.producers["p"].last_used) == (2, 7.0)
    old = rpb.StateSnapshot.FromString(snapshot_bytes(sm))
    for p in old.producers:  # as written before log format 7
        p.ClearField("last_used")
        p.last_index = 0
    restored = restore_bytes(old.SerializeToString())
    assert (restored.producers["p"].last_index, restored.producers["p"].last_used) == (0, 500.0)
    assert restored.idle_producers(600.0, 200.0) == []  # not forgotten early


def test_memory_of_100k_idle_producers_goes_back_once_they_are_forgotten() -> None:
    """100,000 producer ids, one message each to a topic no durable wants (only the windows
    grow), then forgotten: the memory they held is released."""
    import gc
    import tracemalloc

    sm = StateMachine()
    pids = [f"producer-{i:06d}" for i in range(100_000)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for start in range(0, len(pids), 5000):
            ops = [publish("t", b"x", pid=pid, seq=1) for pid in pids[start:start + 5000]]
            sm.apply_entry(rpb.LogEntry(index=start // 5000 + 1, epoch=1, ops=ops))
            del ops
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
        assert len(sm.producers) == 100_000 and held > 100_000 * 200  # a window is some hundreds of bytes
        sm.apply_entry(rpb.LogEntry(index=100, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=1000.0))]))
        idle = sm.idle_producers(1000.0, 100.0)
        assert len(idle) == 100_000
        for start in range(0, len(idle), 1000):
            sm.apply_entry(rpb.LogEntry(index=101 + start // 1000, epoch=1,
                                        ops=[forget(*idle[start:start + 1000], before=100, clock=1000.0)]))
        del idle
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert not sm.producers and sm.tallies.producers_forgotten == 100_000
    assert left < held * 0.05, (held, left)  # per idle producer: next to nothing


def counts(key: str, **by_seq: int) -> rpb.Operation:
    seqs = [int(s[1:]) for s in by_seq]
    return rpb.Operation(delivery_counts=rpb.DeliveryCountsOp(durable_key=key, message_seqs=seqs,
                                                              counts=list(by_seq.values())))


def test_delivery_counts_are_kept_for_pending_messages_only_never_lowered_and_go_with_the_message() -> None:
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[publish("q", b"%d" % i, pid="", queue=True) for i in range(3)]))
    key = durable_key("q", "")
    (held,) = sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[counts(key, m1=2, m2=1, m9=4)]))
    d = sm.durable("q", "")
    assert held == 2 and d is not None and d.delivery_counts == {1: 2, 2: 1}  # 9 is not pending
    sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[counts(key, m1=1, m2=3)]))
    assert d.delivery_counts == {1: 2, 2: 3}  # a late, lower count changes nothing
    copy = restore_bytes(snapshot_bytes(sm))
    assert copy.durable("q", "").delivery_counts == {1: 2, 2: 3}  # type: ignore[union-attr]
    sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[ack("q", "", 1)]))
    assert d.delivery_counts == {2: 3}
    assert sm.apply_entry(rpb.LogEntry(index=5, epoch=1, ops=[counts("nobody", m2=5)])) == [0]
    sm.apply_entry(rpb.LogEntry(index=6, epoch=1, ops=[rpb.Operation(replay=rpb.ReplayOp(durable_key=key,
                                                                                          sequence=1))]))
    assert d.delivery_counts == {}  # replayed: delivered and counted afresh


def _rss_reader() -> Callable[[], float]:
    """This process's resident MiB after a collection and glibc's malloc_trim (what was freed
    handed back), read from /proc; skips the test without glibc."""
    import ctypes
    import gc

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc: memory freed is handed back on request
    except (OSError, AttributeError):
        pytest.skip("needs glibc's malloc_trim to read what was given back")

    def rss_mib() -> float:
        gc.collect()
        libc.malloc_trim(0)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    return rss_mib


def test_a_message_kept_after_a_restore_does_not_hold_the_whole_snapshot() -> None:
    """A restored state whose messages are all acknowledged but one gives the rest of the
    snapshot's memory back: each stored message is a copy, not a view into the parsed snapshot
    (which kept every message of it alive, one protobuf arena, for as long as any lived)."""
    rss_mib = _rss_reader()

    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[create("t", "d")]))
    for start in range(0, 40_000, 1000):
        sm.apply_entry(rpb.LogEntry(index=2 + start // 1000, epoch=1, ops=[
            publish("t", bytes(2000) + i.to_bytes(4, "big"), pid="") for i in range(start, start + 1000)]))
    data = snapshot_bytes(sm)  # held to the end: the same 80 MB in every reading
    del sm
    before = rss_mib()
    restored = restore_bytes(data)
    loaded = rss_mib()
    assert loaded - before > 60, (before, loaded)  # 40,000 messages of 2 KB held
    seqs = sorted(restored.messages)[:-1]  # all but the last acknowledged
    for first in range(0, len(seqs), 1000):
        restored.apply_entry(rpb.LogEntry(index=100 + first, epoch=1, ops=[ack("t", "d", *seqs[first:first + 1000])]))
    assert len(restored.messages) == 1
    left = rss_mib()
    assert left - before < 0.25 * (loaded - before), (before, loaded, left)


def test_a_last_value_does_not_hold_the_whole_entry_it_came_in() -> None:
    """A last value lives long, the other messages of its log entry (a batch) do not: once they
    are acknowledged, their memory goes back, though the last value stays. A stored message that
    was a view into the applied entry kept the whole entry alive (one protobuf arena)."""
    rss_mib = _rss_reader()

    entries = 40
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[create("bulk", "d")] + [
        create(f"lv{n}", "latest", cpb.DURABLE_KIND_LASTVALUE) for n in range(entries)]))
    before = rss_mib()
    for n in range(entries):  # each entry: 999 messages for "bulk", then one for a last-value topic
        ops = [publish("bulk", bytes(2000) + i.to_bytes(4, "big"), pid="") for i in range(999)]
        ops.append(publish(f"lv{n}", bytes(2000), pid=""))
        sm.apply_entry(rpb.LogEntry.FromString(rpb.LogEntry(index=2 + n, epoch=1, ops=ops).SerializeToString()))
    loaded = rss_mib()
    assert loaded - before > 60, (before, loaded)  # 39,960 messages of 2 KB held
    bulk = sorted(sm.durable("bulk", "d").pending)  # type: ignore[union-attr]
    for first in range(0, len(bulk), 1000):
        sm.apply_entry(rpb.LogEntry(index=100 + first, epoch=1, ops=[ack("bulk", "d", *bulk[first:first + 1000])]))
    assert len(sm.messages) == entries  # the last values
    left = rss_mib()
    assert left - before < 0.25 * (loaded - before), (before, loaded, left)
