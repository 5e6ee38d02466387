"""What a realm version decides about the durables of a cluster.

- **Static durables** (a store's `durables` in the realm) exist from the realm version on, so a
  last-value static durable holds the latest message (per key value) before any subscriber
  comes: the leader creates the ones missing with `CreateDurableOp`s.
- **Reachability.** A durable is named by its destination and kind of rule: a topic durable by
  topic and name, a queue's by the queue, an endpoint durable by store and name. When a realm
  version changes the rule of a destination to another kind (topic, queue or endpoint), moves
  it to another cluster, or removes it, subscriptions resolve to a different durable and the
  old one is out of reach. The leader suspends such durables (`SuspendDurablesOp`): they take
  no new messages, keep what they hold, show as unreachable in status, and are resumed when a
  later realm version reaches them again. Deleting one is an operator's decision
  (`strongroom durable delete`). A topic moved to another store of the same cluster keeps its
  durables (they take the new messages; status lists them under the store they were created
  in).
- **Route durables on endpoints.** A router's route durable (`sr.route.<neighbour>`, see
  docs/routing.md) opened on an endpoint of a routed store holds what waits to be forwarded of
  that endpoint only: it is a standard durable keyed by the endpoint and its name, as a topic
  durable is, not a store-wide content durable of the endpoint's template (`is_endpoint_route`).
  The realm reaches it while the name is an endpoint of a routed store.
- **Use and expiry.** A durable created on a topic or endpoint whose rule sets
  `durable_expiry_seconds` is deleted once it has been unused that long on the pseudo-clock:
  no subscriber attached and no acknowledgment. Its last use is replicated state
  (`Durable.last_used`, `Durable.attached`), written by the operations that use it (its
  creation and acknowledgments carry the leader's clock) and by `DurableUseOp`s the leader
  writes when a durable's first subscriber attaches or its last one goes. A durable with a
  subscriber attached is in use until the log says otherwise, so a new leader counts it unused
  only from when it leads (a failover delays an expiry, never brings it forward). Static
  durables, a queue's own durable and suspended durables never expire.

Pure functions over the realm and the durables: the leader (`StoreKeeper`) turns them into log
operations and status into its `unreachable` and `expires_in` columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import StrongroomError
from strongroom.persistence.state import Durable, content_durable_key, durable_key
from strongroom.realm.model import AckSync, Realm, Route, StaticDurable, Store, TemplateKind
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX

__all__ = ["TEMPLATE_KINDS", "ExpiryMemo", "UseChanges", "durable_expiry", "expires_in", "is_endpoint_route",
           "is_static", "kind_word", "static_durable_ops", "unreachable_reason", "reach_changes", "use_changes"]

TEMPLATE_KINDS = {TemplateKind.STANDARD: cpb.DURABLE_KIND_STANDARD, TemplateKind.SHARED: cpb.DURABLE_KIND_SHARED,
                  TemplateKind.LAST_VALUE: cpb.DURABLE_KIND_LASTVALUE}


def kind_word(kind: int) -> str:
    """A durable kind in the realm's words (standard, shared, last-value), for messages."""
    return next((t.value for t, k in TEMPLATE_KINDS.items() if k == kind), str(kind))


def is_endpoint_route(route: Route, name: str) -> bool:
    """A router's route durable on an endpoint of a routed store: a standard durable of that
    endpoint's messages, keyed by endpoint and name (not a store-wide content durable)."""
    return route.endpoint and route.store.routed and name.startswith(ROUTE_DURABLE_PREFIX)


def _ack_sync(mode: AckSync) -> int:
    return cpb.ACK_SYNC_MODE_SYNC if mode == AckSync.SYNC else cpb.ACK_SYNC_MODE_ASYNC


def _static_create(realm: Realm, store: Store, d: StaticDurable) -> rpb.CreateDurableOp:
    if d.endpoint is not None:
        route = realm.route(d.endpoint)
        template = route.template
        assert template is not None  # validated: an endpoint of this store
        return rpb.CreateDurableOp(store=store.name, destination=d.endpoint, durable=d.name,
                                   kind=TEMPLATE_KINDS[template.kind], key_field=template.key_field or "",
                                   content=True, ack_sync_mode=_ack_sync(template.ack_mode))
    assert d.destination is not None  # validated: a topic of this store
    route = realm.route(d.destination)
    return rpb.CreateDurableOp(store=store.name, destination=d.destination, durable=d.name,
                               kind=TEMPLATE_KINDS[d.kind or TemplateKind.STANDARD], key_field=d.key_field or "",
                               ack_sync_mode=_ack_sync(route.ack_mode))


def static_durable_ops(realm: Realm, cluster: str, existing: dict[str, Durable],
                       replicated: bool) -> list[rpb.Operation]:
    """Creates for the static durables of the cluster's replicated (or non-replicated) stores
    that `existing` does not hold yet."""
    ops = []
    for store in realm.stores:
        if not store.served_by(cluster) or store.replicated != replicated:
            continue
        for d in store.durables:
            key = content_durable_key(store.name, d.name) if d.endpoint else durable_key(d.destination or "", d.name)
            if key not in existing:
                ops.append(rpb.Operation(create_durable=_static_create(realm, store, d)))
    return ops


