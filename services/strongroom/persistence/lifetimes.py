"""Store settings, message lifetimes and dead-lettering: what the leader decides for every member.

- What the realm decides for the stores: a new term (and a new realm version) puts store limits
  (`ConfigureStoreOp`s where they differ from the state's), static durables and the suspension
  of durables the realm no longer reaches (see `durables`) into the log, so every member
  applies them from the same log index on.
- Time-to-lives end on the pseudo-clock (or, when their rule says `ttl_clock: wall`, and for
  every message stored before log format 5, on the leader's wall clock); retentions end on the
  wall clock. The leader's expiry loop turns due messages into `ExpireOp`s carrying both clocks'
  values, and the log carries the decision to every member.
- Durables: the leader writes which durables have a subscriber attached and when they were
  last used (`DurableUseOp`), and expires the ones unused for their rule's
  `durable_expiry_seconds` on the pseudo-clock (`DeleteDurableOp` with its expiry; see
  `durables`).
- A message delivered more often than its destination's redelivery limit is moved to the
  destination's dead-letter destination (or dropped, if it names none) with a `DeadLetterOp`.
  The deliveries of such durables' messages go into the log (`DeliveryCountsOp`, every
  `DELIVERY_COUNT_SECONDS`), so the limit holds across leader changes.
- Producers: the deduplication window of a producer id that published nothing for the cluster's
  `producer_idle_expiry_seconds` on the pseudo-clock is forgotten (`ForgetProducersOp`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

from strongroom import clocks
from strongroom.aio import wait_event
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import StrongroomError
from strongroom.persistence.durables import (
    ExpiryMemo,
    durable_expiry,
    reach_changes,
    static_durable_ops,
    use_changes,
)
from strongroom.persistence.log import DELIVERY_COUNTS_LOG_FORMAT, PRODUCERS_LOG_FORMAT
from strongroom.persistence.state import DeleteResult, Durable, StateMachine
from strongroom.persistence.term import CommitResult, LeaderTerm
from strongroom.persistence.ticker import CLOCK_IDLE_TICK_SECONDS
from strongroom.realm.model import LimitPolicyName, Realm, Route, Store

__all__ = ["DEAD_LETTER_RETRY", "StoreKeeper", "store_config"]

log = logging.getLogger("strongroom.lifetimes")

DEAD_LETTER_RETRY = 5.0
"""A message past its redelivery limit whose dead-letter destination refused it (store limit)
stays pending, is not delivered, and is offered to the dead-letter destination again after this
long (seconds)."""
EXPIRY_POLL_SECONDS = 0.25
"""The leader looks for ended time-to-lives and retentions at least this often (seconds)."""
DURABLE_POLL_SECONDS = 1.0
"""The leader looks at the durables' use at least this often (seconds), and as soon as a
durable's first subscriber attaches or its last one goes."""


PRODUCER_POLL_SECONDS = 10.0
"""The leader looks for idle producers at most this far apart (seconds; a quarter of the idle
expiry when that is shorter, at least half a second)."""
FORGET_BATCH = 1000
"""Producer ids per ForgetProducersOp."""
DELIVERY_COUNT_SECONDS = 0.2
"""The leader writes the delivery counts of durables with a redelivery limit this often: what a
failover can lose of them is about that much of deliveries."""


def store_config(store: Store) -> rpb.ConfigureStoreOp:
    """A store's limits as the state machine keeps them."""
    policy = (cpb.LIMIT_POLICY_DISCARD_OLDEST if store.limit_policy == LimitPolicyName.DISCARD_OLDEST
              else cpb.LIMIT_POLICY_REJECT)
    return rpb.ConfigureStoreOp(store=store.name, max_messages=store.max_messages, max_bytes=store.max_bytes,
                                policy=policy)


class Resolver(Protocol):
    """Routes of destination names (`MessagingFront.resolve`)."""

    def resolve(self, destination: str) -> Route: ...


