"""Interest records: merged by version, read from durables, and asked whether a message is wanted."""

from __future__ import annotations

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


def test_route_durables_are_not_interest() -> None:
    m = build_matcher({"sym": "A"})
    got = own_interest([("wide", "wide.a", "billing", None), ("wide", "wide.a", route_durable("rio"), None),
                        ("wide", "wide.b", "x", m), ("wide", "wide.b", "y", build_matcher({"sym": "A"}))])
    assert got == {Interest.of("wide", "wide.a"), Interest.of("wide", "wide.b", m)}


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
