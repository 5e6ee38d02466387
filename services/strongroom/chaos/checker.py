"""The history checker: pure logic over a list of `Event`s.

What it finds, per durable (destination/durable name):

- **lost**: a publish confirmed (`ok`) to a destination, never delivered to a durable of that
  destination created before the publish was invoked. The loss of a publish in flight inside a
  recorded `loss-window` (a fault the storage mode documents as lossy: `_in_flight`, invoked
  before the crash that closed the window, confirmed after it opened and at most REPLY_GRACE
  after the crash) is reported apart as `lost_allowed` and does not fail the run; so is the
  loss of a message a DR activation's lost tail published (`lost-tail` events, `chaos.losttail`: the old primary's log after the index
  the activated site holds).
- **phantom**: a delivery of a message no client invoked, with another body or destination
  than the one invoked, or of a publish that certainly failed.
- **duplicated**: a delivery beyond what the redelivery rules allow: the same message twice
  on one subscription; twice with delivery count 1 from the same leader (subscription ids name
  the leader member and epoch); or again after an acknowledgment was confirmed, on a
  subscription opened after that confirmation (`ack_redelivered`); an ack a DR activation's lost
  tail held, or one in flight inside a `loss-window`, may be undone: its message delivered again
  is reported apart (`ack_redelivered_allowed`).
- **order**: on a durable with a single consumer, the first deliveries of one producer's
  messages out of sequence order.
- **fence**: a confirmation by a member that a fault had fenced (paused past its lease, cut
  off from etcd or from its peers) inside the fenced interval.

- **liveness**: `violation` events a fault recorded (no leader of a newer epoch in time).

Units of work (`uow-send`, `uow-receive`, `uow-settle` events), per UOW id:

- **uow_partial**: a receiver got a UOW with other messages than its sender put in it (some
  missing, one too many, another order, another queue), or one no sender sent: a UOW is
  visible whole or not at all, whatever its sender was told (an unknown outcome too).
- **uow_lost**: a UOW its sender saw committed (`ok`) that no receiver committed (confirmed)
  and the audit receiver did not find either. Sent in flight inside a `loss-window`, or
  committed in a DR activation's lost tail, it is reported apart (`uow_allowed`).
- **uow_aborted_delivered**: a UOW delivered although its sender saw it certainly fail (backed
  out, UOW_ABORTED, or its commit never sent).
- **uow_redelivered**: a UOW received again, by a receive invoked after a receiver's commit
  of it was confirmed (a commit in flight inside a `loss-window` or held by a lost tail:
  `uow_allowed`). A commit whose outcome is unknown allows anything.

`CheckResult.ok` is false on any lost, phantom, order or fence violation and on any of the
four UOW findings; message duplicates and liveness findings are reported and a caller decides
(the chaos runs fail on them too).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from strongroom.chaos.history import AUDIT, FAIL, INFO, INVOKE, OK, Event
from strongroom.chaos.losttail import (
    LOST_TAIL,
    TAIL_ACKED,
    TAIL_PUBLISHED,
    TAIL_UOW_COMMITTED,
    TAIL_UOW_PROCESSED,
    ack_id,
)

__all__ = ["CheckResult", "check", "leader_of_subscription", "unavailability"]

EXAMPLES = 10


def leader_of_subscription(sub: str) -> str:
    """The leader incarnation (member-epoch) that opened a subscription id."""
    return sub.rsplit("-sub-", 1)[0] if "-sub-" in sub else sub


@dataclass
class CheckResult:
    """What the checker found; lists hold one human-readable line per finding."""

    operations: int = 0
    publishes: int = 0
    confirmed: int = 0
    failed: int = 0
    unknown: int = 0
    deliveries: int = 0
    lost: list[str] = field(default_factory=list)
    lost_allowed: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    ack_redelivered: list[str] = field(default_factory=list)
    ack_redelivered_allowed: list[str] = field(default_factory=list)
    """Deliveries again after a confirmed ack that a DR activation's lost tail held (not
    duplicates: the new primary never had the ack)."""
    redelivered_after_async_ack: int = 0
    order: list[str] = field(default_factory=list)
    fence: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    """`violation` events the faults recorded (e.g. no new leader in time)."""
    unavailable_seconds: float = 0.0
    longest_gap_seconds: float = 0.0
    uow_sends: int = 0
    uows_confirmed: int = 0
    uows_failed: int = 0
    uows_unknown: int = 0
    uow_receives: int = 0
    uows_processed: int = 0
    """UOWs with a receiver's commit confirmed."""
    uow_partial: list[str] = field(default_factory=list)
    uow_lost: list[str] = field(default_factory=list)
    uow_aborted_delivered: list[str] = field(default_factory=list)
    uow_redelivered: list[str] = field(default_factory=list)
    uow_allowed: list[str] = field(default_factory=list)
    """UOW losses and redeliveries inside a documented loss window (they do not fail the run)."""

    @property
    def lost_messages(self) -> int:
        """Distinct messages lost in at least one durable (outside allowed windows)."""
        return len({line.split(" ", 1)[0] for line in self.lost})

    @property
    def uow_violations(self) -> int:
        """Findings of the four UOW rules."""
        return len(self.uow_partial) + len(self.uow_lost) + len(self.uow_aborted_delivered) + len(
            self.uow_redelivered)

    @property
    def ok(self) -> bool:
        """No loss, no phantom, no order violation, no fenced confirmation, no UOW finding."""
        return not (self.lost or self.phantom or self.order or self.fence or self.uow_violations)

    def summary(self) -> str:
        """A few lines for a test failure or the console."""
        head = (f"operations={self.operations} publishes={self.publishes} confirmed={self.confirmed} "
                f"failed={self.failed} unknown={self.unknown} deliveries={self.deliveries} "
                f"lost={self.lost_messages} lost_allowed={len(self.lost_allowed)} "
                f"duplicated={len(self.duplicated)} phantom={len(self.phantom)} order={len(self.order)} "
                f"fence={len(self.fence)} liveness={len(self.liveness)} ack_redelivered={len(self.ack_redelivered)} "
                f"ack_redelivered_allowed={len(self.ack_redelivered_allowed)} "
                f"redelivered_after_async_ack={self.redelivered_after_async_ack} "
                f"unavailable={self.unavailable_seconds:.1f}s longest_gap={self.longest_gap_seconds:.1f}s\n"
                f"  uows: sent={self.uow_sends} confirmed={self.uows_confirmed} failed={self.uows_failed} "
                f"unknown={self.uows_unknown} receives={self.uow_receives} processed={self.uows_processed} "
                f"partial={len(self.uow_partial)} lost={len(self.uow_lost)} "
                f"aborted_delivered={len(self.uow_aborted_delivered)} redelivered={len(self.uow_redelivered)} "
                f"allowed={len(self.uow_allowed)}")
        lines = [head]
        for name in ("lost", "lost_allowed", "phantom", "duplicated", "ack_redelivered", "ack_redelivered_allowed",
                     "order", "fence",
                     "liveness", "uow_partial", "uow_lost", "uow_aborted_delivered", "uow_redelivered",
                     "uow_allowed"):
            items: list[str] = getattr(self, name)
            for line in items[:EXAMPLES]:
                lines.append(f"  {name}: {line}")
            if len(items) > EXAMPLES:
                lines.append(f"  {name}: ... {len(items) - EXAMPLES} more")
        return "\n".join(lines)


