"""The messaging front: publish, subscribe and acknowledge on this member's cluster.

Everything a client asks of the message store arrives here as domain values (destination
names, messages, durable kinds, sequences), is checked here (the servicers only translate), and
goes to the current `LeaderTerm`: replicated stores through its group commit, non-replicated
stores straight into its leader-local state. Store limits, expiry and dead-lettering are the
`StoreKeeper`'s (`lifetimes.py`). A message a router forwarded from another cluster carries its
origin (`Message.origin`): it is checked against the realm here and written with
`PublishOp.forwarded`, so every member applies it under the mark rule (`StateMachine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from strongroom import clocks
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    DurableMismatch,
    InvalidArgument,
    InvalidMatcher,
    InvalidOrigin,
    LogFormatPending,
    MessageTooLarge,
    NoInterest,
    PersistenceUnavailable,
    StrongroomError,
    UnknownDestination,
    UnknownDurable,
    UnknownDurableKind,
)
from strongroom.persistence.dispatcher import Dispatcher, Subscription
from strongroom.persistence.durables import TEMPLATE_KINDS, is_endpoint_route, kind_word
from strongroom.persistence.log import ORIGIN_LOG_FORMAT
from strongroom.persistence.matcher import (
    compile_matcher,
    key_of,
    matcher_text,
    same_matcher,
    validate_matcher,
)
from strongroom.persistence.publishing import (
    PendingPublishes,
    PublishItem,
    PublishMode,
    PublishOutcome,
    check_publish,
    invalid,
    publish_op,
    publish_ops,
    publish_outcome,
)
from strongroom.persistence.state import (
    DeleteResult,
    Durable,
    StateMachine,
    content_durable_key,
    durable_key,
)
from strongroom.persistence.term import CommitResult, LeaderTerm
from strongroom.realm.model import AckSync, PublisherMode, Realm, Route, Store, TtlClock
from strongroom.security.access import Access, Action
from strongroom.tracing import traced

__all__ = ["MessagingFront", "Replay", "Routes"]

_KINDS = (cpb.DURABLE_KIND_UNSPECIFIED, cpb.DURABLE_KIND_STANDARD, cpb.DURABLE_KIND_SHARED, cpb.DURABLE_KIND_LASTVALUE)
_ACK_MODES = (mpb.ACK_MODE_UNSPECIFIED, mpb.ACK_MODE_EXPLICIT, mpb.ACK_MODE_AUTO)
# `PublishOp.forwarded` set, encoded: appended to a publish head, it makes the head of forwarded
# messages (a field after the others merges into the operation).
_FORWARDED = rpb.PublishOp(forwarded=True).SerializeToString()
# Message.HasField unbound: asked of every published message, it costs half of
# `message.HasField(...)`, which makes a bound method per call (34 against 60 ns).
_has_field = cpb.Message.HasField


def _origin_format_read(term: LeaderTerm, cluster: str) -> bool:
    """True, or LogFormatPending: a forwarded message to a replicated store needs every member
    of the cluster to read its log format."""
    if not term.membership.all_read(ORIGIN_LOG_FORMAT):
        raise LogFormatPending(f"a forwarded message needs log format {ORIGIN_LOG_FORMAT}, and not every "
                               f"member of {cluster} reads it yet; retry once all run this version")
    return True


def _check_origin_sequence(sequence: int, previous: int) -> None:
    """Refuse a forwarded message whose origin sequence is below 1 or whose `previous` is not
    below it (InvalidOrigin)."""
    if sequence < 1:
        raise InvalidOrigin("an origin sequence is 1 or more")
    if previous >= sequence:
        raise InvalidOrigin(f"origin previous {previous} is not below its sequence {sequence}")


@dataclass(frozen=True)
class Replay:
    """Reposition a durable before subscribing: from a store sequence, or from a time."""

    sequence: int | None = None
    """Store sequence (message_seq) to start at."""
    time: float | None = None
    """Unix seconds: messages published at or after this time."""


class Routes(Protocol):
    """Where destinations go, and who leads (`PersistenceNode`)."""

    cluster_name: str
    realm: Realm
    term: LeaderTerm | None

    def require_leader(self) -> LeaderTerm: ...

    def name_leader(self, err: StrongroomError) -> StrongroomError: ...


class MessagingFront:
    """Publish, subscribe and acknowledge."""

    def __init__(self, routes: Routes) -> None:
        self._routes = routes
        self._resolved: dict[str, Route] = {}

    def check_leader(self) -> None:
        """Raise what a client should be told (NOT_LEADER with the leader's address, recovering,
        no leader) unless this member serves as leader."""
        self._routes.require_leader()

    def named(self, err: StrongroomError) -> StrongroomError:
        """`err` as the client is told it: a NOT_LEADER names the leader, if this member knows it."""
        return self._routes.name_leader(err)

    def realm_changed(self) -> None:
        """A new realm version: routes are resolved afresh."""
        self._resolved = {}

    def resolve(self, destination: str) -> Route:
        """The route of a destination or endpoint name, or UnknownDestination (cached per realm
        version)."""
        hit = self._resolved.get(destination)
        if hit is not None:
            return hit
        cluster = self._routes.cluster_name
        route = self._routes.realm.route(destination)
        if not route.store.served_by(cluster):
            raise UnknownDestination(f"destination {destination!r} maps to store {route.store.name!r} "
                                     f"of {route.store.where}, not {cluster!r}")
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[destination] = route
        return route

    # --- publish ------------------------------------------------------------------------------

    def store_of(self, destination: str) -> str:
        """The name of the store `destination` maps to here (UnknownDestination otherwise)."""
        return self.resolve(destination).store.name

    async def publish(self, item: PublishItem, access: Access | None = None) -> PublishOutcome:
        """Store one message (a `Publish`, or a `PublishRequest` as it came); with confirm-send,
        return once committed."""
        (outcome,) = await self.submit_publishes([item], None, [], access).outcomes()
        if isinstance(outcome, StrongroomError):
            raise outcome
        return outcome

    @traced("submit")
    def submit_publishes(self, items: Sequence[PublishItem], pin: list[int] | None,
                         broken: list[StrongroomError], access: Access | None = None) -> PendingPublishes:
        """Store several messages: the replicated ones go into the next round as one group, now
        (a publish stream submits each batch as it reads it, with no task per batch); the
        returned `PendingPublishes` waits for their outcomes.

        `pin` (owned by a publish stream) pins the stream to one leadership epoch: a stream
        that outlives a change of epoch, even back to this member, is refused so the client
        re-sends its unconfirmed messages in order on a fresh stream. `broken` (also owned by
        the stream) holds the first retriable error: every later request fails with it, which
        keeps one publisher's messages in order. `access` (None: nothing checked) is the
        caller's: a message to a destination it may not publish on is refused PERMISSION_DENIED,
        asked once per destination and batch.
        """
        # Leadership cannot change while this synchronous part runs: check it once per batch.
        try:
            if broken:
                raise broken[0]
            term = self._routes.require_leader()
            if pin is not None:
                if not pin:
                    pin.append(term.epoch)
                elif pin[0] != term.epoch:
                    raise PersistenceUnavailable("leadership changed during this publish stream; reconnect")
        except StrongroomError as err:
            if err.retriable and not broken:
                broken.append(err)
            # A malformed request is refused as such; the rest share the stream's error.
            return PendingPublishes([invalid(item) or err for item in items], [], None, items, broken)
        outcomes: list[PublishOutcome | StrongroomError | None] = [None] * len(items)
        # A replicated store's message while the persistent store is unavailable or takes no new
        # units of work (docs/store-operations.md): refused as it is read, nothing queued.
        refusal = term.producing_refusal()
        ops: list[bytes] = []
        positions: list[int] = []
        confirm_any = False
        # Consecutive messages to one destination form a run: one PublishBatchOp in log format
        # 2 (its head once, then the messages), else one PublishOp each; applied in order.
        batching = term.membership.all_read(2)
        run_head = b""
        run: list[bytes] = []
        # The leader's clock stamps the batch; members never read their own clocks to decide.
        now = clocks.wall()
        # Per destination of this batch: its route, the encoded PublishOp without the message, and
        # whether a message no durable wants is refused (require_interest).
        heads: dict[str, tuple[Route, bytes, bool]] = {}
        # The same heads with `forwarded` set, for the messages that carry an origin.
        forwarded_heads: dict[str, bytes] = {}
        # (destination, origin cluster, origin store) found valid in this batch: the realm is
        # asked once per origin of a destination, not per message (the realm and the members'
        # log format cannot change while this synchronous part runs).
        origins: set[tuple[str, str, str]] = set()
        origin_format = False  # every member reads forwarded messages (asked once a batch has one)
        tracer = term.state.tallies.tracer  # message tracing: None while nothing is traced
        for i, item in enumerate(items):
            try:
                check_publish(item)
                destination = item.destination
                known = heads.get(destination)
                if known is None:
                    route = self.resolve(destination)
                    if access is not None:
                        access.check(Action.PUBLISH, route.store.name, destination)
                    guard = route.rule.require_interest and not route.queue and not route.rule.retain_seconds
                    known = heads[destination] = (route, _publish_head(route, destination, now, term), guard)
                route, head, guard = known
                store = route.store
                message = item.message
                if tracer is not None and tracer.wants(destination, message.producer_id):
                    tracer.received(destination, message.producer_id, message.sequence, message.traceparent)
                # The one test per message for forwarded messages (a router's): a field's presence.
                forwarded = _has_field(message, "origin")
                if forwarded:
                    origin = message.origin
                    source = (destination, origin.cluster, origin.store)
                    if source not in origins:
                        self._check_origin(route, origin.cluster, origin.store, term)
                        origins.add(source)
                    _check_origin_sequence(origin.sequence, origin.previous)
                    if store.replicated and not origin_format:
                        origin_format = _origin_format_read(term, self._routes.cluster_name)
                    head = forwarded_heads.get(destination) or forwarded_heads.setdefault(destination,
                                                                                         head + _FORWARDED)
                elif guard and not term.state_for(store.replicated).wants(store.name, destination, route.endpoint,
                                                                          message):
                    raise NoInterest(f"no durable wants {'endpoint' if route.endpoint else 'topic'} "
                                     f"{destination!r} and its rule sets require_interest; the message was not "
                                     f"stored")
                body = message.SerializeToString()
                if len(body) > store.max_message_bytes:
                    raise MessageTooLarge(f"message of {len(body)} bytes exceeds store {store.name!r} limit of "
                                          f"{store.max_message_bytes} bytes")
                if not store.replicated:
                    result = term.local_state.apply_op(rpb.Operation.FromString(publish_op(head, body)))
                    outcomes[i] = publish_outcome(result, message, 0)
                    continue
                if refusal is not None:
                    outcomes[i] = refusal  # the caller is told: it retries once the store takes it
                    continue
                if head is not run_head and run:
                    ops += publish_ops(run_head, run, batching)
                    run = []
                run_head = head
                run.append(body)
                positions.append(i)
                mode = item.mode
                # A forwarded message is always answered once committed: a duplicate or a gap
                # decides what its router sends next.
                confirm_any = confirm_any or forwarded or mode == PublishMode.STORE_CONFIRM_SEND or (
                    mode == PublishMode.STORE_DEFAULT and store.publisher_mode == PublisherMode.STORE_CONFIRM_SEND)
            except StrongroomError as err:
                outcomes[i] = err
        if run:
            ops += publish_ops(run_head, run, batching)
        fut = term.submit_raw(ops, want_result=confirm_any, results=len(positions)) if ops else None
        if ops and fut is None:
            for pos in positions:
                outcomes[pos] = PublishOutcome(0, False, False, 0)
            positions = []
        return PendingPublishes(outcomes, positions, fut, items, broken)

    def _check_origin(self, route: Route, origin_cluster: str, origin_store: str, term: LeaderTerm) -> None:
        """Refuse forwarded messages whose origin cannot be meant here (InvalidOrigin: they go to
        a topic of a routed store that exists at another cluster too, their origin is one of
        those other clusters and that store). Asked once per batch, destination and origin; each
        message's sequence is `_check_origin_sequence`'s, the members' log format
        `_origin_format_read`'s."""
        store = route.store
        cluster = self._routes.cluster_name
        others = [c for c in store.clusters if c != cluster]
        if not store.routed or not others:
            raise InvalidOrigin(f"{route.name!r} maps to store {store.name!r}, which is not routed to another "
                                f"cluster: a message published to it carries no origin")
        if route.queue:
            raise InvalidOrigin(f"{route.name!r} is a queue: routers forward the messages of topics and endpoints "
                                f"only")
        if origin_cluster not in others:
            raise InvalidOrigin(f"origin cluster {origin_cluster!r} is not another cluster of routed store "
                                f"{store.name!r} ({', '.join(others)})")
        if origin_store != store.name:
            raise InvalidOrigin(f"origin store {origin_store!r} is not {store.name!r}, the store of {route.name!r}")

    # --- subscriptions ------------------------------------------------------------------------

    async def open_subscription(self, destination: str, durable_name: str, kind: int, client_name: str,
                                credit: int, matcher: cpb.ContentMatcher | None = None, ack_sync_mode: int = 0,
                                replay: Replay | None = None, ack_mode: int = 0) -> Subscription:
        """Open a subscription; the durable is created (through the log) if it does not exist,
        repositioned first when `replay` is given. `ack_mode` (explicit or automatic acks) is
        the client library's business: only an unknown value is refused."""
        if kind not in _KINDS:
            raise UnknownDurableKind(f"unknown durable kind {kind}; use STANDARD, SHARED or LASTVALUE")
        if not destination:
            raise InvalidArgument("destination is required")
        if ack_mode not in _ACK_MODES:
            raise InvalidArgument(f"unknown ack mode {ack_mode}; use EXPLICIT or AUTO")
        term = self._routes.require_leader()
        route = self.resolve(destination)
        store = route.store
        if store.replicated:
            term.require_store()
        state = term.state_for(store.replicated)
        matcher = matcher if matcher is not None else cpb.ContentMatcher()
        validate_matcher(matcher)
        key_field = ""
        if route.queue:
            if kind not in (cpb.DURABLE_KIND_UNSPECIFIED, cpb.DURABLE_KIND_SHARED):
                raise InvalidArgument(f"queue {destination!r} is shared; durable kind "
                                      f"{kind_word(kind)} does not apply")
            if matcher.fields:
                raise InvalidMatcher(f"queue {destination!r} delivers every message; a matcher does not apply")
            durable_name = ""
            kind = cpb.DURABLE_KIND_SHARED
        elif is_endpoint_route(route, durable_name):
            # A router's route durable on an endpoint: that endpoint's messages, standard.
            if kind not in (cpb.DURABLE_KIND_UNSPECIFIED, cpb.DURABLE_KIND_STANDARD) or matcher.fields:
                raise DurableMismatch(f"route durable {durable_name!r} on endpoint {destination!r} is standard "
                                      f"and wants every message of the endpoint")
            kind = cpb.DURABLE_KIND_STANDARD
        elif route.template is not None:
            if not durable_name:
                raise InvalidArgument("an endpoint subscription needs a durable name")
            template = route.template
            template_kind = TEMPLATE_KINDS[template.kind]
            if kind not in (cpb.DURABLE_KIND_UNSPECIFIED, template_kind):
                raise DurableMismatch(f"endpoint {destination!r} creates {template.kind.value} durables "
                                      f"(template {template.name!r}), not {kind_word(kind)}")
            kind = template_kind
            key_field = template.key_field or ""
        else:
            if not durable_name:
                raise InvalidArgument("a topic subscription needs a durable name")
            existing = state.durables.get(_durable_key(route, durable_name))
            if existing is not None:
                # A subscriber that names no kind takes the durable as it is (a static durable
                # of the realm, or one another subscriber made); a keyed one is reached by key.
                kind = kind or existing.kind
                key_field = existing.key_field
            elif kind == cpb.DURABLE_KIND_UNSPECIFIED:
                kind = cpb.DURABLE_KIND_STANDARD
        slot = ""
        sub_matcher = None
        durable_matcher = matcher
        if key_field:
            # A keyed last-value durable holds every key; the subscriber names its key.
            cond = matcher.fields.get(key_field)
            if cond is None or cond.WhichOneof("condition") != "equals":
                raise InvalidMatcher(f"durable {durable_name!r} is last-value keyed on field {key_field!r}: the "
                                     f"matcher must name {key_field}=<value>")
            slot = key_of(cond.equals)
            sub_matcher = matcher
            durable_matcher = cpb.ContentMatcher()
        if replay is not None and kind == cpb.DURABLE_KIND_LASTVALUE:
            raise InvalidArgument("a last-value durable keeps only the latest message; replay does not apply")
        if replay is not None and replay.time is not None and not replay.time > 0:
            raise InvalidArgument(f"replay time {replay.time} is not a positive unix time")
        if ack_sync_mode not in (cpb.ACK_SYNC_MODE_UNSPECIFIED, cpb.ACK_SYNC_MODE_SYNC, cpb.ACK_SYNC_MODE_ASYNC):
            raise InvalidArgument(f"unknown ack sync mode {ack_sync_mode}")
        if ack_sync_mode == cpb.ACK_SYNC_MODE_UNSPECIFIED:
            ack_sync_mode = cpb.ACK_SYNC_MODE_SYNC if route.ack_mode == AckSync.SYNC else cpb.ACK_SYNC_MODE_ASYNC
        key = _durable_key(route, durable_name)
        durable = state.durables.get(key)
        if durable is None:
            if store.replicated:
                term.require_new()  # a new durable is a new record: not while no new units of work
            create = rpb.CreateDurableOp(
                store=store.name, destination=destination, durable=durable_name, kind=kind, queue=route.queue,
                matcher=durable_matcher, key_field=key_field, content=route.endpoint and not is_endpoint_route(route, durable_name),
                ack_sync_mode=ack_sync_mode,
                clock=term.lifetimes_clock() or 0.0)
            await _apply_or_commit(term, store, rpb.Operation(create_durable=create))
            durable = state.durables.get(key)
            if durable is None:
                raise PersistenceUnavailable(f"durable {durable_name!r} was removed while it was created; retry")
        if durable.suspended:
            # Reached again under this realm version; its resumption is on its way to the log.
            raise PersistenceUnavailable(f"durable {durable_name!r} on {destination!r} is being resumed; retry")
        # Checked after a create too: another subscriber may have created it first, otherwise.
        if durable.kind != kind:
            raise DurableMismatch(f"durable {durable_name!r} on {destination!r} exists with kind "
                                  f"{kind_word(durable.kind)}, not {kind_word(kind)}")
        if not key_field and not same_matcher(durable.matcher, durable_matcher):
            raise DurableMismatch(f"durable {durable_name!r} on {destination!r} exists with matcher "
                                  f"[{matcher_text(durable.matcher)}], not [{matcher_text(durable_matcher)}]")
        if replay is not None:
            # A separate operation even for a new durable: if another subscriber created it a
            # moment earlier, the replay still happens.
            op = rpb.ReplayOp(durable_key=key)
            if replay.sequence is not None:
                op.sequence = replay.sequence
            else:
                op.time = replay.time or 0.0
            await _apply_or_commit(term, store, rpb.Operation(replay=op))
        if self._routes.require_leader() is not term:
            # Leadership changed while the durable was created: the state read belongs to the
            # term that ended.
            raise PersistenceUnavailable("leadership changed while the subscription was opened; retry")
        if store.replicated:
            term.require_store()  # disconnected meanwhile
        assert term.dispatcher is not None
        return term.dispatcher.open(durable, state, client_name, credit, slot=slot,
                                    match=compile_matcher(sub_matcher), ack_sync_mode=ack_sync_mode)

    async def delete_durable(self, destination: str, name: str, content: bool) -> DeleteResult:
        """Delete a durable (named as status lists it) and release what it holds."""
        if not destination:
            raise InvalidArgument("destination is required (the destination or endpoint the durable was created on)")
        term = self._routes.require_leader()
        for replicated in (True, False):
            state = term.state_for(replicated)
            durable = next((d for d in state.durables.values()
                            if d.destination == destination and d.name == name and d.content == content), None)
            if durable is None:
                continue
            if replicated:
                term.require_store()
            if replicated and not term.membership.all_read(3):
                raise LogFormatPending(f"deleting a durable needs log format 3, and not every member of "
                                       f"{self._routes.cluster_name} reads it yet; retry once all run this version")
            op = rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=durable.key))
            result = (await term.commit(op))[0] if replicated else state.apply_op(op)
            if not isinstance(result, DeleteResult):
                raise UnknownDurable(f"durable {name!r} on {destination!r} was deleted meanwhile")
            return result
        what = "endpoint durable" if content else ("queue" if not name else "durable")
        raise UnknownDurable(f"no {what} {name or destination!r}{f' on {destination!r}' if name else ''} in "
                             f"cluster {self._routes.cluster_name}; `strongroom status` lists the durables")

    def grant(self, sub: Subscription, credit: int) -> None:
        """More credit for a subscription."""
        dispatcher = self._dispatcher()
        if dispatcher is not None:
            dispatcher.grant(sub, credit)

    def close_subscription(self, sub: Subscription) -> None:
        """A subscribe stream ended."""
        dispatcher = self._dispatcher()
        if dispatcher is not None:
            dispatcher.close(sub)

    def _dispatcher(self) -> Dispatcher | None:
        term = self._routes.term
        return term.dispatcher if term is not None else None

    # --- acknowledgments ----------------------------------------------------------------------

    async def ack(self, destination: str, durable_name: str, seqs: list[int], sub_id: str) -> int:
        """Acknowledge messages of a durable; returns the log index once committed."""
        if not destination:
            raise InvalidArgument("destination is required")
        self._routes.require_leader()
        route = self.resolve(destination)
        if route.queue:
            durable_name = ""
        term = self._routes.require_leader()
        durable, state = _durable_in(term, route.store, _durable_key(route, durable_name))
        if route.store.replicated:
            term.require_store()
        assert term.dispatcher is not None
        term.dispatcher.check_ack(durable, seqs, sub_id)
        fut = _acknowledge(term, durable, state, seqs, wait=True)
        return (await fut).log_index if fut is not None else 0

    def ack_subscription(self, sub: Subscription, destination: str,
                         seqs: list[int]) -> list[tuple[int, StrongroomError]]:
        """Acknowledge messages delivered on a subscription, asynchronously (not waiting for
        the commit), each on its own: returns the ones refused, with why; the others are
        acknowledged."""
        term, durable, state = self._delivered_on(sub, destination)
        assert term.dispatcher is not None
        valid, refused = term.dispatcher.split_ack(durable, seqs, sub.id)
        if valid:
            _acknowledge(term, durable, state, valid, wait=False)
        return refused

    def refused(self, sub: Subscription, operation: str, refusals: list[tuple[int, StrongroomError]]) -> None:
        """Tell a subscriber which of its acks, naks or terms were refused."""
        term = self._routes.term
        if term is not None and term.dispatcher is not None:
            term.dispatcher.refused(sub, operation, refusals)

    def nak_subscription(self, sub: Subscription, destination: str, seqs: list[int],
                         delay: float) -> list[tuple[int, StrongroomError]]:
        """Give back messages delivered on a subscription, to be delivered again at once or after
        `delay` seconds; returns the ones refused, with why."""
        term, durable, state = self._delivered_on(sub, destination)
        assert term.dispatcher is not None
        return term.dispatcher.nak(durable, state, seqs, sub.id, delay)

    def term_subscription(self, sub: Subscription, destination: str,
                          seqs: list[int]) -> list[tuple[int, StrongroomError]]:
        """Terminate messages delivered on a subscription: never delivered again (dead-lettered,
        or dropped); returns the ones refused, with why."""
        term, durable, state = self._delivered_on(sub, destination)
        assert term.dispatcher is not None
        return term.dispatcher.terminate(durable, state, seqs, sub.id)

    def _delivered_on(self, sub: Subscription, destination: str) -> tuple[LeaderTerm, Durable, StateMachine]:
        term = self._routes.require_leader()
        store = self.resolve(destination).store
        if store.replicated:
            term.require_store()
        durable, state = _durable_in(term, store, sub.durable_key)
        return term, durable, state


