"""Which clock a published message's time-to-live ends on, as the leader writes it into the log:
the pseudo-clock by default once every member reads log format 5, the wall clock when the rule
says `ttl_clock: wall` and, during a rolling upgrade, until every member reads format 5."""

from __future__ import annotations

from dataclasses import dataclass

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.membership import MemberRecord, Membership
from strongroom.persistence.messaging import _publish_head
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import parse_realm

REALM = parse_realm("""\
clusters:
  - name: c
    members: [{name: m1}, {name: m2}, {name: m3}]
stores:
  - name: s
    cluster: c
destinations:
  - name: prices
    store: s
    ttl_seconds: 10
    ttl_clock: wall
  - name: kept
    store: s
    retain_seconds: 60
  - name: "*"
    store: s
    ttl_seconds: 10
""")


@dataclass
class _Term:
    """What the publish head reads of a LeaderTerm: the membership and the pseudo-clock (and
    the term's own rule for when the log may carry it)."""

    membership: Membership
    lifetimes_clock = LeaderTerm.lifetimes_clock

    def clock(self) -> float:
        return 500.0


def _term(peer_formats: tuple[int, int]) -> _Term:
    cluster = REALM.cluster("c")
    assert cluster is not None
    membership = Membership(None, cluster, "m1", "127.0.0.1:1")  # type: ignore[arg-type]
    for name, fmt in zip(("m2", "m3"), peer_formats):
        membership.note(name, MemberRecord(f"127.0.0.1:{fmt}", log_format=fmt).to_bytes())
    return _Term(membership)


def _head(destination: str, peer_formats: tuple[int, int]) -> rpb.PublishOp:
    raw = _publish_head(REALM.route(destination), destination, 1000.0, _term(peer_formats))  # type: ignore[arg-type]
    return rpb.PublishOp.FromString(raw)


def test_a_time_to_live_ends_on_the_pseudo_clock_by_default() -> None:
    head = _head("orders", (5, 5))
    assert (head.expires_clock, head.expires_at, head.published_at) == (510.0, 0.0, 1000.0)


def test_a_rule_with_ttl_clock_wall_ends_on_the_wall_clock() -> None:
    head = _head("prices", (5, 5))
    assert (head.expires_at, head.expires_clock) == (1010.0, 0.0)


def test_until_every_member_reads_log_format_5_a_time_to_live_stays_on_the_wall_clock() -> None:
    # A member of format 4 would not know expires_clock and keep the message for ever.
    head = _head("orders", (5, 4))
    assert (head.expires_at, head.expires_clock) == (1010.0, 0.0)


def test_retention_stays_on_the_wall_clock() -> None:
    head = _head("kept", (5, 5))
    assert (head.retain_until, head.expires_at, head.expires_clock) == (1060.0, 0.0, 0.0)


def test_the_last_member_upgraded_switches_time_to_lives_to_the_pseudo_clock_by_itself() -> None:
    term = _term((5, 4))
    route = REALM.route("orders")
    assert rpb.PublishOp.FromString(_publish_head(route, "orders", 1000.0, term)).expires_at == 1010.0  # type: ignore[arg-type]
    # m3 restarts on this version and registers log format 5.
    term.membership.note("m3", MemberRecord("127.0.0.1:5", log_format=5).to_bytes())
    head = rpb.PublishOp.FromString(_publish_head(route, "orders", 1000.0, term))  # type: ignore[arg-type]
    assert (head.expires_clock, head.expires_at) == (510.0, 0.0)