@dataclass
class _Invoked:
    """An operation invoked and its first outcome."""

    invoke: Event
    outcome: Event | None = None


def unavailability(events: list[Event], gap: float = 1.0) -> tuple[float, float]:
    """Seconds without any confirmed publish inside the fault phase: the sum of the gaps
    longer than `gap` between consecutive confirmations (phase edges included), and the
    longest gap. Zero if the history has no fault phase."""
    start = next((e.t for e in events if e.f == "phase" and e.detail == "faults-start"), None)
    end = next((e.t for e in events if e.f == "phase" and e.detail == "faults-end"), None)
    if start is None or end is None or end <= start:
        return 0.0, 0.0
    times = sorted(e.t for e in events if e.f == "publish" and e.type == OK and start <= e.t <= end)
    marks = [start, *times, end]
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    return sum(g for g in gaps if g > gap), max(gaps, default=0.0)


def check(events: list[Event]) -> CheckResult:
    """Check a history (in recording order)."""
    res = CheckResult()
    publishes: dict[str, _Invoked] = {}
    durables: dict[str, Event] = {}
    deliveries: dict[str, list[Event]] = defaultdict(list)  # durable key -> deliveries in order
    acks_ok: list[tuple[Event, Event]] = []  # (invoke, ok) of confirmed acks
    async_acks: dict[tuple[str, int], float] = {}
    ack_invokes: dict[tuple[str, str, int], Event] = {}
    fences: list[Event] = []
    loss_windows: list[Event] = []
    sub_first_seen: dict[str, float] = {}
    uow_sends: dict[str, _Invoked] = {}
    uow_receives: list[Event] = []
    uow_commits: dict[str, Event] = {}  # UOW id -> the first confirmed receiver commit
    settles_invoked: dict[tuple[str, str], float] = {}  # (receiver, UOW id) -> its commit's invoke
    commits_invoked: dict[str, float] = {}  # UOW id -> when the commit in uow_commits was invoked
    tail = _Tail()

    for e in events:
        if e.sub:
            # A `subscribed` event marks when the client learnt the id (the stream opened);
            # without one, the first event naming the subscription stands in.
            sub_first_seen.setdefault(e.sub, e.t)
        if e.f == "publish":
            if e.type == INVOKE:
                res.publishes += 1
                res.operations += 1
                publishes[e.msg] = _Invoked(e)
            else:
                p = publishes.get(e.msg)
                if p is not None and p.outcome is None:
                    p.outcome = e
        elif e.f == "deliver":
            res.deliveries += 1
            res.operations += 1
            deliveries[e.durable_key].append(e)
        elif e.f == "ack":
            key = (e.durable_key, e.proc, e.mseq or 0)
            if e.sync:
                if e.type == INVOKE:
                    res.operations += 1
                    ack_invokes[key] = e
                elif e.type == OK and key in ack_invokes:
                    acks_ok.append((ack_invokes.pop(key), e))
            else:
                res.operations += 1
                async_acks.setdefault((e.durable_key, e.mseq or 0), e.t)
        elif e.f == "durable" and e.type == OK:
            durables.setdefault(e.durable_key, e)
        elif e.f == "fence":
            fences.append(e)
        elif e.f == "loss-window":
            loss_windows.append(e)
        elif e.f == LOST_TAIL:
            tail.add(e)
        elif e.f == "violation":
            res.liveness.append(f"at {e.t:.3f}: {e.detail}")
        elif e.f == "uow-send":
            if e.type == INVOKE:
                res.uow_sends += 1
                res.operations += 1
                uow_sends[e.uow or ""] = _Invoked(e)
            else:
                sent = uow_sends.get(e.uow or "")
                if sent is not None and sent.outcome is None:
                    sent.outcome = e
        elif e.f == "uow-receive" and e.type == OK:
            res.uow_receives += 1
            res.operations += 1
            uow_receives.append(e)
        elif e.f == "uow-settle":
            if e.type == INVOKE:
                res.operations += 1
                settles_invoked[(e.proc, e.uow or "")] = e.t
            elif e.type == OK and e.kind == "commit" and (e.uow or "") not in uow_commits:
                uow_commits[e.uow or ""] = e
                commits_invoked[e.uow or ""] = settles_invoked.get((e.proc, e.uow or ""), e.t)

    for p in publishes.values():
        if p.outcome is None or p.outcome.type == INFO:
            res.unknown += 1
        elif p.outcome.type == OK:
            res.confirmed += 1
        elif p.outcome.type == FAIL:
            res.failed += 1

    _check_deliveries(res, publishes, durables, deliveries, loss_windows, tail)
    _check_duplicates(res, deliveries, acks_ok, async_acks, sub_first_seen, tail, loss_windows)
    _check_order(res, durables, deliveries)
    _check_fences(res, publishes, fences)
    _check_uows(res, uow_sends, uow_receives, uow_commits, commits_invoked, loss_windows, tail)
    res.unavailable_seconds, res.longest_gap_seconds = unavailability(events)
    return res