def unreachable_reason(durable: Durable, realm: Realm, cluster: str) -> str:
    """Why subscriptions under `realm` cannot reach the durable ('' when they can)."""
    if durable.content:
        for endpoint in realm.endpoints:
            if endpoint.store != durable.store:
                continue
            template = realm.template(endpoint.template)
            if template is not None and TEMPLATE_KINDS[template.kind] == durable.kind:
                return ""
        return (f"no endpoint of store {durable.store!r} creates {kind_word(durable.kind)} durables any more "
                f"(it was opened through endpoint {durable.destination!r})")
    try:
        route = realm.route(durable.destination)
    except StrongroomError:
        return f"no rule of the realm maps {durable.destination!r} any more"
    if not route.store.served_by(cluster):
        return f"{durable.destination!r} now maps to store {route.store.name!r} of {route.store.where}"
    if route.endpoint and not is_endpoint_route(route, durable.name):
        return f"{durable.destination!r} is now an endpoint"
    if route.queue != durable.queue:
        return f"{durable.destination!r} is now a {'queue' if route.queue else 'topic'}"
    return ""


def reach_changes(durables: Iterable[Durable], realm: Realm, cluster: str) -> list[rpb.Operation]:
    """The SuspendDurablesOps that make the durables' suspension follow `realm`: suspend the
    ones it no longer reaches, resume the suspended ones it reaches again."""
    suspend: list[str] = []
    resume: list[str] = []
    for durable in durables:
        reachable = not unreachable_reason(durable, realm, cluster)
        if durable.suspended and reachable:
            resume.append(durable.key)
        elif not durable.suspended and not reachable:
            suspend.append(durable.key)
    ops = []
    if resume:
        ops.append(rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=resume, suspended=False)))
    if suspend:
        ops.append(rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=suspend, suspended=True)))
    return ops


def is_static(durable: Durable, realm: Realm) -> bool:
    """Declared in the realm (a store's `durables`): a topic durable by topic and name, an
    endpoint durable (store-wide) by name."""
    store = realm.store(durable.store)
    where = None if durable.content else durable.destination
    return store is not None and any((None if d.endpoint else d.destination) == where and d.name == durable.name
                                     for d in store.durables)


ExpiryMemo = dict[tuple[str, str, bool, int], float]
"""What `durable_expiry` found of the rules of one realm, by (store, destination, content,
kind): durables of one destination share it, and resolving a rule (globs) is the costly part."""


def durable_expiry(durable: Durable, realm: Realm, cluster: str, memo: ExpiryMemo | None = None) -> float:
    """Pseudo-clock seconds unused after which the durable expires (0: never): the
    `durable_expiry_seconds` of the destination or endpoint it was created on. Never a queue's
    own durable, a static durable, a suspended one or one the realm no longer reaches. `memo`:
    kept by a caller that asks for many durables under one realm."""
    if durable.queue or durable.suspended or is_static(durable, realm):
        return 0.0
    key = (durable.store, durable.destination, durable.content, durable.kind)
    found = memo.get(key) if memo is not None else None
    if found is None:
        found = 0.0
        if not unreachable_reason(durable, realm, cluster):
            try:
                found = realm.route(durable.destination).rule.durable_expiry_seconds
            except StrongroomError:
                pass
        if memo is not None:
            memo[key] = found
    return found


def expires_in(durable: Durable, expiry: float, in_use: bool, clock: float) -> float | None:
    """Pseudo-clock seconds at `clock` before the durable expires if it stays unused (0: due);
    None while it does not expire (no expiry, in use, its last use not known yet)."""
    if not expiry or in_use or durable.attached or not durable.last_used:
        return None
    return max(0.0, expiry - durable.idle(clock))


class UseChanges(NamedTuple):
    """What the leader writes about the durables' use (`use_changes`)."""

    attached: list[str]
    """Keys of durables a subscriber attached to (a `DurableUseOp`, attached)."""
    released: list[str]
    """Keys of durables used until now and no longer in use, or whose last use is not known
    yet (a `DurableUseOp`, not attached: their last use is now)."""
    expired: list[tuple[str, float]]
    """(key, expiry) of durables unused for their expiry (`DeleteDurableOp` with its expiry)."""


def use_changes(durables: Iterable[Durable], in_use: Callable[[str], bool], used: set[str],
                expiry_of: Callable[[Durable], float], clock: float) -> UseChanges:
    """At pseudo-clock `clock`, given which durables have a subscriber now (`in_use`) and which
    had one attach or go since the last call (`used`): the durables to mark attached, the ones
    whose last use is now, and the ones to expire."""
    changes = UseChanges([], [], [])
    for d in durables:
        if in_use(d.key):
            if not d.attached:
                changes.attached.append(d.key)
        elif d.attached or not d.last_used or d.key in used:
            changes.released.append(d.key)
        else:
            expiry = expiry_of(d)
            if expires_in(d, expiry, False, clock) == 0.0:
                changes.expired.append((d.key, expiry))
    return changes
