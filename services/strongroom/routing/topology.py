"""Where a routed store's messages go: the neighbour graph of each routed store and the
breadth-first forwarding tree per origin cluster, computed from the realm alone.

    topo = Topology.of(realm, "london")
    topo.children("wide", origin="rio")            # ["tokyo"]: london passes rio's messages on
    topo.subtree("wide", origin="rio", child="tokyo")  # {"tokyo"} and whoever tokyo passes them to

Every router computes the same trees (neighbours visited in name order, the first cluster to
reach another is its parent), so a message of origin O reaches each cluster of the store by
exactly one path, whatever the zones look like (a full mesh, chained zones, cycles).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from strongroom.realm.model import Realm
from strongroom.realm.zones import neighbours

__all__ = ["StoreTopology", "Topology", "bfs_tree"]


def bfs_tree(graph: dict[str, set[str]], origin: str) -> dict[str, str]:
    """child -> parent of the breadth-first tree from `origin` over `graph` (neighbours in name
    order; the first cluster to reach another is its parent). The origin has no parent."""
    parent: dict[str, str] = {}
    seen = {origin}
    todo = deque([origin])
    while todo:
        c = todo.popleft()
        for n in sorted(graph.get(c, ())):
            if n not in seen:
                seen.add(n)
                parent[n] = c
                todo.append(n)
    return parent


@dataclass(frozen=True)
class StoreTopology:
    """One routed store: its neighbour graph and the tree of every origin."""

    store: str
    graph: dict[str, set[str]]
    """cluster -> its neighbours for this store."""
    parents: dict[str, dict[str, str]] = field(default_factory=dict)
    """origin -> (cluster -> its parent in the origin's tree)."""

    @classmethod
    def build(cls, store: str, graph: dict[str, set[str]]) -> StoreTopology:
        """The topology of a store over `graph`, every origin's tree computed once."""
        return cls(store, graph, {origin: bfs_tree(graph, origin) for origin in graph})

    @property
    def clusters(self) -> list[str]:
        """The store's clusters, by name."""
        return sorted(self.graph)

    def parent(self, origin: str, cluster: str) -> str | None:
        """Who passes origin's messages to `cluster` (None at the origin, or outside the store)."""
        return self.parents.get(origin, {}).get(cluster)

    def children(self, origin: str, cluster: str) -> list[str]:
        """The clusters `cluster` forwards origin's messages to, by name."""
        return sorted(c for c, p in self.parents.get(origin, {}).items() if p == cluster)

    def subtree(self, origin: str, child: str) -> set[str]:
        """`child` and every cluster below it in origin's tree: who receives origin's messages
        through `child`."""
        parents = self.parents.get(origin, {})
        if child != origin and child not in parents:
            return set()
        below: dict[str, list[str]] = {}
        for c, p in parents.items():
            below.setdefault(p, []).append(c)
        out, todo = set(), [child]
        while todo:
            c = todo.pop()
            out.add(c)
            todo.extend(below.get(c, ()))
        return out

    def beyond(self, cluster: str, neighbour: str) -> dict[str, set[str]]:
        """origin -> the clusters `cluster` reaches through `neighbour` for that origin's
        messages (only origins whose tree makes `neighbour` a child of `cluster`)."""
        return {origin: self.subtree(origin, neighbour) for origin in self.graph
                if self.parent(origin, neighbour) == cluster}


@dataclass(frozen=True)
class Topology:
    """A cluster's view of every routed store it is in (with at least one other cluster)."""

    cluster: str
    stores: dict[str, StoreTopology]

    @classmethod
    def of(cls, realm: Realm, cluster: str) -> Topology:
        """The routed stores of the realm that exist at `cluster` and elsewhere too."""
        zones = {z.name: z for z in realm.zones}
        return cls(cluster, {s.name: StoreTopology.build(s.name, neighbours(zones, s.zones))
                             for s in realm.routed_stores(cluster)})

    def neighbours(self) -> list[str]:
        """Every cluster this one shares a zone with in some routed store, by name."""
        return sorted({n for t in self.stores.values() for n in t.graph.get(self.cluster, ())})

    def stores_with(self, neighbour: str) -> list[str]:
        """The routed stores in which `neighbour` is a neighbour of this cluster."""
        return sorted(s for s, t in self.stores.items() if neighbour in t.graph.get(self.cluster, ()))

    def children(self, store: str, origin: str) -> list[str]:
        """This cluster's children in origin's tree of `store`."""
        t = self.stores.get(store)
        return t.children(origin, self.cluster) if t is not None else []

    def forwards_to(self, store: str, origin: str, neighbour: str) -> bool:
        """True when this cluster passes origin's messages of `store` to `neighbour`."""
        t = self.stores.get(store)
        return t is not None and t.parent(origin, neighbour) == self.cluster

    def beyond(self, store: str, neighbour: str) -> dict[str, set[str]]:
        """origin -> the clusters this one reaches through `neighbour` in `store`."""
        t = self.stores.get(store)
        return t.beyond(self.cluster, neighbour) if t is not None else {}
