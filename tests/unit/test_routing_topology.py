"""The forwarding trees every router derives from the realm: one path per origin and cluster."""

from __future__ import annotations

from strongroom.realm.model import parse_realm
from strongroom.routing.topology import Topology


def _realm(clusters: list[str], zones: dict[str, list[str]], stores: dict[str, list[str]]) -> str:
    text = "clusters:\n"
    for i, c in enumerate(clusters):
        text += f"  - name: {c}\n    members:\n      - name: m1\n    router:\n      address: 127.0.0.1:{7100 + i}\n"
    text += "zones:\n" + "".join(f"  - name: {z}\n    clusters: [{', '.join(cs)}]\n" for z, cs in zones.items())
    text += "stores:\n" + "".join(f"  - name: {s}\n    routed: true\n    zones: [{', '.join(zs)}]\n"
                                  for s, zs in stores.items())
    text += "destinations:\n" + "".join(f"  - name: \"{s}.*\"\n    store: {s}\n" for s in stores)
    return text


def _paths(topo_of: dict[str, Topology], store: str, origin: str) -> dict[str, list[str]]:
    """cluster -> the clusters that forward origin's messages to it (exactly one each, but the
    origin none)."""
    into: dict[str, list[str]] = {c: [] for c in topo_of}
    for c, topo in topo_of.items():
        for child in topo.children(store, origin):
            into[child].append(c)
    return into


def test_a_full_mesh_is_a_star_from_each_origin() -> None:
    names = ["london", "rio", "tokyo"]
    realm = parse_realm(_realm(names, {"z": names}, {"wide": ["z"]}))
    topo = {c: Topology.of(realm, c) for c in names}
    for origin in names:
        others = [c for c in names if c != origin]
        assert topo[origin].children("wide", origin) == others
        for c in others:
            assert topo[c].children("wide", origin) == []  # nobody re-forwards
            assert topo[origin].beyond("wide", c)[origin] == {c}
    assert topo["rio"].neighbours() == ["london", "tokyo"]


def test_chained_zones_pass_through_the_middle() -> None:
    realm = parse_realm(_realm(["rio", "london", "tokyo"], {"z1": ["rio", "london"], "z2": ["london", "tokyo"]},
                               {"wide": ["z1", "z2"]}))
    rio, london, tokyo = (Topology.of(realm, c) for c in ("rio", "london", "tokyo"))
    assert rio.neighbours() == ["london"] and tokyo.neighbours() == ["london"]
    assert london.neighbours() == ["rio", "tokyo"]
    assert rio.children("wide", "rio") == ["london"]
    assert london.children("wide", "rio") == ["tokyo"]
    assert tokyo.children("wide", "rio") == []
    # Rio reaches london and tokyo through london, for its own messages only.
    assert rio.beyond("wide", "london") == {"rio": {"london", "tokyo"}}
    assert london.beyond("wide", "tokyo") == {"rio": {"tokyo"}, "london": {"tokyo"}}
    assert london.forwards_to("wide", "tokyo", "rio") and not london.forwards_to("wide", "rio", "rio")
    assert tokyo.beyond("wide", "london") == {"tokyo": {"london", "rio"}}


def test_a_cycle_of_four_zones_reaches_each_cluster_once() -> None:
    names = ["a", "b", "c", "d"]
    zones = {"ab": ["a", "b"], "bc": ["b", "c"], "cd": ["c", "d"], "da": ["d", "a"]}
    realm = parse_realm(_realm(names, zones, {"ring": list(zones)}))
    topo = {c: Topology.of(realm, c) for c in names}
    for origin in names:
        into = _paths(topo, "ring", origin)
        assert into[origin] == []
        assert all(len(into[c]) == 1 for c in names if c != origin), into
    # From a: b and d directly (name order), c through b (b reaches it before d does).
    assert topo["a"].children("ring", "a") == ["b", "d"]
    assert topo["b"].children("ring", "a") == ["c"]
    assert topo["d"].children("ring", "a") == []
    assert topo["a"].beyond("ring", "b") == {"a": {"b", "c"}, "d": {"b"}}


def test_a_cluster_in_two_stores_with_different_zones() -> None:
    names = ["london", "rio", "tokyo"]
    realm = parse_realm(_realm(names, {"all": names, "z1": ["rio", "london"], "z2": ["london", "tokyo"]},
                               {"mesh": ["all"], "chain": ["z1", "z2"]}))
    rio = Topology.of(realm, "rio")
    assert sorted(rio.stores) == ["chain", "mesh"]
    assert rio.stores_with("tokyo") == ["mesh"] and rio.stores_with("london") == ["chain", "mesh"]
    assert rio.children("mesh", "rio") == ["london", "tokyo"]
    assert rio.children("chain", "rio") == ["london"]
    assert rio.beyond("chain", "london") == {"rio": {"london", "tokyo"}}
    assert rio.beyond("mesh", "london") == {"rio": {"london"}}
    assert Topology.of(realm, "london").children("chain", "rio") == ["tokyo"]
    assert Topology.of(realm, "london").children("mesh", "rio") == []


def test_a_store_of_one_cluster_is_not_routed_there() -> None:
    realm = parse_realm(_realm(["rio", "london"], {"z1": ["rio", "london"], "solo": ["rio"]},
                               {"wide": ["z1"], "alone": ["solo"]}))
    assert sorted(Topology.of(realm, "rio").stores) == ["wide"]
