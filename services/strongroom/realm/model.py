"""The realm document: clusters and members, stores, destinations.

`parse_realm(text, source)` validates a YAML realm and raises `RealmInvalid` whose problems are
`file:line:column: path: what is wrong`. Defaults are documented on each field.

Longer than 600 lines: the realm's schema and its cross-reference rules (a dead-letter target,
a static durable's topic or endpoint, names that must be unique) are one document's contract;
pydantic runs the rules as validators of the models they read, and keeping them beside the
fields they check is what lets a reader see every rule a realm file must meet in one place.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from strongroom.errors import RealmInvalid, UnknownDestination
from strongroom.realm.locations import (
    Path,
    UniqueKeyLoader,
    locate,
    path_text,
    positions,
    unknown_key,
    yaml_problem,
)
from strongroom.realm.access import Action, Auth, Grant, Role, User, check_access
from strongroom.realm.zones import RouterSpec, Zone, check_address, check_zones, store_clusters

__all__ = ["StorageMode", "PublisherMode", "DestinationKind", "Member", "Cluster", "Store", "StaticDurable", "Destination",
           "UnitsOfWork", "TtlClock", "PersistentStore", "StoreDriver",
    "Endpoint", "DurableTemplate", "TemplateKind", "AckSync", "LimitPolicyName", "Realm", "Route",
    "Zone", "RouterSpec", "Action", "Auth", "Grant", "Role", "User", "parse_realm", "DEFAULT_REALM_YAML"]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DEST_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]-][A-Za-z0-9_.*?\[\]/-]{0,254}$")


class StorageMode(str, Enum):
    """Where a cluster's members keep the log and state."""

    MEMORY = "memory"
    DISK_SYNC = "disk-sync"  # fsync before a member acknowledges
    DISK_ASYNC = "disk-async"  # written, not fsynced, before a member acknowledges


class StoreDriver(str, Enum):
    """The storage driver of a cluster's members (docs/store-operations.md, "The store driver")."""

    ROCKSDB = "rocksdb"  # RocksDB (rocksdict): the default
    SQLITE = "sqlite"  # SQLite from the standard library, WAL journal


class PublisherMode(str, Enum):
    """When a publish call returns."""

    STORE_CONFIRM_SEND = "store_confirm_send"  # after the message is committed
    STORE_SEND_NOCONFIRM = "store_send_noconfirm"  # once the leader has it queued


class DestinationKind(str, Enum):
    """Topic (kept only while a durable wants it) or queue (kept until consumed)."""

    TOPIC = "topic"
    QUEUE = "queue"


class AckSync(str, Enum):
    """Whether acknowledgments wait for their commit (sync) or go batched in the background (async)."""

    SYNC = "sync"
    ASYNC = "async"


class LimitPolicyName(str, Enum):
    """What a store at its limit does with a new message."""

    REJECT = "reject"  # the publisher gets STORE_LIMIT_EXCEEDED
    DISCARD_OLDEST = "discard_oldest"  # the store's oldest messages make room


class TtlClock(str, Enum):
    """The clock a message's time-to-live runs on."""

    PSEUDO = "pseudo"
    """The pseudo-clock: seconds during which the cluster had a serving leader (the default)."""
    WALL = "wall"
    """The leader's wall clock: an absolute deadline, running while the cluster is down too."""


class TemplateKind(str, Enum):
    """The durable kind a durable template creates."""

    STANDARD = "standard"
    SHARED = "shared"
    LAST_VALUE = "last-value"


