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

Pure functions over the realm and the durables: the leader (`StoreKeeper`) turns them into log
operations and status into its `unreachable` column.
"""

from __future__ import annotations

from collections.abc import Iterable

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import StrongroomError
from strongroom.persistence.state import Durable, content_durable_key, durable_key
from strongroom.realm.model import AckSync, Realm, StaticDurable, Store, TemplateKind

__all__ = ["TEMPLATE_KINDS", "kind_word", "static_durable_ops", "unreachable_reason", "reach_changes"]

TEMPLATE_KINDS = {TemplateKind.STANDARD: cpb.DURABLE_KIND_STANDARD, TemplateKind.SHARED: cpb.DURABLE_KIND_SHARED,
                  TemplateKind.LAST_VALUE: cpb.DURABLE_KIND_LASTVALUE}


def kind_word(kind: int) -> str:
    """A durable kind in the realm's words (standard, shared, last-value), for messages."""
    return next((t.value for t, k in TEMPLATE_KINDS.items() if k == kind), str(kind))


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
        if store.cluster != cluster or store.replicated != replicated:
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
    if route.store.cluster != cluster:
        return f"{durable.destination!r} now maps to store {route.store.name!r} of cluster {route.store.cluster!r}"
    if route.endpoint:
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
