"""Message swapping in-process: payloads past the budget go to the swap database and come back intact."""

from __future__ import annotations

import os
from pathlib import Path

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import StateMachine, durable_key
from strongroom.persistence.swap import SwapSpace

KIB = 1024


def body(i: int) -> bytes:
    return i.to_bytes(4, "big") + os.urandom(KIB - 4)


def publish(i: int, payload: bytes) -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                               message=cpb.Message(body=payload, producer_id="p", sequence=i + 1)))


def fill(sm: StateMachine, n: int) -> dict[int, bytes]:
    bodies = {}
    for i in range(n):
        payload = body(i)
        (res,) = sm.apply_entry(rpb.LogEntry(index=i + 1, epoch=1, ops=[publish(i, payload)]))
        bodies[res.message_seq] = payload
    return bodies


def test_payloads_past_budget_are_swapped_and_read_back(tmp_path: Path, driver: str) -> None:
    space = SwapSpace(tmp_path / "swap", 64 * KIB, driver)
    sm = StateMachine(space.store())
    bodies = fill(sm, 500)
    swapped = sm.swapped_messages("s")
    assert swapped >= 500 - 64, swapped
    assert space.resident_bytes <= space.budget_bytes
    assert sum(1 for m in sm.messages.values() if m.swapped) == swapped
    for seq, payload in bodies.items():
        assert sm.message(seq).message.body == payload  # type: ignore[union-attr]
    # Acknowledged messages leave the swap and the count.
    sm.apply_entry(rpb.LogEntry(index=1000, epoch=1, ops=[rpb.Operation(ack=rpb.AckOp(
        store="s", durable_key=durable_key("q", ""), message_seqs=list(bodies)[:100]))]))
    assert sm.swapped_messages("s") == swapped - 100
    assert sm.store_count["s"] == 400


def test_swapped_payloads_survive_a_restart_through_the_snapshot(tmp_path: Path, driver: str) -> None:
    space = SwapSpace(tmp_path / "swap", 32 * KIB, driver)
    sm = StateMachine(space.store())
    bodies = fill(sm, 200)
    assert sm.swapped_messages("s") > 100
    snapshot = snapshot_bytes(sm)  # reads swapped payloads back
    space.close()
    # A new process: the swap directory is wiped; the state comes from a peer's snapshot.
    space2 = SwapSpace(tmp_path / "swap", 32 * KIB, driver)
    sm2 = restore_bytes(snapshot, space2.store())
    assert sm2.swapped_messages("s") > 100
    got = {seq: sm2.message(seq).message.body for seq in sm2.durable("q", "").pending}  # type: ignore[union-attr]
    assert got == bodies


def test_budget_is_shared_and_a_dropped_state_frees_its_part(tmp_path: Path, driver: str) -> None:
    space = SwapSpace(tmp_path / "swap", 16 * KIB, driver)
    a, b = StateMachine(space.store()), StateMachine(space.store())
    bodies_a = fill(a, 50)
    bodies_b = fill(b, 50)
    assert space.resident_bytes <= space.budget_bytes
    # The oldest payloads (all of a's) went first.
    assert a.swapped_messages("s") == 50
    a.close()
    assert b.swapped_messages("s") > 0
    assert {s: b.message(s).message.body for s in bodies_b} == bodies_b  # type: ignore[union-attr]
    assert len(bodies_a) == 50


def test_no_budget_no_swap(tmp_path: Path) -> None:
    sm = StateMachine()
    fill(sm, 10)
    assert sm.swapped_messages("s") == 0
    assert not any(m.swapped for m in sm.messages.values())
