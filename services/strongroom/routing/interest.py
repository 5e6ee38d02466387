"""Interest: what the durables of each cluster want of the routed stores, how the records of
every cluster merge as routers exchange them, and whether a message is wanted by any cluster of
a set.

A cluster's record lists every distinct (store, destination, matcher, content) its durables
want, excluding the routers' own route durables (`sr.route.<neighbour>`). A topic durable wants
the messages of its topic; a content durable (opened through an endpoint: the content matching
model) wants the messages published to any endpoint of its store, as the members apply it
(`StateMachine._wanting`). Records carry a version; a router keeps, per cluster, the record with
the highest version it has seen (its own included), so records spread hop by hop across chained
zones. Content matching is `strongroom.persistence.matcher`'s compiled matcher, the one the
members apply; a keyed last-value durable's key field joins it as a `present` condition (a
message without the field has no slot there, as `Durable.wants` says).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from strongroom.api.v1 import admin_pb2 as apb
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
    """One durable's interest: a destination of a routed store (or, `content`, every endpoint
    of the store), and its content matcher."""

    store: str
    destination: str
    """The topic; for a content durable, the endpoint it was opened through (for people)."""
    matcher: bytes = b""
    """The ContentMatcher, serialised deterministically (empty: every message)."""
    content: bool = False
    """A content durable: it wants what is published to any endpoint of the store."""

    @classmethod
    def of(cls, store: str, destination: str, matcher: cpb.ContentMatcher | None = None, content: bool = False,
           key_field: str = "") -> Interest:
        """An interest from a matcher message (deterministic bytes, so equal matchers are equal);
        `key_field` (a keyed last-value durable) joins the matcher as a `present` condition."""
        if key_field and (matcher is None or key_field not in matcher.fields):
            keyed = cpb.ContentMatcher()
            if matcher is not None:
                keyed.CopyFrom(matcher)
            keyed.fields[key_field].test = cpb.FIELD_TEST_PRESENT
            matcher = keyed
        raw = matcher.SerializeToString(deterministic=True) if matcher is not None and matcher.fields else b""
        return cls(store, destination, raw, content)

    def wants(self, store: str, destination: str, endpoint: bool) -> bool:
        """Whether a message of `destination` in `store` (an endpoint of the store, or a topic)
        is of this interest's destinations (its matcher aside)."""
        if store != self.store:
            return False
        return endpoint if self.content else destination == self.destination

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
            interests=[rpb.Interest(store=i.store, destination=i.destination, matcher=i.content_matcher(),
                                    content=i.content)
                       for i in sorted(self.interests, key=lambda i: (i.store, i.destination, i.matcher, i.content))])

    @classmethod
    def from_proto(cls, record: rpb.ClusterInterest) -> ClusterInterest:
        """A record from the wire."""
        return cls(record.cluster, record.version,
                   frozenset(Interest.of(i.store, i.destination, i.matcher, i.content) for i in record.interests),
                   record.observed_at)


@dataclass
class InterestTable:
    """Every cluster's interest a router knows: the record with the highest version per cluster."""

    cluster: str
    """The router's own cluster."""
    records: dict[str, ClusterInterest] = field(default_factory=dict)
    echoed: int = 0
    """The highest version of this cluster's own record seen from elsewhere."""
    changes: int = 0
    """Grows whenever a cluster's interest changes (or a cluster's first record comes): what
    `wanting` said before holds while it stays the same."""
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
        if changed:
            self.changes += 1
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
        if held is None or held.interests != new:
            self.changes += 1
            return True
        return False

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

    def destinations(self, store: str, clusters: Iterable[str], endpoints: Iterable[str] = ()) -> set[str]:
        """The destinations of `store` some cluster of `clusters` has interest in: the topics of
        its topic durables, and `endpoints` (the store's endpoints) if it has a content durable."""
        out: set[str] = set()
        content = False
        for c in clusters:
            r = self.records.get(c)
            if r is not None:
                out.update(i.destination for i in r.interests if i.store == store and not i.content)
                content = content or any(i.store == store and i.content for i in r.interests)
        if content:
            out.update(endpoints)
        return out

    def wanted(self, store: str, destination: str, message: cpb.Message, clusters: Iterable[str],
               endpoint: bool = False) -> bool:
        """True when some cluster of `clusters` has a durable wanting this message: of its
        destination (a topic durable of `destination`; a content durable of the store when
        `destination` is an endpoint) and its fields per the durable's matcher."""
        wanting = self.wanting(store, destination, clusters, endpoint)
        return wanting if isinstance(wanting, bool) else any(match(message) for match in wanting)

    def wanting(self, store: str, destination: str, clusters: Iterable[str],
                endpoint: bool = False) -> bool | list[Match]:
        """What `wanted` decides for every message of `destination` at once: True when some
        cluster of `clusters` wants all of them (a durable without matcher), False when none
        wants any, else the matchers of the durables that want some (a message is wanted when
        one of them matches it). It holds while `changes` stays the same."""
        matchers: list[Match] = []
        for c in clusters:
            r = self.records.get(c)
            if r is None:
                continue
            for i in r.interests:
                if not i.wants(store, destination, endpoint):
                    continue
                match = self._match(i.matcher)
                if match is None:
                    return True
                matchers.append(match)
        return matchers or False


def own_interest(durables: Iterable[apb.DurableStatus], store: str = "") -> set[Interest]:
    """A cluster's interest from its durables as ListDurables lists them (`store`: theirs when
    a durable names none): every durable except the routers' route durables and the ones the
    realm no longer reaches (they take no new messages)."""
    return {Interest.of(d.store or store, d.destination, d.content_matcher, d.content, d.key_field)
            for d in durables if not is_route_durable(d.name) and not d.unreachable}
