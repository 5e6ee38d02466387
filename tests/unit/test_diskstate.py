"""Indexes on disk: the disk state machine against the memory one, under the same random
operations, compared on everything observable; plus restart (reopen) and snapshot install."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.diskinstall import install_parts
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.dispatcher import Dispatcher, Opened
from strongroom.persistence.drivers import DRIVERS
from strongroom.persistence.snapshots import (restore_bytes, restore_parts, snapshot_bytes, snapshot_parts,
                                              state_parts)
from strongroom.persistence.state import DeleteResult, StateMachine, durable_key
from strongroom.persistence.storage import DiskStorage

DESTS = ["t", "u", "q"]
DURABLES = [("t", "a", cpb.DURABLE_KIND_STANDARD), ("t", "b", cpb.DURABLE_KIND_SHARED),
            ("u", "lv", cpb.DURABLE_KIND_LASTVALUE), ("u", "k", cpb.DURABLE_KIND_LASTVALUE)]


def op_strategy() -> st.SearchStrategy[tuple[object, ...]]:
    return st.one_of(
        st.tuples(st.just("publish"), st.sampled_from(DESTS), st.integers(0, 40), st.integers(0, 3),
                  st.booleans(), st.sampled_from(["x", "y", "z"]), st.booleans()),
        st.tuples(st.just("create"), st.integers(0, len(DURABLES) - 1), st.integers(0, 100)),
        st.tuples(st.just("ack"), st.integers(0, 2), st.lists(st.integers(1, 60), max_size=4), st.integers(0, 100)),
        st.tuples(st.just("use"), st.lists(st.integers(0, len(ALL_KEYS) - 1), max_size=3), st.integers(0, 100),
                  st.booleans()),
        st.tuples(st.just("expire_durable"), st.integers(0, len(ALL_KEYS) - 1), st.integers(0, 100),
                  st.integers(1, 30)),
        st.tuples(st.just("limit"), st.integers(0, 8), st.booleans()),
        st.tuples(st.just("expire"), st.integers(0, 100), st.integers(0, 100)),
        st.tuples(st.just("tick"), st.integers(0, 100)),
        # The leader's delivery counts of a durable's messages.
        st.tuples(st.just("counts"), st.integers(0, len(ACK_KEYS) - 1), st.lists(st.integers(1, 12), max_size=4),
                  st.integers(1, 5)),
        # The leader forgets idle producers' windows: which, and the index it decided at.
        st.tuples(st.just("forget"), st.lists(st.sampled_from(["p", "r", "gone"]), max_size=3, unique=True),
                  st.integers(0, 25), st.integers(0, 100)),
        st.tuples(st.just("dead_letter"), st.integers(0, 2), st.integers(1, 60)),
        st.tuples(st.just("replay"), st.integers(0, 1), st.integers(0, 40)),
        st.tuples(st.just("map"), st.sampled_from(["k1", "k2"]), st.booleans(), st.binary(max_size=4)),
        st.tuples(st.just("suspend"), st.lists(st.integers(0, len(ALL_KEYS) - 1), max_size=3), st.booleans()),
        st.tuples(st.just("delete"), st.integers(0, len(ALL_KEYS) - 1)),
        st.tuples(st.just("restart")),
        # A message a router forwarded: destination, origin cluster, origin sequence, and how far
        # back its previous is (in order, a gap or a duplicate, depending on the mark).
        st.tuples(st.just("forward"), st.sampled_from(["t", "u"]), st.sampled_from(["rio", "tokyo"]),
                  st.integers(1, 5), st.integers(1, 2)),
    )


ACK_KEYS = [durable_key("t", "a"), durable_key("t", "b"), durable_key("q", "")]
ALL_KEYS = [*ACK_KEYS, durable_key("u", "lv"), durable_key("u", "k")]


def to_op(spec: tuple[object, ...]) -> rpb.Operation | None:
    kind = spec[0]
    if kind == "publish":
        _, dest, seq, ttl, pid, sym, on_clock = spec
        producer = ("p" if int(seq) % 3 else "r") if pid else ""  # type: ignore[call-overload]
        msg = cpb.Message(body=f"{dest}-{seq}".encode() * 3, producer_id=producer, sequence=int(seq) if pid else 0)  # type: ignore[call-overload]
        msg.fields["sym"].string_value = str(sym)
        end = float(ttl) * 25 if ttl else 0.0  # type: ignore[arg-type]
        # A time-to-live on the wall clock (as before log format 5) or on the pseudo-clock.
        return rpb.Operation(publish=rpb.PublishOp(store="s", destination=str(dest), message=msg, queue=dest == "q",
                                                   published_at=float(seq), expires_at=0.0 if on_clock else end,  # type: ignore[arg-type]
                                                   expires_clock=end if on_clock else 0.0))
    if kind == "create":
        dest, name, dkind = DURABLES[spec[1]]  # type: ignore[index]
        return rpb.Operation(create_durable=rpb.CreateDurableOp(
            store="s", destination=dest, durable=name, kind=dkind, key_field="sym" if name == "k" else "",
            clock=float(spec[2])))  # type: ignore[arg-type]
    if kind == "ack":
        return rpb.Operation(ack=rpb.AckOp(store="s", durable_key=ACK_KEYS[spec[1]], message_seqs=spec[2],  # type: ignore[index,arg-type]
                                           clock=float(spec[3])))  # type: ignore[arg-type]
    if kind == "use":
        return rpb.Operation(durable_use=rpb.DurableUseOp(durable_keys=[ALL_KEYS[i] for i in spec[1]],  # type: ignore[attr-defined]
                                                          clock=float(spec[2]), attached=bool(spec[3])))  # type: ignore[arg-type]
    if kind == "expire_durable":
        return rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=ALL_KEYS[spec[1]], expiry=rpb.DurableExpiry(  # type: ignore[index]
            clock=float(spec[2]), unused_for=float(spec[3]))))  # type: ignore[arg-type]
    if kind == "limit":
        return rpb.Operation(configure_store=rpb.ConfigureStoreOp(
            store="s", max_messages=int(spec[1]) * 3,  # type: ignore[call-overload]
            policy=cpb.LIMIT_POLICY_DISCARD_OLDEST if spec[2] else cpb.LIMIT_POLICY_UNSPECIFIED))
    if kind == "expire":
        return rpb.Operation(expire=rpb.ExpireOp(message_seqs=list(range(1, 60)), now=float(spec[1]),  # type: ignore[arg-type]
                                                 clock=float(spec[2])))  # type: ignore[arg-type]
    if kind == "tick":
        return rpb.Operation(clock=rpb.ClockOp(clock=float(spec[1])))  # type: ignore[arg-type]
    if kind == "counts":
        seqs = list(dict.fromkeys(spec[2]))  # type: ignore[call-overload]
        return rpb.Operation(delivery_counts=rpb.DeliveryCountsOp(durable_key=ACK_KEYS[spec[1]], message_seqs=seqs,  # type: ignore[index]
                                                                  counts=[int(spec[3]) + s % 3 for s in seqs]))  # type: ignore[call-overload]
    if kind == "forget":
        return rpb.Operation(forget_producers=rpb.ForgetProducersOp(
            producer_ids=spec[1], before_index=spec[2], clock=float(spec[3]), idle_for=5.0))  # type: ignore[arg-type]
    if kind == "dead_letter":
        return rpb.Operation(dead_letter=rpb.DeadLetterOp(durable_key=ACK_KEYS[spec[1]], message_seq=spec[2],  # type: ignore[index,arg-type]
                                                          deliveries=5, target_store="s", target_destination="q",
                                                          target_queue=True))
    if kind == "replay":
        return rpb.Operation(replay=rpb.ReplayOp(durable_key=ACK_KEYS[spec[1]], sequence=spec[2]))  # type: ignore[index,arg-type]
    if kind == "suspend":
        keys = [ALL_KEYS[i] for i in spec[1]]  # type: ignore[attr-defined]
        return rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=keys, suspended=bool(spec[2])))
    if kind == "delete":
        return rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=ALL_KEYS[spec[1]]))  # type: ignore[index]
    if kind == "forward":
        _, dest, cluster, seq, back = spec
        msg = cpb.Message(body=f"{cluster}-{seq}".encode(), origin=cpb.Origin(  # type: ignore[call-overload]
            cluster=cluster, store="s", sequence=seq, previous=max(0, seq - back)))  # type: ignore[operator]
        msg.fields["sym"].string_value = "x"
        return rpb.Operation(publish=rpb.PublishOp(store="s", destination=str(dest), message=msg, forwarded=True,
                                                   published_at=float(seq)))  # type: ignore[arg-type]
    if kind == "map":
        _, key, delete, value = spec
        op = rpb.MapOp(store="s", map="m", key=str(key))
        if delete:
            op.delete = True
        else:
            op.put = bytes(value)  # type: ignore[arg-type]
        return rpb.Operation(map=op)
    return None


def observe(sm: StateMachine) -> dict[str, object]:
    """Everything a client or the dispatcher can see of a state machine."""
    messages = {m.seq: (m.store, m.destination, m.refs, m.size, m.queue, m.retained, m.expires_at, m.expires_clock,
                        m.message.SerializeToString(deterministic=True)) for m in sm.messages.values()}
    durables = {k: (d.kind, list(d.pending), len(d.pending), d.pending_bytes, d.last_value_seq, dict(d.last_values),
                    d.suspended, d.wants_all, d.last_used, d.attached, dict(d.delivery_counts))
                for k, d in sm.durables.items()}
    indexed = {k: sorted(d.key for d in ds) for k, ds in (*sm.by_destination.items(), *sm.content_durables.items())
               if ds}
    producers = {p: (list(w.items()), w.max_seq, w.last_index, w.last_used) for p, w in sm.producers.items()}
    return {
        # The counts a DR standby's lag and an activation's tail loss compare (persistence/committed.py).
        "applied": (sm.applied_index, sm.applied_epoch, sm.next_seq, sm.acked_messages),
        "messages": messages, "durables": durables, "indexed": indexed, "producers": producers,
        "counts": ({k: v for k, v in sm.store_count.items() if v}, {k: v for k, v in sm.store_bytes.items() if v}),
        "store_seqs": {k: list(v) for k, v in sm.store_seqs.items() if len(list(v))},
        "configs": {k: v.SerializeToString() for k, v in sm.store_configs.items()},
        # Non-empty maps only: the memory state keeps an empty map after a delete of a missing key.
        "maps": {k: v for k, v in sm.maps.items() if v}, "due": sm.due(1e9), "clock_due": sm.due(0.0, 1e9),
        "clock": sm.clock, "timed": sm.timed(),
        "origins": {k: (m.store, m.sequence, m.stored_at) for k, m in sm.origin_marks.items()},
    }


def result_of(r: object) -> object:
    """An operation's result, comparable across the two variants (a durable by its key)."""
    if hasattr(r, "key") and hasattr(r, "pending"):
        return ("durable", r.key)
    if isinstance(r, DeleteResult):
        return tuple(r)
    return r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(op_strategy(), min_size=1, max_size=6), min_size=1, max_size=25))
