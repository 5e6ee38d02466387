"""Interest records: merged by version, read from durables, and asked whether a message is wanted."""

from __future__ import annotations

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.client.messages import build_matcher, fill_message
from strongroom.routing.interest import (
    ClusterInterest,
    Interest,
    InterestTable,
    next_version,
    own_interest,
    route_durable,
)


def message(**fields: object) -> cpb.Message:
    m = cpb.Message()
    fill_message(m, b"x", fields, "", 0)
    return m


def test_the_higher_version_wins_and_travels() -> None:
    table = InterestTable("london")
    a1 = ClusterInterest("rio", 10, frozenset({Interest.of("wide", "wide.a")}))
    a0 = ClusterInterest("rio", 5, frozenset())
    assert table.merge([a1]) is True
    assert table.merge([a0]) is False
    assert table.records["rio"] is a1
    a2 = ClusterInterest("rio", 11, frozenset())
    assert table.merge([a2]) is True and table.records["rio"] is a2
    # The wire form round-trips.
    assert ClusterInterest.from_proto(a1.to_proto()) == a1


def test_an_own_record_is_never_taken_from_elsewhere_and_moves_past_its_echo() -> None:
    table = InterestTable("london")
    table.set_own([Interest.of("wide", "wide.a")], now_ns=100)
    assert table.merge([ClusterInterest("london", 5_000, frozenset())]) is False
    assert table.own().interests == {Interest.of("wide", "wide.a")}  # type: ignore[union-attr]
    # A restarted router with a slower clock still moves forward past what neighbours hold.
    table.set_own([], now_ns=200)
    assert table.own().version == 5_001  # type: ignore[union-attr]
    assert next_version(10, 3, now_ns=50) == 50 and next_version(10, 3, now_ns=5) == 11


def listed(destination: str, name: str, matcher: cpb.ContentMatcher | None = None, **kw: object) -> apb.DurableStatus:
    """A durable as ListDurables lists it."""
    return apb.DurableStatus(store="wide", destination=destination, name=name, content_matcher=matcher, **kw)  # type: ignore[arg-type]


def test_route_durables_are_not_interest() -> None:
    m = build_matcher({"sym": "A"})
    got = own_interest([listed("wide.a", "billing"), listed("wide.a", route_durable("rio")),
                        listed("wide.b", "x", m), listed("wide.b", "y", build_matcher({"sym": "A"})),
                        listed("wide.c", "gone", unreachable=True)])
    assert got == {Interest.of("wide", "wide.a"), Interest.of("wide", "wide.b", m)}


def test_a_content_durable_wants_what_any_endpoint_of_its_store_publishes_that_it_matches() -> None:
    """A durable opened through endpoint `quotes` (the FTL content model) wants the messages
    published to any endpoint of its store that its matcher wants, not the store's topics."""
    (content,) = own_interest([listed("quotes", "desk", build_matcher({"sym": "A"}), content=True)])
    assert content.content and content.destination == "quotes"
    table = InterestTable("london")
    table.merge([ClusterInterest("rio", 1, frozenset({content}))])
    assert ClusterInterest.from_proto(table.records["rio"].to_proto()) == table.records["rio"]  # on the wire
    assert table.wanted("wide", "quotes", message(sym="A"), {"rio"}, endpoint=True)
    assert table.wanted("wide", "trades", message(sym="A"), {"rio"}, endpoint=True)  # another endpoint
    assert not table.wanted("wide", "trades", message(sym="B"), {"rio"}, endpoint=True)  # its matcher
    assert not table.wanted("wide", "wide.a", message(sym="A"), {"rio"})  # a topic of the store
    assert not table.wanted("other", "quotes", message(sym="A"), {"rio"}, endpoint=True)
    # Its routes: every endpoint of the store, no topic.
    assert table.destinations("wide", {"rio"}, ["quotes", "trades"]) == {"quotes", "trades"}
    assert table.destinations("wide", {"rio"}) == set()


def test_a_keyed_durable_wants_only_messages_with_its_key_field() -> None:
    (keyed,) = own_interest([listed("wide.a", "latest", key_field="sym", kind=cpb.DURABLE_KIND_LASTVALUE)])
    table = InterestTable("london")
    table.merge([ClusterInterest("rio", 1, frozenset({keyed}))])
    assert table.wanted("wide", "wide.a", message(sym="A", px=1), {"rio"})
    assert not table.wanted("wide", "wide.a", message(px=1), {"rio"})


