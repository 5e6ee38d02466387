"""values.yaml is documented and typed key by key; values that would not run are refused with a
sentence saying what to change."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from chartkit import CHART, helm, render

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def _cluster(**over: Any) -> dict[str, Any]:
    return {"name": "default", "members": 3, "storage": "disk-sync", **over}


# (values, a sentence the failure must contain)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("even members", {"persistence": {"clusters": [_cluster(members=4)]}},
     "persistence.clusters[0] (default) has 4 members; use an odd count (1, 3, 5 ...) so a majority is well defined."),
    ("disk without a storage class when required",
     {"persistence": {"requireStorageClass": True, "clusters": [_cluster()]}},
     ("persistence.clusters[0] (default) keeps its data on disk (storage disk-sync) but "
      "persistence.clusters[0].volume.storageClass is empty while persistence.requireStorageClass is true: "
      "name the StorageClass its volumes are provisioned from.")),
    ("no etcd at all", {"etcd": {"enabled": False}},
     ("etcd.enabled is false but etcd.externalEndpoints is empty: list the host:port of your etcd, "
      "or enable the bundled etcd.")),
    ("replication link on the gRPC port", {"persistence": {"replicationPort": 7101}},
     ("persistence.replicationPort (7101) is the same as persistence.port: the replication link needs a "
      "port of its own.")),
    ("even etcd", {"etcd": {"replicas": 2}},
     "etcd.replicas is 2; use an odd count (1, 3, 5) so etcd's majority is well defined."),
    ("store on an undefined cluster", {"realm": {"stores": [{"name": "s", "cluster": "nope"}], "destinations": []}},
     'realm.stores[0] (s) names cluster "nope", which persistence.clusters does not define.'),
    ("destination on an undefined store",
     {"realm": {"destinations": [{"name": "*", "store": "nope"}]}},
     'realm.destinations[0] (*) names store "nope", which realm.stores does not define.'),
    ("grace shorter than a hand-off",
     {"persistence": {"terminationGracePeriodSeconds": 5, "clusters": [_cluster(leaseTtlSeconds=3)]}},
     ("persistence.terminationGracePeriodSeconds (5) must exceed the lease TTL of persistence.clusters[0] "
      "(default) (3 s) plus the member's 2 s drain")),
    ("duplicate cluster", {"persistence": {"clusters": [_cluster(), _cluster()]}},
     'persistence.clusters[1] (default): the cluster name "default" is used twice'),
    ("no cluster", {"persistence": {"clusters": []}}, "persistence.clusters is empty"),
    ("names too long", {"fullnameOverride": "a" * 40, "persistence": {"clusters": [_cluster(name="b" * 20)]}},
     "over Kubernetes' 52; shorten the release name, fullnameOverride or the cluster name."),
]


@pytest.mark.parametrize(("values", "sentence"), [(v, s) for _, v, s in INVALID], ids=[n for n, _, _ in INVALID])
def test_invalid_values_fail_with_a_clear_sentence(values: dict[str, Any], sentence: str) -> None:
    with pytest.raises(helm.HelmError) as exc:
        render(values)
    assert "STRONGROOM VALUES:" in str(exc.value)
    assert sentence in str(exc.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(helm.HelmError) as exc:
        render({"etcd": {"replicas": 2}, "persistence": {"clusters": [_cluster(members=2)]}})
    assert "etcd.replicas is 2" in str(exc.value) and "has 2 members" in str(exc.value)


def test_lint_refuses_values_the_schema_refuses() -> None:
    # Helm's lint mode logs a template's `fail` instead of failing, so the validateValues
    # sentences are checked on render above; what lint does refuse is a schema violation.
    report = helm.lint(str(CHART), {"persistence": {"replicas": 3}}, strict=True)
    assert any("additional properties 'replicas' not allowed" in e for e in report["errors"])


def test_valid_edge_cases_render() -> None:
    render({"persistence": {"requireStorageClass": True,
                            "clusters": [_cluster(storage="memory"), _cluster(name="b", volume={"storageClass": "x"})]},
            "realm": {"stores": [{"name": "s", "cluster": "b"}], "destinations": [{"name": "*", "store": "s"}]}})
    render({"persistence": {"clusters": [_cluster(members=1)]}})


@pytest.mark.parametrize(("values", "where"), [
    ({"persistence": {"clusters": [_cluster(members="three")]}}, "/persistence/clusters/0/members"),
    ({"persistence": {"clusters": [_cluster(storage="tape")]}}, "/persistence/clusters/0/storage"),
    ({"persistence": {"clusters": [_cluster(name="Orders_1")]}}, "/persistence/clusters/0/name"),
    ({"persistence": {"antiAffinity": "sometimes"}}, "/persistence/antiAffinity"),
    ({"persistence": {"replicas": 3}}, "replicas"),  # unknown key: a typo is not silently ignored
    ({"etcd": {"externalEndpoints": ["no-port"]}}, "/etcd/externalEndpoints/0"),
    ({"realm": {"stores": [{"name": "s", "cluster": "default", "publisher_mode": "maybe"}]}}, "publisher_mode"),
    ({"realm": {"stores": [{"name": "s", "routed": "yes", "zones": ["z"]}]}}, "/realm/stores/0/routed"),
    ({"realm": {"zones": [{"name": "z", "clusters": []}]}}, "/realm/zones/0/clusters"),
    ({"persistence": {"clusters": [_cluster(router={"address": "no-port"})]}},
     "/persistence/clusters/0/router/address"),
    ({"router": {"service": {"type": "ExternalName"}}}, "/router/service/type"),
    ({"router": {"replicas": 0}}, "/router/replicas"),
    ({"router": {"probes": {"readinessService": "x"}}}, "readinessService"),
])
def test_schema_types_keys(values: dict[str, Any], where: str) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as exc:
        chart.validate_schema(values)
    assert where in str(exc.value)


def _schema_for(path: tuple[str | int, ...]) -> dict[str, Any]:
    node = SCHEMA
    for part in path:
        node = node["items"] if isinstance(part, int) else node["properties"][part]
    return node


def _walk(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], Any]]:
    out = [(path, value)] if path else []
    schema = _schema_for(path) if path else SCHEMA
    if isinstance(value, dict) and schema.get("additionalProperties") is not True:
        for k, v in value.items():
            out += _walk(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _walk(v, (*path, i))
    return out


def test_schema_types_and_describes_every_key_of_values_yaml() -> None:
    for path, value in _walk(DEFAULTS):
        if isinstance(path[-1], int):
            continue
        node = _schema_for(path)
        assert node.get("type"), f"{path}: no type"
        assert node.get("description"), f"{path}: no description"


def test_schema_describes_every_property_it_declares() -> None:
    def visit(node: dict[str, Any], where: str) -> None:
        for name, child in node.get("properties", {}).items():
            assert child.get("type") and child.get("description"), f"{where}.{name}"
            visit(child, f"{where}.{name}")
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{where}[]")

    visit(SCHEMA, "values")


def test_every_key_of_values_yaml_is_commented() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    key = re.compile(r"^(\s*)(- )?([A-Za-z_][\w.-]*|\"[^\"]+\"):")
    for n, line in enumerate(lines):
        if not key.match(line):
            continue
        prev = next((lines[i].strip() for i in range(n - 1, -1, -1) if lines[i].strip()), "")
        inline = " #" in line.split(":", 1)[1]
        # A comment line right above, or on the key's own line ("- # ..." opens a list item).
        assert prev.startswith(("#", "- #")) or inline, f"values.yaml:{n + 1}: {line.strip()} has no comment"
