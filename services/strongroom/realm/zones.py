"""Forwarding zones of the realm: which clusters a routed store exists at, and the checks a realm's
zones must pass.

A forwarding zone is a set of clusters whose routers connect to each other. A routed store names
the zones it belongs to and exists at every cluster of every one of them (each cluster holds its
own projection of it). Two clusters are neighbours for a store when some zone of the store holds
both; a cluster in two zones of the store joins them (chained zones). The store's clusters must
form one connected graph, else a message published at one side could never reach the other.

The graph, and the forwarding tree a router derives from it (`strongroom.routing.topology`), are
computed from the realm alone, so the routers of every cluster agree on them without talking.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["ROUTE_DURABLE_PREFIX", "RouterSpec", "Zone", "check_address", "check_zones", "neighbours", "store_clusters"]

ROUTE_DURABLE_PREFIX = "sr.route."
"""A router's route durables are named this plus the neighbour cluster: they hold what waits to be
forwarded there, and are not interest."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouterSpec(_Model):
    """A cluster's router: the one endpoint other clusters' routers reach it at."""

    address: str
    """host:port of the cluster's RouterService, as other sites reach it (the cross-site
    endpoint firewalls and TLS are set up for). The active router replica listens there."""

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        return check_address(v, "router address")


def check_address(v: str, what: str) -> str:
    """`v` if it is host:port (a port from 1 to 65535), else ValueError naming `what`."""
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {v!r} must be host:port")
    return v


class Zone(_Model):
    """A forwarding zone: clusters whose routers exchange the messages of the zone's stores."""

    name: str
    clusters: list[str]
    """The clusters of the zone (at least one, each once)."""

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a zone needs at least one cluster")
        seen: set[str] = set()
        for c in v:
            if c in seen:
                raise ValueError(f"cluster {c!r} appears twice")
            seen.add(c)
        return v


Problem = tuple[tuple[Any, ...], str]


def store_clusters(zones: dict[str, Zone], store_zones: list[str]) -> list[str]:
    """The clusters a routed store exists at: every cluster of its zones, in the order the zones
    name them (each once)."""
    out: list[str] = []
    for name in store_zones:
        zone = zones.get(name)
        for c in zone.clusters if zone is not None else ():
            if c not in out:
                out.append(c)
    return out


def neighbours(zones: dict[str, Zone], store_zones: list[str]) -> dict[str, set[str]]:
    """cluster -> the clusters it forwards to directly for a store of these zones (those sharing a
    zone with it)."""
    graph: dict[str, set[str]] = {c: set() for c in store_clusters(zones, store_zones)}
    for name in store_zones:
        zone = zones.get(name)
        for c in zone.clusters if zone is not None else ():
            graph[c].update(x for x in zone.clusters if x != c)
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    seen: set[str] = set()
    parts: list[list[str]] = []
    for start in graph:
        if start in seen:
            continue
        part, todo = [], [start]
        seen.add(start)
        while todo:
            c = todo.pop()
            part.append(c)
            for n in sorted(graph[c]):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        parts.append(sorted(part))
    return parts


def check_zones(zones: list[Zone], clusters: dict[str, int], routers: dict[str, bool],
                stores: list[Any]) -> list[Problem]:
    """What is wrong with the realm's zones and routed stores, each at its place in the document.

    `clusters` maps a cluster name to its index in `clusters`, `routers` says which cluster has a
    router address, `stores` are the realm's stores (`name`, `routed`, `zones`, `cluster`)."""
    problems: list[Problem] = []
    by_name: dict[str, Zone] = {}
    for i, z in enumerate(zones):
        if z.name in by_name:
            problems.append((("zones", i, "name"), f"zone name {z.name!r} appears twice"))
        by_name[z.name] = z
        for j, c in enumerate(z.clusters):
            if c not in clusters:
                problems.append((("zones", i, "clusters", j),
                                 f"zone {z.name!r} names cluster {c!r}, which the realm does not define"))
    need_router: dict[str, tuple[str, str]] = {}
    for i, s in enumerate(stores):
        if s.zones and not s.routed:
            problems.append((("stores", i, "zones"),
                             f"store {s.name!r} names zones but is not routed; zones are for routed stores "
                             f"(set routed: true)"))
            continue
        if not s.routed:
            continue
        if not s.zones:
            if s.cluster is None:
                problems.append((("stores", i),
                                 f"routed store {s.name!r} names neither zones nor a cluster; give zones: [...] "
                                 f"(the clusters it exists at)"))
            continue
        unknown = False
        for j, zname in enumerate(s.zones):
            if zname not in by_name:
                problems.append((("stores", i, "zones", j),
                                 f"store {s.name!r} names zone {zname!r}, which the realm does not define"))
                unknown = True
        if unknown:
            continue
        members = store_clusters(by_name, s.zones)
        if s.cluster is not None and s.cluster not in members:
            problems.append((("stores", i, "cluster"),
                             f"routed store {s.name!r} names cluster {s.cluster!r}, which is in none of its zones "
                             f"({', '.join(s.zones)}); a routed store exists at the clusters of its zones "
                             f"(remove cluster, or add it to a zone)"))
        graph = neighbours(by_name, s.zones)
        parts = _components(graph)
        if len(parts) > 1:
            sides = " and ".join("{" + ", ".join(p) + "}" for p in parts)
            problems.append((("stores", i, "zones"),
                             f"the zones of routed store {s.name!r} share no cluster between {sides}: a message "
                             f"could not pass from one side to the other; chain them with a cluster that is in "
                             f"zones of both sides"))
        if len(members) > 1:
            for c in members:
                need_router.setdefault(c, (s.name, next(z for z in s.zones if c in by_name[z].clusters)))
    for c, (store, zone) in need_router.items():
        if c in clusters and not routers.get(c):
            problems.append((("clusters", clusters[c]),
                             f"cluster {c!r} is in zone {zone!r} of routed store {store!r} but has no router "
                             f"address; give router: {{address: host:port}} (where other clusters' routers "
                             f"reach it)"))
    return problems
