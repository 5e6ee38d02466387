"""The dispatcher against a real (memory) state machine: what it hands out around acknowledgments."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import InvalidArgument
from strongroom.limits import DELIVERY_BATCH_BYTES
from strongroom.persistence.dispatcher import Dispatcher, Subscription
from strongroom.persistence.state import StateMachine


def _publish(sm: StateMachine, index: int, body: bytes) -> None:
    sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(publish=rpb.PublishOp(
        store="s", destination="q", queue=True, message=cpb.Message(body=body)))]))


def _ack(sm: StateMachine, index: int, seqs: list[int]) -> None:
    sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(ack=rpb.AckOp(
        store="s", durable_key=sm.durable("q", "").key, message_seqs=seqs))]))  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def _running() -> AsyncIterator[tuple[StateMachine, Dispatcher]]:
    """A memory state machine with a started dispatcher attached."""
    sm = StateMachine()
    dispatcher = Dispatcher("t")
    dispatcher.attach(sm)
    dispatcher.start()
    try:
        yield sm, dispatcher
    finally:
        await dispatcher.stop("", "")


async def _received(sub: Subscription, wait: float = 0.2) -> list[int]:
    """Sequences delivered to `sub` within `wait` seconds (its `opened` answer skipped)."""
    return [seq for seq, _ in await _delivered(sub, wait)]


async def test_message_acked_before_this_leader_handed_it_out_is_not_delivered_while_the_ack_commits() -> None:
    """After a failover a subscriber acks a message the old leader delivered: the new leader's
    dispatcher never handed it out, and must not hand it to anyone while that ack is on its way
    to the log (found by the partition-etcd chaos scenario: ack confirmed, then delivered again)."""
    async with _running() as (sm, dispatcher):
        _publish(sm, 1, b"one")
        _publish(sm, 2, b"two")
        queue = sm.durable("q", "")
        assert queue is not None
        # The ack comes from a subscription of the previous leader: accepted, not yet committed.
        dispatcher.check_ack(queue, [1], "old-leader-sub")
        dispatcher.acking(queue, sm, [1])
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _received(sub) == [2]
        _ack(sm, 3, [1])
        _publish(sm, 4, b"three")
        assert await _received(sub) == [3]


async def test_message_acked_by_a_subscriber_that_then_leaves_is_not_redelivered() -> None:
    async with _running() as (sm, dispatcher):
        _publish(sm, 1, b"one")
        queue = sm.durable("q", "")
        assert queue is not None
        first = dispatcher.open(queue, sm, "a", credit=10)
        assert await _received(first) == [1]
        dispatcher.check_ack(queue, [1], first.id)
        dispatcher.acking(queue, sm, [1])
        dispatcher.close(first)  # gone before its ack committed
        second = dispatcher.open(queue, sm, "b", credit=10)
        assert await _received(second) == []
        _ack(sm, 2, [1])
        assert await _received(second) == []


async def _delivered(sub: Subscription, wait: float = 0.2) -> list[tuple[int, int]]:
    """(sequence, delivery count) of what `sub` got within `wait` seconds."""
    got: list[tuple[int, int]] = []
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return got
        try:
            item = await asyncio.wait_for(sub.outbox.get(), left)
        except TimeoutError:
            return got
        if isinstance(item, list):
            got += [(d.message_seq, d.delivery_count) for d in item]


async def test_a_nak_delivers_the_message_again_at_once_or_after_its_delay() -> None:
    async with _running() as (sm, dispatcher):
        for i in (1, 2):
            _publish(sm, i, b"m")
        queue = sm.durable("q", "")
        assert queue is not None
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, 1), (2, 1)]
        assert dispatcher.nak(queue, sm, [2], sub.id, 0.0) == []
        assert await _delivered(sub) == [(2, 2)]
        assert dispatcher.nak(queue, sm, [1], sub.id, 0.5) == []
        assert await _delivered(sub, 0.3) == []  # held back for its delay
        assert await _delivered(sub, 0.6) == [(1, 2)]


async def test_a_nak_takes_each_message_on_its_own_and_refuses_what_it_may_not_give_back() -> None:
    async with _running() as (sm, dispatcher):
        for i in (1, 2, 3):
            _publish(sm, i, b"m")
        queue = sm.durable("q", "")
        assert queue is not None
        mine = dispatcher.open(queue, sm, "a", credit=1)
        other = dispatcher.open(queue, sm, "b", credit=1)
        got_mine = await _delivered(mine)
        got_other = await _delivered(other)
        assert len(got_mine) == len(got_other) == 1
        theirs = got_other[0][0]
        refused = dispatcher.nak(queue, sm, [got_mine[0][0], theirs, 99], mine.id, 0.0)
        assert [(seq, err.reason) for seq, err in refused] == [(theirs, "FOREIGN_MESSAGE"), (99, "UNKNOWN_MESSAGE")]
        # Its own message was given back all the same (and the other subscriber still holds its own).
        assert dispatcher.unacked(queue.key) == 1
        dispatcher.grant(mine, 1)
        again = await _delivered(mine)
        assert again and again[0][1] == 2


async def test_a_nak_with_a_bad_delay_changes_nothing() -> None:
    async with _running() as (sm, dispatcher):
        _publish(sm, 1, b"m")
        queue = sm.durable("q", "")
        assert queue is not None
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, 1)]
        for bad in (-1.0, float("inf"), float("nan")):
            with pytest.raises(InvalidArgument, match="nak delay"):
                dispatcher.nak(queue, sm, [1], sub.id, bad)
        assert dispatcher.unacked(queue.key) == 1


async def test_a_terminated_message_goes_to_dead_lettering_and_is_not_delivered_again() -> None:
    terminated: list[tuple[int, int, str]] = []
    sm = StateMachine()
    dispatcher = Dispatcher("t", dead_letter=lambda durable, seq, count, why: terminated.append((seq, count, why)))
    dispatcher.attach(sm)
    dispatcher.start()
    try:
        for i in (1, 2):
            _publish(sm, i, b"m")
        queue = sm.durable("q", "")
        assert queue is not None
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, 1), (2, 1)]
        assert dispatcher.terminate(queue, sm, [1], sub.id) == []
        assert terminated == [(1, 1, "was terminated by its subscriber")]
        dispatcher.close(sub)  # message 2 goes back for redelivery, message 1 does not
        again = dispatcher.open(queue, sm, "c", credit=10)
        assert await _delivered(again) == [(2, 2)]
    finally:
        await dispatcher.stop("", "")


async def test_a_message_whose_time_to_live_ended_on_the_pseudo_clock_is_not_delivered() -> None:
    clock = [10.0]
    sm = StateMachine()
    dispatcher = Dispatcher("t", clock=lambda: clock[0])
    dispatcher.attach(sm)
    dispatcher.start()
    try:
        for index, end in ((1, 12.0), (2, 0.0)):
            sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(publish=rpb.PublishOp(
                store="s", destination="q", queue=True, message=cpb.Message(body=b"m"), expires_clock=end))]))
        queue = sm.durable("q", "")
        assert queue is not None
        # Past its end on the term's pseudo-clock (the expiry round has not removed it yet).
        clock[0] = 12.0
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _received(sub) == [2]
    finally:
        await dispatcher.stop("", "")


async def test_a_new_leader_counts_on_from_the_delivery_counts_the_log_recorded() -> None:
    """The redelivery limit holds across a leader change: the first leader's dispatcher reports
    its deliveries of a limited durable (`take_counted`); once they are in the log
    (DeliveryCountsOp), a second leader's dispatcher counts on from them and dead-letters the
    message at the limit, not after another limit's worth of deliveries."""
    lettered: list[tuple[int, int, str]] = []
    sm = StateMachine()
    first = Dispatcher("a", redelivery_limit=lambda durable: 3,
                       dead_letter=lambda durable, seq, count, why: lettered.append((seq, count, why)))
    first.attach(sm)
    first.start()
    _publish(sm, 1, b"poison")
    queue = sm.durable("q", "")
    assert queue is not None
    for delivery in (1, 2):
        sub = first.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, delivery)]
        first.close(sub)  # gone without an ack: delivered again
    counted = first.take_counted()
    assert {key: counts for key, (state, counts) in counted.items()} == {queue.key: {1: 2}}
    assert counted[queue.key][0] is sm and first.take_counted() == {}
    await first.stop("", "")
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(delivery_counts=rpb.DeliveryCountsOp(
        durable_key=queue.key, message_seqs=[1], counts=[2]))]))

    second = Dispatcher("b", redelivery_limit=lambda durable: 3,
                        dead_letter=lambda durable, seq, count, why: lettered.append((seq, count, why)))
    second.attach(sm)
    second.start()
    try:
        sub = second.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, 3)]  # the third delivery, as the client is told
        second.close(sub)
        again = second.open(queue, sm, "c", credit=10)
        assert await _delivered(again) == []
        assert lettered == [(1, 3, "reached 3 deliveries")]
    finally:
        await second.stop("", "")


