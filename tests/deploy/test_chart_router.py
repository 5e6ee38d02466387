"""The chart runs a router per cluster the realm routes: a Deployment of replicas (one active,
standbys) started as the local launcher starts a router, with the members' etcd, every running
replica ready, and a Service that reaches only the active replica: the one that labelled its own
pod (persistence/k8s.py, as the member leaders do), with the ServiceAccount and Role that label
needs; no router for a realm without routed stores."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartkit import (
    CHART,
    NAMESPACE,
    SCENARIOS,
    TLS_DIR,
    Rendered,
    check_of,
    fullname,
    health_check,
    helm,
    load_values,
    render,
    render_scenario,
)

from strongroom.api.v1 import router_pb2
from strongroom.errors import RealmInvalid
from strongroom.local.process import router_argv
from strongroom.persistence.k8s import ACTIVE_VALUE, LEADER_VALUE, ROLE_LABEL, patch_body
from strongroom.realm.model import Realm, parse_realm

ROUTER_SERVICE = router_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
ZONES = "values-zones.yaml"
SITE = "values-zones-site.yaml"


def routers(r: Rendered, kind: str) -> list[dict[str, Any]]:
    """The router resources of a kind."""
    return [d for d in r.all(kind) if d["metadata"]["labels"]["app.kubernetes.io/component"] == "router"]


def router_container(deploy: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deploy["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    assert container["name"] == "router"
    return container


def args_of(container: dict[str, Any]) -> dict[str, str]:
    """--flag=value arguments by flag, in order."""
    return {flag: value for flag, _, value in (a.partition("=") for a in container["args"])}


def realm_of(r: Rendered) -> Realm:
    """The generated realm file, parsed by the realm service's own validator."""
    return parse_realm(r.get("ConfigMap", f"{fullname(r.values)}-realm")["data"]["realm.yaml"], "realm ConfigMap")


def routed_clusters(r: Rendered) -> list[str]:
    """The clusters the chart must run a router for: by the realm's own rule (Realm.routed_stores,
    which the local launcher starts routers by) or, with an existing realm, router.clusters."""
    if r.values["realm"]["existingConfigMap"]:
        return list(r.values["router"]["clusters"])
    realm = realm_of(r)
    return [c.name for c in realm.clusters if realm.routed_stores(c.name)]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- which clusters get a router -------------------------------------------------------------------


