"""A shared-store pair on Kubernetes (persistence.clusters[].sharedStore; docs/store-operations.md,
"Standby on a shared store"): the cluster's one member runs as two pods of its StatefulSet, both
started as standby at their own pod addresses, on one ReadWriteMany claim; the realm the chart
generates declares the pair. Rendered with the real Helm engine (ci/values-shared-store.yaml,
which test_chart_render.py also lints and validates against the Kubernetes schemas).

Not checked here (no Kubernetes cluster): that a real ReadWriteMany volume gives the store's
fcntl lock across nodes (NFSv4 does; NFSv3 without lockd does not), and a takeover between pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from chartkit import (
    NAMESPACE,
    SCENARIOS,
    Rendered,
    args_of,
    check_of,
    expand,
    fullname,
    health_check,
    helm,
    load_values,
    member_container,
    render,
    render_scenario,
)

from strongroom.persistence.k8s import LEADER_VALUE, ROLE_LABEL
from strongroom.realm.model import parse_realm

SCENARIO = "values-shared-store.yaml"
PAIR = "solo"
"""The scenario's shared-store cluster; `orders` beside it is an ordinary three-member cluster."""


@pytest.fixture(scope="module")
def r() -> Rendered:
    return render_scenario(SCENARIO)


def _sts(r: Rendered, cluster: str = PAIR) -> dict[str, Any]:
    return r.get("StatefulSet", f"{fullname(r.values)}-{cluster}")


def _pod_addresses(r: Rendered) -> list[str]:
    """The two pods' stable addresses: "<pod>.<headless Service>.<namespace>.svc.<domain>:<port>"."""
    sts = _sts(r)
    headless = r.get("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    port = r.values["persistence"]["port"]
    return [f"{sts['metadata']['name']}-{i}.{headless['metadata']['name']}.{NAMESPACE}.svc."
            f"{r.values['clusterDomain']}:{port}" for i in range(2)]


def test_the_scenario_is_rendered_with_the_others() -> None:
    # So test_chart_render.py lints it, validates every manifest strictly and checks its invariants.
    assert SCENARIO in {p.name for p in SCENARIOS}


def test_one_readwritemany_claim_is_the_only_claim_both_pods_mount(r: Rendered) -> None:
    sts = _sts(r)
    assert sts["spec"]["replicas"] == 2
    assert "volumeClaimTemplates" not in sts["spec"]  # no claim per pod
    spec = sts["spec"]["template"]["spec"]
    claims = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert len(claims) == 1 and claims[0]["name"] == "data"
    claim_name = claims[0]["persistentVolumeClaim"]["claimName"]
    assert claim_name == f"{sts['metadata']['name']}-data"
    mounts = {m["name"]: m["mountPath"] for m in member_container(sts)["volumeMounts"]}
    assert args_of(member_container(sts))["--data-dir"].startswith(mounts["data"] + "/")

    pvc = r.get("PersistentVolumeClaim", claim_name)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    shared = next(c for c in r.values["persistence"]["clusters"] if c["name"] == PAIR)["sharedStore"]
    assert pvc["spec"]["storageClassName"] == shared["volume"]["storageClass"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == shared["volume"]["size"]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # outlives an uninstall
    # It is the release's only PersistentVolumeClaim: every other cluster keeps a claim per pod.
    assert [c["metadata"]["name"] for c in r.all("PersistentVolumeClaim")] == [claim_name]
    orders = _sts(r, "orders")["spec"]["volumeClaimTemplates"]
    assert [c["spec"]["accessModes"] for c in orders] == [["ReadWriteOnce"]]


def test_both_pods_start_as_standby_each_at_its_own_address(r: Rendered) -> None:
    sts = _sts(r)
    container = member_container(sts)
    args = args_of(container)
    assert args["--run-mode"] == "standby"
    assert args["--cluster"] == PAIR
    # Both pods are the one member: named as the StatefulSet, not as a pod.
    assert args["--member"] == sts["metadata"]["name"]
    assert args["--listen"] == f"0.0.0.0:{r.values['persistence']['port']}"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    advertised = [expand(args["--advertise"], {"POD_NAME": f"{sts['metadata']['name']}-{i}", "POD_NAMESPACE": NAMESPACE})
                  for i in range(sts["spec"]["replicas"])]
    assert advertised == _pod_addresses(r)
    assert advertised[0] != advertised[1]
    # The same data directory for both: one argument in the one pod template.
    assert args["--data-dir"] == "/var/lib/strongroom/data"
    # A standby answers no health check: TCP probes on the member port (see the template).
    port = next(p for p in container["ports"] if p["name"] == "grpc")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["tcpSocket"]["port"] == port["name"]
        assert "grpc" not in container[probe]
    # Other clusters keep their own names and gRPC health probes (through strongroom.probe with TLS).
    orders = member_container(_sts(r, "orders"))
    assert args_of(orders)["--member"] == "$(POD_NAME)" and "--run-mode" not in args_of(orders)
    assert check_of(orders["readinessProbe"]) == health_check(r.values, port["containerPort"])


def test_the_realm_declares_the_pair_at_the_pods_addresses(r: Rendered) -> None:
    text = r.get("ConfigMap", f"{fullname(r.values)}-realm")["data"]["realm.yaml"]
    realm = parse_realm(text, "realm ConfigMap")  # the realm service's own parser and validator
    cluster = realm.cluster(PAIR)
    assert cluster is not None and cluster.shared_store is not None
    assert cluster.shared_store.instances == _pod_addresses(r)
    assert cluster.shared_store.control_interval_seconds == 2
    assert [(m.name, m.address) for m in cluster.members] == [(_sts(r)["metadata"]["name"], None)]
    assert cluster.storage.value == "disk-sync" and cluster.standby is None
    # The member each pod starts as is the realm's, and its advertised address one of the instances.
    args = args_of(member_container(_sts(r)))
    assert cluster.member(args["--member"]) is not None
    orders = realm.cluster("orders")
    assert orders is not None and orders.shared_store is None and len(orders.members) == 3


def test_services_and_disruption_budget_of_the_pair(r: Rendered) -> None:
    sts = _sts(r)
    fn = sts["metadata"]["name"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    client = r.get("Service", fn)
    leader = r.get("Service", f"{fn}-leader")
    # Clients reach either pod; the standby answers NOT_LEADER naming the standard.
    assert all(pod_labels.get(k) == v for k, v in client["spec"]["selector"].items())
    assert leader["spec"]["selector"] == {**sts["spec"]["selector"]["matchLabels"], ROLE_LABEL: LEADER_VALUE}
    pdb = r.get("PodDisruptionBudget", fn)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]}}
    role = next(x for x in r.all("Role") if x["metadata"]["labels"]["app.kubernetes.io/component"] == "persistence")
    assert {f"{fn}-0", f"{fn}-1"} <= set(role["rules"][0]["resourceNames"])  # either pod labels itself leader
    assert f"{fn}-0.{fn}-headless" in r.notes and f"{fn}-data" in r.notes


