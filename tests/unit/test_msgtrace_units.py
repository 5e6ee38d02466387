"""Message tracing's pure parts: the W3C traceparent check, the filters (matching, ending, kept in
etcd as bytes), the operator's request, and the tracer on a real state machine applying a
message's whole life (committed, acked, deleted) while filters decide what is followed."""

from __future__ import annotations

import time

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import InvalidArgument
from strongroom.observability import msgtrace
from strongroom.observability.msgtrace import (
    MessageTracer,
    TraceFilter,
    TraceSettings,
    check_traceparent,
    requested_filter,
)
from strongroom.persistence.state import StateMachine, durable_key

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("value", [GOOD, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-later-fields"])
def test_well_formed_traceparents_pass(value: str) -> None:
    check_traceparent(value)


@pytest.mark.parametrize("value", [
    "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
    GOOD + "-more",  # version 00 has nothing after the flags
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # a digit short
])
def test_malformed_traceparents_are_refused(value: str) -> None:
    with pytest.raises(InvalidArgument, match="traceparent"):
        check_traceparent(value)


def test_filters_match_a_destination_a_pattern_or_a_producer() -> None:
    assert TraceFilter("orders.eu").matches("orders.eu", "p")
    assert not TraceFilter("orders.eu").matches("orders.us", "p")
    assert TraceFilter("orders.*").matches("orders.us", "")
    assert not TraceFilter("orders.*").matches("audit.us", "")
    assert TraceFilter(producer_id="p1").matches("anything", "p1")
    assert not TraceFilter(producer_id="p1").matches("anything", "p2")


def test_settings_keep_one_filter_per_target_end_in_time_and_survive_etcd() -> None:
    now = 1000.0
    s = TraceSettings().with_filter(TraceFilter("a", "", now + 10)).with_filter(TraceFilter("", "p", now + 5))
    s = s.with_filter(TraceFilter("a", "", now + 60))  # again: replaced, not doubled
    assert s.filters == (TraceFilter("", "p", now + 5), TraceFilter("a", "", now + 60))
    assert TraceSettings.from_bytes(s.to_bytes()) == s
    assert s.live(now + 6).filters == (TraceFilter("a", "", now + 60),)
    assert s.without("a", "").filters == (TraceFilter("", "p", now + 5),)
    assert s.without("", "").filters == ()


def test_an_operators_request_names_one_target_for_a_bounded_time() -> None:
    assert requested_filter("a", "", 0, 100.0) == TraceFilter("a", "", 100.0 + msgtrace.DEFAULT_SECONDS)
    assert requested_filter("", "p", 30, 100.0).until == 130.0
    for destination, producer, seconds in (("", "", 10), ("a", "p", 10), ("a", "", -1), ("a", "", 86_401)):
        with pytest.raises(InvalidArgument):
            requested_filter(destination, producer, seconds, 100.0)


def _publish(dest: str, body: bytes, producer: str, seq: int, traceparent: str = "") -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination=dest, message=cpb.Message(
        body=body, producer_id=producer, sequence=seq, traceparent=traceparent)))


def _create(dest: str, name: str) -> rpb.Operation:
    return rpb.Operation(create_durable=rpb.CreateDurableOp(store="s", destination=dest, durable=name,
                                                            kind=cpb.DURABLE_KIND_STANDARD))


def _ack(dest: str, name: str, *seqs: int) -> rpb.Operation:
    return rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key(dest, name), message_seqs=seqs))


def test_a_state_machine_reports_each_step_of_the_traced_messages_only() -> None:
    sm = StateMachine()
    tracer = MessageTracer("m1", TraceSettings((TraceFilter("t", "", time.time() + 60),)))
    sm.tallies.tracer = tracer
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[_create("t", "a"), _create("t", "b"), _create("u", "a")]))
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[_publish("t", b"x", "p", 1, GOOD), _publish("u", b"y", "p", 2)]))
    sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[_ack("t", "a", 1), _ack("u", "a", 2)]))
    sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[_ack("t", "b", 1)]))
    steps = [(e.step, e.store, e.message_seq, e.log_index, e.destination, e.producer_id, e.sequence, e.traceparent)
             for e in tracer.ring]
    assert steps == [("committed", "s", 1, 2, "t", "p", 1, GOOD), ("acked", "s", 1, 3, "t", "p", 1, GOOD),
                     ("acked", "s", 1, 4, "t", "p", 1, GOOD), ("deleted", "s", 1, 4, "t", "p", 1, GOOD)]
    assert [e.detail for e in tracer.ring][:2] == ["pending for 2 durable(s)", "by durable a"]
    # Filtered reads, as GetMessageTrace answers them.
    assert [e.step for e in tracer.events(producer_id="p", sequence=1, limit=2)] == ["acked", "deleted"]
    assert tracer.events(destination="u") == []
    # Off: nothing more is recorded, and nothing costs more than the test of None.
    sm.tallies.tracer = None
    sm.apply_entry(rpb.LogEntry(index=5, epoch=1, ops=[_publish("t", b"z", "p", 3)]))
    assert len(tracer.ring) == 4


def test_the_tracer_follows_a_bounded_number_of_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(msgtrace, "TRACKED_MESSAGES", 2)
    tracer = MessageTracer("m1", TraceSettings((TraceFilter("t", "", time.time() + 60),)))
    for seq in (1, 2, 3):
        tracer.committed(seq, "s", seq, "t", "p", seq, "", 1)
    assert "no longer followed" in tracer.ring[-1].detail
    tracer.step("acked", "s", 1)  # let go: nothing recorded
    tracer.step("acked", "s", 3)
    assert [(e.step, e.message_seq) for e in tracer.ring][-1] == ("acked", 3)
    assert len(tracer.ring) == 4