class StoreKeeper:
    """Store limits, expiry and dead-lettering for the stores of one cluster."""

    def __init__(self, cluster: str, resolver: Resolver) -> None:
        self.cluster = cluster
        self._resolver = resolver

    # --- what a realm version decides -------------------------------------------------------

    def submit_realm(self, term: LeaderTerm, realm: Realm) -> asyncio.Future[CommitResult] | None:
        """Put what `realm` decides for this cluster's stores into the log now, ahead of every
        operation submitted after this call: durables it no longer reaches are suspended (and
        ones it reaches again resumed), its static durables created, its store limits set.
        Non-replicated stores: applied to the leader's own state at once. The future resolves
        once the replicated part is applied (None: nothing to commit)."""
        replicated_ops: list[rpb.Operation] = []
        for replicated in (True, False):
            state = term.state_for(replicated)
            ops = reach_changes(state.durables.values(), realm, self.cluster)
            if ops and replicated and not term.membership.all_read(3):
                # An older member would skip the operation it does not know and diverge.
                log.warning("the realm leaves %d durable(s) unreachable or reaches them again, but not every member "
                            "of %s reads log format 3 yet: they are suspended or resumed once every member runs "
                            "this version", sum(len(op.suspend_durables.durable_keys) for op in ops), self.cluster)
                ops = []
            ops += static_durable_ops(realm, self.cluster, state.durables, replicated)
            for store in realm.stores:
                if store.served_by(self.cluster) and store.replicated == replicated:
                    wanted = store_config(store)
                    if state.store_configs.get(store.name) != wanted:
                        ops.append(rpb.Operation(configure_store=wanted))
            if replicated:
                replicated_ops = ops
            else:
                for op in ops:
                    state.apply_op(op)
        if replicated_ops and term.alive():
            # The realm's decisions are written while the persistent store is unavailable too.
            return term.submit(replicated_ops, bookkeeping=True)
        return None

    async def apply_realm(self, term: LeaderTerm, realm: Realm) -> None:
        """`submit_realm`, and wait until it is applied."""
        fut = self.submit_realm(term, realm)
        if fut is not None:
            await fut

    async def realm_applied(self, fut: asyncio.Future[CommitResult]) -> None:
        """Wait for a new realm version's operations while leading; a term that ends first
        leaves them to the next leader, which submits them when it starts."""
        try:
            await fut
        except StrongroomError as err:
            log.info("the new realm's store settings are not applied yet (%s); the next leader applies them", err)

    # --- expiry -------------------------------------------------------------------------------

    async def expire(self, term: LeaderTerm) -> None:
        """Turn ended time-to-lives and retentions into ExpireOps while `term` lasts (the
        leader's clocks decide, the log carries the decision to every member)."""
        local = term.local_state
        while term.alive():
            clocks.drift()  # a step of the system clock is logged; decisions keep to `wall()`
            now = clocks.wall()
            # The pseudo-clock goes into ExpireOps only once every member reads it (before, no
            # message has a time-to-live on it).
            clock = term.lifetimes_clock() or 0.0
            state = term.state
            try:
                due = local.due(now, clock)
                if due:
                    local.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=now, clock=clock)))
                # No timeout processing on the persistent store while it is unavailable.
                due = state.due(now, clock) if not term.store_unavailable else []
                if due:
                    await term.commit(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=now, clock=clock)))
                    continue
            except StrongroomError as err:
                log.info("expiry round failed: %s", err)
            waits = [t - now for t in (state.next_timer(), local.next_timer()) if t]
            waits += [t - clock for t in (state.next_clock_timer(), local.next_clock_timer()) if t and clock]
            await asyncio.sleep(min(EXPIRY_POLL_SECONDS, max(0.01, min(waits))) if waits else EXPIRY_POLL_SECONDS)

    # --- durables' use and expiry ------------------------------------------------------------

    async def track_durables(self, term: LeaderTerm, realm: Callable[[], Realm]) -> None:
        """While `term` serves: write into the log which durables have a subscriber attached
        and when they were last used, and expire the ones unused past their rule's
        `durable_expiry_seconds` (`realm()`: the realm in force). Nothing until every member
        reads log format 5."""
        dispatcher = term.dispatcher
        assert dispatcher is not None, "the term serves"
        wake = asyncio.Event()
        dispatcher.on_use = wake.set
        while term.alive():
            wake.clear()
            if term.lifetimes_clock() is not None:
                used = dispatcher.take_used()
                try:
                    for replicated in (False,) if term.store_unavailable else (True, False):
                        await self._durables_round(term, term.state_for(replicated), replicated, realm(), used)
                except StrongroomError as err:
                    log.info("durable use round failed: %s", err)
            await wait_event(wake, DURABLE_POLL_SECONDS)

    async def _durables_round(self, term: LeaderTerm, state: StateMachine, replicated: bool, realm: Realm,
                              used: set[str]) -> None:
        dispatcher = term.dispatcher
        assert dispatcher is not None
        clock = term.clock()
        memo: ExpiryMemo = {}
        changes = use_changes(list(state.durables.values()), lambda key: dispatcher.subscribers(key) > 0, used,
                              lambda d: durable_expiry(d, realm, self.cluster, memo), clock)
        ops = [rpb.Operation(durable_use=rpb.DurableUseOp(durable_keys=keys, clock=clock, attached=attached))
               for keys, attached in ((changes.attached, True), (changes.released, False)) if keys]
        ops += [rpb.Operation(delete_durable=rpb.DeleteDurableOp(
            durable_key=key, expiry=rpb.DurableExpiry(clock=clock, unused_for=expiry))) for key, expiry in changes.expired]
        if not ops:
            return
        gone = {key: state.durables[key] for key, _ in changes.expired}
        if replicated:
            fut = term.submit(ops)
            assert fut is not None
            results = (await fut).results
        else:
            results = [state.apply_op(op) for op in ops]
        for op, result in zip(ops, results):
            if isinstance(result, DeleteResult):
                d = gone[op.delete_durable.durable_key]
                log.info("durable %r on %r expired: unused for %g s; released %d message(s)",
                         d.name, d.destination, op.delete_durable.expiry.unused_for, result.released)

    # --- idle producers -----------------------------------------------------------------------

    async def forget_producers(self, term: LeaderTerm, realm: Callable[[], Realm]) -> None:
        """While `term` serves: forget the deduplication windows of producers that published
        nothing for the cluster's `producer_idle_expiry_seconds` of pseudo-clock (`realm()`: the
        realm in force). Nothing until every member reads log format 7."""
        while term.alive():
            cluster = realm().cluster(self.cluster)
            idle_for = cluster.producer_idle_expiry_seconds if cluster is not None else 0.0
            if idle_for and term.membership.all_read(PRODUCERS_LOG_FORMAT):
                try:
                    for replicated in (False,) if term.store_unavailable else (True, False):
                        await self._forget_round(term, term.state_for(replicated), replicated, idle_for)
                except StrongroomError as err:
                    log.info("idle producer round failed: %s", err)
            await asyncio.sleep(min(PRODUCER_POLL_SECONDS, max(0.5, idle_for / 4)) if idle_for
                                else PRODUCER_POLL_SECONDS)

    async def _forget_round(self, term: LeaderTerm, state: StateMachine, replicated: bool, idle_for: float) -> None:
        clock = term.clock()
        # A window's last use is the pseudo-clock as applied, which trails the leader's by up to
        # an idle tick: counting that tick too, no window is forgotten before it was idle long
        # enough.
        idle = state.idle_producers(clock, idle_for + CLOCK_IDLE_TICK_SECONDS)
        forgotten = 0
        for start in range(0, len(idle), FORGET_BATCH):
            op = rpb.Operation(forget_producers=rpb.ForgetProducersOp(
                producer_ids=idle[start:start + FORGET_BATCH], before_index=state.applied_index, clock=clock,
                idle_for=idle_for))
            if replicated:
                fut = term.submit([op])
                assert fut is not None
                forgotten += cast(int, (await fut).results[0])
            else:
                forgotten += cast(int, state.apply_op(op))
        if forgotten:
            log.info("forgot the deduplication windows of %d producer(s) idle for %g s or more%s",
                     forgotten, idle_for, "" if replicated else " (stores not replicated)")

    # --- delivery counts -----------------------------------------------------------------------

    async def record_deliveries(self, term: LeaderTerm) -> None:
        """While `term` serves: write the delivery counts of durables with a redelivery limit
        into the log (replicated stores; a store that is not replicated does not outlive its
        leader), off every confirmation's path. Nothing until every member reads log format 7."""
        dispatcher = term.dispatcher
        assert dispatcher is not None, "the term serves"
        while term.alive():
            await asyncio.sleep(DELIVERY_COUNT_SECONDS)
            counted = dispatcher.take_counted()
            if not counted or term.store_unavailable or not term.membership.all_read(DELIVERY_COUNTS_LOG_FORMAT):
                continue
            ops = [rpb.Operation(delivery_counts=rpb.DeliveryCountsOp(
                durable_key=key, message_seqs=list(counts), counts=list(counts.values())))
                for key, (state, counts) in counted.items() if state is term.state]
            if not ops:
                continue
            try:
                fut = term.submit(ops)
                if fut is not None:
                    await fut
            except StrongroomError as err:
                log.info("delivery counts not recorded (%s); a later leader may deliver those again", err)

    # --- dead letters -------------------------------------------------------------------------

    def _route_of(self, durable: Durable) -> Route | None:
        try:
            return self._resolver.resolve(durable.destination)
        except StrongroomError:
            return None

    def redelivery_limit(self, durable: Durable) -> int:
        """Deliveries of a message to this durable before it is dead-lettered (0: no limit)."""
        route = self._route_of(durable)
        return route.rule.redelivery_limit if route is not None else 0

    def dead_letter(self, term: LeaderTerm, realm: Realm, durable: Durable, seq: int, deliveries: int,
                    why: str) -> None:
        """A message reached its redelivery limit, or its subscriber terminated it (`why` says
        which): move it (through the log for replicated stores) out of the durable and into the
        dead-letter destination, if any."""
        route = self._route_of(durable)
        op = rpb.DeadLetterOp(durable_key=durable.key, message_seq=seq, deliveries=deliveries,
                              published_at=clocks.wall(), reason=why)
        target = route.rule.dead_letter if route is not None else None
        if target:
            assert route is not None
            try:
                to = self._resolver.resolve(target)
            except StrongroomError as err:
                log.warning("dead-letter destination %r of %r is not usable (%s); message %d stays pending",
                            target, durable.destination, err, seq)
                self._later(term, durable, seq, target)
                return
            if to.store.replicated != route.store.replicated:
                log.warning("dead-letter destination %r is in a store of another replication mode than %r; "
                            "message %d stays pending", target, durable.destination, seq)
                self._later(term, durable, seq, target)
                return
            op.target_store = to.store.name
            op.target_destination = target
            op.target_queue = to.queue
        log.info("message %d of %r %s on durable %r; dead-lettering to %s",
                 seq, durable.destination, why, durable.name, target or "(discarded)")
        wrapped = rpb.Operation(dead_letter=op)
        store = realm.store(durable.store)
        if store is not None and not store.replicated:
            if not term.local_state.apply_op(wrapped):
                self._later(term, durable, seq, target)
            return
        fut = term.submit([wrapped])
        assert fut is not None

        def done(f: asyncio.Future[CommitResult]) -> None:
            if f.cancelled() or f.exception() is not None:
                return  # the leadership ended: the next leader redelivers and counts again
            if not f.result().results[0]:
                self._later(term, durable, seq, target)

        fut.add_done_callback(done)

    def _later(self, term: LeaderTerm, durable: Durable, seq: int, target: str | None) -> None:
        log.warning("dead-letter destination %r refused message %d of %r (store limit); retrying in %.0f s",
                    target, seq, durable.destination, DEAD_LETTER_RETRY)
        if term.dispatcher is not None:
            term.dispatcher.unpark(durable.key, seq, DEAD_LETTER_RETRY)
