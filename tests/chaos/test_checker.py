"""The history checker on handmade histories: each violation is found, each allowed case passes.

Pure logic, no processes: runs in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from strongroom.chaos.checker import check, leader_of_subscription, unavailability
from strongroom.chaos.history import AUDIT, FAIL, INFO, INVOKE, OK, Event, History, load_history

TOPIC = "t"
QUEUE = "q"


class Builder:
    """A history written by hand, with a clock that advances one tick per event."""

    def __init__(self) -> None:
        self.h = History()
        self.now = 0.0

    def at(self, t: float) -> Builder:
        self.now = t
        return self

    def _rec(self, proc: str, type: str, f: str, **kw: object) -> Event:
        self.now += 1.0
        return self.h.record(proc, type, f, t=self.now, **kw)

    def durable(self, dest: str, name: str, ordered: bool = True) -> None:
        self._rec("c", OK, "durable", dest=dest, durable=name, ordered=ordered)

    def subscribed(self, sub: str, proc: str = "c") -> None:
        self._rec(proc, OK, "subscribed", sub=sub)

    def publish(self, producer: str, seq: int, dest: str = TOPIC, outcome: str = OK, via: str = "stream",
                body: str | None = None) -> None:
        self._rec("p", INVOKE, "publish", producer=producer, seq=seq, dest=dest, via=via,
                  body=body or f"{producer}-{seq}")
        if outcome:
            self._rec("p", outcome, "publish", producer=producer, seq=seq, dest=dest, via=via, mseq=seq)

    def deliver(self, producer: str, seq: int, dest: str = TOPIC, durable: str = "d", count: int = 1,
                sub: str = "m1-5-sub-1", proc: str = "c", body: str | None = None) -> None:
        self._rec(proc, OK, "deliver", producer=producer, seq=seq, dest=dest, durable=durable, count=count,
                  sub=sub, mseq=seq, body=body or f"{producer}-{seq}")

    def ack(self, producer: str, seq: int, dest: str = TOPIC, durable: str = "d", sync: bool = True,
            outcome: str = OK, sub: str = "m1-5-sub-1") -> None:
        values: dict[str, object] = {"producer": producer, "seq": seq, "dest": dest, "durable": durable,
                                     "mseq": seq, "sync": sync, "sub": sub}
        if not sync:
            self._rec("c", INFO, "ack", **values)
            return
        self._rec("c", INVOKE, "ack", **values)
        self._rec("c", outcome, "ack", **values)

    def uow_send(self, uow: str, n: int = 3, outcome: str = OK, error: str | None = None) -> list[str]:
        """A UOW of `n` messages sent whole; its bodies."""
        messages = uow_bodies(uow, n)
        self._rec("s", INVOKE, "uow-send", uow=uow, dest=QUEUE, messages=messages, via="stream")
        if outcome:
            self._rec("s", outcome, "uow-send", uow=uow, dest=QUEUE, error=error)
        return messages

    def uow_receive(self, uow: str, messages: list[str], proc: str = "r1", invoked: float | None = None,
                    dest: str = QUEUE) -> None:
        start = self.now + 0.5 if invoked is None else invoked
        self._rec(proc, OK, "uow-receive", uow=uow, dest=dest, messages=messages, start=start)

    def uow_settle(self, uow: str, kind: str = "commit", outcome: str = OK, proc: str = "r1") -> None:
        self._rec(proc, INVOKE, "uow-settle", uow=uow, dest=QUEUE, kind=kind)
        if outcome:
            self._rec(proc, outcome, "uow-settle", uow=uow, dest=QUEUE, kind=kind)

    def events(self) -> list[Event]:
        return self.h.events


def uow_bodies(uow: str, n: int) -> list[str]:
    return [f"{uow}|{i}/{n}|" for i in range(1, n + 1)]


def clean() -> Builder:
    b = Builder()
    b.durable(TOPIC, "d")
    b.subscribed("m1-5-sub-1")
    for i in (1, 2, 3):
        b.publish("P", i)
    for i in (1, 2, 3):
        b.deliver("P", i)
        b.ack("P", i)
    return b


def test_a_clean_history_passes() -> None:
    res = check(clean().events())
    assert res.ok and not res.duplicated, res.summary()
    assert (res.publishes, res.confirmed, res.deliveries) == (3, 3, 3)


def test_a_confirmed_message_never_delivered_is_lost() -> None:
    b = clean()
    b.publish("P", 4)
    res = check(b.events())
    assert not res.ok
    assert res.lost_messages == 1 and res.lost[0].startswith("P:4 on t/d"), res.summary()


def test_loss_counts_per_durable_and_only_for_durables_that_existed() -> None:
    b = clean()
    b.publish("P", 4)
    b.durable(TOPIC, "late")  # created after P:4 was published: it never wanted it
    b.deliver("P", 4)
    b.publish("P", 5)
    b.deliver("P", 5)  # delivered on d, not on late, which existed by then
    res = check(b.events())
    assert res.lost == [res.lost[0]] and res.lost[0].startswith("P:5 on t/late"), res.summary()


def test_an_unknown_or_failed_publish_may_be_missing() -> None:
    b = clean()
    b.publish("P", 4, outcome=INFO)
    b.publish("P", 5, outcome=FAIL)
    b.publish("P", 6, outcome="")  # no outcome recorded at all
    res = check(b.events())
    assert res.ok, res.summary()
    assert res.unknown == 2 and res.failed == 1


def test_an_unknown_publish_that_arrives_is_fine() -> None:
    b = clean()
    b.publish("P", 4, outcome=INFO)
    b.deliver("P", 4)
    assert check(b.events()).ok


def test_a_loss_inside_a_documented_window_is_reported_apart() -> None:
    b = clean()
    b.publish("P", 4)
    confirmed_at = b.now
    b.h.record("nemesis", INFO, "loss-window", t=b.now + 1, member="m2", start=confirmed_at - 0.5,
               end=confirmed_at + 0.5, detail="disk-async crash")
    b.publish("P", 5)  # confirmed after the window: a real loss
    res = check(b.events())
    assert len(res.lost_allowed) == 1 and "P:4" in res.lost_allowed[0]
    assert res.lost_messages == 1 and "P:5" in res.lost[0]


def test_a_loss_confirmed_just_after_the_crash_of_a_publish_invoked_before_it_is_allowed() -> None:
    """The crashed member acknowledged it inside the window; the leader's confirmation reached
    the client after the crash. A publish invoked after the crash could not count on that
    member: its loss is real."""
    b = clean()
    window_start = b.now + 0.5
    b.publish("P", 4)  # invoked at +1, confirmed at +2
    crash = b.now - 0.5  # between its invocation and its confirmation
    b.h.record("nemesis", INFO, "loss-window", t=b.now + 0.1, member="m1", start=window_start, end=crash,
               detail="disk-async crash")
    b.publish("P", 5)  # invoked after the crash
    # Invoked before the crash, confirmed long after it (a retry at a new leader, a lease later):
    # committed after the crash, so the crashed member counted for nothing.
    b.h.record("p", INVOKE, "publish", t=crash - 0.1, producer="P", seq=6, dest=TOPIC, via="unary", body="P-6")
    b.h.record("p", OK, "publish", t=crash + 5, producer="P", seq=6, dest=TOPIC, via="unary", mseq=6)
    res = check(b.events())
    assert len(res.lost_allowed) == 1 and "P:4" in res.lost_allowed[0], res.summary()
    assert res.lost_messages == 2 and "P:5" in res.lost[0] and "P:6" in res.lost[1], res.lost


def test_an_ack_in_flight_inside_a_loss_window_may_be_undone() -> None:
    """An acknowledgment is a commit like a publish: one under way while a disk-async member's
    loss window was open may be lost with it, and its message delivered again; one invoked
    after the crash may not."""
    b = Builder()
    b.durable(TOPIC, "d", ordered=False)
    b.subscribed("m1-5-sub-1")
    b.publish("P", 1)
    b.publish("P", 2)
    b.deliver("P", 1)
    b.deliver("P", 2)
    window_start = b.now
    b.ack("P", 1)  # invoked and confirmed inside the window
    crash = b.now + 0.5
    b.h.record("nemesis", INFO, "loss-window", t=crash, member="m1", start=window_start, end=crash,
               detail="disk-async crash")
    b.at(crash + 1).ack("P", 2)  # after the crash
    b.subscribed("m2-9-sub-1")
    b.deliver("P", 1, sub="m2-9-sub-1")
    b.deliver("P", 2, sub="m2-9-sub-1")
    res = check(b.events())
    assert len(res.ack_redelivered_allowed) == 1 and "mseq 1 " in res.ack_redelivered_allowed[0], res.summary()
    assert "inside the documented loss window of m1" in res.ack_redelivered_allowed[0]
    assert len(res.ack_redelivered) == 1 and "mseq 2 " in res.ack_redelivered[0]


def test_phantoms_never_published_other_body_or_failed() -> None:
    b = clean()
    b.deliver("X", 1)
    b.publish("P", 4)
    b.deliver("P", 4, body="tampered")
    b.publish("P", 5, outcome=FAIL)
    b.deliver("P", 5)
    res = check(b.events())
    assert not res.ok
    assert len(res.phantom) == 3, res.summary()
    assert "never published" in res.phantom[0]
    assert "differs" in res.phantom[1]
    assert "failed" in res.phantom[2]


def test_the_same_message_twice_on_one_subscription_is_a_duplicate() -> None:
    b = clean()
    b.deliver("P", 3, count=2)
    res = check(b.events())
    assert res.ok and len(res.duplicated) == 1 and "twice on subscription" in res.duplicated[0]


def test_count_one_twice_from_the_same_leader_is_a_duplicate() -> None:
    b = Builder()
    b.durable(TOPIC, "d", ordered=False)
    b.publish("P", 1)
    b.deliver("P", 1, sub="m1-5-sub-1")
    b.deliver("P", 1, sub="m1-5-sub-2", proc="c2")
    res = check(b.events())
    assert len(res.duplicated) == 1 and "count 1 twice by leader m1-5" in res.duplicated[0]


def test_redelivery_rules_that_are_allowed() -> None:
    b = Builder()
    b.durable(TOPIC, "d", ordered=False)
    b.publish("P", 1)
    b.deliver("P", 1, sub="m1-5-sub-1")
    b.deliver("P", 1, sub="m1-5-sub-2", count=2)  # redelivered by the same leader: count went up
    b.deliver("P", 1, sub="m2-9-sub-1", count=1)  # a new leader starts counting again
    b.ack("P", 1, sync=False, sub="m2-9-sub-1")
    b.deliver("P", 1, sub="m3-12-sub-1", count=1)  # the async ack was lost in a failover
    res = check(b.events())
    assert res.ok and not res.duplicated, res.summary()
    assert res.redelivered_after_async_ack == 1


def test_delivery_after_a_confirmed_ack_on_a_new_subscription_is_a_duplicate() -> None:
    b = clean()
    b.subscribed("m2-9-sub-1")
    b.deliver("P", 2, sub="m2-9-sub-1")
    res = check(b.events())
    assert len(res.ack_redelivered) == 1 and len(res.duplicated) == 1, res.summary()
    assert "opened after the ack" in res.ack_redelivered[0]


def test_delivery_after_a_confirmed_ack_on_a_subscription_opened_before_it_is_allowed() -> None:
    # The server sent it before the ack committed; the consumer read it only afterwards.
    b = Builder()
    b.durable(TOPIC, "d", ordered=False)
    b.subscribed("m1-5-sub-1")
    b.subscribed("m1-5-sub-2", proc="c2")
    b.publish("P", 1)
    b.deliver("P", 1, sub="m1-5-sub-1")
    b.ack("P", 1, sub="m1-5-sub-1")
    b.deliver("P", 1, sub="m1-5-sub-2", proc="c2", count=2)
    res = check(b.events())
    assert not res.ack_redelivered and not res.duplicated, res.summary()


def test_a_failed_ack_does_not_forbid_redelivery() -> None:
    b = clean()
    b.publish("P", 4)
    b.deliver("P", 4)
    b.ack("P", 4, outcome=INFO)
    b.subscribed("m2-9-sub-1")
    b.deliver("P", 4, sub="m2-9-sub-1")
    res = check(b.events())
    assert res.ok and not res.duplicated, res.summary()


def test_first_deliveries_out_of_publish_order_on_an_ordered_durable() -> None:
    b = Builder()
    b.durable(TOPIC, "d")
    for i in (1, 2, 3):
        b.publish("P", i)
    b.deliver("P", 1)
    b.deliver("P", 3)
    b.deliver("P", 2)
    res = check(b.events())
    assert not res.ok and len(res.order) == 1 and "sequence 2" in res.order[0], res.summary()


def test_order_allows_gaps_redeliveries_and_other_producers() -> None:
    b = Builder()
    b.durable(TOPIC, "d")
    for i in (1, 2, 3, 4):
        b.publish("P", i)
    b.publish("Q", 1)
    b.deliver("P", 1)
    b.deliver("P", 2)
    b.deliver("Q", 1)
    b.deliver("P", 1, count=1, sub="m2-9-sub-1")  # redelivered after a failover: not a first delivery
    b.deliver("P", 4, sub="m2-9-sub-1")  # 3 missing: a loss, not an order violation
    res = check(b.events())
    assert not res.order, res.summary()
    assert res.lost_messages == 1


def test_order_is_not_checked_on_an_unordered_durable() -> None:
    b = Builder()
    b.durable(TOPIC, "d", ordered=False)
    b.publish("P", 1)
    b.publish("P", 2)
    b.deliver("P", 2, proc="c2", sub="m1-5-sub-2")
    b.deliver("P", 1)
    assert check(b.events()).ok


def test_a_fenced_member_must_not_confirm() -> None:
    b = clean()
    start = b.now
    b.publish("Z", 1, via="direct:m1")  # invoked and confirmed inside the fence
    b.deliver("Z", 1)
    b.h.record("nemesis", INFO, "fence", t=b.now + 1, member="m1", kind="invoked", start=start, end=b.now + 0.5,
               detail="paused past its lease")
    b.publish("Z", 2, via="direct:m1")  # after the fence
    b.deliver("Z", 2)
    b.publish("Z", 3, via="direct:m2")  # another member
    b.deliver("Z", 3)
    res = check(b.events())
    assert not res.ok and len(res.fence) == 1 and res.fence[0].startswith("Z:1"), res.summary()


def test_a_completed_fence_looks_at_the_confirmation_time() -> None:
    b = clean()
    b.h.record("p", INVOKE, "publish", t=10.0, producer="Z", seq=1, dest=TOPIC, via="direct:m1", body="Z-1")
    b.h.record("p", OK, "publish", t=13.0, producer="Z", seq=1, dest=TOPIC, via="direct:m1", mseq=9)
    b.h.record("p", INVOKE, "publish", t=10.5, producer="Z", seq=2, dest=TOPIC, via="direct:m1", body="Z-2")
    b.h.record("p", OK, "publish", t=11.0, producer="Z", seq=2, dest=TOPIC, via="direct:m1", mseq=10)
    b.h.record("n", INFO, "fence", t=14.0, member="m1", kind="completed", start=12.0, end=14.0, detail="cut off")
    b.at(20.0)
    b.deliver("Z", 1)
    b.deliver("Z", 2)
    res = check(b.events())
    assert len(res.fence) == 1 and res.fence[0].startswith("Z:1"), res.summary()


def test_unavailability_sums_the_gaps_between_confirmations() -> None:
    h = History()
    h.record("n", INFO, "phase", t=0.0, detail="faults-start")
    for t in (0.5, 1.0, 4.0, 4.5, 9.0):
        h.record("p", OK, "publish", t=t, producer="P", seq=int(t * 10), dest=TOPIC)
    h.record("n", INFO, "phase", t=10.0, detail="faults-end")
    total, longest = unavailability(h.events)
    assert round(total, 3) == 7.5  # 1.0->4.0 and 4.5->9.0; gaps of 1s or less do not count
    assert longest == 4.5


def test_history_round_trips_through_jsonl(tmp_path: Path) -> None:
    for i, b in enumerate((clean(), uows_clean())):  # uows_clean: UOW ids and message lists too
        path = tmp_path / f"h{i}.jsonl"
        h = History(path)
        h.extend(b.events())
        h.close()
        loaded = load_history(path)
        assert loaded == b.events()
        assert check(loaded).ok


def test_leader_of_a_subscription_id() -> None:
    assert leader_of_subscription("m-east-1-42-sub-7") == "m-east-1-42"
    assert leader_of_subscription("odd") == "odd"


def test_a_recorded_violation_is_a_liveness_finding() -> None:
    b = clean()
    b.h.record("nemesis", INFO, "violation", t=b.now + 1, detail="no leader of an epoch newer than 4 within 9s")
    res = check(b.events())
    assert res.ok  # safety holds; the run fails on liveness separately
    assert res.liveness == [f"at {b.now + 1:.3f}: no leader of an epoch newer than 4 within 9s"]


# --- units of work ---------------------------------------------------------------------------------


def uows_clean() -> Builder:
    """A UOW received whole and committed; one backed out by its receiver, offered again whole
    to another and committed; one its sender saw abort, never delivered; one of unknown
    outcome delivered whole, one of unknown outcome never delivered."""
    b = clean()
    b.uow_receive("U1", b.uow_send("U1"))
    b.uow_settle("U1")
    u2 = b.uow_send("U2", n=2)
    b.uow_receive("U2", u2)
    b.uow_settle("U2", kind="backout")
    b.uow_receive("U2", u2, proc="r2")
    b.uow_settle("U2", proc="r2")
    b.uow_send("U3", outcome=FAIL, error="UOW_ABORTED: the leader changed")
    b.uow_receive("U4", b.uow_send("U4", outcome=INFO))
    b.uow_settle("U4")
    b.uow_send("U5", outcome=INFO)
    return b


def test_a_clean_uow_history_passes() -> None:
    res = check(uows_clean().events())
    assert res.ok and res.uow_violations == 0, res.summary()
    assert (res.uow_sends, res.uows_confirmed, res.uows_failed, res.uows_unknown) == (5, 2, 1, 2)
    assert (res.uow_receives, res.uows_processed) == (4, 3)


def test_a_uow_received_without_some_of_its_messages_is_partial() -> None:
    b = uows_clean()
    sent = b.uow_send("U6", n=4)
    b.uow_receive("U6", sent[:3])  # the last message is missing
    b.uow_settle("U6")
    res = check(b.events())
    assert not res.ok and len(res.uow_partial) == 1, res.summary()
    assert res.uow_partial[0].startswith("U6 received by r1") and "got 3 of its 4 messages" in res.uow_partial[0]


def test_a_uow_of_unknown_outcome_must_still_be_whole_in_order_and_its_own() -> None:
    b = uows_clean()
    unknown = b.uow_send("U6", outcome=INFO)
    b.uow_receive("U6", [unknown[1], unknown[0], unknown[2]])  # reordered
    other = b.uow_send("U7", n=2)
    b.uow_receive("U7", [*other, "U1|1/3|"])  # a message of another UOW in it
    b.uow_settle("U7")
    b.uow_receive("U8", uow_bodies("U8", 2))  # never sent
    res = check(b.events())
    assert not res.ok and len(res.uow_partial) == 3, res.summary()
    assert "another order" in res.uow_partial[0]
    assert "not its own ['U1|1/3|']" in res.uow_partial[1]
    assert "no sender sent it" in res.uow_partial[2]


def test_a_uow_committed_by_its_sender_that_no_receiver_committed_is_lost() -> None:
    b = uows_clean()
    b.uow_send("U6")  # never received
    held = b.uow_send("U7")
    b.uow_receive("U7", held)
    b.uow_settle("U7", outcome=INFO)  # received, but its commit was never confirmed
    res = check(b.events())
    assert not res.ok and len(res.uow_lost) == 2, res.summary()
    assert res.uow_lost[0].startswith("U6: committed by its sender s")
    assert res.uow_lost[1].startswith("U7:")


def test_a_uow_the_audit_still_finds_is_not_lost() -> None:
    b = uows_clean()
    b.uow_receive("U6", b.uow_send("U6"), proc=AUDIT)
    res = check(b.events())
    assert res.ok and not res.uow_lost, res.summary()


def test_a_uow_lost_inside_a_documented_loss_window_is_reported_apart() -> None:
    b = uows_clean()
    b.uow_send("U6")
    confirmed_at = b.now
    b.h.record("nemesis", INFO, "loss-window", t=b.now + 1, member="m2", start=confirmed_at - 0.5,
               end=confirmed_at + 0.5, detail="disk-async crash")
    b.uow_send("U7")  # confirmed after the window: a real loss
    res = check(b.events())
    assert len(res.uow_allowed) == 1 and res.uow_allowed[0].startswith("U6:"), res.summary()
    assert len(res.uow_lost) == 1 and res.uow_lost[0].startswith("U7:")


def test_a_receiver_commit_in_flight_inside_a_loss_window_may_be_undone() -> None:
    b = uows_clean()
    held = b.uow_send("U6")
    b.uow_receive("U6", held)
    window_start = b.now
    b.uow_settle("U6")  # invoked at +1, confirmed at +2
    b.h.record("nemesis", INFO, "loss-window", t=b.now, member="m1", start=window_start, end=b.now - 0.5,
               detail="disk-async crash")
    b.uow_receive("U6", held, proc="r2", invoked=b.now + 1)  # offered again: the commit was lost
    b.uow_settle("U6", proc="r2")
    res = check(b.events())
    assert res.ok and not res.uow_redelivered, res.summary()
    assert len(res.uow_allowed) == 1 and "inside the documented loss window of m1" in res.uow_allowed[0]


def test_a_uow_its_sender_saw_fail_is_never_delivered() -> None:
    b = uows_clean()
    aborted = b.uow_send("U6", outcome=FAIL, error="UOW_ABORTED: the leader changed")
    b.uow_receive("U6", aborted)
    res = check(b.events())
    assert not res.ok and len(res.uow_aborted_delivered) == 1, res.summary()
    assert "saw it fail" in res.uow_aborted_delivered[0] and "UOW_ABORTED" in res.uow_aborted_delivered[0]
    assert not res.uow_partial


def test_a_uow_received_again_after_a_confirmed_receiver_commit_is_a_violation() -> None:
    b = uows_clean()
    b.uow_receive("U1", uow_bodies("U1", 3), proc="r2")  # invoked after r1's commit was confirmed
    res = check(b.events())
    assert not res.ok and len(res.uow_redelivered) == 1, res.summary()
    assert res.uow_redelivered[0].startswith("U1 received by r2") and "r1's commit of it" in res.uow_redelivered[0]


def test_redelivery_is_allowed_before_a_commit_is_confirmed_or_when_its_outcome_is_unknown() -> None:
    b = uows_clean()
    sent = b.uow_send("U6")
    b.uow_receive("U6", sent)
    invoked_before_the_commit = b.now + 0.5
    b.uow_settle("U6", outcome=INFO)  # unknown: it may have been released and offered again
    b.uow_receive("U6", sent, proc="r2")
    b.uow_settle("U6", proc="r2")
    b.uow_receive("U6", sent, proc="r3", invoked=invoked_before_the_commit)  # answered late
    res = check(b.events())
    assert res.ok and not res.uow_redelivered, res.summary()