def test_a_router_runs_for_every_routed_cluster_and_no_other(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    # A standby site (dr.role standby) runs none: its sets serve no client.
    runs = scenario.values["router"]["enabled"] and scenario.values["dr"]["role"] != "standby"
    wanted = routed_clusters(scenario) if runs else []
    names = [f"{fn}-{c}-router" for c in wanted]
    assert [d["metadata"]["name"] for d in routers(scenario, "Deployment")] == names
    assert [s["metadata"]["name"] for s in routers(scenario, "Service")] == names
    for name, cluster in zip(names, wanted, strict=True):
        for doc in (scenario.get("Deployment", name), scenario.get("Service", name)):
            assert doc["metadata"]["labels"]["strongroom.io/cluster"] == cluster


def test_the_zone_scenarios_route_what_they_say() -> None:
    assert {"values-zones.yaml", "values-zones-site.yaml"} <= {p.name for p in SCENARIOS}
    assert routed_clusters(render_scenario(ZONES)) == ["rio", "london", "tokyo"]  # not cache
    assert routed_clusters(render_scenario(SITE)) == ["rio"]


def test_no_router_for_a_realm_without_routed_stores() -> None:
    for name in ("values-default.yaml", "values-multi-cluster.yaml"):
        r = render_scenario(name)
        assert not routers(r, "Deployment") and not routers(r, "Service")
        assert "Routers" not in r.notes


def test_no_router_for_a_routed_store_at_one_cluster_only() -> None:
    """A routed store whose zones hold one cluster forwards nothing: that cluster needs no router
    (nor a router address)."""
    values = load_values(CHART / "ci" / ZONES)
    values["realm"]["zones"] = [{"name": "alone", "clusters": ["rio"]}]
    values["realm"]["stores"][0]["zones"] = ["alone"]
    for c in values["persistence"]["clusters"]:
        c.pop("router", None)
    r = render(values)
    prices = realm_of(r).store("prices")
    assert prices is not None and prices.routed and prices.clusters == ("rio",)
    assert not routers(r, "Deployment") and routed_clusters(r) == []


def test_chained_zones_route_every_cluster_of_them() -> None:
    values = load_values(CHART / "ci" / ZONES)
    values["realm"]["zones"] = [{"name": "south", "clusters": ["rio", "london"]},
                                {"name": "east", "clusters": ["london", "tokyo"]}]
    values["realm"]["stores"][0]["zones"] = ["south", "east"]
    r = render(values)
    fn = fullname(r.values)
    assert routed_clusters(r) == ["rio", "london", "tokyo"]
    assert [d["metadata"]["name"] for d in routers(r, "Deployment")] == [f"{fn}-{c}-router" for c in
                                                                         ("rio", "london", "tokyo")]


def test_router_enabled_false_renders_none_and_says_so() -> None:
    values = load_values(CHART / "ci" / ZONES)
    values["router"]["enabled"] = False
    r = render(values)
    assert not routers(r, "Deployment") and not routers(r, "Service")
    assert "router.enabled is false: the realm routes rio, london, tokyo" in r.notes


# --- the Deployment ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_router_command_line_is_the_launchers(name: str) -> None:
    """The pod starts strongroom-router with the flags the local launcher passes (router_argv),
    listening on the router port, one replica per pod name."""
    r = render_scenario(name)
    fn = fullname(r.values)
    launcher_flags = [a for a in router_argv("E", "C", "L", "R") if a.startswith("--")]
    for cluster in routed_clusters(r):
        container = router_container(r.get("Deployment", f"{fn}-{cluster}-router"))
        assert container["command"] == ["strongroom-router"]
        args = args_of(container)
        assert list(args) == [*launcher_flags[:1], "--etcd", "--listen", "--replica", "--serve-standby",
                              "--metrics-listen", "--log-level"]
        assert args["--metrics-listen"] == f"0.0.0.0:{r.values['router']['metricsPort']}"
        assert set(launcher_flags) <= set(args)
        assert args["--cluster"] == cluster
        assert args["--listen"] == f"0.0.0.0:{r.values['router']['port']}"
        assert args["--replica"] == "$(POD_NAME)"
        assert args["--log-level"] == r.values["router"]["logLevel"]
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        # POD_NAME and POD_NAMESPACE are what turn the pod label on (persistence/k8s.py).
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert args["--etcd"] == "$(STRONGROOM_ETCD)"
        assert container["image"] == f"{r.values['image']['repository']}:0.1.0"


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_router_reaches_the_same_etcd_as_its_clusters_members(name: str) -> None:
    r = render_scenario(name)
    fn = fullname(r.values)
    for cluster in routed_clusters(r):
        member = r.get("StatefulSet", f"{fn}-{cluster}")["spec"]["template"]["spec"]["containers"][0]
        router = router_container(r.get("Deployment", f"{fn}-{cluster}-router"))
        member_env = {e["name"]: e.get("value") for e in member["env"]}
        router_env = {e["name"]: e.get("value") for e in router["env"]}
        assert router_env["STRONGROOM_ETCD"] == member_env["STRONGROOM_ETCD"]
        assert router_env["STRONGROOM_ETCD"].startswith(f"https://{fn}-etcd-0.{fn}-etcd-headless.{NAMESPACE}.svc.")


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_probes_make_every_running_replica_ready(name: str) -> None:
    """Startup, readiness and liveness all ask the health service for "" (SERVING on every
    running replica, active or standby): a standby is ready, so a rollout can wait for it; no
    probe asks for RouterService (SERVING on the active replica only), since the label, not
    readiness, picks the active replica."""
    r = render_scenario(name)
    probes = r.values["router"]["probes"]
    for deploy in routers(r, "Deployment"):
        container = router_container(deploy)
        port, metrics = container["ports"]
        assert port == {"name": "grpc", "containerPort": r.values["router"]["port"], "protocol": "TCP"}
        assert metrics == {"name": "metrics", "containerPort": r.values["router"]["metricsPort"], "protocol": "TCP"}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            # With TLS (these scenarios' default) through `python -m strongroom.probe PORT`.
            assert check_of(container[probe]) == health_check(r.values, port["containerPort"])
            assert ROUTER_SERVICE not in str(container[probe])
        assert ROUTER_SERVICE == "strongroom.v1.RouterService"
        assert container["readinessProbe"]["failureThreshold"] == probes["readinessFailureThreshold"]
        assert container["livenessProbe"]["failureThreshold"] == probes["livenessFailureThreshold"]
        assert container["startupProbe"]["failureThreshold"] == probes["startupFailureThreshold"]
        assert {container[p]["periodSeconds"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == \
            {probes["periodSeconds"]}


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_replicas_rollout_and_scheduling(name: str) -> None:
    r = render_scenario(name)
    router = r.values["router"]
    for deploy in routers(r, "Deployment"):
        spec = deploy["spec"]
        assert spec["replicas"] == router["replicas"]
        # Every running replica is ready: a rollout adds one, waits for it and only then stops an
        # old one, so a standby always runs to take over (never every replica at once).
        assert spec["strategy"] == {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        selector = spec["selector"]["matchLabels"]
        # The Deployment must not select on the label that moves between its pods.
        assert ROLE_LABEL not in selector and ROLE_LABEL not in spec["template"]["metadata"]["labels"]
        assert selects(selector, spec["template"]["metadata"]["labels"])
        aff = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
        if router["antiAffinity"] == "hard":
            term = aff["requiredDuringSchedulingIgnoredDuringExecution"][0]
        else:
            term = aff["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term["labelSelector"]["matchLabels"] == selector
        # A drain evicts one replica at a time (every replica counts: all are ready when healthy).
        pdb = r.get("PodDisruptionBudget", deploy["metadata"]["name"])
        assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
        assert pdb["metadata"]["labels"] == deploy["metadata"]["labels"]
    assert len(routers(r, "PodDisruptionBudget")) == len(routers(r, "Deployment"))
    assert render_scenario(ZONES).get("Deployment", "sr-strongroom-rio-router")["spec"]["replicas"] == 2  # default


def test_no_router_disruption_budget_for_one_replica_or_when_disabled() -> None:
    """One replica: a budget of maxUnavailable 1 would say nothing, minAvailable 1 would block
    every drain; none is rendered. router.podDisruptionBudget.enabled false: none either."""
    values = load_values(CHART / "ci" / ZONES)
    values["router"]["replicas"] = 1
    r = render(values)
    assert routers(r, "Deployment") and not routers(r, "PodDisruptionBudget")
    assert all(d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
               for d in routers(r, "Deployment"))
    values = load_values(CHART / "ci" / ZONES)
    values["router"]["podDisruptionBudget"] = {"enabled": False}
    r = render(values)
    assert routers(r, "Deployment") and not routers(r, "PodDisruptionBudget")


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_router_pods_are_locked_down_like_the_other_workloads(name: str) -> None:
    r = render_scenario(name)
    realm = r.get("Deployment", f"{fullname(r.values)}-realm")["spec"]["template"]["spec"]
    for deploy in routers(r, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        container = router_container(deploy)
        assert pod["securityContext"] == r.values["podSecurityContext"] == realm["securityContext"]
        assert container["securityContext"] == r.values["securityContext"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        # The token is mounted for the label patch only, under the routers' own ServiceAccount
        # (not the members', whose Role names the members' pods).
        assert pod["automountServiceAccountToken"] is True
        assert pod["serviceAccountName"] == f"{fullname(r.values)}-router"
        # A read-only root: /tmp is the one writable place, as for the realm service; the
        # certificate of the cluster's routers is mounted read-only.
        assert {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]} == \
            {"/tmp": False, TLS_DIR: True}
        assert container.get("resources", {}) == r.values["router"]["resources"]
    # The scenario's resources over the chart's defaults (Helm merges them: its CPU limit stays).
    assert router_container(render_scenario(ZONES).get("Deployment", "sr-strongroom-rio-router"))["resources"] == \
        {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


# --- the label's ServiceAccount and Role ----------------------------------------------------------


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_the_routers_role_grants_only_get_and_patch_of_pods(name: str) -> None:
    """What persistence/k8s.py's label needs and no more: get and patch of pods, in the release's
    namespace, bound to the ServiceAccount the router pods run as. No resourceNames: a
    Deployment's pod names are not known when the chart renders."""
    r = render_scenario(name)
    name_ = f"{fullname(r.values)}-router"
    (sa,) = routers(r, "ServiceAccount")
    assert sa["metadata"]["name"] == name_ and sa["metadata"]["namespace"] == NAMESPACE
    assert sa["automountServiceAccountToken"] is False  # mounted by the router pods only
    (role,) = routers(r, "Role")
    assert role["metadata"]["name"] == name_ and role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}]
    (binding,) = routers(r, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name_}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name_, "namespace": NAMESPACE}]
    for deploy in routers(r, "Deployment"):
        assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == name_
    # A ServiceAccount of its own: the members' (whose Role names their pods) is not the routers'.
    (members,) = [b for b in r.all("RoleBinding") if b["metadata"]["labels"]["app.kubernetes.io/component"] ==
                  "persistence"]
    assert members["subjects"][0]["name"] != name_


def test_no_router_identity_without_routers() -> None:
    for name in ("values-default.yaml", "values-multi-cluster.yaml", "values-dr-standby.yaml"):
        r = render_scenario(name)
        assert not routers(r, "ServiceAccount") and not routers(r, "Role") and not routers(r, "RoleBinding")
    values = load_values(CHART / "ci" / ZONES)
    values["router"]["enabled"] = False
    r = render(values)
    assert not routers(r, "ServiceAccount") and not routers(r, "Role") and not routers(r, "RoleBinding")


def test_a_service_account_named_in_the_values_is_used_as_it_is() -> None:
    values = load_values(CHART / "ci" / ZONES)
    values["router"]["serviceAccountName"] = "router-labeller"
    r = render(values)
    assert not routers(r, "ServiceAccount") and not routers(r, "Role") and not routers(r, "RoleBinding")
    for deploy in routers(r, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "router-labeller" and pod["automountServiceAccountToken"] is True


# --- the Service ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [ZONES, SITE])
def test_router_service_selects_the_replica_that_labelled_itself_active(name: str) -> None:
    """The Service selects exactly the label the active replica patches onto its pod
    (persistence/k8s.py's patch_body with ACTIVE_VALUE): no pod of the Deployment as rendered,
    the one that carries the label, and nothing else even with that label (a member leader's
    label is another value)."""
    r = render_scenario(name)
    svc_values = r.values["router"]["service"]
    active = patch_body(True, ACTIVE_VALUE)["metadata"]["labels"]
    assert active == {ROLE_LABEL: "active"} and ACTIVE_VALUE != LEADER_VALUE
    for deploy in routers(r, "Deployment"):
        svc = r.get("Service", deploy["metadata"]["name"])
        assert svc["spec"]["type"] == svc_values["type"]
        assert svc["metadata"].get("annotations", {}) == svc_values["annotations"]
        assert svc["spec"]["ports"] == [{"name": "grpc", "port": r.values["router"]["port"],
                                         "targetPort": "grpc", "protocol": "TCP"}]
        # Ready pods only: a label left on a pod whose router died (not ready) gets no calls.
        assert "publishNotReadyAddresses" not in svc["spec"]
        pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"] == {**deploy["spec"]["selector"]["matchLabels"], **active}
        assert not selects(svc["spec"]["selector"], pod_labels)  # a standby (no label)
        assert selects(svc["spec"]["selector"], {**pod_labels, **active})  # the active replica
        leader = patch_body(True)["metadata"]["labels"]
        for other in r.all("StatefulSet") + r.all("Deployment"):
            if other is not deploy:
                for label in (active, leader):
                    labels = {**other["spec"]["template"]["metadata"]["labels"], **label}
                    assert not selects(svc["spec"]["selector"], labels)
    site = render_scenario(SITE).get("Service", "sr-strongroom-rio-router")
    assert site["spec"]["type"] == "LoadBalancer"
    assert site["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"] == \
        "rio-router.strongroom.example"


def test_in_cluster_router_addresses_in_the_realm_are_the_router_services() -> None:
    """values-zones.yaml runs its zone in one Kubernetes cluster: each cluster's router address
    in the generated realm is its router Service's DNS name and port."""
    r = render_scenario(ZONES)
    realm = realm_of(r)
    domain = r.values["clusterDomain"]
    for cluster in routed_clusters(r):
        rc = realm.cluster(cluster)
        assert rc is not None and rc.router is not None
        svc = r.get("Service", f"sr-strongroom-{cluster}-router")
        assert rc.router.address == f"{svc['metadata']['name']}.{NAMESPACE}.svc.{domain}:{svc['spec']['ports'][0]['port']}"
    cache = realm.cluster("cache")
    assert cache is not None and cache.router is None
    prices = realm.store("prices")
    assert prices is not None and prices.clusters == ("rio", "london", "tokyo")


def test_existing_realm_routes_the_clusters_router_clusters_names() -> None:
    values = load_values(CHART / "ci" / SITE)
    values["persistence"]["clusters"].append({"name": "lima", "members": 1, "storage": "memory"})
    r = render(values)
    assert [d["metadata"]["name"] for d in routers(r, "Deployment")] == ["sr-strongroom-rio-router"]
    values["router"]["clusters"] = ["rio", "lima"]
    assert len(routers(render(values), "Deployment")) == 2


# --- refusals ---------------------------------------------------------------------------------------


def test_a_routed_cluster_without_a_router_address_fails_the_render() -> None:
    values = load_values(CHART / "ci" / ZONES)
    del values["persistence"]["clusters"][1]["router"]
    with pytest.raises(helm.HelmError) as exc:
        render(values)
    assert "STRONGROOM VALUES:" in str(exc.value)
    assert ("persistence.clusters[1] (london) is in a forwarding zone of a routed store but has no router "
            "address: set persistence.clusters[1].router.address to the host:port other clusters' routers reach "
            "it at (its router Service sr-strongroom-london-router.messaging.svc.cluster.local:7500 within this "
            "Kubernetes cluster, or the address of its LoadBalancer).") in str(exc.value)
    # The same rule as the realm service's, which would refuse that realm only once it runs.
    doc = yaml.safe_load(render_scenario(ZONES).get("ConfigMap", "sr-strongroom-realm")["data"]["realm.yaml"])
    del doc["clusters"][1]["router"]
    with pytest.raises(RealmInvalid, match="'london' is in zone 'world' of routed store 'prices' but has no router"):
        parse_realm(yaml.safe_dump(doc))


@pytest.mark.parametrize(("section", "key", "value", "sentence"), [
    ("realm", "zones", [{"name": "world", "clusters": ["rio", "london", "oslo"]}],
     'realm.zones[0] (world) names cluster "oslo", which persistence.clusters does not define.'),
    ("realm", "stores", [{"name": "prices", "routed": True, "zones": ["moon"]}],
     'realm.stores[0] (prices) names zone "moon", which realm.zones does not define.'),
    ("realm", "stores", [{"name": "prices", "routed": True}],
     ("realm.stores[0] (prices) names no cluster: give cluster (the persistence cluster that owns it), or "
      "routed: true and zones (the forwarding zones it exists in).")),
    ("router", "clusters", ["rio"],
     ("router.clusters is set but the chart generates the realm: it derives the routed clusters from "
      "realm.zones and realm.stores itself; leave router.clusters empty (it is for realm.existingConfigMap "
      "only).")),
])
def test_zone_values_that_cannot_run_fail_with_a_sentence(section: str, key: str, value: Any, sentence: str) -> None:
    values = load_values(CHART / "ci" / ZONES)
    values[section][key] = value
    if key == "stores":
        values["realm"]["destinations"] = [{"name": "*", "store": "prices"}]
    with pytest.raises(helm.HelmError) as exc:
        render(values)
    assert "STRONGROOM VALUES:" in str(exc.value)
    assert sentence in str(exc.value)


def test_router_clusters_of_an_existing_realm_must_be_this_releases() -> None:
    values = load_values(CHART / "ci" / SITE)
    values["router"]["clusters"] = ["rio", "tokyo"]
    with pytest.raises(helm.HelmError) as exc:
        render(values)
    assert ("router.clusters[1] (tokyo) is not a cluster of persistence.clusters: list only the clusters this "
            "release runs that the realm routes.") in str(exc.value)
