"""The leader's side of units of work: senders, receivers, status queries, the pseudo-clock.

Everything arrives as domain values (`SendRequest`, names, ids), is checked here, and goes to
the current `LeaderTerm`: a UOW whose messages or status are persistent through the log (the
replicated state's `UowTable`), one with neither into the leader's own state (it goes with the
term, like a non-replicated store).

A UOW sent to a durable topic is a publication: the table gives it the topic's durable
subscriptions as readers at its commit, and each subscriber receives and settles it for itself
(`receive` and `settle` with the subscriber's name as receiver; `PublicationFront` in
publications.py subscribes and hands out publications). A publication of a replicated store
always goes through the log; its `persistent` and `persistent_status` keep their meaning (its
messages held by the leader only, its status dropped at completion).

What lives only on the leader, in the term's `UowLeader`:
- the messages added to an open UOW: they reach the log only with the sender's commit (one
  entry), so a UOW open when the leader changes cannot be committed on the next one: the new
  leader backs it out (ABANDON) and the sender gets UOW_ABORTED;
- the messages of committed UOWs that are not persistent: a new leader does not hold them and
  discards (DISCARD) those whose status is persistent;
- which UOWs are being delivered (a DELIVER in flight), and the receivers waiting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    InvalidArgument,
    MessageTooLarge,
    PersistenceUnavailable,
    StoreLimitExceeded,
    StrongroomError,
    UnknownUow,
    UowAborted,
    UowExists,
    UowStateError,
)
from strongroom.persistence.lifetimes import Resolver
from strongroom.persistence.log import PUBLICATION_LOG_FORMAT, UOW_LOG_FORMAT
from strongroom.persistence.messaging import Routes
from strongroom.persistence.publishing import check_message
from strongroom.persistence.state import StateMachine
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Destination, Route
from strongroom.uow.leader import OpenUow, UowLeader
from strongroom.uow.model import LIVE, OpKind, Refused, Uow, UowStatus
from strongroom.uow.publications import PublicationFront
from strongroom.uow.steps import (
    UowScope,
    apply,
    check_name,
    find,
    gone,
    make_op,
)
from strongroom.uow.values import (
    MAX_WAIT_SECONDS,
    Action,
    ReceivedUow,
    SenderStream,
    SendOutcome,
    SendRequest,
    Settlement,
    SettleOutcome,
    SubscriberView,
    UowChoices,
    UowView,
)

__all__ = ["MAX_USER_STATUS", "MAX_WAIT_SECONDS", "UowFront"]

log = logging.getLogger(__name__)

MAX_USER_STATUS = 32
# How often the leader looks for what is due (seconds of its pseudo-clock).
TIMER_POLL_SECONDS = 0.25


_SETTLE_OPS = {Settlement.COMMIT: OpKind.RECEIVER_COMMIT, Settlement.BACKOUT: OpKind.RECEIVER_BACKOUT,
               Settlement.CANCEL: OpKind.RECEIVER_CANCEL}


class UowFront:
    """Senders, receivers and status queries of units of work."""

    def __init__(self, routes: Routes, resolver: Resolver) -> None:
        self._routes = routes
        self._scope = UowScope(routes, resolver)
        self.publications = PublicationFront(self._scope)
        """Durable subscriptions and the delivery of publications."""

    # --- the term ------------------------------------------------------------------------------

    async def take_over(self, term: LeaderTerm) -> None:
        """A new term, before it serves: start its `UowLeader`, then settle what the previous
        leader held alone: open UOWs are backed out (what was added to them is gone), and
        committed UOWs with non-persistent messages are discarded (their messages are gone)."""
        leader = UowLeader(term)
        self._scope.leader = leader
        table = term.state.uows
        abandon = [u.id for u in table.uows.values() if u.status == UowStatus.RECEIVED]
        discard = [u.id for u in table.uows.values()
                   if u.status in LIVE and u.status != UowStatus.RECEIVED and not u.definition.persistent]
        if not abandon and not discard:
            return
        if not term.membership.all_read(UOW_LOG_FORMAT):
            log.warning("%d open and %d non-persistent units of work wait to be backed out or discarded until every "
                        "member reads log format %d", len(abandon), len(discard), UOW_LOG_FORMAT)
            return
        ops = [make_op(leader, kind, ids) for kind, ids in ((OpKind.ABANDON, abandon), (OpKind.DISCARD, discard))
               if ids]
        # The cluster's bookkeeping: written while the persistent store is unavailable too.
        fut = term.submit([rpb.Operation(uow=op) for op in ops], bookkeeping=True)
        if fut is not None:
            await fut
        log.info("units of work left by the previous leader: %d open ones backed out, %d non-persistent ones "
                 "discarded", len(abandon), len(discard))

    async def run(self, term: LeaderTerm) -> None:
        """While `term` lasts: time out what is due on the pseudo-clock (lifetimes,
        conversations, status lifetimes)."""
        while term.alive():
            leader = self._scope.leader
            if leader is None or leader.term is not term:
                return
            try:
                await self._time_out(term, leader)
            except StrongroomError as err:
                log.info("units-of-work timers: %s", err)
            await asyncio.sleep(TIMER_POLL_SECONDS)

    async def _time_out(self, term: LeaderTerm, leader: UowLeader) -> None:
        clock = leader.clock()
        # No timeout processing on the persistent store while it is unavailable (its clock stands).
        paused = term.store_unavailable
        abandoned = [uow_id for uow_id, opened in leader.open.items()
                     if opened.last_active + opened.conversation_timeout <= clock and not (opened.replicated and paused)]
        for uow_id in abandoned:
            opened = leader.open.pop(uow_id)
            await apply(term, opened.replicated, make_op(leader, OpKind.ABANDON, [uow_id]))
        for replicated in (False,) if paused else (True, False):
            state = term.state_for(replicated)
            for kind, ids in state.uows.due(clock).items():
                if replicated and not term.membership.all_read(UOW_LOG_FORMAT):
                    continue
                await apply(term, replicated, make_op(leader, kind, ids))
                for uow_id in ids:
                    if uow_id not in state.uows.uows or state.uows.uows[uow_id].final:
                        leader.held.pop(uow_id, None)
            await self.publications.expire(term, leader, replicated)

    # --- senders --------------------------------------------------------------------------------

    def open_stream(self) -> SenderStream:
        """A stream of sender requests, pinned to the serving term (NOT_LEADER and the like
        when this member does not serve)."""
        term, _ = self._scope.current()
        return SenderStream(term.epoch)

    def submit(self, stream: SenderStream, requests: Sequence[SendRequest]) -> list[asyncio.Future[SendOutcome]]:
        """Start a stream's requests, in order, at once; each future resolves with its outcome
        (or fails with its error). Whatever of them goes to the log without waiting (a whole
        UOW's commit does) is queued now, in order, so a batch of commits joins the same
        group-commit round: each request runs up to its commit before the next starts. A
        request for a UOW that an earlier request of the stream still works on waits for it."""
        started: list[asyncio.Future[SendOutcome]] = []
        for req in requests:
            before = stream.working.get(req.uow_id) if req.uow_id else None
            work = asyncio.ensure_future(self._stream_send(stream, req, before))
            if req.uow_id:
                stream.working[req.uow_id] = work
                work.add_done_callback(functools.partial(stream.done, req.uow_id))
            started.append(work)
        return started

    async def _stream_send(self, stream: SenderStream, req: SendRequest,
                           before: asyncio.Future[SendOutcome] | None) -> SendOutcome:
        if before is not None:
            await asyncio.wait([before])
        if stream.broken is not None:
            raise stream.broken
        try:
            return await self.send(req, stream.epoch)
        except StrongroomError as err:
            if err.retried_by_client and stream.broken is None:
                stream.broken = err
            raise

    async def send(self, req: SendRequest, epoch: int | None = None) -> SendOutcome:
        """A sender's request: open, add, and commit / back out / cancel, as it asks; `epoch`:
        refused unless the serving term is still that one (a stream's pin)."""
        route, rule = self._scope.destination(req.destination)
        if req.action not in (Action.NONE, Action.COMMIT, Action.BACKOUT, Action.CANCEL):
            raise InvalidArgument(f"unknown action {req.action!r}")
        if req.uow_id:
            check_name("uow_id", req.uow_id)
        if not req.open and not req.uow_id:
            raise InvalidArgument("uow_id is required unless the request opens a unit of work")
        _check_user_status(req.user_status)
        size = 0
        limit = route.store.max_message_bytes
        for i, message in enumerate(req.messages):
            check_message(message, f"message {i + 1}")
            n = message.ByteSize()
            if n > limit:
                raise MessageTooLarge(f"message {i + 1} has {n} bytes; store {route.store.name!r} takes at most {limit}")
            size += n
        term, leader = self._scope.current()
        if epoch is not None and term.epoch != epoch:
            raise PersistenceUnavailable("leadership changed during this stream of units of work; send what is "
                                         "unanswered again on a new stream")
        if req.open:
            return await self._open(term, leader, route, rule, req, size)
        return await self._continue(term, leader, route, req, size)

    async def _open(self, term: LeaderTerm, leader: UowLeader, route: Route, rule: Destination, req: SendRequest,
                    size: int) -> SendOutcome:
        if req.action == Action.CANCEL:
            raise InvalidArgument("a unit of work being opened cannot be cancelled; back it out instead")
        definition = self._definition(route, rule, req.choices)
        replicated = definition.persistent or definition.persistent_status or (
            definition.publication and route.store.replicated)
        if replicated:
            term.require_store()
            await self._scope.require_format(term, PUBLICATION_LOG_FORMAT if definition.publication else UOW_LOG_FORMAT)
        uow_id = req.uow_id or leader.new_id()
        known = find(term, uow_id)
        if known is not None or uow_id in leader.open or gone(term, uow_id):
            if req.action == Action.COMMIT and (known is None or known[0].status != UowStatus.RECEIVED):
                # A whole UOW sent again (the sender did not hear the answer): already stored.
                uow = known[0] if known is not None else None
                return SendOutcome(uow_id, uow.status if uow else UowStatus.ACCEPTED, uow.count if uow else 0,
                                   duplicate=True)
            raise UowExists(f"unit of work {uow_id!r} exists already")
        if replicated:
            # A new persistent UOW (a sender's retry of a stored one was answered above).
            term.require_new()
        self._check_room(route, size)
        if req.action == Action.COMMIT:
            op = make_op(leader, OpKind.COMMIT, [uow_id], definition=definition,
                          message_count=len(req.messages), message_bytes=size)
            if definition.persistent:
                op.messages.extend(req.messages)
            if req.user_status is not None:
                op.user_status = req.user_status
            if not definition.persistent:
                leader.held[uow_id] = list(req.messages)
            try:
                result, index = await apply(term, replicated, op)
                uow = _accepted(result)
            except BaseException:
                leader.held.pop(uow_id, None)
                raise
            return SendOutcome(uow_id, uow.status, uow.count, log_index=index)
        op = make_op(leader, OpKind.OPEN, [uow_id], definition=definition)
        if req.user_status is not None:
            op.user_status = req.user_status
        opened = OpenUow(replicated, list(req.messages), size, leader.clock(), definition.conversation_timeout)
        leader.open[uow_id] = opened
        try:
            result, index = await apply(term, replicated, op)
            uow = _accepted(result)
        except BaseException:
            leader.open.pop(uow_id, None)
            raise
        if req.action == Action.BACKOUT:
            return await self._continue(term, leader, route, SendRequest(req.destination, uow_id, action=Action.BACKOUT),
                                        0)
        return SendOutcome(uow_id, uow.status, len(opened.messages), log_index=index)

    async def _continue(self, term: LeaderTerm, leader: UowLeader, route: Route, req: SendRequest,
                        size: int) -> SendOutcome:
        uow_id = req.uow_id
        opened = leader.open.get(uow_id)
        known = find(term, uow_id)
        if known is None:
            if gone(term, uow_id):
                raise UowStateError(f"unit of work {uow_id!r} is complete")
            raise UnknownUow(f"no unit of work {uow_id!r} in cluster {self._routes.cluster_name} (its status "
                             f"lifetime may have ended, or, not persistent, it went with an earlier leader)")
        uow, replicated = known
        if replicated and (req.messages or req.action == Action.COMMIT):
            term.require_new()  # adding to or committing a sender's UOW produces
        elif replicated:
            term.require_store()  # backing out, cancelling, a user status consume
        if uow.destination != req.destination and uow.dead_lettered_from != req.destination:
            raise InvalidArgument(f"unit of work {uow_id!r} is on {uow.destination!r}, not {req.destination!r}")
        if opened is None and uow.status == UowStatus.RECEIVED or (
                uow.status == UowStatus.BACKEDOUT and (req.messages or req.action == Action.COMMIT)):
            raise UowAborted(f"unit of work {uow_id!r} was backed out before its sender committed it (backed out by "
                             f"its sender, its conversation timed out, or the leader changed): nothing of it is "
                             f"visible; send it again as a new unit of work")
        if (req.messages or req.action in (Action.COMMIT, Action.BACKOUT)) and opened is None:
            raise UowStateError(f"unit of work {uow_id!r} is {uow.status.name}; adding messages, committing "
                                f"and backing out need RECEIVED")
        if req.messages:
            assert opened is not None
            self._check_room(route, opened.size + size)
            opened.messages.extend(req.messages)
            opened.size += size
            opened.last_active = leader.clock()
        if req.action == Action.COMMIT:
            assert opened is not None
            op = make_op(leader, OpKind.COMMIT, [uow_id], message_count=len(opened.messages),
                          message_bytes=opened.size)
            if uow.definition.persistent:
                op.messages.extend(opened.messages)
            else:
                leader.held[uow_id] = opened.messages
            kind = OpKind.COMMIT
        elif req.action == Action.BACKOUT:
            op, kind = make_op(leader, OpKind.SENDER_BACKOUT, [uow_id]), OpKind.SENDER_BACKOUT
        elif req.action == Action.CANCEL:
            op, kind = make_op(leader, OpKind.SENDER_CANCEL, [uow_id]), OpKind.SENDER_CANCEL
        elif req.user_status is not None:
            op, kind = make_op(leader, OpKind.USER_STATUS, [uow_id]), OpKind.USER_STATUS
        else:
            return SendOutcome(uow_id, uow.status, len(opened.messages) if opened else uow.count)
        if req.user_status is not None:
            op.user_status = req.user_status
        try:
            result, index = await apply(term, replicated, op)
            done = _accepted(result)
        except BaseException:
            if kind == OpKind.COMMIT and not uow.definition.persistent:
                leader.held.pop(uow_id, None)
            if req.messages and opened is not None:
                # Refused (e.g. backed out by a disconnect while the term goes on): the request's
                # messages were not taken, so a retry of it adds them once.
                del opened.messages[-len(req.messages):]
                opened.size -= size
            raise
        if kind in (OpKind.COMMIT, OpKind.SENDER_BACKOUT):
            leader.open.pop(uow_id, None)
        if done.final:
            leader.held.pop(uow_id, None)
        return SendOutcome(uow_id, done.status, done.count if kind != OpKind.USER_STATUS or not opened
                           else len(opened.messages), log_index=index)

    def _definition(self, route: Route, rule: Destination, choices: UowChoices) -> rpb.UowDefinition:
        defaults = rule.units_of_work
        store = route.store
        persistent = _choose(choices.persistent, defaults.persistent, store.replicated)
        persistent_status = _choose(choices.persistent_status, defaults.persistent_status, store.replicated)
        if not store.replicated and (persistent or persistent_status):
            raise InvalidArgument(f"{route.name!r} is in non-replicated store {store.name!r}: its units of work "
                                  f"cannot be persistent, nor have a persistent status")
        lifetime = defaults.lifetime_seconds if choices.lifetime is None else choices.lifetime
        if not lifetime > 0:
            raise InvalidArgument(f"a lifetime must be more than 0 seconds, not {lifetime}")
        multiple = (defaults.status_lifetime_multiple if choices.status_lifetime_multiple is None
                    else choices.status_lifetime_multiple)
        if multiple < 1:
            raise InvalidArgument(f"a status lifetime multiple must be 1 or more, not {multiple}")
        definition = rpb.UowDefinition(
            store=store.name, destination=route.name, persistent=persistent, persistent_status=persistent_status,
            lifetime=lifetime, status_lifetime_multiple=multiple, backout_threshold=defaults.backout_threshold,
            conversation_timeout=defaults.conversation_timeout_seconds, publication=not route.queue)
        target = self._routes.realm.uow_dead_letter(rule)
        if target and defaults.backout_threshold and route.queue:
            dead = self._scope.resolver.resolve(target)
            definition.dead_letter_store = dead.store.name
            definition.dead_letter_destination = target
        return definition

    @staticmethod
    def _check_room(route: Route, size: int) -> None:
        store = route.store
        if store.max_bytes and size > store.max_bytes:
            raise StoreLimitExceeded(f"the unit of work has {size} bytes; store {store.name!r} holds at most "
                                     f"{store.max_bytes}")

    # --- receivers ------------------------------------------------------------------------------

    async def receive(self, destination: str, receiver: str, wait: float) -> ReceivedUow | None:
        """The oldest ACCEPTED UOW of a queue, now DELIVERED to `receiver`; on a durable topic,
        the oldest publication the subscriber `receiver` has still to receive. None when none
        came within `wait` seconds."""
        route, rule = self._scope.destination(destination)
        if not receiver:
            raise InvalidArgument("receiver is required (the name that settles the unit of work)")
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise InvalidArgument(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS:g}, not {wait:g}")
        deadline = time.monotonic() + wait
        while True:
            term, leader = self._scope.current()
            if route.queue:
                # While the persistent store is unavailable a receiver of a queue whose UOWs are
                # persistent (or one with a persistent UOW waiting) is refused at once, unless a
                # non-persistent one is there to take.
                refused: StrongroomError | None = None
                for replicated in (True, False):
                    state = term.state_for(replicated)
                    try:
                        got = await self._deliver(term, leader, state, replicated, destination, receiver)
                    except PersistenceUnavailable as err:
                        refused, got = err, None
                    if got is not None:
                        return got
                if refused is not None:
                    raise refused
                if route.store.replicated and _persistent_by_default(rule, route):
                    term.require_store()
            else:
                got = await self.publications.deliver(term, leader, route, rule, receiver)
                if got is not None:
                    return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(leader.arrival(destination).wait(), min(left, 1.0))
            except TimeoutError:
                pass

    async def _deliver(self, term: LeaderTerm, leader: UowLeader, state: StateMachine, replicated: bool,
                       destination: str, receiver: str) -> ReceivedUow | None:
        while True:
            uow = state.uows.next_accepted(destination, leader.delivering)
            if uow is None:
                return None
            if uow.definition.persistent or uow.id in leader.held:
                break
            # Its messages went with an earlier leader; DISCARD is on its way.
            leader.delivering.add(uow.id)
        if replicated:
            term.require_store()
        leader.delivering.add(uow.id)
        try:
            result, _ = await apply(term, replicated, make_op(leader, OpKind.DELIVER, [uow.id],
                                                                     receiver=receiver))
        finally:
            leader.delivering.discard(uow.id)
        if isinstance(result, Refused):
            return None
        assert isinstance(result, Uow)
        messages = result.messages if result.messages is not None else leader.held.get(result.id, [])
        return ReceivedUow(result.id, result.destination, list(messages), result.backouts, result.user_status or b"")

    async def settle(self, uow_id: str, receiver: str, settlement: str, user_status: bytes | None) -> SettleOutcome:
        """A receiver commits, backs out or cancels a UOW it holds."""
        if not uow_id:
            raise InvalidArgument("uow_id is required")
        if not receiver:
            raise InvalidArgument("receiver is required")
        kind = _SETTLE_OPS.get(settlement)
        if kind is None:
            raise InvalidArgument(f"settlement must be commit, backout or cancel, not {settlement!r}")
        _check_user_status(user_status)
        term, leader = self._scope.current()
        known = find(term, uow_id)
        if known is None:
            raise UnknownUow(f"no unit of work {uow_id!r} in cluster {self._routes.cluster_name}")
        uow, replicated = known
        if replicated:
            term.require_store()
        before = uow.destination
        op = make_op(leader, kind, [uow_id], receiver=receiver)
        if user_status is not None:
            op.user_status = user_status
        result, index = await apply(term, replicated, op)
        if isinstance(result, Refused) and result.reason in ("UOW_STATE", "UOW_NOT_HELD"):
            again = find(term, uow_id)
            if again is not None and _settled_by(again[0], receiver, kind):
                uow = again[0]
                if uow.publication:
                    reader = (uow.readers or {})[receiver]
                    return SettleOutcome(reader.status, reader.backouts, duplicate=True)
                return SettleOutcome(uow.status, uow.backouts, uow.destination if uow.dead_lettered_from else "",
                                     duplicate=True)
        done = _accepted(result)
        if done.final:
            leader.held.pop(uow_id, None)
        if done.publication:
            # Where this subscriber stands (the publication may wait for others).
            reader = (done.readers or {})[receiver]
            return SettleOutcome(reader.status, reader.backouts, "", index)
        moved = done.destination if done.destination != before else ""
        return SettleOutcome(done.status, done.backouts, moved, index)

    # --- status ---------------------------------------------------------------------------------

    def status(self, uow_id: str) -> UowView:
        """A UOW's status, by id."""
        if not uow_id:
            raise InvalidArgument("uow_id is required")
        term, leader = self._scope.current()
        known = find(term, uow_id)
        if known is None:
            raise UnknownUow(f"no unit of work {uow_id!r} in cluster {self._routes.cluster_name} (never sent, its "
                             f"status lifetime ended, its status was not persistent, or, not persistent, it went "
                             f"with an earlier leader)")
        uow = known[0]
        if known[1]:
            term.require_store()
        d = uow.definition
        opened = leader.open.get(uow_id)
        count, size = (len(opened.messages), opened.size) if opened is not None else (uow.count, uow.size)
        return UowView(uow.id, uow.status, uow.destination, uow.store, count, size, uow.backouts,
                       uow.user_status or b"", uow.receiver, d.persistent, d.persistent_status, d.lifetime,
                       d.status_lifetime_multiple, uow.created_at, uow.completed_at, uow.expires_at(),
                       leader.clock(), uow.dead_lettered_from, uow.publication,
                       tuple(SubscriberView(name, r.status, r.backouts) for name, r in sorted((uow.readers or {}).items())))

    def clock(self) -> float:
        """The pseudo-clock as the current term runs it (0: not leading)."""
        leader = self._scope.leader
        return leader.clock() if leader is not None and leader.term.alive() else 0.0


def _settled_by(uow: Uow, receiver: str, kind: OpKind) -> bool:
    """Whether `uow` is as `receiver`'s settlement `kind` leaves it: a receiver whose commit was
    applied but who never heard the answer (the leader died between the two, or the answer was
    lost) sends it again, to the new leader, and must hear that it is done, not UOW_STATE; a
    production broker's receiver retries a settlement it did not hear about. Told apart by
    what the UOW keeps: the receiver that last held it, and whether it was still held when it
    ended (a receiver cancel ends a DELIVERED UOW, with its delivery time; a sender cancel an
    ACCEPTED one, whose delivery time a backout cleared). A backout repeated while the UOW is
    offered again with this receiver as its last holder is answered as done too (given back is
    given back, whether by the backout or by its conversation's timeout); once another receiver
    took it, it is refused. A UOW whose status is not persistent is forgotten once complete: a
    repeated settlement of it is answered UNKNOWN_UOW."""
    if uow.publication:
        # A publication: this subscriber's own reader says where it stands.
        reader = (uow.readers or {}).get(receiver)
        if reader is None:
            return False
        if kind == OpKind.RECEIVER_COMMIT:
            return reader.status == UowStatus.PROCESSED
        if kind == OpKind.RECEIVER_CANCEL:
            return reader.status == UowStatus.CANCELLED
        return reader.status == UowStatus.ACCEPTED and reader.backouts > 0
    if uow.receiver != receiver:
        return False
    if kind == OpKind.RECEIVER_COMMIT:
        return uow.status == UowStatus.PROCESSED
    if kind == OpKind.RECEIVER_CANCEL:
        return uow.status == UowStatus.CANCELLED and uow.delivered_at > 0
    return uow.status == UowStatus.ACCEPTED and uow.backouts > 0


def _persistent_by_default(rule: Destination, route: Route) -> bool:
    """A destination's units of work are persistent (or of persistent status) unless a sender
    says otherwise."""
    defaults, replicated = rule.units_of_work, route.store.replicated
    return _choose(None, defaults.persistent, replicated) or _choose(None, defaults.persistent_status, replicated)


def _choose(asked: bool | None, default: bool | None, store_default: bool) -> bool:
    if asked is not None:
        return asked
    return store_default if default is None else default


def _check_user_status(user_status: bytes | None) -> None:
    if user_status is not None and len(user_status) > MAX_USER_STATUS:
        raise InvalidArgument(f"a user status has at most {MAX_USER_STATUS} bytes, not {len(user_status)}")


def _accepted(result: object) -> Uow:
    """The UOW an operation changed, or the error its refusal means."""
    if isinstance(result, Refused):
        raise result.error()
    if not isinstance(result, Uow):
        raise PersistenceUnavailable(f"unexpected result of a unit-of-work operation: {result!r}")
    return result