def _check_name(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError("must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return v


Name = Annotated[str, AfterValidator(_check_name)]
"""A member, cluster or store name."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Member(_Model):
    """One persistence service of a cluster."""

    name: Name
    """Member name, unique in its cluster; the service is started with it."""
    address: str | None = None
    """host:port peers and clients use; when absent the member registers its listen address in etcd."""


class EventLog(_Model):
    """Where a cluster's store event log goes (see "Store event log" in the README)."""

    directory: str
    """The event-log root directory: the leader writes `cluster=<name>/hour=<UTC hour>/` below
    it. Every member of the cluster must see the same directory (one machine, or a volume all
    of them mount), since a new leader resumes after the newest file its predecessor published.
    A relative path is relative to each member's working directory. (An S3-compatible URL is
    the next step; not supported yet.)"""
    interval_seconds: float = Field(default=10.0, gt=0, le=3600)
    """While events flow, a file is published at least this often (seconds)."""


def _check_member_set(v: list[Member]) -> list[Member]:
    if not v:
        raise ValueError("a cluster needs at least one member")
    if len(v) % 2 == 0:
        raise ValueError(f"has {len(v)} members; use an odd count so a majority is well defined")
    seen: set[str] = set()
    for m in v:
        if m.name in seen:
            raise ValueError(f"member name {m.name!r} appears twice")
        seen.add(m.name)
    return v


class StandbySet(_Model):
    """A cluster's disaster-recovery standby set (docs/dr.md): members at another site, with their
    own etcd, that receive the primary set's committed log asynchronously and can be activated
    when the primary site is lost. Clients never talk to it and never wait for it."""

    members: list[Member]
    """The standby members (an odd count), none of them a member of the primary set. Started
    like the primary's (`strongroom-persistence --cluster C --member NAME`) against the standby
    site's etcd."""
    primary: list[str]
    """host:port addresses the standby site's DR service reads the primary's committed log at:
    its members, or one address in front of them (a Kubernetes Service). Any member serves it."""

    @field_validator("members")
    @classmethod
    def _members(cls, v: list[Member]) -> list[Member]:
        return _check_member_set(v)

    @field_validator("primary")
    @classmethod
    def _primary(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one address of the primary site (host:port)")
        return [check_address(a, "primary address") for a in v]


class PersistentStore(_Model):
    """A cluster's persistent store: its replicated log and state on the members
    (docs/store-operations.md)."""

    capacity_messages: int = Field(default=0, ge=0)
    """Messages the replicated stores may hold (those held by units of work included) before the
    store takes no new units of work by itself (0, the default: no capacity)."""
    capacity_bytes: int = Field(default=0, ge=0)
    """The same in message bytes (0, the default: no capacity)."""
    driver: StoreDriver = StoreDriver.ROCKSDB
    """The storage driver the members keep the log and state in (and swap payloads to):
    rocksdb (the default) or sqlite. Fixed at a member's start; a member refuses a data
    directory the other driver wrote (changing it is a migration by unload and load)."""
    write_buffer_mb: int = Field(default=32, ge=1, le=65536)
    """Writes a member's database holds in memory before writing them to its files, in MiB, over
    all its families (RocksDB memtables; the largest is flushed when they reach it). Read at a
    member's start. SQLite has no write buffer (each commit goes to its write-ahead log)."""
    read_cache_mb: int = Field(default=32, ge=1, le=65536)
    """Blocks of the database's files a member keeps in memory for the next read, in MiB (RocksDB's
    block cache, shared by every family; SQLite's page cache). Read at a member's start."""
    scrub_interval_seconds: float = Field(default=21600, ge=0, le=30 * 86400)
    """How often each member reads its whole store back from its files to find damage that
    happened while it runs (a flipped bit: RocksDB checks every block's checksum), in seconds (6
    hours by default; 0: never, damage is then found at the member's next start). A member that
    finds damage starts again on an empty store and rebuilds it from its peers
    (docs/store-operations.md, "A damaged store"). Read at every round."""
    report: bool = False
    """Each member writes the PSTORE report of the records its store creates and deletes (log
    entries, snapshots and restore points), a line per record (EntireX's PSTORE-REPORT=YES).
    Read at a member's start."""


class SharedStore(_Model):
    """A single-member cluster run as two instances on one store on shared storage
    (docs/store-operations.md, "Standby on a shared store"): a standard instance that serves and
    a standby instance that takes the store over when the standard stops answering."""

    instances: list[str]
    """The two instances' host:port addresses (each is started with `--listen` or `--advertise`
    at one of them; the other is its partner). Clients reach the cluster at either."""
    control_interval_seconds: float = Field(default=2.0, gt=0, le=60)
    """How often the standby checks that the standard answers (seconds); the standby takes the
    store over after the standard missed one check and released the store's lock."""

    @field_validator("instances")
    @classmethod
    def _instances(cls, v: list[str]) -> list[str]:
        if len(v) != 2:
            raise ValueError(f"names {len(v)} instance addresses; a shared store has exactly two instances "
                             f"(the standard and the standby), host:port each")
        addresses = [check_address(a, "instance address") for a in v]
        if addresses[0] == addresses[1]:
            raise ValueError(f"names {addresses[0]} twice; the two instances need different addresses")
        return addresses


class Cluster(_Model):
    """A persistence cluster: an odd number of members electing one leader through etcd."""

    name: Name
    """Cluster name, unique in the realm."""
    members: list[Member]
    """The members; an odd count (1, 3, 5 …) so a majority is well defined."""
    storage: StorageMode = StorageMode.DISK_SYNC
    """memory, disk-sync (default) or disk-async."""
    lease_ttl_seconds: int = Field(default=3, ge=1, le=60)
    """TTL of the leader's etcd lease; a leader that cannot renew it in time stops serving."""
    compact_after_entries: int = Field(default=20000, ge=100)
    """Truncate the log prefix every member has applied once it is this long."""
    max_batch_ops: int = Field(default=4096, ge=1)
    """Upper bound of operations carried by one group-commit round."""
    producer_idle_expiry_seconds: float = Field(default=86400.0, ge=0)
    """A producer id that published nothing for this long (pseudo-clock seconds: time the
    cluster had a serving leader) has its deduplication window forgotten, so memory per idle
    producer goes to zero; a re-send of a message it sent before it went quiet is then stored
    again. 0: windows are never forgotten. Default one day."""
    indexes_on_disk: bool = False
    """Keep message metadata, durable cursors and pending sets in RocksDB instead of memory, so
    memory stays flat as the backlog grows and a restart does not re-read the backlog. Needs
    disk-sync or disk-async storage."""
    memory_budget_mb: int = Field(default=0, ge=0)
    """Message swapping: past this many MiB of payloads held in memory by memory-storage and
    non-replicated stores, payloads move to a swap file on disk and are read back on delivery
    (0, the default: no swapping)."""
    event_log: EventLog | None = None
    """The store event log: off unless set (a member's `--event-log-dir` or
    STRONGROOM_EVENT_LOG_DIR also turns it on, with that directory)."""
    router: RouterSpec | None = None
    """The cluster's router (`strongroom-router`): required when the cluster is in a zone of a
    routed store with more than one cluster."""
    standby: StandbySet | None = None
    """The cluster's disaster-recovery standby set (docs/dr.md); none by default."""
    persistent_store: PersistentStore = PersistentStore()
    """The persistent store's capacity and storage driver (docs/store-operations.md); no
    capacity and RocksDB by default."""
    shared_store: SharedStore | None = None
    """A single-member cluster whose one member runs as a standard and a standby instance on one
    store on shared storage (docs/store-operations.md); none by default."""

    @field_validator("members")
    @classmethod
    def _members(cls, v: list[Member]) -> list[Member]:
        return _check_member_set(v)

    def member(self, name: str) -> Member | None:
        """The member of the primary set with this name."""
        return next((m for m in self.members if m.name == name), None)

    def as_seen_by(self, name: str) -> Cluster:
        """The cluster as member `name` runs in it: for a member of the standby set, the same
        cluster with the standby set as its members (they elect, replicate and count majorities
        among themselves); for anyone else, this cluster."""
        if self.standby is None or not self.is_standby_member(name):
            return self
        return self.model_copy(update={"members": self.standby.members})

    def is_standby_member(self, name: str) -> bool:
        """Whether `name` is a member of the cluster's standby set."""
        return self.standby is not None and any(m.name == name for m in self.standby.members)


class StaticDurable(_Model):
    """A durable the realm declares in a store: it exists from the realm version on, whether or
    not a subscriber ever opened it, so it takes messages from then on. A last-value static
    durable is how a topic or an endpoint keeps its latest message (per key value) for
    subscribers that come later: a new subscriber gets the value at once."""

    name: Name
    destination: str | None = None
    """A topic of this store (an exact name, not a pattern). Give this or `endpoint`."""
    endpoint: str | None = None
    """An endpoint of this store: a store-wide content durable of the endpoint's template."""
    kind: TemplateKind | None = None
    """standard (the default for a topic), shared or last_value; an endpoint's durables take
    its template's kind."""
    key_field: str | None = None
    """A last-value durable on a topic: one latest message per value of this field (default:
    one slot). An endpoint's durables take its template's key field."""


class Store(_Model):
    """A persistence store owned by one cluster, or a routed store at every cluster of its zones."""

    name: Name
    cluster: str | None = None
    """The cluster that owns the store (required unless the store is routed and names zones)."""
    replicated: bool = True
    """Replicated through the log (true) or kept by the leader alone, lost when it goes (false)."""
    publisher_mode: PublisherMode = PublisherMode.STORE_CONFIRM_SEND
    max_message_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)
    """Largest message body plus fields accepted (default 1 MiB)."""
    max_messages: int = Field(default=0, ge=0)
    """Most messages the store holds (0, the default: no limit)."""
    max_bytes: int = Field(default=0, ge=0)
    """Most message bytes the store holds (0, the default: no limit)."""
    limit_policy: LimitPolicyName = LimitPolicyName.REJECT
    """At a limit: reject the new message (default) or discard the store's oldest messages."""
    routed: bool = False
    """A routed (wide-area) store, forwarded between the clusters of its zones. Queues and maps
    are not allowed in it."""
    zones: list[str] = []
    """A routed store's forwarding zones: it exists at every cluster of each of them."""
    maps: bool | None = None
    """Clients may create key-value maps in the store (default: true, false for routed stores)."""
    durables: list[StaticDurable] = []
    """Static durables: created when the realm version takes effect (see StaticDurable)."""

    _clusters: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _maps_default(self) -> Store:
        if self.maps is None:
            object.__setattr__(self, "maps", not self.routed)
        if self.cluster is not None:
            self._clusters = (self.cluster,)
        return self

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters the store exists at: its cluster, or every cluster of its zones."""
        return self._clusters

    def served_by(self, cluster: str) -> bool:
        """True when the store exists at this cluster."""
        return cluster in self._clusters

    @property
    def where(self) -> str:
        """The clusters the store exists at, for messages: "cluster 'a'" or "clusters 'a', 'b'"."""
        names = ", ".join(repr(c) for c in self._clusters)
        return f"cluster{'s' if len(self._clusters) > 1 else ''} {names}"


class _DeliveryOptions(_Model):
    """Message lifetime and redelivery options shared by destinations and endpoints.

    A time-to-live runs on the pseudo-clock by default (`ttl_clock: pseudo`): it counts only
    the seconds during which the cluster had a serving leader, so a message does not expire
    while the cluster is down or leaderless, as units of work's lifetimes (EntireX's
    pseudo-clock); a consumer that was kept from it by an outage still gets it. `ttl_clock:
    wall` is for a deadline that holds whatever happens to the cluster (a price that is stale
    after 10 s of real time). Replay retention (`retain_seconds`) stays on the wall clock: it
    promises how far back in real time a replay reaches."""

    ttl_seconds: float = Field(default=0, ge=0)
    """Time-to-live: a message not consumed this long after publishing expires (0, the
    default: never), measured on `ttl_clock`."""
    ttl_clock: TtlClock = TtlClock.PSEUDO
    """The clock `ttl_seconds` runs on: pseudo (the default: uptime of the cluster with a
    leader) or wall (the leader's wall clock, an absolute deadline). A message keeps the clock
    it was published with when the realm changes."""
    retain_seconds: float = Field(default=0, ge=0)
    """Replay retention: messages stay stored at least this long after publishing even when no
    durable wants them, so a durable can replay them (0, the default: a message is kept only
    while some durable wants it). Wall-clock seconds."""
    redelivery_limit: int = Field(default=0, ge=0)
    """Deliveries of one message to a durable before it is dead-lettered (0, the default: no
    limit)."""
    dead_letter: str | None = None
    """Destination that receives messages past the redelivery limit (default: none, the message
    is discarded from the durable). Must be a name the realm maps to a store of the same cluster."""
    require_interest: bool = False
    """Refuse a publish that no durable wants (NO_INTEREST) instead of answering that it was not
    stored: a guard against misspelled topic names (default: false). Queues always store; a rule
    with `retain_seconds` stores for replay."""
    durable_expiry_seconds: float = Field(default=0, ge=0)
    """A durable created on this topic or endpoint (by a subscriber) that stays unused this long
    on the pseudo-clock is deleted as `strongroom durable delete` would, releasing what only it
    held (0, the default: durables never expire). Unused: no subscriber attached and no
    acknowledgment. Static durables of the realm never expire; a queue's own durable (its
    messages) neither, so a queue rule may not set it."""


class UnitsOfWork(_Model):
    """Units of work sent to a queue: their defaults (a sender may choose its own persistence
    and lifetimes per UOW) and the backout threshold; on a topic with `durable: true`,
    publications (UOWs every durable subscriber receives) and durable subscriptions. Times are
    pseudo-clock seconds: time during which the cluster had a serving leader."""

    durable: bool = False
    """A topic's durable publish and subscribe (EntireX's DURABLE topic): subscribers subscribe
    durably (the subscription survives restarts) and receive, whole, every publication committed
    after they subscribed. Topics only (default false)."""
    subscription_expiration_seconds: float = Field(default=604800.0, gt=0)
    """A durable subscription unused this long (no subscribe, receive or settle) ends and
    releases what it had still to receive (default 7 days). Durable topics only."""

    lifetime_seconds: float = Field(default=86400.0, gt=0)
    """From creation to completion; an ACCEPTED UOW whose lifetime ends times out (default one
    day, EntireX's default). A publication lives this long unless every eligible subscriber
    settled it earlier."""
    persistent: bool | None = None
    """Messages stored through the replicated log (default: the store's `replicated`)."""
    persistent_status: bool | None = None
    """Status kept through the log and after completion (default: the store's `replicated`)."""
    status_lifetime_multiple: int = Field(default=1, ge=1, le=1000)
    """A persistent status is deleted this many lifetimes after the UOW completed (default 1)."""
    backout_threshold: int = Field(default=0, ge=0)
    """Receiver backouts a UOW may take; one more moves it whole to `dead_letter` (0, the
    default: no limit)."""
    dead_letter: str | None = None
    """The queue a UOW past the backout threshold moves to (default: the destination's own
    `dead_letter`). Required with a backout_threshold."""
    conversation_timeout_seconds: float = Field(default=300.0, gt=0)
    """A sender silent this long before committing loses its open UOW (BACKEDOUT); a receiver
    holding a UOW this long without settling it loses it (backed out for it). Default 5 min."""


class Destination(_DeliveryOptions):
    """Maps destination names (exact or glob: `*`, `?`, `[..]`) to a store, as a topic or a queue."""

    name: str
    kind: DestinationKind = DestinationKind.TOPIC
    store: str
    ack_mode: AckSync = AckSync.ASYNC
    """Default acknowledgment mode of subscribers that do not choose one (default async)."""
    units_of_work: UnitsOfWork = UnitsOfWork()
    """Units of work on a queue: defaults and backout threshold (see UnitsOfWork)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DEST_RE.match(v):
            raise ValueError("must be 1-255 characters of letters, digits, '.', '_', '-', '/' and glob characters")
        return v

    @property
    def is_pattern(self) -> bool:
        """True when the name is a glob."""
        return any(c in self.name for c in "*?[")


class DurableTemplate(_Model):
    """How durables created through an endpoint behave (content matching model)."""

    name: Name
    kind: TemplateKind = TemplateKind.STANDARD
    key_field: str | None = None
    """Last-value durables: one latest message per value of this field (required for them)."""
    ack_mode: AckSync = AckSync.ASYNC
    """Acknowledgment mode of the durables it creates (default async)."""

    @model_validator(mode="after")
    def _key(self) -> DurableTemplate:
        if self.kind == TemplateKind.LAST_VALUE and not self.key_field:
            raise ValueError("a last-value template needs key_field (the field whose value keys the slots)")
        if self.kind != TemplateKind.LAST_VALUE and self.key_field:
            raise ValueError(f"key_field applies only to last-value templates, not {self.kind.value}")
        return self


class Endpoint(_DeliveryOptions):
    """Content matching model: an endpoint name maps to a store and a durable template.
    Publishers send to the endpoint; subscribers pass a durable name, the endpoint and a matcher,
    and see every message of the store sent through any endpoint that matches."""

    name: Name
    store: str
    template: str


class Realm(_Model):
    """The whole realm."""

    clusters: list[Cluster]
    stores: list[Store] = []
    destinations: list[Destination] = []
    durable_templates: list[DurableTemplate] = []
    endpoints: list[Endpoint] = []
    zones: list[Zone] = []
    """Forwarding zones (see `strongroom.realm.zones`)."""
    auth: Auth = Auth()
    """Whether calls are checked against users' permissions (see `strongroom.realm.access`)."""
    roles: list[Role] = []
    """Named sets of permissions."""
    users: list[User] = []
    """Who may call, with their roles."""

    @model_validator(mode="after")
    def _references(self) -> Realm:
        problems: list[tuple[tuple[Any, ...], str]] = []
        cluster_names: set[str] = set()
        for i, c in enumerate(self.clusters):
            if c.name in cluster_names:
                problems.append((("clusters", i, "name"), f"cluster name {c.name!r} appears twice"))
            cluster_names.add(c.name)
            if c.standby is not None:
                primary = {m.name for m in c.members}
                for j, m in enumerate(c.standby.members):
                    if m.name in primary:
                        problems.append((("clusters", i, "standby", "members", j, "name"),
                                         f"standby member {m.name!r} is also a member of the primary set of cluster "
                                         f"{c.name!r}; the two sets are different members at different sites"))
            problems.extend(_check_shared_store(i, c))
            if c.indexes_on_disk and c.storage == StorageMode.MEMORY:
                problems.append((("clusters", i, "indexes_on_disk"),
                                 f"cluster {c.name!r} keeps indexes on disk but its storage is memory; "
                                 f"use disk-sync or disk-async, or set indexes_on_disk: false"))
        stores: dict[str, Store] = {}
        for i, s in enumerate(self.stores):
            if s.name in stores:
                problems.append((("stores", i, "name"), f"store name {s.name!r} appears twice"))
            stores[s.name] = s
            if s.cluster is None and not s.routed:
                problems.append((("stores", i),
                                 f"store {s.name!r} names no cluster; a store that is not routed belongs to one "
                                 f"cluster (give cluster: NAME)"))
            elif s.cluster is not None and s.cluster not in cluster_names:
                problems.append((("stores", i, "cluster"),
                                 f"store {s.name!r} names cluster {s.cluster!r}, which the realm does not define"))
            if s.routed and s.maps:
                problems.append((("stores", i, "maps"),
                                 f"store {s.name!r} is routed; maps cannot be created in routed stores "
                                 f"(set maps: false)"))
            if s.max_bytes and s.max_bytes < s.max_message_bytes:
                problems.append((("stores", i, "max_bytes"),
                                 f"store {s.name!r} has max_bytes {s.max_bytes}, below its max_message_bytes "
                                 f"{s.max_message_bytes}: the largest allowed message could never be stored"))
        zones = {z.name: z for z in self.zones}
        for s in self.stores:
            if s.routed and s.zones:
                s._clusters = tuple(store_clusters(zones, s.zones))
        dest_names: set[str] = set()
        for i, d in enumerate(self.destinations):
            if d.name in dest_names:
                problems.append((("destinations", i, "name"), f"destination {d.name!r} appears twice"))
            dest_names.add(d.name)
            store = stores.get(d.store)
            if store is None:
                problems.append((("destinations", i, "store"),
                                 f"destination {d.name!r} names store {d.store!r}, which the realm does not define"))
            elif store.routed and d.kind == DestinationKind.QUEUE:
                problems.append((("destinations", i, "kind"),
                                 f"queue {d.name!r} maps to routed store {store.name!r}; queues cannot be "
                                 f"created in routed stores"))
        templates = {t.name: t for t in self.durable_templates}
        if len(templates) != len(self.durable_templates):
            seen: set[str] = set()
            for i, t in enumerate(self.durable_templates):
                if t.name in seen:
                    problems.append((("durable_templates", i, "name"), f"durable template {t.name!r} appears twice"))
                seen.add(t.name)
        endpoint_names: set[str] = set()
        for i, e in enumerate(self.endpoints):
            if e.name in endpoint_names:
                problems.append((("endpoints", i, "name"), f"endpoint {e.name!r} appears twice"))
            endpoint_names.add(e.name)
            if e.store not in stores:
                problems.append((("endpoints", i, "store"),
                                 f"endpoint {e.name!r} names store {e.store!r}, which the realm does not define"))
            if e.template not in templates:
                problems.append((("endpoints", i, "template"),
                                 f"endpoint {e.name!r} names durable template {e.template!r}, which the realm "
                                 f"does not define"))
            rule = next((d for d in self.destinations if not d.is_pattern and d.name == e.name), None)
            if rule is not None:
                problems.append((("endpoints", i, "name"),
                                 f"endpoint {e.name!r} has the name of a destination; a name is either"))
        for section, rules in (("destinations", self.destinations), ("endpoints", self.endpoints)):
            for i, r in enumerate(rules):
                problems.extend(self._check_dead_letter(section, i, r, stores))
                problems.extend(_check_lifetimes(section, i, r))
        for i, d in enumerate(self.destinations):
            problems.extend(self._check_units_of_work(i, d, stores))
        for i, s in enumerate(self.stores):
            seen_durables: set[tuple[str | None, str]] = set()
            for j, d in enumerate(s.durables):
                problem = self._check_static_durable(("stores", i, "durables", j), s, d, templates)
                if problem is not None:
                    problems.append(problem)
                # Endpoint durables are store-wide (one name per store), topic durables per topic.
                ident = (None if d.endpoint else d.destination, d.name)
                if ident in seen_durables:
                    problems.append((("stores", i, "durables", j, "name"),
                                     f"static durable {d.name!r} appears twice"))
                seen_durables.add(ident)
        problems.extend(check_zones(self.zones, {c.name: i for i, c in enumerate(self.clusters)},
                                    {c.name: c.router is not None for c in self.clusters}, self.stores))
        problems.extend(check_access(self.auth, self.roles, self.users, set(stores)))
        if problems:
            raise _CrossRefError(problems)
        return self

    def zone(self, name: str) -> Zone | None:
        """The zone with this name."""
        return next((z for z in self.zones if z.name == name), None)

    def routed_stores(self, cluster: str) -> list[Store]:
        """The routed stores that exist at this cluster and at some other cluster too."""
        return [s for s in self.stores if s.routed and len(s.clusters) > 1 and s.served_by(cluster)]

    def _check_units_of_work(self, i: int, rule: Destination,
                             stores: dict[str, Store]) -> list[tuple[tuple[Any, ...], str]]:
        uow = rule.units_of_work
        where: tuple[Any, ...] = ("destinations", i, "units_of_work")
        store = stores.get(rule.store)
        problems: list[tuple[tuple[Any, ...], str]] = []
        if store is not None and not store.replicated:
            for name in ("persistent", "persistent_status"):
                if getattr(uow, name):
                    problems.append(((*where, name), f"{rule.name!r} is in non-replicated store {store.name!r}; "
                                                     f"its units of work cannot be persistent (set {name}: false)"))
        topic = rule.kind != DestinationKind.QUEUE
        if uow.durable and store is not None and store.routed:
            problems.append(((*where, "durable"), f"{rule.name!r} maps to routed store {store.name!r}; units of work "
                                                  f"are not routed between clusters (a publication commits in one "
                                                  f"cluster, and its readers and status are that cluster's): map the "
                                                  f"durable topic to a store of one cluster"))
        if uow.durable and not topic:
            problems.append(((*where, "durable"), f"{rule.name!r} is a queue; durable publish and subscribe is for "
                                                  f"topics (units of work on a queue need no `durable`)"))
        if topic and uow.backout_threshold:
            problems.append(((*where, "backout_threshold"),
                             f"{rule.name!r} is a topic; a publication has no backout threshold (a subscriber's "
                             f"backout offers it again until its lifetime ends)"))
        if uow.dead_letter is not None:
            if topic:
                problems.append(((*where, "dead_letter"), f"{rule.name!r} is a topic; units of work go to queues"))
            else:
                problems.extend(self._check_dead_letter_target((*where, "dead_letter"), rule, uow.dead_letter,
                                                               stores, queue=True))
        elif not topic and uow.backout_threshold and rule.dead_letter is None:
            problems.append(((*where, "backout_threshold"),
                             f"{rule.name!r} has a backout_threshold but no dead-letter queue; set "
                             f"units_of_work.dead_letter (or the destination's dead_letter) to where a UOW "
                             f"past the threshold goes"))
        return problems

    def uow_dead_letter(self, rule: Destination) -> str | None:
        """Where a unit of work of this destination goes past its backout threshold."""
        return rule.units_of_work.dead_letter or rule.dead_letter

    def _check_dead_letter(self, section: str, i: int, rule: Destination | Endpoint,
                           stores: dict[str, Store]) -> list[tuple[tuple[Any, ...], str]]:
        if rule.dead_letter is None:
            return []
        where = (section, i, "dead_letter")
        if not rule.redelivery_limit and not (isinstance(rule, Destination) and rule.units_of_work.backout_threshold):
            return [(where, f"{rule.name!r} names a dead_letter destination but no redelivery_limit; "
                            f"set redelivery_limit to the deliveries after which a message is dead-lettered")]
        return self._check_dead_letter_target(where, rule, rule.dead_letter, stores,
                                              queue=isinstance(rule, Destination) and rule.kind == DestinationKind.QUEUE
                                              and bool(rule.units_of_work.backout_threshold))

    def _check_dead_letter_target(self, where: tuple[Any, ...], rule: Destination | Endpoint, target: str,
                                  stores: dict[str, Store], queue: bool) -> list[tuple[tuple[Any, ...], str]]:
        if not DEST_RE.match(target) or any(c in target for c in "*?["):
            return [(where, f"dead_letter {target!r} must be a destination name, not a pattern")]
        if any(e.name == target for e in self.endpoints):
            return [(where, f"dead_letter {target!r} is an endpoint; name a destination")]
        match = self._rule_for(target)
        if match is None:
            return [(where, f"dead_letter {target!r} matches no destination of the realm")]
        if match is rule:
            return [(where, f"dead_letter {target!r} maps back to the same destination rule {match.name!r}")]
        own, theirs = stores.get(rule.store), stores.get(match.store)
        if own is not None and theirs is not None and not set(own.clusters) <= set(theirs.clusters):
            return [(where, f"dead_letter {target!r} maps to store {theirs.name!r} of {theirs.where}; "
                            f"it must be a store at {own.where}")]
        if own is not None and theirs is not None and own.replicated != theirs.replicated:
            return [(where, f"dead_letter {target!r} maps to store {theirs.name!r}, "
                            f"{'' if theirs.replicated else 'non-'}replicated, but {rule.name!r} is in "
                            f"{'a ' if own.replicated else 'a non-'}replicated store; a message moves "
                            f"between stores of the same kind only")]
        if queue and match.kind != DestinationKind.QUEUE:
            return [(where, f"dead_letter {target!r} is a topic; a unit of work past its backout threshold "
                            f"moves to a queue")]
        return []

    def _check_static_durable(self, where: tuple[Any, ...], store: Store, d: StaticDurable,
                              templates: dict[str, DurableTemplate]) -> tuple[tuple[Any, ...], str] | None:
        if (d.destination is None) == (d.endpoint is None):
            return where, (f"static durable {d.name!r} needs either destination (a topic) or endpoint, not "
                           f"{'both' if d.destination is not None else 'neither'}")
        if d.endpoint is not None:
            endpoint = self.endpoint(d.endpoint)
            if endpoint is None:
                return (*where, "endpoint"), (f"static durable {d.name!r} names endpoint {d.endpoint!r}, "
                                              f"which the realm does not define")
            if endpoint.store != store.name:
                return (*where, "endpoint"), (f"endpoint {d.endpoint!r} maps to store {endpoint.store!r}, "
                                              f"not {store.name!r}: declare the durable in that store")
            template = templates.get(endpoint.template)
            if d.key_field is not None:
                return (*where, "key_field"), (f"static durable {d.name!r} is opened through endpoint "
                                               f"{d.endpoint!r}: its key field is its template's")
            if template is not None and d.kind is not None and d.kind != template.kind:
                return (*where, "kind"), (f"endpoint {d.endpoint!r} creates {template.kind.value} durables "
                                          f"(template {template.name!r}), not {d.kind.value}")
            return None
        target = d.destination or ""
        if not DEST_RE.match(target) or any(c in target for c in "*?["):
            return (*where, "destination"), (f"static durable {d.name!r}: destination {target!r} must be a "
                                             f"topic name, not a pattern")
        if self.endpoint(target) is not None:
            return (*where, "destination"), (f"{target!r} is an endpoint: write endpoint: {target}")
        match = self._rule_for(target)
        if match is None:
            return (*where, "destination"), (f"static durable {d.name!r}: destination {target!r} matches no "
                                             f"destination of the realm")
        if match.kind != DestinationKind.TOPIC:
            return (*where, "destination"), (f"static durable {d.name!r}: {target!r} is a queue, which has "
                                             f"its own durable; static durables are for topics")
        if match.store != store.name:
            return (*where, "destination"), (f"topic {target!r} maps to store {match.store!r}, not "
                                             f"{store.name!r}: declare the durable in that store")
        if d.key_field is not None and d.kind != TemplateKind.LAST_VALUE:
            return (*where, "key_field"), (f"key_field applies only to last-value durables, not "
                                           f"{(d.kind or TemplateKind.STANDARD).value}")
        return None

    def _rule_for(self, name: str) -> Destination | None:
        """The destination rule of a name: an exact rule wins, else the first glob in order."""
        match = next((d for d in self.destinations if not d.is_pattern and d.name == name), None)
        if match is None:
            match = next((d for d in self.destinations if d.is_pattern and fnmatch.fnmatchcase(name, d.name)), None)
        return match

    def endpoint(self, name: str) -> Endpoint | None:
        """The endpoint with this name."""
        return next((e for e in self.endpoints if e.name == name), None)

    def template(self, name: str) -> DurableTemplate | None:
        """The durable template with this name."""
        return next((t for t in self.durable_templates if t.name == name), None)

    def cluster(self, name: str) -> Cluster | None:
        """The cluster with this name."""
        return next((c for c in self.clusters if c.name == name), None)

    def store(self, name: str) -> Store | None:
        """The store with this name."""
        return next((s for s in self.stores if s.name == name), None)

    def resolve(self, destination: str) -> tuple[Destination, Store]:
        """The destination rule and store for a name: an exact rule wins, else the first glob in order."""
        if not destination or not DEST_RE.match(destination) or any(c in destination for c in "*?["):
            raise UnknownDestination(f"invalid destination name {destination!r}")
        match = self._rule_for(destination)
        if match is None:
            raise UnknownDestination(f"no destination of the realm matches {destination!r}")
        store = self.store(match.store)
        assert store is not None  # validated
        return match, store

    def route(self, name: str) -> Route:
        """What a publish or subscribe name resolves to: an endpoint (exact name) or a destination."""
        endpoint = self.endpoint(name)
        if endpoint is not None:
            store = self.store(endpoint.store)
            template = self.template(endpoint.template)
            assert store is not None and template is not None  # validated
            return Route(name=name, store=store, rule=endpoint, queue=False, template=template)
        rule, store = self.resolve(name)
        return Route(name=name, store=store, rule=rule, queue=rule.kind == DestinationKind.QUEUE, template=None)

    def to_json(self) -> str:
        """Normalised JSON (defaults filled in)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def _check_shared_store(i: int, c: Cluster) -> list[tuple[tuple[Any, ...], str]]:
    """A shared store is one member's store, on disk, at one site: say what contradicts it."""
    if c.shared_store is None:
        return []
    where = ("clusters", i, "shared_store")
    problems: list[tuple[tuple[Any, ...], str]] = []
    if len(c.members) != 1:
        problems.append((where, f"cluster {c.name!r} has {len(c.members)} members; a shared store belongs to a "
                                f"single-member cluster (its standby is a second instance of that member)"))
    for j, m in enumerate(c.members):
        if m.address is not None:
            problems.append((("clusters", i, "members", j, "address"),
                             f"member {m.name!r} of cluster {c.name!r} has a shared store: it is reached at "
                             f"shared_store.instances, not at an address of its own (remove address)"))
    if c.storage == StorageMode.MEMORY:
        problems.append((("clusters", i, "storage"),
                         f"cluster {c.name!r} has a shared store but its storage is memory, which nothing can "
                         f"take over; use disk-sync or disk-async"))
    if c.standby is not None:
        problems.append((where, f"cluster {c.name!r} has both a shared store and a disaster-recovery standby set; "
                                f"choose one"))
    return problems


def _check_lifetimes(section: str, i: int, rule: Destination | Endpoint) -> list[tuple[tuple[Any, ...], str]]:
    """A lifetime option that does nothing without another is a mistake: say which."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    if rule.ttl_clock == TtlClock.WALL and not rule.ttl_seconds:
        problems.append(((section, i, "ttl_clock"), (f"{rule.name!r} sets ttl_clock: wall but no ttl_seconds; "
                                                     f"ttl_clock says which clock the time-to-live runs on (set "
                                                     f"ttl_seconds, or remove ttl_clock)")))
    if rule.durable_expiry_seconds and isinstance(rule, Destination) and rule.kind == DestinationKind.QUEUE:
        problems.append(((section, i, "durable_expiry_seconds"),
                         (f"{rule.name!r} is a queue: its own durable holds the queue's messages and never expires; "
                          f"durable_expiry_seconds applies to topics and endpoints")))
    return problems


@dataclass(frozen=True)
class Route:
    """A destination or endpoint name, resolved: its store, its options and (for an endpoint)
    the durable template of the durables opened through it."""

    name: str
    store: Store
    rule: Destination | Endpoint
    queue: bool
    template: DurableTemplate | None

    @property
    def endpoint(self) -> bool:
        """True for the content matching model (an endpoint)."""
        return self.template is not None

    @property
    def ack_mode(self) -> AckSync:
        """Default acknowledgment mode: the template's for an endpoint, else the destination's."""
        if self.template is not None:
            return self.template.ack_mode
        assert isinstance(self.rule, Destination)
        return self.rule.ack_mode


class _CrossRefError(ValueError):
    def __init__(self, problems: list[tuple[tuple[Any, ...], str]]) -> None:
        super().__init__("; ".join(m for _, m in problems))
        self.problems = problems


def parse_realm(text: str, source: str = "realm.yaml") -> Realm:
    """Parse and validate a realm document; raise RealmInvalid with file:line:column problems,
    in the order of the document."""
    try:
        node = yaml.compose(text, Loader=UniqueKeyLoader)
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        line, col, sentence = yaml_problem(exc, text)
        raise RealmInvalid([f"{source}:{line}:{col}: {sentence}"]) from None
    except yaml.YAMLError as exc:
        raise RealmInvalid([f"{source}:1:1: {exc}"]) from None
    if node is None or data is None:
        raise RealmInvalid([f"{source}:1:1: the realm document is empty"])
    if not isinstance(data, dict):
        raise RealmInvalid([f"{source}:1:1: the realm must be a mapping with clusters, stores and destinations"])
    known: dict[Path, tuple[int, int]] = {}
    positions(node, (), known)
    try:
        return Realm.model_validate(data)
    except ValidationError as exc:
        problems: list[tuple[int, int, str]] = []
        for err in exc.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, _CrossRefError):
                for loc, msg in ctx_err.problems:
                    problems.append((*locate(known, loc), f"{path_text(loc)}: {msg}"))
                continue
            loc = tuple(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = unknown_key(Realm, loc)
            elif err["type"] == "missing":
                msg = f"required key {loc[-1]!r} is missing"
            elif err["type"] == "enum":
                expected = (err.get("ctx") or {}).get("expected", "")
                msg = f"{err['input']!r} is not one of {expected}"
            problems.append((*locate(known, loc), f"{path_text(loc)}: {msg}"))
        # By line, then column: the order the operator reads and fixes them in.
        raise RealmInvalid([f"{source}:{line}:{col}: {msg}" for line, col, msg in sorted(problems)]) from None


DEFAULT_REALM_YAML = """\
# The built-in default realm of `strongroom up`.
clusters:
  - name: default
    storage: disk-sync
    members:
      - name: m1
      - name: m2
      - name: m3
stores:
  - name: default
    cluster: default
    replicated: true
    publisher_mode: store_confirm_send
destinations:
  # Queues: any name ending in .queue; stored with or without subscribers, shared.
  - name: "*.queue"
    kind: queue
    store: default
  # Durable topics (publications and durable subscriptions): any name ending in .durable.
  - name: "*.durable"
    kind: topic
    store: default
    units_of_work:
      durable: true
  # Topics of any other name.
  - name: "*"
    kind: topic
    store: default
"""
