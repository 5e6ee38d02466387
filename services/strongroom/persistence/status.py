"""A member's view of its cluster, as typed values (the admin servicer turns them into protos)."""

from __future__ import annotations

from dataclasses import dataclass, field

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.errors import InvalidArgument, StrongroomError, UnknownStore
from strongroom.persistence.config import Role
from strongroom.persistence.dispatcher import Dispatcher
from strongroom.persistence.durables import (
    ExpiryMemo,
    durable_expiry,
    expires_in,
    is_static,
    unreachable_reason,
)
from strongroom.persistence.lifetimes import store_config
from strongroom.persistence.log import LIFETIMES_LOG_FORMAT
from strongroom.persistence.matcher import matcher_text
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.persistence.state import Durable, StateMachine
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import AckSync, Realm, Store

__all__ = ["ClusterStatus", "DurableList", "DurableStatus", "MemberStatus", "OriginMarkStatus", "StoreStatus",
           "cluster_status", "durable_list", "origin_mark_list"]


@dataclass(frozen=True)
class MemberStatus:
    """One member, as this member sees it."""

    name: str
    address: str
    match_index: int
    """Leader's view: highest log index known stored on the member (this member: its last)."""
    reachable: bool
    replication: str
    """How a leader sends it appends: "link", "grpc", or "" (this member, or not registered)."""
    cannot_store: str = ""
    """Why it cannot write its storage ("": it can, or not known): this member's own; a leader's
    view of a follower, from its last append answer."""
    cannot_store_since: float = 0.0
    voter: bool = True
    """Its promise and acknowledgments count (False: being added, or removed)."""


@dataclass(frozen=True)
class DurableStatus:
    """One durable of a store."""

    name: str
    destination: str
    kind: int
    pending_messages: int
    pending_bytes: int
    unacked: int
    subscribers: int
    matcher: str
    key_field: str
    ack_sync_mode: int
    content: bool
    refused: int = 0
    """Acks, naks and terms of its subscribers this leader refused."""
    unreachable_reason: str = ""
    """Why the realm in force no longer reaches it ("": it does)."""
    static: bool = False
    """Declared in the realm (a store's `durables`)."""
    store: str = ""
    last_used: float = 0.0
    """Its last use on the pseudo-clock (0: not known yet)."""
    attached: bool = False
    """A subscriber is attached, as the log says (every member knows it)."""
    expiry_seconds: float = 0.0
    """Unused this long on the pseudo-clock, it is deleted (0: never)."""
    expires_in: float | None = None
    """Pseudo-clock seconds until it expires if it stays unused; None: it does not now."""
    content_matcher: cpb.ContentMatcher | None = None
    """Its matcher as conditions (`matcher` is the text of it)."""


@dataclass(frozen=True)
class DurableList:
    """Every durable of the cluster (or of a store, or a destination), as the leader sees it."""

    clock: float
    """The leader's pseudo-clock now (`DurableStatus.last_used` is on it)."""
    durables: list[DurableStatus]


@dataclass(frozen=True)
class OriginMarkStatus:
    """The mark of one origin cluster and destination of a routed store: the highest origin
    sequence of the messages forwarded from there that the state holds as stored."""

    cluster: str
    destination: str
    sequence: int
    stored_at: float
    """Unix seconds on the leader when the mark moved there."""


@dataclass(frozen=True)
class StoreStatus:
    """One store of the cluster, with its realm settings."""

    name: str
    replicated: bool
    messages: int
    bytes: int
    durables: list[DurableStatus]
    cluster: str
    storage: str
    publisher_mode: str
    max_messages: int
    max_bytes: int
    limit_policy: int
    maps: bool
    routed: bool
    max_message_bytes: int
    map_count: int
    swapped_messages: int
    uows: int = 0
    """Units of work of any status (the non-persistent ones only on the leader)."""
    uows_pending: int = 0
    """Committed and not settled (ACCEPTED or DELIVERED)."""
    uow_messages: int = 0
    uow_bytes: int = 0
    origin_marks: list[OriginMarkStatus] = field(default_factory=list)
    """A routed store's origin marks (by destination and cluster)."""


