"""Forwarding zones in the realm: where a routed store exists, and bad zones refused at file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from strongroom.errors import RealmInvalid
from strongroom.realm.model import parse_realm


def cluster(name: str, router: bool = True, port: int = 7100) -> str:
    text = f"  - name: {name}\n    members:\n      - name: m1\n"
    if router:
        text += f"    router:\n      address: 127.0.0.1:{port}\n"
    return text


def realm(clusters: str, zones: str, stores: str, destinations: str = "  - name: \"wide.*\"\n    store: wide\n") -> str:
    return f"clusters:\n{clusters}zones:\n{zones}stores:\n{stores}destinations:\n{destinations}"


CHAINED_CLUSTERS = (cluster("rio", port=7101) + cluster("london", port=7102) + cluster("tokyo", port=7103)
                    + cluster("paris", router=False))
CHAINED_ZONES = "  - name: z1\n    clusters: [rio, london]\n  - name: z2\n    clusters: [london, tokyo]\n"
CHAINED_STORES = "  - name: wide\n    routed: true\n    zones: [z1, z2]\n  - name: local\n    cluster: paris\n"
CHAINED = realm(CHAINED_CLUSTERS, CHAINED_ZONES, CHAINED_STORES)


def problems(text: str) -> list[str]:
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text)
    return info.value.problems


def line_of(text: str, needle: str, nth: int = 1) -> int:
    seen = 0
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            seen += 1
            if seen == nth:
                return number
    raise AssertionError(needle)


def test_a_routed_store_exists_at_every_cluster_of_its_zones() -> None:
    r = parse_realm(CHAINED)
    wide, local = r.store("wide"), r.store("local")
    assert wide is not None and local is not None
    assert wide.clusters == ("rio", "london", "tokyo")
    assert wide.served_by("tokyo") and not wide.served_by("paris")
    assert local.clusters == ("paris",) and local.served_by("paris") and not local.served_by("rio")
    assert [s.name for s in r.routed_stores("london")] == ["wide"]
    assert r.routed_stores("paris") == []
    assert r.cluster("rio").router.address == "127.0.0.1:7101"  # type: ignore[union-attr]
    # A destination of the routed store resolves at each of its clusters.
    assert r.route("wide.prices").store.name == "wide"


def test_a_routed_store_with_a_cluster_and_no_zones_stays_a_store_of_that_cluster() -> None:
    text = realm(cluster("c1", router=False), "", "  - name: wide\n    cluster: c1\n    routed: true\n")
    r = parse_realm(text.replace("zones:\n", ""))
    assert r.store("wide").clusters == ("c1",)  # type: ignore[union-attr]
    assert r.routed_stores("c1") == []  # nothing to forward to


def test_a_zone_naming_an_unknown_cluster() -> None:
    text = CHAINED.replace("clusters: [london, tokyo]", "clusters: [london, osaka]")
    p = problems(text)
    assert any(x.startswith(f"realm.yaml:{line_of(text, 'clusters: [london, osaka]')}:")
               and "zone 'z2' names cluster 'osaka', which the realm does not define" in x for x in p), p


def test_zones_that_share_no_cluster_cannot_carry_a_store() -> None:
    text = CHAINED.replace("clusters: [london, tokyo]", "clusters: [paris, tokyo]")
    # paris has no router either: both problems are reported.
    p = problems(text)
    assert any(f":{line_of(text, 'zones: [z1, z2]')}:" in x and "share no cluster between {london, rio} and "
               "{paris, tokyo}" in x for x in p), p
    assert any(f":{line_of(text, '- name: paris')}:" in x and "cluster 'paris' is in zone 'z2'" in x
               and "no router address" in x for x in p), p


def test_a_router_address_missing() -> None:
    text = CHAINED.replace("    router:\n      address: 127.0.0.1:7103\n", "")
    p = problems(text)
    assert len(p) == 1 and p[0].startswith(f"realm.yaml:{line_of(text, '- name: tokyo')}:"), p
    assert "cluster 'tokyo' is in zone 'z2' of routed store 'wide' but has no router address" in p[0]


def test_a_bad_router_address() -> None:
    text = CHAINED.replace("127.0.0.1:7103", "tokyo-router")
    p = problems(text)
    assert any(f":{line_of(text, 'tokyo-router')}:" in x and "must be host:port" in x for x in p), p


def test_units_of_work_cannot_be_published_to_a_routed_store() -> None:
    """A durable topic (units of work) of a routed store is refused where it says so: a UOW
    commits in one cluster, its readers and status are that cluster's (docs/routing.md); the
    same topic in a store of one cluster is fine."""
    durable = "  - name: \"wide.*\"\n    store: wide\n    units_of_work:\n      durable: true\n"
    text = realm(CHAINED_CLUSTERS, CHAINED_ZONES, CHAINED_STORES, durable)
    p = problems(text)
    assert len(p) == 1 and p[0].startswith(f"realm.yaml:{line_of(text, 'durable: true')}:"), p
    assert "'wide.*' maps to routed store 'wide'; units of work are not routed between clusters" in p[0]
    parse_realm(realm(CHAINED_CLUSTERS, CHAINED_ZONES, CHAINED_STORES,
                      durable.replace("wide.*", "paris.*").replace("store: wide", "store: local")))


def test_zones_on_a_store_that_is_not_routed() -> None:
    text = CHAINED.replace("    routed: true\n    zones: [z1, z2]\n", "    cluster: rio\n    zones: [z1, z2]\n")
    p = problems(text)
    assert any(f":{line_of(text, 'zones: [z1, z2]')}:" in x and "is not routed" in x for x in p), p


def test_a_store_naming_an_unknown_zone_or_a_cluster_outside_its_zones() -> None:
    text = CHAINED.replace("zones: [z1, z2]", "zones: [z1, z9]")
    p = problems(text)
    assert any("names zone 'z9', which the realm does not define" in x for x in p), p
    text = CHAINED.replace("    routed: true\n    zones: [z1, z2]\n", "    routed: true\n    cluster: paris\n    zones: [z1, z2]\n")
    p = problems(text)
    assert any(f":{line_of(text, 'cluster: paris')}:" in x and "in none of its zones" in x for x in p), p


def test_a_store_without_a_cluster_must_be_routed_with_zones() -> None:
    text = CHAINED.replace("  - name: local\n    cluster: paris\n", "  - name: local\n    replicated: true\n")
    p = problems(text)
    assert any(f":{line_of(text, '- name: local')}:" in x and "names no cluster" in x for x in p), p


def test_a_zone_listing_a_cluster_twice_and_zone_names_twice() -> None:
    text = CHAINED.replace("clusters: [rio, london]", "clusters: [rio, rio]")
    assert any("cluster 'rio' appears twice" in x for x in problems(text))
    text = CHAINED.replace("  - name: z2\n", "  - name: z1\n")
    assert any("zone name 'z1' appears twice" in x for x in problems(text))


def test_a_cycle_of_zones_is_allowed() -> None:
    text = realm(cluster("a", port=1) + cluster("b", port=2) + cluster("c", port=3) + cluster("d", port=4),
                 "  - name: ab\n    clusters: [a, b]\n  - name: bc\n    clusters: [b, c]\n"
                 "  - name: cd\n    clusters: [c, d]\n  - name: da\n    clusters: [d, a]\n",
                 "  - name: wide\n    routed: true\n    zones: [ab, bc, cd, da]\n")
    assert parse_realm(text).store("wide").clusters == ("a", "b", "c", "d")  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["routing-one-zone.yaml", "routing-chained.yaml"])
def test_the_example_realms_are_valid(name: str) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / name
    r = parse_realm(path.read_text(), str(path))
    wide = r.store("wide")
    assert wide is not None and wide.clusters == ("rio", "london", "tokyo")
    assert all(c.router is not None for c in r.clusters)
