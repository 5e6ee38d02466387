"""One leadership term: everything that exists only while this member leads one epoch.

A `LeaderTerm` is created when this member is elected and closed when it stops leading (lease
lost, a newer epoch seen, no quorum, storage failure, asked to step down). It owns the group
commit (the proposal queue, the rounds, the waiters of each round), the replicators of the
followers, the dispatcher of the subscriptions, the non-replicated stores (which live only on
the leader) and the tasks that run while it leads. Code outside asks it one question,
`alive()`, instead of comparing roles and epochs; `close()` ends all of it at once.

Group commit: while one round is in flight the term queues operations; the next round carries
all of them as one log entry: one storage write (one fsync), one append per follower. An entry
of the term's own epoch commits once a majority stored it; earlier entries commit with it.
Callers get a `CommitResult` once their round is applied on this member.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, Protocol, cast

from strongroom import clocks
from strongroom.aio import cancel_and_wait
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (LogDiverged, NoQuorumError, NotLeaderError, PersistenceUnavailable, StrongroomError,
                               error_for_reason)
from strongroom.events.publisher import EventPublisher
from strongroom.persistence.config import Role
from strongroom.persistence.dispatcher import Dispatcher
from strongroom.persistence.log import LIFETIMES_LOG_FORMAT, ReplicatedLog
from strongroom.persistence.membership import Membership
from strongroom.persistence.configuration import majority_heard, majority_index
from strongroom.persistence.replica import Replica
from strongroom.persistence.replicator import Replicating
from strongroom.persistence.snapshot_source import PeerSnapshot, peer_snapshot
from strongroom.persistence.state import StateMachine
from strongroom.persistence.ticker import tick_clock
from strongroom.tracing import traced
from strongroom.wire import ENTRY_OPS, repeated_after

__all__ = ["CommitResult", "LeaderTerm", "Leadership"]

log = logging.getLogger("strongroom.term")

STORAGE_FAILURE_PAUSE = 30.0
"""A member whose storage failed while leading sits out elections this long (seconds)."""
QUORUM_CHECK_SECONDS = 0.25
"""How often a serving leader checks that a majority answered within a lease TTL (seconds)."""


class CommitResult(NamedTuple):
    """What a committed submission gave: one result per operation (per message of a
    PublishBatchOp), in order, and the log index of its entry."""

    results: list[object]
    log_index: int


class Leadership(Protocol):
    """What a term needs of the member that holds it."""

    def elected(self) -> bool:
        """The election still holds this member's leader key."""

    def lease_valid(self) -> bool:
        """The lease is certainly alive: no other member can have been elected."""

    async def step_down(self, reason: str, err: Exception | None = None, term: LeaderTerm | None = None) -> None:
        """Stop leading now (closes the term), if `term` (when given) is still the current one."""

    async def hand_over(self, reason: str, err: Exception | None = None, pause: float = 0.0,
                        term: LeaderTerm | None = None) -> None:
        """Stop leading, release the leader key and sit out elections for `pause` seconds, if
        `term` (when given) is still the current one."""

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task the member owns (not one of the term's)."""


ReplicatorFactory = Callable[["LeaderTerm", str], Replicating]


class LeaderTerm:
    """This member's leadership of one epoch."""

    def __init__(self, epoch: int, member: str, replica: Replica, membership: Membership,
                 leadership: Leadership) -> None:
        self.epoch = epoch
        self.member = member
        self.replica = replica
        self.membership = membership
        self._leadership = leadership
        self.serving = False
        """Recovered: the no-op of this epoch committed, clients are served."""
        self.standby_ready = False
        """A standby set's leader that recovered: it takes what the DR service ships."""
        self.since = 0.0
        """When it started serving (monotonic)."""
        self.replicators: dict[str, Replicating] = {}
        self._replicator: ReplicatorFactory | None = None
        self.joint: tuple[str, ...] | None = None
        """In a membership change, the new voters: counted too (`reconfig.py`)."""
        self.dispatcher: Dispatcher | None = None
        self.events: EventPublisher | None = None
        """The store event log's publisher, while serving with the event log on."""
        self.local_state = replica.new_state(replicated=False)
        """The non-replicated stores: they live on the leader only and go with its term."""
        # Map versions of non-replicated stores continue above anything an earlier term (of any
        # member: epochs only grow) handed out.
        self.local_state.start_local_versions(epoch << 32)
        # Highest index this member has durably stored (its own vote in commits).
        self.durable_index = replica.log.last_index
        # Queued work: (serialised operations, future or None, how many results they give,
        # bookkeeping: the term's own, written while the persistent store is unavailable too).
        self._queue: list[tuple[list[bytes], asyncio.Future[CommitResult] | None, int, bool]] = []
        self._queue_wake = asyncio.Event()
        # index -> (epoch of the entry, [(future, how many of the entry's results are its)])
        self._waiters: dict[int, tuple[int, list[tuple[asyncio.Future[CommitResult] | None, int]]]] = {}
        self._commit_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        # The pseudo-clock as this term runs it: the applied value it began with, run on since;
        # while stopped (the persistent store unavailable), it stands at `_clock_base`.
        self._clock_base = 0.0
        self._clock_since = 0.0
        self._clock_stopped = False
        # The persistent store's state as this term enforces it (`enforce_store`; None: served).
        self._unavailable: StrongroomError | None = None
        self._no_new: StrongroomError | None = None
        replica.on_applied = self._on_applied
        replica.compaction_floor = self._compaction_floor

    # --- what others ask ----------------------------------------------------------------------

    def start_clock(self) -> None:
        """Start the pseudo-clock from the highest value applied (replicated or this term's own
        state): called once the term has adopted the log, before it serves."""
        self._clock_base = max(self.state.clock, self.local_state.clock)
        self._clock_since = time.monotonic()

    def clock(self) -> float:
        """The pseudo-clock now: seconds during which the cluster had a serving leader. It runs
        on the leader alone and reaches the log as `ClockOp`s and the operations that carry it,
        so it stands still while the cluster is down or leaderless. Units of work, message
        time-to-lives and durable expiry measure time on it."""
        if not self._clock_since:
            return max(self.state.clock, self.local_state.clock)
        if self._clock_stopped:
            return self._clock_base
        return self._clock_base + (time.monotonic() - self._clock_since)

    def lifetimes_clock(self) -> float | None:
        """The pseudo-clock now, for the lifetime fields of the log (log format 5: time-to-lives
        and durables' use on it); None while some member does not read that format."""
        return self.clock() if self.membership.all_read(LIFETIMES_LOG_FORMAT) else None

    # --- the persistent store's state (docs/store-operations.md) --------------------------------

    def enforce_store(self, unavailable: StrongroomError | None, no_new: StrongroomError | None,
                      in_flight: bool = False) -> int:
        """Enforce the persistent store's state (persistence/pstore.py decides it): `unavailable`
        is what a command that needs persistence gets, `no_new` what a producing one gets (None:
        served). Made unavailable, the term backs out what is queued and not yet in an entry (its
        callers get `unavailable`; an entry being stored was handed to the store before and
        completes), ends the replicated stores' subscriptions and stops the pseudo-clock, which
        runs on from there once the store is connected; `in_flight` (members cannot store): the
        callers of entries not committed get `unavailable` too. Returns how many it backed out."""
        backed: list[tuple[list[bytes], asyncio.Future[CommitResult] | None, int, bool]] = []
        if unavailable is not None and self._unavailable is None:
            self._clock_base, self._clock_stopped = self.clock(), True
            backed = [item for item in self._queue if not item[3]]
            self._queue = [item for item in self._queue if item[3]]
            futs = [fut for _, fut, _, _ in backed] + [fut for index, (_, waiting) in self._waiters.items()
                                                       if in_flight and index > self.commit_index for fut, _ in waiting]
            for fut in futs:
                if fut is not None and not fut.done():
                    fut.set_exception(self._fresh(unavailable))
            if self.dispatcher is not None:
                self.dispatcher.suspend(self.replica.state, unavailable.reason, unavailable.message)
        elif unavailable is None and self._clock_stopped:
            self._clock_since, self._clock_stopped = time.monotonic(), False
        self._unavailable, self._no_new = unavailable, no_new
        return len(backed)

    @staticmethod
    def _fresh(err: StrongroomError) -> StrongroomError:  # one exception object per raise
        return error_for_reason(err.reason, err.message, err.metadata)

    def require_store(self) -> None:
        """Raise PSTORE_UNAVAILABLE while the persistent store is unavailable."""
        if self._unavailable is not None:
            raise self._fresh(self._unavailable)

    def producing_refusal(self) -> StrongroomError | None:
        """What a producing command on a replicated store is told now (PSTORE_UNAVAILABLE, or
        NO_NEW_UOW while the store takes no new units of work); None: it is served."""
        refusal = self._unavailable or self._no_new
        return self._fresh(refusal) if refusal is not None else None

    def require_new(self) -> None:
        """Raise what a producing command on a replicated store is told now, if anything."""
        refusal = self.producing_refusal()
        if refusal is not None:
            raise refusal

    @property
    def store_unavailable(self) -> bool:
        """The persistent store is unavailable: no timeout processing on it."""
        return self._unavailable is not None

    @property
    def closed(self) -> bool:
        """The term ended (`close`)."""
        return self._closed

    def alive(self) -> bool:
        """Still this member's term: not closed, and the election still holds the key."""
        return not self._closed and self._leadership.elected()

    @property
    def role(self) -> Role:
        """Recovering until it serves (a standby set's leader: until it takes shipped entries),
        then leader."""
        return Role.LEADER if self.serving or self.standby_ready else Role.RECOVERING

    @property
    def log(self) -> ReplicatedLog:
        """The replicated log."""
        return self.replica.log

    @property
    def commit_index(self) -> int:
        """The highest committed index."""
        return self.replica.commit_index

    @property
    def state(self) -> StateMachine:
        """The replicated state machine."""
        return self.replica.state

    def state_for(self, replicated: bool) -> StateMachine:
        """The state machine of replicated or of non-replicated stores."""
        return self.replica.state if replicated else self.local_state

    def snapshot_for_peer(self) -> PeerSnapshot:
        """A state for a follower that is too far behind (`snapshot_source.py`)."""
        return peer_snapshot(self.replica)

    def lease_valid(self) -> bool:
        """The lease is certainly alive (answers from the leader's state are safe)."""
        return self._leadership.lease_valid()

    # --- tasks --------------------------------------------------------------------------------

    def run(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` for as long as this term lasts (cancelled by `close`)."""
        self._tasks.append(asyncio.create_task(work, name=name))

    def start_replication(self, replicator: ReplicatorFactory) -> None:
        """Start replicating to every follower, and the group commit."""
        self.durable_index = self.replica.log.last_index
        self._replicator = replicator
        for name in self.membership.peers():
            self.replicate_to(name)
        self.run(self._proposer(), "proposer")

    def replicate_to(self, name: str) -> None:
        """Replicate to `name` too (a voter, or a member being added), if not yet."""
        if name not in self.replicators and name != self.member and self._replicator is not None and not self._closed:
            rep = self.replicators[name] = self._replicator(self, name)
            rep.start()

    async def stop_replicating(self, name: str) -> None:
        """A member removed from the cluster: no more appends to it."""
        if (rep := self.replicators.pop(name, None)) is not None:
            await rep.stop()

    def serve(self, dispatcher: Dispatcher) -> None:
        """Recovered: deliver to subscribers and serve clients."""
        self.dispatcher = dispatcher
        dispatcher.attach(self.replica.state)
        dispatcher.attach(self.local_state)
        dispatcher.start()
        self.since = time.monotonic()
        self.serving = True
        self.run(self._quorum_watchdog(), "quorum")
        self.run(tick_clock(self), "pseudo-clock")

    def publish_events(self, publisher: EventPublisher) -> None:
        """Serving with the event log on: publish the store events (and the deliveries)."""
        self.events = publisher
        state = self.replica.state
        if self.dispatcher is not None:
            self.dispatcher.on_delivered = lambda sm, durable, stored, count: (
                publisher.delivered(durable, stored, count) if sm is state else None)
        self.run(publisher.run(), "events")

    @property
    def events_published(self) -> int:
        """The last log index whose store events are published (0: none, or no event log)."""
        journal = self.replica.events
        return journal.published if journal is not None else 0

    # --- submitting ---------------------------------------------------------------------------

    def submit(self, ops: list[rpb.Operation], want_result: bool = True,
               bookkeeping: bool = False) -> asyncio.Future[CommitResult] | None:
        """Queue operations for the next round; the future resolves once they are applied."""
        return self.submit_raw([op.SerializeToString() for op in ops], want_result, bookkeeping=bookkeeping)

    def submit_raw(self, ops: list[bytes], want_result: bool = True, results: int | None = None,
                   bookkeeping: bool = False) -> asyncio.Future[CommitResult] | None:
        """Like `submit`, the operations already serialised; `results`: how many results
        they give (one per operation unless some are PublishBatchOps). On a closed term the
        future fails at once with NotLeaderError; while the persistent store is unavailable,
        with PSTORE_UNAVAILABLE, unless the operations are the term's `bookkeeping` (its no-op,
        the realm's store settings, the take-over of units of work)."""
        fut: asyncio.Future[CommitResult] | None = asyncio.get_running_loop().create_future() if want_result else None
        if self._closed or (self._unavailable is not None and not bookkeeping):
            if fut is not None:
                fut.set_exception(NotLeaderError(f"member {self.member} is no longer the leader") if self._closed
                                  else self._fresh(self._unavailable))  # type: ignore[arg-type]
            return fut
        self._queue.append((ops, fut, len(ops) if results is None else results, bookkeeping))
        self._queue_wake.set()
        return fut

    async def commit(self, op: rpb.Operation, bookkeeping: bool = False) -> tuple[object, int]:
        """Commit one operation: its result and log index."""
        return await self.commit_raw(op.SerializeToString(), bookkeeping)

    async def commit_raw(self, op: bytes, bookkeeping: bool = False) -> tuple[object, int]:
        """Like `commit`, the operation already serialised."""
        done = await cast("asyncio.Future[CommitResult]", self.submit_raw([op], bookkeeping=bookkeeping))
        return done.results[0], done.log_index

    # --- the group commit ---------------------------------------------------------------------

    async def _proposer(self) -> None:
        """Run the group commit. If this member's storage fails (disk full, I/O error), the entry
        it could not write stays in memory, unstored (followers may hold it), and is written again
        before any other (`StorageHealth.store_unstored`): the member says it cannot store, and
        `PStore` hands over to members that can or goes on with the store unavailable."""
        lg, health = self.replica.log, self.replica.health
        while True:
            try:
                return await self._rounds()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - storage failure
                if not lg.unstored:  # not a write of the log: hand over, as nothing else can go on
                    log.error("group commit failed while leading (%s); stepping down", exc)
                    return await self._leadership.hand_over("storage failed", PersistenceUnavailable(
                        f"member {self.member} cannot write its storage: {exc}"), STORAGE_FAILURE_PAUSE, self)
                health.failed(exc)
            await health.store_unstored(lg, self.alive)
            if not self.alive():
                return
            self.durable_index = lg.last_index
            self.advance_commit()

    async def _rounds(self) -> None:
        """Group commit: everything queued during the previous round goes out as one entry, one
        storage write (one fsync) and one Append per follower."""
        max_ops = self.membership.cluster.max_batch_ops
        epoch = self.epoch
        lg = self.replica.log
        while self.alive():
            if not self._queue:
                self._queue_wake.clear()
                await self._queue_wake.wait()
                continue
            taken = 0
            count = 0
            for _, _, n, _ in self._queue:
                taken += 1
                count += n
                if count >= max_ops:
                    break
            batch, self._queue = self._queue[:taken], self._queue[taken:]
            if not self._leadership.lease_valid():
                for _, fut, _, _ in batch:
                    if fut is not None and not fut.done():
                        fut.set_exception(NotLeaderError("leader lease expired"))
                await self._leadership.step_down("lease could not be renewed in time", None, self)
                return
            # Made as bytes (its head, then each operation as queued), parsed once for log and apply.
            index = lg.last_index + 1
            round_ops = [op for ops, _, _, _ in batch for op in ops]
            raw = repeated_after(rpb.LogEntry(index=index, epoch=epoch, time=clocks.wall()).SerializeToString(), ENTRY_OPS,
                                 round_ops)
            began = time.perf_counter()
            entry = rpb.LogEntry.FromString(raw)
            self._waiters[index] = (epoch, [(fut, n) for _, fut, n, _ in batch])
            # The followers get the entry before this member stores it: the replicators kicked
            # here write their appends in the one loop turn given to them, and this member's
            # own write (with its fsync, disk-sync) then runs while the followers store theirs.
            # The write runs on the loop thread (a worker thread cost the leader about 0.2 ms
            # of CPU per round in handing it over and back, and the round no less time), and
            # even if this task is cancelled meanwhile (stepping down): the log in memory never
            # holds an entry its storage does not. This member counts itself toward the
            # majority only once its write returned.
            lg.add_local(entry, raw)
            for rep in self.replicators.values():
                rep.kick()
            try:
                await asyncio.sleep(0)
            finally:
                lg.store_last(keep=self.alive())
            if not self.alive():
                return
            self.durable_index = entry.index
            self.advance_commit()
            while self.replica.commit_index < entry.index and self.alive():
                self._commit_changed.clear()
                await self._commit_changed.wait()
            if self.replica.commit_index >= entry.index:
                tallies = self.replica.tallies
                tallies.commit_seconds.observe(time.perf_counter() - began)
                tallies.round_operations.observe(len(round_ops))

    # --- a standby set's leader (disaster recovery, docs/dr.md) ---------------------------------------

    def watch_quorum(self) -> None:
        """Standby: step aside when no majority of the set answers for a lease TTL (`serve` does
        the same for a serving leader)."""
        self.since = time.monotonic()
        self.run(self._quorum_watchdog(), "quorum")

    def commit_held(self) -> None:
        """Standby: everything this member's log holds was committed at the primary (the DR
        service ships committed entries only): commit and apply it, and tell the followers."""
        replica = self.replica
        if self.alive() and replica.commit_index < replica.log.last_index:
            self._commit_to(replica.log.last_index)

    def ship(self, first_index: int, entries: list[rpb.LogEntry], raws: list[bytes]) -> bool:
        """Standby: store entries of the primary's committed log that continue this member's
        log at `first_index` (False, nothing stored, when they do not), send them to the
        followers, and commit them (`commit_held`). Entries already held are skipped."""
        lg = self.replica.log
        last = lg.last_index
        if first_index > last + 1 or first_index < 1:
            return False
        skip = last + 1 - first_index
        if skip:
            held = [lg.epoch_at(e.index) for e in entries[:skip]]
            if any(h is not None and h != e.epoch for h, e in zip(held, entries)):
                raise LogDiverged(f"shipped entries from index {first_index} differ from the standby's own there: "
                                  f"the sites hold different histories")
            entries, raws = entries[skip:], raws[skip:]
        if entries:
            outcome = lg.append_from_leader(last, lg.epoch_at(last) or 0, entries,
                                            commit_index=entries[-1].index, raws=raws)
            if not outcome.ok:
                return False
            self.durable_index = lg.last_index
            for rep in self.replicators.values():
                rep.kick()
        self.commit_held()
        return True

    @traced("match")
    def on_match(self, peer: str) -> None:
        """A follower stored more entries: maybe commit."""
        self.advance_commit()

    def advance_commit(self) -> None:
        """Commit the highest entry of this epoch a majority stored (and everything before it)."""
        if not self.alive():
            return
        replica = self.replica
        candidate = majority_index(self.membership.voters, self.match_of)
        if self.joint is not None:
            candidate = min(candidate, majority_index(self.joint, self.match_of))
        # Only an entry of our own epoch commits by counting; earlier ones commit with it.
        if candidate > replica.commit_index and replica.log.epoch_at(candidate) == self.epoch:
            if not self._leadership.lease_valid():
                # Never confirm after the lease may have expired: another leader may exist.
                self._leadership.in_background(
                    self._leadership.step_down("lease could not be renewed in time", None, self))
                return
            self._commit_to(candidate)

    def _commit_to(self, index: int) -> None:
        """Commit and apply through `index`; wake the rounds waiting on it and tell the followers."""
        self.replica.commit_index = index
        self.replica.apply_committed()
        self._commit_changed.set()
        for rep in self.replicators.values():
            rep.commit_advanced()

    def match_of(self, name: str) -> int:
        """The last index `name` is known to hold as this leader's log does."""
        if name == self.member:
            return self.durable_index
        rep = self.replicators.get(name)
        return rep.match_index if rep is not None else 0

    def _on_applied(self, index: int, epoch: int, results: list[object]) -> None:
        waiting = self._waiters.pop(index, None)
        # Only the entry our own round appended answers our callers: a later leader may have
        # put another entry at this index.
        if waiting is not None and waiting[0] == epoch:
            at = 0
            for fut, n in waiting[1]:
                if fut is not None and not fut.done():
                    fut.set_result(CommitResult(results[at:at + n], index))
                at += n

    def _compaction_floor(self) -> int | None:
        lagging = [r.match_index for r in self.replicators.values() if r.reachable]
        return min(lagging) if lagging else None

    # --- the followers --------------------------------------------------------------------------

    def observe_higher_epoch(self, epoch: int, reason: str) -> None:
        """A peer promised a newer epoch: someone else leads now. Everything unconfirmed fails
        at once; the step-down (which stops the replicators calling this) runs in a task of its
        own."""
        if epoch > self.epoch and not self._closed:
            log.warning("stepping down: %s (epoch %d > %d)", reason, epoch, self.epoch)
            self.fail_pending(NotLeaderError(f"member {self.member} stepped down: {reason}"))
            self._leadership.in_background(self._leadership.hand_over(reason, None, 0.0, self))

    def majority_contact(self) -> float:
        """When a majority of the voters (counting ourselves) last answered us (monotonic time)."""
        reps = self.replicators
        return majority_heard(self.membership.voters, self.member, lambda n: reps[n].last_ack if n in reps else 0.0)

    async def _quorum_watchdog(self) -> None:
        """A leader that keeps its lease but cannot reach a majority steps aside, so members
        that can reach each other elect a leader that can commit."""
        while self.alive():
            await asyncio.sleep(QUORUM_CHECK_SECONDS)
            if not self.alive():
                return
            ttl = self.membership.cluster.lease_ttl_seconds
            silent = time.monotonic() - max(self.majority_contact(), self.since)
            if silent > ttl:
                log.warning("no majority answered for %.1fs; stepping down", silent)
                await self._leadership.hand_over("no quorum", NoQuorumError(
                    f"leader {self.member} cannot reach a majority of cluster {self.membership.cluster.name}"), ttl, self)
                return

    # --- the end ------------------------------------------------------------------------------

    def fail_pending(self, err: Exception) -> None:
        """Fail every unconfirmed request now: nothing queued or in flight may be answered by a
        member that is no longer the leader."""
        waiters, self._waiters = self._waiters, {}
        for _, futs in waiters.values():
            for fut, _ in futs:
                if fut is not None and not fut.done():
                    fut.set_exception(err)
        queue, self._queue = self._queue, []
        for _, fut, _, _ in queue:
            if fut is not None and not fut.done():
                fut.set_exception(err)

    def close(self, err: Exception) -> asyncio.Future[None]:
        """End the term. What decides happens at once (nothing pending is answered, nothing new
        is accepted, the replica forgets this term); the returned clean-up (tasks, replicators,
        subscriptions) runs in a task of its own, so a caller cancelled half-way (the election's
        task on lease loss) cannot leave it undone."""
        self._closed = True
        self.serving = False
        self.fail_pending(err)
        replica = self.replica
        replica.log.drop_unstored()
        if replica.on_applied == self._on_applied:
            replica.on_applied = None
        if replica.compaction_floor == self._compaction_floor:
            replica.compaction_floor = None
        state = replica.state
        state.on_pending = state.on_acked = state.on_reset = None
        if self.events is not None:
            self.events.close()
        cleanup = asyncio.ensure_future(self._clean_up(asyncio.current_task()))
        # The non-replicated stores go once the dispatcher that may still read them has stopped.
        local = self.local_state
        cleanup.add_done_callback(lambda _: local.close())
        return cleanup

    async def _clean_up(self, current: asyncio.Task[Any] | None) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            if task is not current:
                task.cancel()
        replicators, self.replicators = self.replicators, {}
        for rep in replicators.values():
            await rep.stop()
        dispatcher, self.dispatcher = self.dispatcher, None
        if dispatcher is not None:
            await dispatcher.stop("NOT_LEADER", f"member {self.member} is no longer the leader")
        for task in tasks:
            if task is not current:
                await cancel_and_wait(task)