class _Tail:
    """What DR activations' lost tails undid (`lost-tail` events), by kind."""

    def __init__(self) -> None:
        self.items: dict[str, set[str]] = defaultdict(set)
        self.where = ""

    def add(self, e: Event) -> None:
        self.items[e.kind or ""].update(e.messages or [])
        self.where = e.detail or self.where

    def holds(self, kind: str, item: str) -> str | None:
        """Why `item` may be undone (the tail that held it), or None."""
        return f"in the lost tail of the DR activation ({self.where})" if item in self.items.get(kind, ()) else None


def _check_deliveries(res: CheckResult, publishes: dict[str, _Invoked], durables: dict[str, Event],
                      deliveries: dict[str, list[Event]], loss_windows: list[Event], tail: _Tail) -> None:
    delivered: dict[str, set[str]] = {key: {d.msg for d in ds} for key, ds in deliveries.items()}
    phantoms: set[tuple[str, str]] = set()
    for key, ds in deliveries.items():
        for d in ds:
            p = publishes.get(d.msg)
            why = ""
            if p is None:
                why = "never published"
            elif p.invoke.body is not None and d.body is not None and p.invoke.body != d.body:
                why = f"body {d.body!r} differs from the published {p.invoke.body!r}"
            elif p.invoke.dest != d.dest:
                why = f"published to {p.invoke.dest}, delivered on {d.dest}"
            elif p.outcome is not None and p.outcome.type == FAIL:
                why = f"the publish failed ({p.outcome.error})"
            if why and (key, d.msg) not in phantoms:
                phantoms.add((key, d.msg))
                res.phantom.append(f"{d.msg} on {key} at {d.t:.3f} ({d.proc}): {why}")
    by_dest: dict[str, list[Event]] = defaultdict(list)
    for durable in durables.values():
        by_dest[durable.dest or ""].append(durable)
    windows = _windows(loss_windows)
    for msg, p in publishes.items():
        if p.outcome is None or p.outcome.type != OK:
            continue
        for durable in by_dest.get(p.invoke.dest or "", []):
            if durable.t >= p.invoke.t:
                continue  # the durable did not want it yet
            if msg in delivered.get(durable.durable_key, set()):
                continue
            line = (f"{msg} on {durable.durable_key}: confirmed at {p.outcome.t:.3f} "
                    f"(invoked {p.invoke.t:.3f} via {p.invoke.via}, mseq {p.outcome.mseq}), never delivered")
            allowed = [w for w in windows if _in_flight(p.invoke.t, p.outcome.t, w)]
            undone = tail.holds(TAIL_PUBLISHED, msg)
            if allowed:
                res.lost_allowed.append(line + f" [inside the documented loss window of {allowed[0][2]}]")
            elif undone is not None:
                res.lost_allowed.append(line + f" [{undone}]")
            else:
                res.lost.append(line)