async def test_durables_without_a_redelivery_limit_report_no_counts() -> None:
    async with _running() as (sm, dispatcher):
        _publish(sm, 1, b"m")
        queue = sm.durable("q", "")
        assert queue is not None
        sub = dispatcher.open(queue, sm, "c", credit=10)
        assert await _delivered(sub) == [(1, 1)]
        assert dispatcher.take_counted() == {}


async def test_deliveries_of_large_messages_go_in_batches_within_the_delivery_bound() -> None:
    """One credit's worth of 1 MiB messages is several Subscribe messages, none over
    DELIVERY_BATCH_BYTES (a batch of 512 such messages would pass gRPC's message limit)."""
    async with _running() as (sm, dispatcher):
        for i in range(1, 21):
            _publish(sm, i, bytes(1024 * 1024))
        queue = sm.durable("q", "")
        assert queue is not None
        sub = dispatcher.open(queue, sm, "c", credit=20)
        batches: list[list[int]] = []
        sizes: list[int] = []
        with contextlib.suppress(TimeoutError):
            while sum(len(b) for b in batches) < 20:
                item = await asyncio.wait_for(sub.outbox.get(), 2)
                if isinstance(item, list):
                    batches.append([d.message_seq for d in item])
                    sizes.append(sum(d.message.ByteSize() for d in item))
        assert [seq for batch in batches for seq in batch] == list(range(1, 21))
        assert len(batches) >= 3 and max(sizes) <= DELIVERY_BATCH_BYTES, sizes