@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_disk_state_matches_memory_state(driver: str, entries: list[list[tuple[object, ...]]]) -> None:
    _compare(entries, driver)


def forwarding_strategy() -> st.SearchStrategy[tuple[object, ...]]:
    """Mostly forwarded messages (the origin marks), with what else moves them or refuses."""
    forward = st.tuples(st.just("forward"), st.sampled_from(["t", "u"]), st.sampled_from(["rio", "tokyo"]),
                        st.integers(1, 6), st.integers(1, 2))
    return st.one_of(forward, forward, forward,
                     st.tuples(st.just("create"), st.integers(0, len(DURABLES) - 1), st.integers(0, 100)),
                     st.tuples(st.just("ack"), st.integers(0, 2), st.lists(st.integers(1, 30), max_size=4),
                               st.integers(0, 100)),
                     st.tuples(st.just("limit"), st.integers(0, 3), st.booleans()),
                     st.tuples(st.just("restart")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(forwarding_strategy(), min_size=1, max_size=6), min_size=1, max_size=25))
@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_disk_state_matches_memory_state_for_forwarded_messages(driver: str,
                                                                entries: list[list[tuple[object, ...]]]) -> None:
    _compare(entries, driver)


def _compare(entries: list[list[tuple[object, ...]]], driver: str) -> None:
    """Apply the entries to a memory state and a state on disk (reopened where an entry says
    "restart"): the same results and the same observable state, after a reopen, through a
    snapshot and after installing one."""
    with tempfile.TemporaryDirectory() as tmp:
        storage = DiskStorage(Path(tmp), sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
        try:
            mem = StateMachine()
            disk = DiskStateMachine.open(storage)
            index = 0
            for specs in entries:
                ops = [op for op in (to_op(s) for s in specs) if op is not None]
                if any(s[0] == "restart" for s in specs):
                    disk = DiskStateMachine.open(storage)
                if not ops:
                    continue
                index += 1
                entry = rpb.LogEntry(index=index, epoch=1, ops=ops)
                r_mem = [result_of(r) for r in mem.apply_entry(entry)]
                r_disk = [result_of(r) for r in disk.apply_entry(entry)]
                assert r_mem == r_disk
                assert observe(disk) == observe(mem)
            reopened = DiskStateMachine.open(storage)
            assert observe(reopened) == observe(mem)
            # A snapshot of the disk state is the memory state's, and installs back.
            assert observe(restore_bytes(snapshot_bytes(reopened))) == observe(mem)
            install_parts(reopened, snapshot_parts(mem))
            assert observe(reopened) == observe(mem)
            assert observe(DiskStateMachine.open(storage)) == observe(mem)
            # In many small parts (a pending list and a map across parts), joined or not.
            small = list(state_parts(mem, part_bytes=200, pending_per_part=3))
            assert observe(restore_parts(small)) == observe(mem)
            assert observe(restore_bytes(b"".join(small))) == observe(mem)
            install_parts(reopened, small)
            assert observe(reopened) == observe(mem)
            # A snapshot of a version before parts: no holders per message, no bytes per durable.
            legacy = rpb.StateSnapshot.FromString(snapshot_bytes(mem))
            for m in legacy.messages:
                m.ClearField("refs")
            for d in legacy.durables:
                d.ClearField("pending_bytes")
            install_parts(reopened, [legacy.SerializeToString()])
            assert observe(reopened) == observe(mem)
            assert observe(restore_bytes(legacy.SerializeToString())) == observe(mem)
        finally:
            storage.close()


def test_pending_pages_in_order(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        sm = DiskStateMachine.open(storage)
        ops = [rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                                   message=cpb.Message(body=b"%d" % i))) for i in range(3000)]
        sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=ops))
        pending = sm.durable("q", "").pending  # type: ignore[union-attr]
        first = sm.pending_page(sm.durable("q", ""), 0, 1000)  # type: ignore[arg-type]
        assert first == list(range(1, 1001))
        assert sm.pending_page(sm.durable("q", ""), 2990, 1000) == list(range(2991, 3001))  # type: ignore[arg-type]
        assert len(pending) == 3000 and list(pending) == list(range(1, 3001))
        assert sm.message(1500).message.body == b"1499"  # type: ignore[union-attr]
    finally:
        storage.close()