@dataclass(frozen=True)
class ClusterStatus:
    """This member's view of its cluster."""

    cluster: str
    member: str
    role: Role
    leader: str
    leader_address: str
    epoch: int
    commit_index: int
    last_index: int
    applied_index: int
    snapshot_index: int
    storage: str
    realm_version: int
    synced: bool
    indexes_on_disk: bool
    memory_budget_bytes: int
    memory_payload_bytes: int
    apply_stopped: str
    realm_service: str = ""
    """The realm service's address as registered in etcd ("" while none is)."""
    members: list[MemberStatus] = field(default_factory=list)
    stores: list[StoreStatus] = field(default_factory=list)
    uow_clock: float = 0.0
    """The units-of-work pseudo-clock as this member applied it."""
    standby: bool = False
    """This member belongs to the cluster's disaster-recovery standby set."""
    primary_commit_index: int = 0
    """A standby leader: the primary's commit index as the DR service last reported it."""
    seconds_behind_primary: float = 0.0
    """A standby leader: seconds since it last held everything the primary had committed."""
    messages_behind_primary: int = 0
    """A standby leader: messages the primary had stored (as last reported) that it has not."""
    dr_role: str = "primary"
    """The site's DR role for the cluster: primary, standby or fenced."""
    generation: int = 0
    """The site's DR generation (the high bits of its epochs)."""
    newer_generation: int = 0
    """A fenced site: the generation of the primary that superseded it."""
    dr_since_index: int = 0
    """The last index both sites' logs share, once known (0: not)."""
    store_damage: str = ""
    """Why this member's store was moved aside at start (damaged), or ""."""
    dedup_producers: int = 0
    """Producer ids whose deduplication windows the replicated state holds."""
    events_published_index: int = 0
    """The last log index whose store events are published, as this member knows it (the
    leader: its own publishing; 0 while the cluster's event log is off)."""
    metrics_url: str = ""
    """Where Prometheus scrapes this member's metrics ("": its endpoint is off)."""
    voters: tuple[str, ...] = ()
    """The members whose promises and acknowledgments count now."""
    membership_change: str = ""
    """The leader's membership change under way ("": none, or not the leader)."""


def _ack_sync_mode(durable: Durable, dispatcher: Dispatcher | None, realm: Realm) -> int:
    """The acknowledgment mode in effect for a durable: its newest open subscription's; with none
    open, the one it was created with; a durable created without one (a queue's own, made by its
    first publish) takes its destination's default, as a subscriber that does not choose does."""
    mode = dispatcher.ack_sync_mode(durable.key) if dispatcher is not None else 0
    if mode or durable.ack_sync_mode:
        return mode or durable.ack_sync_mode
    try:
        default = realm.route(durable.destination).ack_mode
    except StrongroomError:  # the realm no longer routes it
        return cpb.ACK_SYNC_MODE_UNSPECIFIED
    return cpb.ACK_SYNC_MODE_SYNC if default == AckSync.SYNC else cpb.ACK_SYNC_MODE_ASYNC


def _durables(state: StateMachine, store: Store, dispatcher: Dispatcher | None, realm: Realm,
              clock: float | None, cluster: str, destination: str = "") -> list[DurableStatus]:
    """The durables of a store (created on `destination`, if given). `clock`: the pseudo-clock
    now, None while durables do not expire (a member does not read log format 5 yet)."""
    durables = []
    memo: ExpiryMemo = {}
    for d in state.durables_of_store(store.name):
        if destination and d.destination != destination:
            continue
        held = (1 if d.last_value_seq else 0) + len(d.last_values)
        subscribers = dispatcher.subscribers(d.key) if dispatcher else 0
        expiry = durable_expiry(d, realm, cluster, memo)
        durables.append(DurableStatus(
            name=d.name, destination=d.destination, kind=d.kind,
            pending_messages=len(d.pending) if d.kind != cpb.DURABLE_KIND_LASTVALUE else held,
            pending_bytes=d.pending_bytes,
            unacked=dispatcher.unacked(d.key) if dispatcher else 0, subscribers=subscribers,
            matcher=matcher_text(d.matcher), key_field=d.key_field, ack_sync_mode=_ack_sync_mode(d, dispatcher, realm),
            content=d.content, refused=dispatcher.refusals(d.key) if dispatcher else 0,
            unreachable_reason=unreachable_reason(d, realm, cluster), static=is_static(d, realm),
            store=store.name, last_used=d.last_used, attached=d.attached, expiry_seconds=expiry,
            expires_in=expires_in(d, expiry, subscribers > 0, clock) if clock is not None else None,
            content_matcher=d.matcher))
    return durables


def _clock(replica: Replica, membership: Membership, term: LeaderTerm | None) -> float | None:
    """The pseudo-clock durable expiry reads: the leader's running one, else the applied one;
    None while some member does not read log format 5 (nothing expires)."""
    if term is not None:
        return term.lifetimes_clock()
    return replica.state.clock if membership.all_read(LIFETIMES_LOG_FORMAT) else None


def durable_list(replica: Replica, membership: Membership, term: LeaderTerm, realm: Realm, store: str = "",
                 destination: str = "") -> DurableList:
    """Every durable of the cluster's stores as the serving leader (`term`) sees it; only those
    of `store` and created on `destination` when given (UnknownStore: no such store here)."""
    cluster = membership.cluster.name
    stores = [s for s in realm.stores if s.served_by(cluster)]
    if store and all(s.name != store for s in stores):
        raise UnknownStore(f"no store {store!r} in cluster {cluster}; its stores: "
                           f"{', '.join(s.name for s in stores) or '(none)'}")
    clock = _clock(replica, membership, term)
    durables = []
    for s in stores:
        if not store or s.name == store:
            durables += _durables(term.state_for(s.replicated), s, term.dispatcher, realm, clock, cluster, destination)
    return DurableList(term.clock(), durables)


