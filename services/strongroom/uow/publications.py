"""Durable publish and subscribe (EntireX's): durable subscriptions to topics, and the delivery
of publications to their subscribers, on the leader.

A UOW sent to a durable topic is a publication (`UowFront` sends it like any UOW); the table
gives it the topic's durable subscriptions as readers at its commit. This front subscribes and
unsubscribes, lists the subscriptions, hands a subscriber its next publication, and ends the
subscriptions unused past their expiration. Subscriptions of a replicated store always go
through the log: they must outlive the leader to say who is eligible for what.
"""

from __future__ import annotations

import logging

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import NotSubscribed, PersistenceUnavailable
from strongroom.persistence.log import PUBLICATION_LOG_FORMAT
from strongroom.persistence.state import StateMachine
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Destination, Route
from strongroom.uow.leader import UowLeader
from strongroom.uow.model import OpKind, Refused, Subscribed, Subscription, Uow
from strongroom.uow.steps import (
    UowScope,
    apply,
    check_name,
    let_go,
    make_op,
)
from strongroom.uow.values import ReceivedUow, SubscriptionView

__all__ = ["PublicationFront"]

log = logging.getLogger(__name__)


class PublicationFront:
    """Durable subscriptions and the delivery of publications."""

    def __init__(self, scope: UowScope) -> None:
        self._scope = scope

    async def deliver(self, term: LeaderTerm, leader: UowLeader, route: Route, rule: Destination,
                      subscriber: str) -> ReceivedUow | None:
        """The oldest publication of the topic the subscriber has still to receive, now
        DELIVERED to it (None: none)."""
        replicated = route.store.replicated
        if replicated:
            term.require_store()
        state = term.state_for(replicated)
        topic = route.name
        subscription = state.uows.subscriptions.get((topic, subscriber))
        if subscription is None:
            raise NotSubscribed(f"{subscriber!r} has no durable subscription to {topic!r} (subscribe first; an "
                                f"unused subscription ends after the topic's subscription expiration)")
        if leader.clock() - subscription.last_used > subscription.expiration / 2:
            # Waiting counts as using it: marked used before half its expiration has gone.
            await self._subscribe(term, leader, route, rule, subscriber)
        skip = {uow_id for uow_id, name in leader.delivering_to if name == subscriber}
        while True:
            uow = state.uows.next_publication(topic, subscriber, skip)
            if uow is None:
                return None
            if uow.definition.persistent or uow.id in leader.held:
                break
            # Its messages went with an earlier leader; DISCARD is on its way.
            skip.add(uow.id)
        key = (uow.id, subscriber)
        leader.delivering_to.add(key)
        try:
            result, _ = await apply(term, replicated, make_op(leader, OpKind.DELIVER, [uow.id], receiver=subscriber))
        finally:
            leader.delivering_to.discard(key)
        if not isinstance(result, Uow):
            return None
        reader = (result.readers or {})[subscriber]
        messages = result.messages if result.messages is not None else leader.held.get(result.id, [])
        return ReceivedUow(result.id, topic, list(messages), reader.backouts, result.user_status or b"")

    async def subscribe(self, topic: str, subscriber: str) -> tuple[SubscriptionView, bool]:
        """Subscribe durably to a durable topic (again: mark the subscription used). The
        subscription, and whether it is new."""
        route, rule = self._scope.topic(topic)
        check_name("subscriber", subscriber)
        term, leader = self._scope.current()
        if route.store.replicated:
            # Subscribing again (marking it used) consumes; a new subscription is a new record.
            if (route.name, subscriber) in term.state.uows.subscriptions:
                term.require_store()
            else:
                term.require_new()
            await self._scope.require_format(term, PUBLICATION_LOG_FORMAT)
        subscribed = await self._subscribe(term, leader, route, rule, subscriber)
        return self._view(term.state_for(route.store.replicated), subscribed.subscription), subscribed.created

    async def _subscribe(self, term: LeaderTerm, leader: UowLeader, route: Route, rule: Destination,
                         subscriber: str) -> Subscribed:
        op = make_op(leader, OpKind.SUBSCRIBE, [])
        op.subscriptions.append(rpb.UowSubscriptionState(
            store=route.store.name, topic=route.name, subscriber=subscriber,
            expiration=rule.units_of_work.subscription_expiration_seconds))
        result, _ = await apply(term, route.store.replicated, op)
        if not isinstance(result, Subscribed):
            raise PersistenceUnavailable(f"unexpected result of a subscription: {result!r}")
        return result

    async def unsubscribe(self, topic: str, subscriber: str) -> int:
        """End a durable subscription; how many publications it left (released)."""
        route, _ = self._scope.topic(topic)
        check_name("subscriber", subscriber)
        term, leader = self._scope.current()
        replicated = route.store.replicated
        if replicated:
            term.require_store()
            await self._scope.require_format(term, PUBLICATION_LOG_FORMAT)
        op = make_op(leader, OpKind.UNSUBSCRIBE, [])
        op.subscriptions.append(rpb.UowSubscriptionState(store=route.store.name, topic=route.name,
                                                         subscriber=subscriber))
        result, _ = await apply(term, replicated, op)
        if isinstance(result, Refused):
            raise result.error()
        assert isinstance(result, int)
        let_go(term, leader)
        return result

    def subscriptions(self, topic: str = "") -> tuple[list[SubscriptionView], float]:
        """The durable subscriptions (of one topic, or all), and the pseudo-clock now."""
        replicated = self._scope.topic(topic)[0].store.replicated if topic else True
        term, leader = self._scope.current()
        if replicated:
            term.require_store()  # the list reads the persistent store's subscriptions
        views = [self._view(term.state_for(replicated), sub)
                 for replicated in (True, False) for sub in term.state_for(replicated).uows.subscribers(topic)]
        views.sort(key=lambda v: (v.topic, v.subscriber))
        return views, leader.clock()

    @staticmethod
    def _view(state: StateMachine, sub: Subscription) -> SubscriptionView:
        return SubscriptionView(sub.topic, sub.store, sub.subscriber, sub.subscribed_at, sub.last_used,
                                sub.expires_at(), len(state.uows.pending_for(sub.topic, sub.subscriber)))

    async def expire(self, term: LeaderTerm, leader: UowLeader, replicated: bool) -> None:
        """End the subscriptions unused past their expiration (the leader's timer)."""
        if replicated and term.store_unavailable:
            return  # no timeout processing on the persistent store while it is unavailable
        state = term.state_for(replicated)
        expired = state.uows.due_subscriptions(leader.clock())
        if not expired or (replicated and not term.membership.all_read(PUBLICATION_LOG_FORMAT)):
            return
        op = make_op(leader, OpKind.EXPIRE_SUBSCRIPTIONS, [])
        op.subscriptions.extend(sub.to_state() for sub in expired)
        ended, _ = await apply(term, replicated, op)
        if isinstance(ended, list) and ended:
            log.info("durable subscriptions unused past their expiration ended: %s",
                     ", ".join(f"{sub.subscriber} on {sub.topic}" for sub in ended))
            let_go(term, leader)