def test_the_neighbouring_cluster_renders_as_without_the_pair() -> None:
    values = load_values(SCENARIOS[0].parent / SCENARIO)
    alone = copy.deepcopy(values)
    alone["persistence"]["clusters"] = [c for c in alone["persistence"]["clusters"] if c["name"] != PAIR]
    alone["realm"]["stores"] = [s for s in alone["realm"]["stores"] if s["cluster"] != PAIR]
    alone["realm"]["destinations"] = [{"name": "*", "kind": "topic", "store": "orders"}]
    with_pair, without = render(values), render(alone)
    fn = fullname(with_pair.values)
    for kind, name in (("StatefulSet", f"{fn}-orders"), ("Service", f"{fn}-orders"),
                       ("Service", f"{fn}-orders-leader"), ("Service", f"{fn}-orders-headless"),
                       ("PodDisruptionBudget", f"{fn}-orders")):
        assert with_pair.get(kind, name) == without.get(kind, name), (kind, name)


def _pair(**over: Any) -> dict[str, Any]:
    cluster = {"name": "default", "members": 1, "storage": "disk-sync", "sharedStore": {"enabled": True}}
    return {"persistence": {"clusters": [{**cluster, **over}]}}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("two members", _pair(members=3),
     "persistence.clusters[0] (default) has sharedStore.enabled with 3 members: a shared-store pair is one "
     "member run as two pods on one ReadWriteMany volume; set persistence.clusters[0].members to 1"),
    ("memory storage", _pair(storage="memory"),
     "persistence.clusters[0] (default) has sharedStore.enabled with storage memory: the standby takes over "
     "the store the standard keeps on the shared volume, and a memory store keeps nothing there; use storage "
     "disk-sync or disk-async."),
    ("a standby set too", _pair(standby={"members": 1, "primary": ["a:1"]}),
     "persistence.clusters[0] (default) has sharedStore.enabled and a disaster-recovery standby set "
     "(persistence.clusters[0].standby): the realm refuses a shared store with a standby set"),
    ("no ReadWriteMany class when required",
     {"persistence": {**_pair()["persistence"], "requireStorageClass": True}},
     "persistence.clusters[0] (default) is a shared-store pair (storage disk-sync) but neither "
     "persistence.clusters[0].sharedStore.volume.storageClass nor .volume.storageClass is set"),
]


@pytest.mark.parametrize(("values", "sentence"), [(v, s) for _, v, s in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_the_chart_refuses_a_pair_that_cannot_run(values: dict[str, Any], sentence: str) -> None:
    with pytest.raises(helm.HelmError) as exc:
        render(values)
    assert "STRONGROOM VALUES:" in str(exc.value)
    assert sentence in str(exc.value)


def test_members_2_is_refused_as_a_pair_and_as_an_even_count() -> None:
    with pytest.raises(helm.HelmError) as exc:
        render(_pair(members=2))
    assert "has sharedStore.enabled with 2 members" in str(exc.value)
    assert "has 2 members; use an odd count" in str(exc.value)


def test_the_smallest_pair_renders_with_the_realm_defaults() -> None:
    r = render(_pair())
    realm = parse_realm(r.get("ConfigMap", f"{fullname(r.values)}-realm")["data"]["realm.yaml"], "realm ConfigMap")
    cluster = realm.cluster("default")
    assert cluster is not None and cluster.shared_store is not None
    assert cluster.shared_store.control_interval_seconds == 2.0  # the realm's default: the key is left out
    pvc = r.get("PersistentVolumeClaim", f"{fullname(r.values)}-default-data")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and "storageClassName" not in pvc["spec"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"


def test_the_schema_types_the_shared_store_keys() -> None:
    for bad, where in (({"enabled": "yes"}, "enabled"), ({"enabled": True, "controlIntervalSeconds": 0},
                                                        "controlIntervalSeconds"),
                       ({"enabled": True, "volume": {"size": "lots"}}, "size"), ({"enabled": True, "typo": 1}, "typo")):
        with helm.Chart.load(str(SCENARIOS[0].parent.parent)) as chart, pytest.raises(helm.HelmValuesError) as exc:
            chart.validate_schema(_pair(sharedStore=bad))
        assert where in str(exc.value)