def _check_duplicates(res: CheckResult, deliveries: dict[str, list[Event]],
                      acks_ok: list[tuple[Event, Event]], async_acks: dict[tuple[str, int], float],
                      sub_first_seen: dict[str, float], tail: _Tail, loss_windows: list[Event]) -> None:
    dups: dict[tuple[str, str], str] = {}
    for key, ds in deliveries.items():
        seen_sub: set[tuple[str, str]] = set()
        first_count: set[tuple[str, str]] = set()
        for d in ds:
            sub = d.sub or ""
            if (d.msg, sub) in seen_sub:
                dups.setdefault((key, d.msg), f"{d.msg} on {key}: delivered twice on subscription {sub} "
                                              f"(again at {d.t:.3f}, count {d.count})")
            seen_sub.add((d.msg, sub))
            if d.count == 1:
                leader = leader_of_subscription(sub)
                if (d.msg, leader) in first_count:
                    dups.setdefault((key, d.msg), f"{d.msg} on {key}: delivered with count 1 twice by "
                                                  f"leader {leader} (again at {d.t:.3f} on {sub})")
                first_count.add((d.msg, leader))
            acked_at = async_acks.get((key, d.mseq or 0))
            if acked_at is not None and d.t > acked_at:
                res.redelivered_after_async_ack += 1
    by_msg: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for key, ds in deliveries.items():
        for d in ds:
            by_msg[(key, d.mseq or 0)].append(d)
    for invoke, ok in acks_ok:
        key = invoke.durable_key
        for d in by_msg.get((key, invoke.mseq or 0), []):
            if d.t > ok.t and sub_first_seen.get(d.sub or "", 0.0) > ok.t:
                line = (f"{d.msg} on {key}: ack of mseq {invoke.mseq} confirmed at {ok.t:.3f}, delivered "
                        f"again at {d.t:.3f} on {d.sub} (count {d.count}, opened after the ack)")
                undone = tail.holds(TAIL_ACKED, ack_id(key, invoke.mseq or 0))
                member = _window_of(invoke.t, ok.t, loss_windows)
                if undone is not None or member is not None:
                    why = f"the ack is {undone}" if undone is not None else f"inside the documented loss window of {member}"
                    res.ack_redelivered_allowed.append(line + f" [{why}]")
                    break
                res.ack_redelivered.append(line)
                dups.setdefault((key, d.msg), line)
                break
    res.duplicated.extend(dups.values())