def test_wanted_uses_the_members_matcher() -> None:
    table = InterestTable("london")
    table.merge([ClusterInterest("rio", 1, frozenset({Interest.of("wide", "wide.a", build_matcher({"n": 1}))})),
                 ClusterInterest("tokyo", 1, frozenset({Interest.of("wide", "wide.b")}))])
    assert table.wanted("wide", "wide.a", message(n=1), {"rio"})
    assert not table.wanted("wide", "wide.a", message(n=1.0), {"rio"})  # typed equality
    assert not table.wanted("wide", "wide.a", message(n=1), {"tokyo"})
    assert table.wanted("wide", "wide.b", message(), {"tokyo", "paris"})
    assert not table.wanted("other", "wide.b", message(), {"tokyo"})
    assert table.destinations("wide", {"rio", "tokyo"}) == {"wide.a", "wide.b"}


def test_what_is_decided_for_all_messages_at_once_holds_until_interest_changes() -> None:
    """`wanting` decides for every message of a destination (routers keep it per route), and
    `changes` tells when it must be decided again: a changed interest, a cluster's first
    record; not a new version of the same interest."""
    table = InterestTable("london")
    assert table.wanting("wide", "wide.a", {"rio"}) is False
    before = table.changes
    table.merge([ClusterInterest("rio", 1, frozenset({Interest.of("wide", "wide.a", build_matcher({"n": 1}))}))])
    assert table.changes > before
    matchers = table.wanting("wide", "wide.a", {"rio"})
    assert isinstance(matchers, list) and [m(message(n=1)) for m in matchers] == [True]
    assert [m(message(n=2)) for m in matchers] == [False]
    before = table.changes
    table.merge([ClusterInterest("rio", 2, frozenset({Interest.of("wide", "wide.a", build_matcher({"n": 1}))}))])
    assert table.changes == before  # the same interest, a newer version
    table.merge([ClusterInterest("rio", 3, frozenset({Interest.of("wide", "wide.a")}))])
    assert table.changes > before and table.wanting("wide", "wide.a", {"rio"}) is True
    before = table.changes
    table.set_own([Interest.of("wide", "wide.b")], now_ns=10)
    table.set_own([Interest.of("wide", "wide.b")], now_ns=20)
    assert table.changes == before + 1


def test_a_routes_decision_is_made_again_once_interest_or_the_realm_changed() -> None:
    """Router.wanted_beyond keeps its decision per (store, destination, origin, neighbour): a
    cluster beyond whose record is unknown wants everything, then its record decides, and a
    changed interest or topology is decided anew, never answered from before."""
    from types import SimpleNamespace

    from strongroom.realm.model import parse_realm
    from strongroom.routing.router import Router
    from strongroom.routing.topology import Topology

    text = """\
clusters:
  - {name: london, members: [{name: m1}], router: {address: "127.0.0.1:7101"}}
  - {name: rio, members: [{name: m1}], router: {address: "127.0.0.1:7102"}}
zones:
  - {name: z, clusters: [london, rio]}
stores:
  - {name: wide, routed: true, zones: [z]}
destinations:
  - {name: "wide.*", store: wide}
"""
    realm = parse_realm(text)
    router = SimpleNamespace(_wanting={}, table=InterestTable("london"), topology=Topology.of(realm, "london"),
                             realm=realm)

    def wanted(m: cpb.Message) -> bool:
        return Router.wanted_beyond(router, "wide", "wide.a", "london", "rio", m)  # type: ignore[arg-type]

    assert wanted(message(n=2))  # rio's interest is not known yet: everything goes
    router.table.merge([ClusterInterest("rio", 1, frozenset({Interest.of("wide", "wide.a", build_matcher({"n": 1}))}))])
    assert wanted(message(n=1)) and not wanted(message(n=2))
    router.table.merge([ClusterInterest("rio", 2, frozenset({Interest.of("wide", "wide.b")}))])
    assert not wanted(message(n=1))
    router.table.merge([ClusterInterest("rio", 3, frozenset({Interest.of("wide", "wide.a")}))])
    assert wanted(message(n=2))
    # A realm without rio's side of the tree: nobody beyond rio any more.
    router.topology = Topology.of(parse_realm(text.replace("clusters: [london, rio]", "clusters: [london]")), "london")
    assert not wanted(message(n=2))