def _origin_marks(state: StateMachine, store: str, destination: str = "") -> list[OriginMarkStatus]:
    """A store's origin marks in `state` (only those of `destination`, if given), by destination
    and origin cluster."""
    return [OriginMarkStatus(cluster, dest, mark.sequence, mark.stored_at)
            for (cluster, dest), mark in sorted(state.origin_marks.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if mark.store == store and (not destination or dest == destination)]


def origin_mark_list(term: LeaderTerm, realm: Realm, cluster: str, store: str = "",
                     destination: str = "") -> list[OriginMarkStatus]:
    """The origin marks of the cluster's routed stores as the serving leader (`term`) sees them;
    only those of `store` and `destination` when given (UnknownStore: no such store here;
    InvalidArgument: a store that is not routed to another cluster, which nothing is forwarded
    to)."""
    routed = realm.routed_stores(cluster)
    if store:
        known = realm.store(store)
        if known is None or not known.served_by(cluster):
            here = [s.name for s in realm.stores if s.served_by(cluster)]
            raise UnknownStore(f"no store {store!r} in cluster {cluster}; its stores: {', '.join(here) or '(none)'}")
        if all(s.name != store for s in routed):
            raise InvalidArgument(f"store {store!r} is not routed to another cluster: nothing is forwarded to it, "
                                  f"it has no origin marks; routed stores of {cluster}: "
                                  f"{', '.join(s.name for s in routed) or '(none)'}")
        routed = [known]
    marks: list[OriginMarkStatus] = []
    for s in routed:
        marks += _origin_marks(term.state_for(s.replicated), s.name, destination)
    return marks


def cluster_status(replica: Replica, membership: Membership, term: LeaderTerm | None, realm: Realm,
                   realm_version: int, leader: tuple[str, str, int] | None, realm_service: str = "") -> ClusterStatus:
    """This member's view: its replica, its term (if it leads) and the realm in force.
    `leader`: (member, address, epoch) of the leader it knows of."""
    me = membership.member
    members = []
    voters = membership.voters
    for name in membership.everyone():
        rep = term.replicators.get(name) if term is not None else None
        cannot, since = "", 0.0
        if name == me:
            match, reachable = replica.log.last_index, True
            cannot, since = replica.health.reason, replica.health.since
        elif rep is not None:
            match, reachable = rep.match_index, rep.reachable
            cannot, since = rep.cannot_store, rep.cannot_store_since
        else:
            match, reachable = 0, False
        members.append(MemberStatus(name=name, address=membership.address_of(name) or "", match_index=match,
                                    reachable=reachable, replication=membership.appends_via(name),
                                    cannot_store=cannot, cannot_store_since=since, voter=name in voters))
    cluster = membership.cluster.name
    storage = replica.storage_mode.value
    dispatcher = term.dispatcher if term is not None else None
    clock = _clock(replica, membership, term)
    stores = []
    for store in realm.stores:
        if not store.served_by(cluster):
            continue
        # Non-replicated stores live in the leader's term; a member that does not lead holds none.
        state = replica.state if store.replicated else term.local_state if term is not None else None
        config = store_config(store)
        uows = [0, 0, 0, 0]
        for held in (replica.state, term.local_state if term is not None else None):
            if held is not None:
                uows = [a + b for a, b in zip(uows, held.uows.counts(store.name))]
        stores.append(StoreStatus(
            name=store.name, replicated=store.replicated,
            messages=state.store_count.get(store.name, 0) if state else 0,
            bytes=state.store_bytes.get(store.name, 0) if state else 0,
            durables=_durables(state, store, dispatcher, realm, clock, cluster) if state else [],
            cluster=cluster, storage=storage, publisher_mode=store.publisher_mode.value,
            max_messages=config.max_messages, max_bytes=config.max_bytes, limit_policy=config.policy,
            maps=bool(store.maps), routed=store.routed, max_message_bytes=store.max_message_bytes,
            map_count=state.maps_of_store(store.name) if state else 0,
            swapped_messages=state.swapped_messages(store.name) if state else 0,
            uows=uows[0], uows_pending=uows[1], uow_messages=uows[2], uow_bytes=uows[3],
            origin_marks=_origin_marks(state, store.name) if state and store.routed else []))
    return ClusterStatus(
        cluster=cluster, member=me, role=term.role if term is not None else Role.FOLLOWER,
        leader=leader[0] if leader else "", leader_address=leader[1] if leader else "",
        epoch=leader[2] if leader else replica.promised_epoch,
        commit_index=replica.commit_index, last_index=replica.log.last_index,
        applied_index=replica.state.applied_index, snapshot_index=replica.log.snapshot_index,
        storage=storage, realm_version=realm_version, synced=replica.synced,
        indexes_on_disk=membership.cluster.indexes_on_disk, memory_budget_bytes=replica.swap.budget_bytes,
        memory_payload_bytes=replica.swap.resident_bytes, apply_stopped=replica.apply_stopped or "",
        realm_service=realm_service, members=members, stores=stores, uow_clock=replica.state.clock,
        standby=membership.cluster.is_standby_member(me),
        events_published_index=replica.events.published if replica.events is not None else 0,
        store_damage=getattr(replica.storage, "damage", ""), dedup_producers=len(replica.state.producers),
        voters=voters)
