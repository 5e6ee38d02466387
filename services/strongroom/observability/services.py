"""The metrics of the services beside the members: a router replica's (from its `RouterStatus`),
a DR service's (from its `DrStatus`) and the realm service's (each served by
`exporter.serve_metrics`).

As a member's, they are built on the service's event loop at each scrape, from the status the
service answers at that moment (catalog.py names and explains each one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.metrics_core import Metric

from strongroom.api.v1 import dr_pb2
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.observability.catalog import family
from strongroom.security import refusals

__all__ = ["dr_families", "realm_families", "refused_family", "router_families"]


def refused_family(name: str, who: Sequence[str], places: Sequence[str] = ("grpc",)) -> Metric:
    """The refusals this process counted (`strongroom.security.refusals`) as the family `name`,
    every (where, reason) of `places` present (0 until one happens)."""
    counts = refusals.snapshot()
    fam = family(name)
    for where in places:
        for reason in refusals.REASONS:
            fam.add_metric([*who, where, reason], counts.get((where, reason), 0))
    return fam


def router_families(st: rpb.RouterStatus) -> list[Metric]:
    """A router replica's metrics: whether it is active, and per route to a neighbour cluster."""
    who = [st.cluster, st.replica]
    active = family("strongroom_router_active")
    active.add_metric(who, 1 if st.active else 0)
    out = [active]
    per_route = (("strongroom_route_connected", lambda p: 1 if p.connected else 0),
                 ("strongroom_route_forwarded_messages", lambda p: p.forwarded_messages),
                 ("strongroom_route_received_messages", lambda p: p.received_messages),
                 ("strongroom_route_resent_messages", lambda p: p.resent_messages),
                 ("strongroom_route_duplicate_messages", lambda p: p.duplicate_messages),
                 ("strongroom_route_waiting_messages", lambda p: p.waiting_messages),
                 ("strongroom_route_oldest_waiting_seconds", lambda p: p.oldest_waiting_seconds))
    for name, read in per_route:
        fam = family(name)
        for peer in st.peers:
            fam.add_metric([*who, peer.cluster], read(peer))
        out.append(fam)
    return [*out, refused_family("strongroom_router_refused", who)]


def dr_families(st: dr_pb2.DrStatus, site: str) -> list[Metric]:
    """A DR service's metrics; `site`: the set it serves, "primary" or "standby"."""
    who = [st.cluster, site]
    out = []
    for name, value in (("strongroom_dr_shipping", 1 if st.state == "shipping" else 0),
                        ("strongroom_dr_generation", st.generation),
                        ("strongroom_dr_entries_behind", st.entries_behind),
                        ("strongroom_dr_messages_behind", st.messages_behind),
                        ("strongroom_dr_seconds_behind", st.seconds_behind),
                        ("strongroom_dr_shipped_bytes", st.bytes_shipped),
                        ("strongroom_dr_shipped_batches", st.batches_shipped),
                        ("strongroom_dr_shipped_snapshots", st.snapshots_shipped),
                        ("strongroom_dr_reconnects", st.reconnects)):
        fam = family(name)
        fam.add_metric(who, value)
        out.append(fam)
    return [*out, refused_family("strongroom_dr_refused", who)]


def realm_families(address: str, version: int, applies: Mapping[str, int]) -> list[Metric]:
    """The realm service's metrics: the current realm version it knows, its applies by outcome."""
    current = family("strongroom_realm_version")
    current.add_metric([address], version)
    answered = family("strongroom_realm_applies")
    for outcome, n in sorted(applies.items()):
        answered.add_metric([address, outcome], n)
    return [current, answered, refused_family("strongroom_realm_refused", [address])]