async def test_last_value_subscriber_gets_updates_with_indexes_on_disk(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        sm = DiskStateMachine.open(storage)
        dispatcher = Dispatcher("t")
        dispatcher.attach(sm)
        sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[rpb.Operation(create_durable=rpb.CreateDurableOp(
            store="s", destination="t", durable="lv", kind=cpb.DURABLE_KIND_LASTVALUE))]))
        durable = sm.durable("t", "lv")
        assert durable is not None
        sub = dispatcher.open(durable, sm, "c", credit=10)
        dispatcher.start()
        sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(publish=rpb.PublishOp(
            store="s", destination="t", message=cpb.Message(body=b"v1")))]))
        opened = await asyncio.wait_for(sub.outbox.get(), 5)
        got = await asyncio.wait_for(sub.outbox.get(), 5)
        assert isinstance(opened, Opened)
        assert isinstance(got, list) and [d.message.body for d in got] == [b"v1"]
        await dispatcher.stop("", "")
    finally:
        storage.close()


def test_acknowledged_messages_are_counted_on_disk_and_in_snapshots(tmp_path: Path, driver: str) -> None:
    """The count a DR activation's acks lost compares: per message a durable acknowledged, kept
    across a reopen of the state on disk, in a snapshot and through an install."""
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        mem, disk = StateMachine(), DiskStateMachine.open(storage)
        specs = [[("create", 0, 1), ("create", 1, 1)],
                 [("publish", "t", 1, 0, False, "x", False), ("publish", "t", 2, 0, False, "x", False)],
                 [("ack", 0, [1, 2], 2), ("ack", 1, [1], 2), ("ack", 1, [7], 2)]]  # seq 7: nothing to ack
        for index, entry_specs in enumerate(specs, 1):
            entry = rpb.LogEntry(index=index, epoch=1, ops=[to_op(s) for s in entry_specs])  # type: ignore[misc]
            mem.apply_entry(entry)
            disk.apply_entry(entry)
        assert mem.acked_messages == disk.acked_messages == 3
        assert DiskStateMachine.open(storage).acked_messages == 3
        assert restore_bytes(snapshot_bytes(mem)).acked_messages == 3
        fresh = DiskStateMachine.open(storage)
        install_parts(fresh, snapshot_parts(StateMachine()))
        assert fresh.acked_messages == 0
        install_parts(fresh, snapshot_parts(mem))
        assert DiskStateMachine.open(storage).acked_messages == 3
    finally:
        storage.close()