def _check_order(res: CheckResult, durables: dict[str, Event], deliveries: dict[str, list[Event]]) -> None:
    for key, durable in durables.items():
        if not durable.ordered:
            continue
        seen: set[str] = set()
        last: dict[str, tuple[int, float]] = {}
        for d in deliveries.get(key, []):
            if d.msg in seen:
                continue
            seen.add(d.msg)
            producer = d.producer or ""
            prev = last.get(producer)
            if prev is not None and (d.seq or 0) < prev[0]:
                res.order.append(f"{key}: producer {producer} sequence {d.seq} first delivered at {d.t:.3f}, "
                                 f"after sequence {prev[0]} (at {prev[1]:.3f})")
            if prev is None or (d.seq or 0) > prev[0]:
                last[producer] = (d.seq or 0, d.t)


def _check_fences(res: CheckResult, publishes: dict[str, _Invoked], fences: list[Event]) -> None:
    for p in publishes.values():
        if p.outcome is None or p.outcome.type != OK or not (p.invoke.via or "").startswith("direct:"):
            continue
        member = (p.invoke.via or "").split(":", 1)[1]
        for fence in fences:
            if fence.member != member:
                continue
            start, end = fence.start or 0.0, fence.end or 0.0
            at = p.invoke.t if fence.kind == "invoked" else p.outcome.t
            if start <= at <= end:
                res.fence.append(f"{p.invoke.msg}: confirmed by {member} at {p.outcome.t:.3f} (invoked "
                                 f"{p.invoke.t:.3f}) although fenced ({fence.detail}) from {start:.3f} "
                                 f"to {end:.3f}")
                break


def _windows(loss_windows: list[Event]) -> list[tuple[float, float, str]]:
    return [(w.start or 0.0, w.end or 0.0, w.member or "") for w in loss_windows]


REPLY_GRACE = 1.0
"""Seconds after a crash a confirmation may still come from a commit made before it."""


def _in_flight(invoked: float, confirmed: float, window: tuple[float, float, str]) -> bool:
    """Whether an operation's commit may have counted on what a crashed member acknowledged
    inside its loss window: invoked before the crash that closed the window, confirmed after
    it opened, and no later than REPLY_GRACE after the crash. The leader's reply to a commit
    made before the crash can reach the client a little after it (on a loaded machine, tens of
    milliseconds), so the confirmation time alone is not the test; but an operation confirmed
    later than that was committed after the crash (a retry or a resent window at a new leader
    a lease later: the crashed member counted for nothing), and its loss is a real one."""
    start, end, _ = window
    return invoked <= end and start <= confirmed <= end + REPLY_GRACE


