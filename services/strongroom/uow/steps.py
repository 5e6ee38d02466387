"""What every front of units of work does the same way: find the current term and its
`UowLeader`, resolve a queue or a durable topic, wait for the log format an operation needs,
stamp an operation with the pseudo-clock and apply it (through the log, or into the leader's own
state), find a UOW by id, and let go of messages the leader no longer needs."""

from __future__ import annotations

import asyncio
import re
import time

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    InvalidArgument,
    LogFormatPending,
    PersistenceUnavailable,
    UnknownDestination,
)
from strongroom.persistence.lifetimes import Resolver
from strongroom.persistence.log import UOW_LOG_FORMAT
from strongroom.persistence.messaging import Routes
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Destination, Route
from strongroom.uow.leader import UowLeader
from strongroom.uow.model import OpKind, Uow
from strongroom.wire import OPERATION_UOW, length_delimited

__all__ = ["FORMAT_WAIT_SECONDS", "UowScope", "apply", "check_name", "find", "gone", "let_go", "make_op"]

# How long a request waits for every member's registration of a log format before it is refused.
FORMAT_WAIT_SECONDS = 5.0
_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class UowScope:
    """What the fronts reach through: the cluster's routes, the destination resolver, and the
    `UowLeader` of the current term (set by `UowFront.take_over`)."""

    def __init__(self, routes: Routes, resolver: Resolver) -> None:
        self.routes = routes
        self.resolver = resolver
        self.leader: UowLeader | None = None

    def current(self) -> tuple[LeaderTerm, UowLeader]:
        """The serving term and its UowLeader (NOT_LEADER and the like otherwise)."""
        term = self.routes.require_leader()
        leader = self.leader
        if leader is None or leader.term is not term:
            raise PersistenceUnavailable("the leader is taking over the units of work; retry")
        return term, leader

    def destination(self, destination: str) -> tuple[Route, Destination]:
        """A queue, or a durable topic (publications)."""
        if not destination:
            raise InvalidArgument("destination is required (a queue, or a durable topic)")
        route = self.resolver.resolve(destination)
        if route.store.routed:
            # Refused, not kept local: a UOW commits atomically in one cluster and its status
            # (receiver, readers, settlements) is that cluster's replicated state, which no other
            # cluster could share (docs/routing.md).
            raise UnknownDestination(f"{destination!r} maps to routed store {route.store.name!r}; units of work are "
                                     f"not routed between clusters: send them to a queue or a durable topic of a "
                                     f"store of one cluster")
        if route.endpoint:
            raise UnknownDestination(f"{destination!r} is an endpoint; units of work go to queues, publications to "
                                     f"durable topics")
        assert isinstance(route.rule, Destination)
        if not route.queue and not route.rule.units_of_work.durable:
            raise UnknownDestination(f"{destination!r} is a topic that is not durable; publications go to topics "
                                     f"whose realm rule says `units_of_work: {{durable: true}}`")
        return route, route.rule

    def topic(self, topic: str) -> tuple[Route, Destination]:
        """A durable topic."""
        if not topic:
            raise InvalidArgument("topic is required (a durable topic)")
        route, rule = self.destination(topic)
        if route.queue:
            raise UnknownDestination(f"{topic!r} is a queue; durable subscriptions are to durable topics")
        return route, rule

    async def require_format(self, term: LeaderTerm, fmt: int = UOW_LOG_FORMAT) -> None:
        """Refused (LOG_FORMAT_PENDING) while a member does not register log format `fmt`. A
        leader that has just started may not have read every registration yet, so it waits for
        them a moment first."""
        deadline = time.monotonic() + FORMAT_WAIT_SECONDS
        while not term.membership.all_read(fmt):
            if time.monotonic() >= deadline:
                what = "units of work" if fmt == UOW_LOG_FORMAT else "publications and durable subscriptions"
                raise LogFormatPending(f"{what} need log format {fmt}, and not every member of "
                                       f"{self.routes.cluster_name} reads it yet; retry once all run this version")
            await asyncio.sleep(0.1)


def make_op(leader: UowLeader, kind: OpKind, ids: list[str], **fields: object) -> rpb.UowOp:
    """An operation stamped with the leader's pseudo-clock."""
    return rpb.UowOp(clock=leader.clock(), kind=int(kind), uow_ids=ids, **fields)  # type: ignore[arg-type]


async def apply(term: LeaderTerm, replicated: bool, op: rpb.UowOp) -> tuple[object, int]:
    """Through the log (replicated) or into the leader's own state: the result and the log
    index (0: not replicated)."""
    if replicated:
        # The Operation as bytes around the serialised op: `rpb.Operation(uow=op)` would copy
        # the op, with a commit's every message, before serialising it.
        return await term.commit_raw(length_delimited(OPERATION_UOW, op.SerializeToString()))
    return term.local_state.apply_op(rpb.Operation(uow=op)), 0


def find(term: LeaderTerm, uow_id: str) -> tuple[Uow, bool] | None:
    """A UOW by id, and whether it is in the replicated state."""
    for replicated in (True, False):
        uow = term.state_for(replicated).uows.uows.get(uow_id)
        if uow is not None:
            return uow, replicated
    return None


def gone(term: LeaderTerm, uow_id: str) -> bool:
    """A complete UOW without persistent status whose id is still remembered."""
    return any(uow_id in term.state_for(r).uows.gone for r in (True, False))


def let_go(term: LeaderTerm, leader: UowLeader) -> None:
    """Messages the leader holds for UOWs now complete are let go (a commit still in flight is
    neither known nor gone: kept)."""
    for uow_id in list(leader.held):
        known = find(term, uow_id)
        if (known is not None and known[0].final) or gone(term, uow_id):
            del leader.held[uow_id]


def check_name(what: str, name: str) -> None:
    """An id or a subscriber's name: 1 to 64 characters from A-Z a-z 0-9 . _ -."""
    if not _ID_RE.match(name):
        raise InvalidArgument(f"{what} {name[:80]!r} must be 1 to 64 characters from A-Z a-z 0-9 . _ -")
