"""The router of one cluster: the election of its active replica, and while active the interest
read from the cluster's durables and exchanged with the neighbours, the routes (one per
neighbour and wanted destination) and the receiver of what neighbours forward. Active or not,
it follows where its cluster's members are (their registrations in the cluster's etcd, the
members of each realm version), so its client reaches members that moved or were added.

    router = Router(config, realm, client, links, etcd, on_active)
    await router.start()          # campaigns; `on_active(True)` once elected, then the listeners
    ...
    await router.stop()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strongroom.aio import cancel_and_wait, tell_listeners, wait_event
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Client
from strongroom.errors import InvalidArgument, NotActiveRouter, StrongroomError
from strongroom.etcd import EtcdClient
from strongroom.keys import router_key
from strongroom.persistence.election import Election, LeaderInfo
from strongroom.persistence.matcher import Match
from strongroom.persistence.membership import MemberAddresses
from strongroom.realm.model import Realm
from strongroom.routing.forwarder import Links, Route
from strongroom.routing.interest import (
    ClusterInterest,
    Interest,
    InterestTable,
    is_route_durable,
    own_interest,
    route_neighbour,
)
from strongroom.routing.receiver import Receiver
from strongroom.routing.stats import PeerStats
from strongroom.routing.topology import Topology

__all__ = ["INTEREST_PERIOD", "Router", "RouterConfig"]

log = logging.getLogger("strongroom.router")

INTEREST_PERIOD = 1.0
"""Seconds between two reads of the cluster's durables, and between two exchanges."""


@dataclass(frozen=True)
class RouterConfig:
    """One router replica."""

    cluster: str
    """The cluster it routes for."""
    replica: str
    """This replica's name (in the election key and the status)."""
    address: str
    """Where neighbours reach it (the realm's router address)."""
    lease_ttl: int = 3
    """TTL of the election lease (the cluster's lease_ttl_seconds)."""


