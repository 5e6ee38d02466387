"""Interest: what the durables of each cluster want of the routed stores, how the records of
every cluster merge as routers exchange them, and whether a message is wanted by any cluster of
a set.

A cluster's record lists every distinct (store, destination, matcher) its durables want,
excluding the routers' own route durables (`sr.route.<neighbour>`). Records carry a version;
a router keeps, per cluster, the record with the highest version it has seen (its own
included), so records spread hop by hop across chained zones. Content matching is
`strongroom.persistence.matcher`'s compiled matcher, the one the members apply.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.persistence.matcher import Match, compile_matcher
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX

__all__ = [
    "ROUTE_DURABLE_PREFIX",
    "ClusterInterest",
    "Interest",
    "InterestTable",
    "is_route_durable",
    "next_version",
    "own_interest",
    "route_durable",
    "route_neighbour",
]

def route_durable(neighbour: str) -> str:
    """The name of the route durable holding what waits to be forwarded to `neighbour`."""
    return f"{ROUTE_DURABLE_PREFIX}{neighbour}"


def is_route_durable(name: str) -> bool:
    """True for a router's route durable (never interest)."""
    return name.startswith(ROUTE_DURABLE_PREFIX)


def route_neighbour(name: str) -> str:
    """The neighbour a route durable holds messages for."""
    return name.removeprefix(ROUTE_DURABLE_PREFIX)


def next_version(previous: int, echoed: int = 0, now_ns: int | None = None) -> int:
    """The version of a cluster's new own record: wall-clock nanoseconds, but always above the
    previous own version and above the highest version of its record a neighbour echoed back
    (a restarted router on a machine with a slower clock still moves forward)."""
    now = time.time_ns() if now_ns is None else now_ns
    return max(now, previous + 1, echoed + 1)


@dataclass(frozen=True)
class Interest:
    """One durable's interest: a destination of a routed store, and its content matcher."""

    store: str
    destination: str
    matcher: bytes = b""
    """The ContentMatcher, serialised deterministically (empty: every message)."""

    @classmethod
    def of(cls, store: str, destination: str, matcher: cpb.ContentMatcher | None = None) -> Interest:
        """An interest from a matcher message (deterministic bytes, so equal matchers are equal)."""
        raw = matcher.SerializeToString(deterministic=True) if matcher is not None and matcher.fields else b""
        return cls(store, destination, raw)

    def content_matcher(self) -> cpb.ContentMatcher:
        """The matcher as a message."""
        return cpb.ContentMatcher.FromString(self.matcher)


@dataclass(frozen=True)
class ClusterInterest:
    """What one cluster's durables want (its record, as routers exchange it)."""

    cluster: str
    version: int
    interests: frozenset[Interest] = frozenset()
    observed_at: float = 0.0
    """Unix seconds at which the cluster's router last read its durables."""

    def to_proto(self) -> rpb.ClusterInterest:
        """The record on the wire."""
        return rpb.ClusterInterest(
            cluster=self.cluster, version=self.version, observed_at=self.observed_at,
            interests=[rpb.Interest(store=i.store, destination=i.destination, matcher=i.content_matcher())
                       for i in sorted(self.interests, key=lambda i: (i.store, i.destination, i.matcher))])

    @classmethod
    def from_proto(cls, record: rpb.ClusterInterest) -> ClusterInterest:
        """A record from the wire."""
        return cls(record.cluster, record.version,
                   frozenset(Interest.of(i.store, i.destination, i.matcher) for i in record.interests),
                   record.observed_at)


@dataclass
class InterestTable:
    """Every cluster's interest a router knows: the record with the highest version per cluster."""

    cluster: str
    """The router's own cluster."""
    records: dict[str, ClusterInterest] = field(default_factory=dict)
    echoed: int = 0
    """The highest version of this cluster's own record seen from elsewhere."""
    _compiled: dict[bytes, Match | None] = field(default_factory=dict, repr=False)

    def merge(self, records: Iterable[ClusterInterest]) -> bool:
        """Keep each record whose version is above the one held; True if anything changed.
        A record of this cluster is never taken from elsewhere (only its version is noted)."""
        changed = False
        for r in records:
            if r.cluster == self.cluster:
                self.echoed = max(self.echoed, r.version)
                continue
            held = self.records.get(r.cluster)
            if held is None or r.version > held.version:
                self.records[r.cluster] = r
                changed = changed or held is None or held.interests != r.interests
        return changed

    def set_own(self, interests: Iterable[Interest], observed_at: float | None = None,
                now_ns: int | None = None) -> bool:
        """This cluster's interest as just read from its durables: a new own record with a
        higher version. True if the interest differs from the previous record."""
        held = self.records.get(self.cluster)
        new = frozenset(interests)
        version = next_version(held.version if held else 0, self.echoed, now_ns)
        self.records[self.cluster] = ClusterInterest(self.cluster, version, new,
                                                     time.time() if observed_at is None else observed_at)
        return held is None or held.interests != new

    def own(self) -> ClusterInterest | None:
        """This cluster's record (None before its durables were read)."""
        return self.records.get(self.cluster)

    def all(self) -> list[ClusterInterest]:
        """Every record, by cluster."""
        return [self.records[c] for c in sorted(self.records)]

    def _match(self, matcher: bytes) -> Match | None:
        if matcher not in self._compiled:
            self._compiled[matcher] = compile_matcher(cpb.ContentMatcher.FromString(matcher)) if matcher else None
        return self._compiled[matcher]

    def destinations(self, store: str, clusters: Iterable[str]) -> set[str]:
        """The destinations of `store` some cluster of `clusters` has interest in."""
        out: set[str] = set()
        for c in clusters:
            r = self.records.get(c)
            if r is not None:
                out.update(i.destination for i in r.interests if i.store == store)
        return out

    def wanted(self, store: str, destination: str, message: cpb.Message, clusters: Iterable[str]) -> bool:
        """True when some cluster of `clusters` has a durable wanting this message (its
        destination, and its fields per the durable's matcher)."""
        for c in clusters:
            r = self.records.get(c)
            if r is None:
                continue
            for i in r.interests:
                if i.store != store or i.destination != destination:
                    continue
                match = self._match(i.matcher)
                if match is None or match(message):
                    return True
        return False


def own_interest(durables: Iterable[tuple[str, str, str, cpb.ContentMatcher | None]]) -> set[Interest]:
    """A cluster's interest from its durables, each (store, destination, name, matcher): every
    durable except the routers' route durables."""
    return {Interest.of(store, destination, matcher) for store, destination, name, matcher in durables
            if not is_route_durable(name)}