def _durable_in(term: LeaderTerm, store: Store, key: str) -> tuple[Durable, StateMachine]:
    """The durable with this key in the state of `store`, and that state (InvalidArgument if
    there is none)."""
    state = term.state_for(store.replicated)
    durable = state.durables.get(key)
    if durable is None:
        raise InvalidArgument(f"no durable {key.split(chr(0))[-1]!r} in store {store.name!r}")
    return durable, state


def _acknowledge(term: LeaderTerm, durable: Durable, state: StateMachine, seqs: list[int],
                 wait: bool) -> asyncio.Future[CommitResult] | None:
    """Acknowledgments the dispatcher accepted: applied at once in a non-replicated store, else
    into the next round, the dispatcher holding the messages back until they commit; with
    `wait`, the future of their round."""
    # The acknowledgment is a use of the durable (durable expiry), at the leader's pseudo-clock.
    op = rpb.Operation(ack=rpb.AckOp(store=durable.store, durable_key=durable.key, message_seqs=seqs,
                                     clock=term.lifetimes_clock() or 0.0))
    if state is term.local_state:
        state.apply_op(op)
        return None
    assert term.dispatcher is not None
    term.dispatcher.acking(durable, state, seqs)
    return term.submit([op], want_result=wait)


def _publish_head(route: Route, destination: str, now: float, term: LeaderTerm) -> bytes:
    """A PublishOp to `destination` at wall-clock time `now`, without its message, encoded. A
    time-to-live ends on the clock its rule names: the term's pseudo-clock once every member
    reads it (log format 5), else the wall clock."""
    rule = route.rule
    op = rpb.PublishOp(store=route.store.name, destination=destination, queue=route.queue, content=route.endpoint,
                       published_at=now)
    if rule.ttl_seconds:
        clock = term.lifetimes_clock() if rule.ttl_clock == TtlClock.PSEUDO else None
        if clock is not None:
            op.expires_clock = clock + rule.ttl_seconds
        else:
            op.expires_at = now + rule.ttl_seconds
    if rule.retain_seconds:
        op.retain_until = now + rule.retain_seconds
    return op.SerializeToString()


def _durable_key(route: Route, name: str) -> str:
    """Endpoint durables are keyed by store, the others (a router's route durable on an
    endpoint too) by destination."""
    if route.endpoint and not is_endpoint_route(route, name):
        return content_durable_key(route.store.name, name)
    return durable_key(route.name, name)


async def _apply_or_commit(term: LeaderTerm, store: Store, op: rpb.Operation) -> object:
    if store.replicated:
        result, _ = await term.commit(op)
        return result
    state: StateMachine = term.local_state
    return state.apply_op(op)