class Router:
    """A router replica: standby until elected, then the cluster's active router."""

    def __init__(self, config: RouterConfig, realm: Realm, client: Client, links: Links, etcd: EtcdClient,
                 on_active: Callable[[bool], Awaitable[None]] | None = None) -> None:
        self.config = config
        self.cluster = config.cluster
        self.metrics_url = ""
        """Where its metrics are scraped (set by `strongroom-router` once its endpoint is up)."""
        self.client = client
        self.links = links
        self.etcd = etcd
        self.on_active = on_active
        self.realm = realm
        self.topology = Topology.of(realm, self.cluster)
        self.table = InterestTable(self.cluster)
        # (store, destination, origin, neighbour) -> what `wanted_beyond` decided for it, with
        # the interest changes and the topology it was decided under.
        self._wanting: dict[tuple[str, str, str, str], tuple[int, Topology, bool | list[Match]]] = {}
        self.peers: dict[str, PeerStats] = {}
        self._set_peers()
        self.routes: dict[tuple[str, str], Route] = {}
        # (neighbour, destination) -> pending messages on its route durable, as last listed.
        self.waiting: dict[tuple[str, str], int] = {}
        self.active = False
        self.active_replica = ""
        self.receiver = Receiver(self.cluster, client, self._store_of, self.peers.get)
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Called with True once this replica is the active router (after `on_active`) and False
        # when it stops being it, like PersistenceNode's, so persistence/k8s.py's pod label
        # serves both. Run in the background: a slow listener holds back neither the routes nor
        # a resignation. Exceptions are logged, never raised into the router.
        self.leadership_listeners: list[Callable[[bool], Awaitable[None]]] = []
        self._listening: set[asyncio.Task[None]] = set()
        self.election = Election(etcd, self.cluster, config.replica, config.address, config.lease_ttl,
                                 self._elected, self._deposed, self._leader, key=router_key(self.cluster),
                                 register=False)
        own = realm.cluster(self.cluster)
        self.members = MemberAddresses(etcd, self.cluster, own.members if own is not None else [])
        self._following: asyncio.Task[None] | None = None
        self._moving: asyncio.Task[None] | None = None

    def _set_peers(self) -> None:
        for n in self.topology.neighbours():
            c = self.realm.cluster(n)
            address = c.router.address if c is not None and c.router is not None else ""
            if n not in self.peers:
                self.peers[n] = PeerStats(n, address)
            else:
                self.peers[n].address = address

    # --- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Follow the members' registrations and campaign for the cluster's router key."""
        self._following = asyncio.create_task(self.members.follow(self._members_moved), name="members")
        self.election.start()

    async def stop(self) -> None:
        """Resign and stop every route (their durables stay: what waits is forwarded later)."""
        await self._deactivate()
        await self.election.stop(resign=True)
        if self._following is not None:
            await cancel_and_wait(self._following)

    def update_realm(self, realm: Realm) -> None:
        """A new realm version: new trees, new neighbours (routes follow at the next round), the
        cluster's members as it lists them."""
        self.realm = realm
        self.topology = Topology.of(realm, self.cluster)
        self._set_peers()
        own = realm.cluster(self.cluster)
        if own is not None and self.members.update(own.members):
            self._moving = asyncio.get_running_loop().create_task(self._members_moved(self.members.addresses()))
        self._changed.set()

    async def _members_moved(self, addresses: list[str]) -> None:
        """The client calls the members where they are now."""
        if addresses and addresses != self.client.endpoints:
            log.info("router of %s reaches its members at %s (was %s)", self.cluster, ",".join(addresses),
                     ",".join(self.client.endpoints))
            await self.client.set_endpoints(addresses)

    async def _elected(self, epoch: int, safe_until: float) -> None:
        log.info("router replica %s is the active router of %s", self.config.replica, self.cluster)
        self.active = True
        for p in self.peers.values():
            p.exchanged = False
        if self.on_active is not None:
            try:
                await self.on_active(True)
            except OSError as exc:
                # Cannot serve on the router address (another process holds it): let another
                # replica have the key.
                log.error("router replica %s cannot serve: %s; resigning", self.config.replica, exc)
                self.active = False
                await self.election.resign()
                return
        self._tasks = [asyncio.create_task(self._interest_loop(), name="interest"),
                       asyncio.create_task(self._exchange_loop(), name="exchange")]
        self._notify(True)

    async def _deposed(self, why: str) -> None:
        log.warning("router replica %s is no longer active (%s)", self.config.replica, why)
        await self._deactivate()

    async def _deactivate(self) -> None:
        was = self.active
        self.active = False
        if was:
            self._notify(False)  # first: out of the router Service while the routes stop
        for t in self._tasks:
            await cancel_and_wait(t)
        self._tasks = []
        routes, self.routes = list(self.routes.values()), {}
        await asyncio.gather(*(r.stop() for r in routes), return_exceptions=True)
        if was and self.on_active is not None:
            await self.on_active(False)

    def _notify(self, active: bool) -> None:
        tell_listeners(self.leadership_listeners, active, self._listen, log)

    def _listen(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._listening.add(task)
        task.add_done_callback(self._listening.discard)

    def _leader(self, info: LeaderInfo | None) -> None:
        self.active_replica = info.member if info is not None else ""

    def neighbours(self) -> list[str]:
        """The clusters whose routers may call this one: those sharing a zone with it."""
        return self.topology.neighbours()

    def require_active(self) -> None:
        """NotActiveRouter unless this replica is the active router."""
        if not self.active:
            raise NotActiveRouter(f"router replica {self.config.replica} of {self.cluster} is not the active "
                                  f"router (active: {self.active_replica or 'none known'})",
                                  {"active_replica": self.active_replica})

    # --- interest ---------------------------------------------------------------------------

    async def _interest_loop(self) -> None:
        while True:
            try:
                await self.read_interest()
                await self.reconcile_routes()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the local cluster away: try again
                log.warning("cannot read the interest of %s: %s", self.cluster, exc)
            await asyncio.sleep(INTEREST_PERIOD)

    async def read_interest(self) -> None:
        """Read the durables of the cluster's routed stores: its own interest, and how much
        waits on each route durable."""
        found: set[Interest] = set()
        waiting: dict[tuple[str, str], int] = {}
        for store in self.topology.stores:
            listed = await self.client.list_durables(store=store)
            found |= own_interest(listed.durables, store)
            for d in listed.durables:
                if is_route_durable(d.name) and not d.content and not d.unreachable:
                    waiting[(route_neighbour(d.name), d.destination)] = d.pending_messages
        self.waiting = waiting
        if self.table.set_own(found):
            log.info("interest of %s is now %s", self.cluster,
                     sorted((i.store, i.destination, i.content) for i in self.table.own().interests))  # type: ignore[union-attr]
            self._changed.set()

    async def _exchange_loop(self) -> None:
        while True:
            await self.exchange_all()
            await wait_event(self._changed, INTEREST_PERIOD)
            self._changed.clear()

    async def exchange_all(self) -> None:
        """One interest exchange with every neighbour."""
        request = rpb.InterestExchange(from_cluster=self.cluster, clusters=[r.to_proto() for r in self.table.all()])

        async def one(peer: PeerStats) -> None:
            try:
                answer = await self.links.exchange(peer.cluster, request)
            except Exception as exc:  # noqa: BLE001 - recorded, tried again next round
                if peer.connected or not peer.last_error:
                    log.warning("interest exchange with %s failed: %s", peer.cluster, exc)
                peer.lost(str(exc))
                return
            peer.contact()
            if self.table.merge(ClusterInterest.from_proto(r) for r in answer.clusters):
                self._changed.set()

        await asyncio.gather(*(one(p) for p in self.peers.values()))

    def exchange(self, from_cluster: str, records: list[ClusterInterest]) -> list[ClusterInterest]:
        """A neighbour's exchange: keep the newer records, answer every record known."""
        self.require_active()
        if self.table.merge(records):
            self._changed.set()
        peer = self.peers.get(from_cluster)
        if peer is not None:
            peer.last_contact = time.time()
        return self.table.all()

    # --- routes -----------------------------------------------------------------------------

    def forwards_to(self, store: str, origin: str, neighbour: str) -> bool:
        """This cluster passes origin's messages of `store` to `neighbour`."""
        return self.topology.forwards_to(store, origin, neighbour)

    def wanted_beyond(self, store: str, destination: str, origin: str, neighbour: str, message: cpb.Message) -> bool:
        """Some cluster reached through `neighbour` for origin's messages wants this one. A
        cluster whose interest is not known yet counts as wanting it (sending one too many is
        harmless; dropping one a cluster wants is not)."""
        key = (store, destination, origin, neighbour)
        known = self._wanting.get(key)
        if known is None or known[0] != self.table.changes or known[1] is not self.topology:
            # Decided again once per message stream whenever interest or the realm changed.
            clusters = self.topology.beyond(store, neighbour).get(origin, set())
            wanting: bool | list[Match] = (
                True if any(c not in self.table.records for c in clusters) else
                self.table.wanting(store, destination, clusters, self.realm.endpoint(destination) is not None))
            known = self._wanting[key] = (self.table.changes, self.topology, wanting)
        wanting = known[2]
        return wanting if isinstance(wanting, bool) else any(match(message) for match in wanting)

    def _endpoints(self, store: str) -> list[str]:
        """The endpoints of a routed store (a content durable of the store wants their messages)."""
        return [e.name for e in self.realm.endpoints if e.store == store]

    def wanted_routes(self) -> dict[tuple[str, str], str]:
        """(neighbour, destination) -> store: every route some cluster beyond a neighbour wants
        (a content durable beyond it: one per endpoint of its store)."""
        out: dict[tuple[str, str], str] = {}
        for store in self.topology.stores:
            endpoints = self._endpoints(store)
            for n in self.topology.neighbours():
                beyond = set().union(*self.topology.beyond(store, n).values())
                for d in self.table.destinations(store, beyond, endpoints):
                    out[(n, d)] = store
        return out

    async def reconcile_routes(self) -> None:
        """Start the routes now wanted, and resume those whose durables exist; stop and delete
        those nobody beyond their neighbour wants any more (only once an exchange with that
        neighbour told what lies beyond it)."""
        wanted = self.wanted_routes()
        for key, store in wanted.items():
            if key not in self.routes:
                self._start_route(key, store)
        for key in list(self.waiting):
            if key in wanted or key in self.routes:
                continue
            earlier = self._store_of_destination(key[1])
            if earlier is not None and key[0] in self.peers:
                self._start_route(key, earlier)  # a route durable of an earlier run: forward what waits
        for key, route in list(self.routes.items()):
            peer = self.peers.get(key[0])
            if key in wanted or peer is None or not peer.exchanged or not self._beyond_known(key[0]):
                continue
            log.info("nobody beyond %s wants %s any more: deleting its route", key[0], key[1])
            del self.routes[key]
            await route.stop(delete=True)

    def _beyond_known(self, neighbour: str) -> bool:
        """Every cluster reached through `neighbour` (any store, any origin) has a known record."""
        for store in self.topology.stores_with(neighbour):
            for clusters in self.topology.beyond(store, neighbour).values():
                if any(c not in self.table.records for c in clusters):
                    return False
        return True

    def _start_route(self, key: tuple[str, str], store: str) -> None:
        neighbour, destination = key
        route = Route(self.cluster, neighbour, store, destination, self.client, self.links, self, self.peers[neighbour])
        self.routes[key] = route
        route.start()
        log.info("route to %s for %s (store %s) started", neighbour, destination, store)

    def _store_of_destination(self, destination: str) -> str | None:
        try:
            route = self.realm.route(destination)
        except StrongroomError:
            return None
        return route.store.name if route.store.name in self.topology.stores else None

    def _store_of(self, from_cluster: str, destination: str) -> str:
        """The routed store a neighbour forwards `destination` of (InvalidArgument if it is not
        a routed store of this cluster in which the sender is a neighbour)."""
        self.require_active()
        store = self._store_of_destination(destination)
        if store is None:
            raise InvalidArgument(f"{destination!r} is not a destination of a routed store of {self.cluster}")
        if from_cluster not in self.topology.stores[store].graph.get(self.cluster, ()):
            raise InvalidArgument(f"{from_cluster!r} is not a neighbour of {self.cluster} in store {store!r}")
        return store

    # --- status -----------------------------------------------------------------------------

    def status(self) -> rpb.RouterStatus:
        """The router's view: neighbours, what went each way, what waits, every interest known."""
        now = time.time()
        reply = rpb.RouterStatus(cluster=self.cluster, replica=self.config.replica, active=self.active,
                                 active_replica=self.active_replica, metrics_url=self.metrics_url,
                                 interest=[r.to_proto() for r in self.table.all()])
        for name in sorted(self.peers):
            p = self.peers[name]
            routes = [r for (n, _), r in self.routes.items() if n == name]
            waiting = sum(c for (n, _), c in self.waiting.items() if n == name)
            held = sum(len(r.held) for r in routes)
            waiting = max(waiting, held)
            oldest = 0.0
            if waiting:
                ats = [a for a in (r.oldest_waiting_at() for r in routes) if a is not None]
                # Nothing read yet though messages wait (the route is not running): the time
                # since the route last made progress, so a stuck route never reads as lag 0.
                since = min((r.last_progress for r in routes), default=0.0)
                oldest = now - min(ats) if ats else (now - since if since else 0.0)
                oldest = max(oldest, 0.001)
            errors = [r.last_error for r in routes if r.last_error]
            reply.peers.add(
                cluster=name, address=p.address, connected=p.connected,
                last_error=p.last_error or (errors[0] if errors else ""), last_contact=p.last_contact,
                forwarded_messages=p.forwarded, resent_messages=p.resent, duplicate_messages=p.duplicates,
                waiting_messages=waiting, oldest_waiting_seconds=oldest,
                received_messages=p.received, stores=self.topology.stores_with(name),
                remote_marks=[rpb.OriginMark(cluster=o, destination=d, sequence=s, stored_at=at)
                              for (o, d), (s, at) in sorted(p.remote_marks.items())])
        return reply