def test_forgotten_windows_leave_nothing_in_the_dedup_family(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        sm = DiskStateMachine.open(storage)
        ops = [rpb.Operation(publish=rpb.PublishOp(store="s", destination="t", message=cpb.Message(
            body=b"x", producer_id=f"p{i % 50}", sequence=i + 1))) for i in range(500)]
        sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[rpb.Operation(clock=rpb.ClockOp(clock=3.0)), *ops]))
        assert len(list(sm._cf("dedup").scan())) == 500
        reopened = DiskStateMachine.open(storage)
        assert {(w.last_index, w.last_used) for w in reopened.producers.values()} == {(1, 3.0)}
        forget = rpb.ForgetProducersOp(producer_ids=[f"p{i}" for i in range(40)], before_index=1, clock=90.0)
        (forgotten,) = reopened.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(forget_producers=forget)]))
        assert forgotten == 40
        assert len(list(reopened._cf("dedup").scan())) == 100  # the 10 producers left, 10 sequences each
        again = DiskStateMachine.open(storage)
        assert sorted(again.producers) == sorted(f"p{i}" for i in range(40, 50))
        (stored,) = again.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[ops[0]]))  # p0's first message
        assert not stored.duplicate
    finally:
        storage.close()


def test_an_interrupted_install_is_moved_aside_and_the_member_starts_empty(tmp_path: Path, driver: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the middle of `install` (its families half written): the next start does not
    refuse, it moves the store aside as a damaged one and starts empty (to catch up)."""
    from strongroom.persistence import diskstate

    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        mem = StateMachine()
        ops = [rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                                   message=cpb.Message(body=b"%d" % i))) for i in range(50)]
        mem.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=ops))
        disk = DiskStateMachine.open(storage)

        def crash(self: object, *args: object) -> None:
            raise RuntimeError("killed in the middle of the install")

        monkeypatch.setattr(diskstate.DiskStateMachine, "_commit", crash)
        with pytest.raises(RuntimeError):
            install_parts(disk, snapshot_parts(mem))
        monkeypatch.undo()
    finally:
        storage.close()
    reopened = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        assert "snapshot install into the indexes on disk was interrupted" in reopened.damage
        assert "moved to" in reopened.damage and list(tmp_path.glob("damaged-*"))
        state = DiskStateMachine.open(reopened)
        assert state.applied_index == 0 and not state.messages.get(1)
        install_parts(state, snapshot_parts(mem))  # and it can take the leader's snapshot now
        assert len(state.durable("q", "").pending) == 50  # type: ignore[union-attr]
    finally:
        reopened.close()
    again = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        assert again.damage == ""  # the finished install is sound
    finally:
        again.close()


def test_delivery_counts_are_kept_on_disk_and_leave_with_the_message(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        sm = DiskStateMachine.open(storage)
        ops = [rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                                   message=cpb.Message(body=b"%d" % i))) for i in range(5)]
        sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=ops))
        key = durable_key("q", "")
        sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(delivery_counts=rpb.DeliveryCountsOp(
            durable_key=key, message_seqs=[1, 2, 3], counts=[2, 4, 1]))]))
        reopened = DiskStateMachine.open(storage)
        assert reopened.durable("q", "").delivery_counts == {1: 2, 2: 4, 3: 1}  # type: ignore[union-attr]
        reopened.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[rpb.Operation(ack=rpb.AckOp(
            store="s", durable_key=key, message_seqs=[2]))]))
        assert DiskStateMachine.open(storage).durable("q", "").delivery_counts == {1: 2, 3: 1}  # type: ignore[union-attr]
    finally:
        storage.close()


def test_an_install_larger_than_one_write_batch_commits_its_batches_and_keeps_everything(
        tmp_path: Path, driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An install writes a batch every INSTALL_BATCH records (20 000: any real backlog): the
    batches before the last part must commit (they once failed on the units-of-work table,
    which tracked no changes yet, so no member could take a snapshot of 20 000 messages)."""
    from strongroom.persistence import diskinstall

    monkeypatch.setattr(diskinstall, "INSTALL_BATCH", 7)
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        mem = StateMachine()
        specs = [[("create", 0, 1), ("create", 2, 1)],
                 [("publish", d, i % 40, 0, False, "x", False) for i in range(60) for d in ("t", "u", "q")]]
        for index, entry_specs in enumerate(specs, 1):
            mem.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[to_op(s) for s in entry_specs]))  # type: ignore[misc]
        assert len(mem.messages) > 10 * 7
        disk = DiskStateMachine.open(storage)
        install_parts(disk, state_parts(mem, part_bytes=2000, pending_per_part=5))
        assert observe(disk) == observe(mem)
        assert observe(DiskStateMachine.open(storage)) == observe(mem)
    finally:
        storage.close()