def _window_of(invoked: float, confirmed: float, loss_windows: list[Event]) -> str | None:
    """The member of a documented loss window an operation was in flight during, or None."""
    return next((w[2] for w in _windows(loss_windows) if _in_flight(invoked, confirmed, w)), None)


def _difference(sent: list[str], got: list[str]) -> str:
    """How the messages a receiver got differ from those sent, in a few words."""
    missing = [m for m in sent if m not in got]
    extra = [m for m in got if m not in sent]
    if not missing and not extra:
        return f"its {len(sent)} messages in another order or repeated: {got}"
    parts = [f"got {len(got)} of its {len(sent)} messages"]
    if missing:
        parts.append(f"missing {missing[:3]}")
    if extra:
        parts.append(f"not its own {extra[:3]}")
    return ", ".join(parts)


def _check_uows(res: CheckResult, sends: dict[str, _Invoked], receives: list[Event], commits: dict[str, Event],
                commit_invoked: dict[str, float], loss_windows: list[Event], tail: _Tail) -> None:
    for sent in sends.values():
        kind = sent.outcome.type if sent.outcome is not None else INFO
        if kind == OK:
            res.uows_confirmed += 1
        elif kind == FAIL:
            res.uows_failed += 1
        else:
            res.uows_unknown += 1
    res.uows_processed = len(commits)
    found: set[tuple[str, str]] = set()  # (finding, UOW id): each UOW once per finding

    def report(finding: str, uow: str, line: str) -> None:
        if (finding, uow) not in found:
            found.add((finding, uow))
            getattr(res, finding).append(line)

    for r in receives:
        uow = r.uow or ""
        where = f"{uow} received by {r.proc} at {r.t:.3f}"
        sent = sends.get(uow)
        if sent is None:
            report("uow_partial", uow, f"{where}: no sender sent it")
        else:
            if (r.messages or []) != (sent.invoke.messages or []):
                report("uow_partial", uow, f"{where}: {_difference(sent.invoke.messages or [], r.messages or [])}")
            elif r.dest != sent.invoke.dest:
                report("uow_partial", uow, f"{where}: sent to {sent.invoke.dest}, received on {r.dest}")
            if sent.outcome is not None and sent.outcome.type == FAIL:
                report("uow_aborted_delivered", uow, f"{where}: its sender {sent.invoke.proc} saw it fail at "
                                                       f"{sent.outcome.t:.3f} ({sent.outcome.error})")
        commit = commits.get(uow)
        invoked = r.start if r.start is not None else r.t
        if commit is not None and invoked > commit.t:
            line = (f"{where} (receive invoked at {invoked:.3f}): {commit.proc}'s commit of it was confirmed at "
                    f"{commit.t:.3f}")
            member = _window_of(commit_invoked.get(uow, commit.t), commit.t, loss_windows)
            undone = tail.holds(TAIL_UOW_PROCESSED, uow)
            if member is not None:
                report("uow_allowed", uow, line + f" [inside the documented loss window of {member}]")
            elif undone is not None:
                report("uow_allowed", uow, line + f" [the receiver's commit is {undone}]")
            else:
                report("uow_redelivered", uow, line)
    audited = {r.uow for r in receives if r.proc == AUDIT}
    for uow, sent in sends.items():
        if sent.outcome is None or sent.outcome.type != OK or uow in commits or uow in audited:
            continue
        line = (f"{uow}: committed by its sender {sent.invoke.proc} at {sent.outcome.t:.3f}, never committed by a "
                f"receiver nor left for the audit")
        member = _window_of(sent.invoke.t, sent.outcome.t, loss_windows)
        undone = tail.holds(TAIL_UOW_COMMITTED, uow)
        if member is not None:
            report("uow_allowed", uow, line + f" [inside the documented loss window of {member}]")
        elif undone is not None:
            report("uow_allowed", uow, line + f" [its commit is {undone}]")
        else:
            report("uow_lost", uow, line)
