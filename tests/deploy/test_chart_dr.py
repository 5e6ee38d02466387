"""Disaster recovery on Kubernetes: the chart installed twice, a primary release at site A and a
standby release (dr.role standby) at site B, each with its own etcd. Both generate the same realm,
whose standby set is the standby release's pods; the standby release runs those members exactly
as primary members are run. Each release runs, per cluster with a standby set, one DR service
(strongroom-dr) against its own site's etcd, the same at both sites but for the names: site B's
ships the primary's log, site A's idles until its site is demoted and then ships there (fail
back with nothing started by hand, as `strongroom up` runs one at each site). Apart from that DR
service and the realm's standby set, the primary release renders what it renders without DR.
ci/values-dr.yaml (the pair's shared values) and ci/values-dr-standby.yaml are scenarios too, so
every invariant of test_chart_render.py (lint, the Kubernetes schemas, names, probes, RBAC)
holds for them."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chartkit import (
    CHART,
    CUSTOM_KINDS,
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

import strongroom.dr.main as dr_main
from strongroom.dr.server import SERVICE as DR_SERVICE
from strongroom.local.process import dr_argv
from strongroom.realm.model import Realm, parse_realm

PAIR = "values-dr.yaml"
STANDBY = "values-dr-standby.yaml"
PRIMARY_RELEASE, STANDBY_RELEASE = "sr", "sr-standby"  # as ci/values-dr.yaml names them
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
SHARED_ISSUER = {"certManager": {"issuerRef": {"name": "strongroom-dr-ca", "kind": "ClusterIssuer"}}}
"""tls values both releases of a pair share (as ci/values-dr.yaml's): one issuer, so each site
trusts the other's certificates (the chart refuses its own authority in a pair)."""


def pair_values(role: str, **dr: Any) -> dict[str, Any]:
    """ci/values-dr.yaml, as one release of the pair is installed with it."""
    values = load_values(CHART / "ci" / PAIR)
    values["dr"] = {**values["dr"], **dr, "role": role}
    return values


def render_pair(namespaces: tuple[str, str] = (NAMESPACE, NAMESPACE),
                **dr: Any) -> tuple[Rendered, Rendered]:
    """Both releases of the pair: (site A's primary release, site B's standby release)."""
    primary = render(pair_values("primary", **dr), release=PRIMARY_RELEASE, namespace=namespaces[0])
    standby = render(pair_values("standby", **dr), release=STANDBY_RELEASE, namespace=namespaces[1])
    return primary, standby


# The releases with DR services the tests below check, by id: each release of the pair, and the
# standby scenario (two clusters, one without a standby set, and every dr.* value set).
DR_RELEASES = ("pair's primary release", "pair's standby release", "standby scenario")


def dr_release(which: str) -> Rendered:
    """One of DR_RELEASES, rendered."""
    if which == "pair's primary release":
        return render(pair_values("primary"), release=PRIMARY_RELEASE)
    if which == "pair's standby release":
        return render(pair_values("standby"), release=STANDBY_RELEASE)
    return render_scenario(STANDBY)


def realm_text(r: Rendered) -> str:
    return str(r.get("ConfigMap", f"{fullname(r.values, r.release)}-realm")["data"]["realm.yaml"])


def realm_of(r: Rendered) -> Realm:
    """The generated realm, parsed by the realm service's own validator."""
    return parse_realm(realm_text(r), "realm ConfigMap")


def of_component(r: Rendered, kind: str, component: str) -> list[dict[str, Any]]:
    return [d for d in r.all(kind) if d["metadata"]["labels"]["app.kubernetes.io/component"] == component]


def dr_container(deploy: dict[str, Any]) -> dict[str, Any]:
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "dr"
    return dict(container)


def member_container(sts: dict[str, Any]) -> dict[str, Any]:
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "persistence"
    return dict(container)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def renamed(doc: Any, old: str, new: str, old_release: str, new_release: str) -> Any:
    """`doc` with the resource-name prefix `old` replaced by `new` in every string and the release
    label value `old_release` by `new_release`: a primary release's object as the standby
    release would hold it if it ran its members the same way."""
    if isinstance(doc, dict):
        return {k: renamed(v, old, new, old_release, new_release) for k, v in doc.items()}
    if isinstance(doc, list):
        return [renamed(v, old, new, old_release, new_release) for v in doc]
    if isinstance(doc, str):
        return new_release if doc == old_release else doc.replace(old, new)
    return doc


# --- the pair: both releases render, validate and agree on the realm ---------------------------------


def test_the_dr_scenarios_are_rendered_with_the_others() -> None:
    assert {PAIR, STANDBY} <= {p.name for p in SCENARIOS}
    assert render_scenario(PAIR).values["dr"]["role"] == "primary"
    assert render_scenario(STANDBY).values["dr"]["role"] == "standby"


def test_the_standby_release_of_the_pair_lints_and_validates_strictly() -> None:
    """ci/values-dr.yaml with dr.role=standby, as site B installs it (the scenario tests render the
    file as the primary release)."""
    values = pair_values("standby")
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    standby = render(values, release=STANDBY_RELEASE)
    assert standby.docs
    for doc in standby.docs:
        assert doc["metadata"]["namespace"] == NAMESPACE
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == STANDBY_RELEASE
        if doc["kind"] in CUSTOM_KINDS:
            continue  # cert-manager's: tests/deploy/test_chart_tls.py
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("where", ["same namespace and domain", "other namespaces and domains"])
def test_both_releases_generate_the_same_realm(where: str) -> None:
    """Each site applies the realm its release generates to its own etcd: the two files are the
    same, byte for byte, and list the primary release's pods as the members and the standby
    release's pods as the standby set."""
    if where == "same namespace and domain":
        namespaces = (NAMESPACE, NAMESPACE)
        primary_values = load_values(CHART / "ci" / PAIR)
        primary = render(primary_values, release=PRIMARY_RELEASE)
        standby = render(pair_values("standby"), release=STANDBY_RELEASE)
        domains = ("cluster.local", "cluster.local")
    else:
        namespaces, domains = ("messaging-a", "messaging-b"), ("site-a.local", "site-b.local")
        sites = {"primary": {"release": PRIMARY_RELEASE, "namespace": namespaces[0], "clusterDomain": domains[0]},
                 "standby": {"release": STANDBY_RELEASE, "namespace": namespaces[1], "clusterDomain": domains[1]}}
        pv = pair_values("primary", sites=sites)
        pv["clusterDomain"] = domains[0]
        sv = pair_values("standby", sites=sites)
        sv["clusterDomain"] = domains[1]
        primary = render(pv, release=PRIMARY_RELEASE, namespace=namespaces[0])
        standby = render(sv, release=STANDBY_RELEASE, namespace=namespaces[1])
    assert realm_text(primary) == realm_text(standby)
    realm = realm_of(standby)
    (cluster,) = realm.clusters
    assert cluster.standby is not None
    for r, members, ns, domain in ((primary, cluster.members, namespaces[0], domains[0]),
                                   (standby, cluster.standby.members, namespaces[1], domains[1])):
        fn = fullname(r.values, r.release)
        sts = r.get("StatefulSet", f"{fn}-default")
        headless = r.get("Service", sts["spec"]["serviceName"])
        pods = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]
        assert [m.name for m in members] == pods
        assert [m.address for m in members] == [f"{p}.{headless['metadata']['name']}.{ns}.svc.{domain}:7101"
                                                for p in pods]
    assert cluster.standby.primary == ["default.site-a.strongroom.example:7101"]
    # The standby release's pods are standby members (what tells them their set), the primary's not.
    assert all(cluster.is_standby_member(m.name) for m in cluster.standby.members)
    assert not any(cluster.is_standby_member(m.name) for m in cluster.members)


def test_the_standby_releases_own_site_defaults_to_itself() -> None:
    """The standby release needs only the primary's release name: its own entry may stay empty."""
    values = pair_values("standby")
    values["dr"]["sites"]["standby"] = {}
    assert realm_text(render(values, release=STANDBY_RELEASE)) == realm_text(render_scenario(PAIR))


# --- the standby release: members, DR service, nothing else; the DR services of both releases ---------


def test_standby_members_are_started_as_primary_members_are() -> None:
    """Same command, arguments, environment, ports and probes as the primary's members, against
    the standby site's own etcd; only the names (and the site's volumes) differ."""
    primary, standby = render_pair()
    p_sts = primary.get("StatefulSet", "sr-strongroom-default")
    s_sts = standby.get("StatefulSet", "sr-standby-strongroom-default")
    assert s_sts["spec"]["replicas"] == standby.values["persistence"]["clusters"][0]["standby"]["members"]
    expected = renamed(member_container(p_sts), "sr-strongroom", "sr-standby-strongroom", "sr", "sr-standby")
    assert member_container(s_sts) == expected
    assert env_of(member_container(s_sts))["STRONGROOM_ETCD"].startswith(
        "https://sr-standby-strongroom-etcd-0.sr-standby-strongroom-etcd-headless.messaging.svc.")
    # Probes: gRPC health "" on the member port, which every member answers SERVING once it has
    # joined its set, leader or follower: readiness never waits for a serving leader, which a
    # standby set does not have until it is activated.
    container = member_container(s_sts)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert check_of(container[probe]) == health_check(standby.values, standby.values["persistence"]["port"])
    # The site's own StorageClass; the size is the cluster's.
    (claim,) = s_sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "ssd-site-b"
    assert p_sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "ssd-site-a"


def test_standby_release_runs_only_the_standby_sets_and_their_dr_services() -> None:
    r = render_scenario(STANDBY)
    assert [s["metadata"]["name"] for s in of_component(r, "StatefulSet", "persistence")] == ["sr-strongroom-orders"]
    assert r.get("StatefulSet", "sr-strongroom-orders")["spec"]["replicas"] == 3  # the standby set's, not 5
    # "cache" has no standby set: nothing of it runs at the standby site, though the realm lists it.
    assert not [d for d in r.docs if "cache" in d["metadata"]["name"]]
    assert realm_of(r).cluster("cache") is not None
    assert [d["metadata"]["name"] for d in of_component(r, "Deployment", "dr")] == ["sr-strongroom-orders-dr"]
    assert [d["metadata"]["name"] for d in of_component(r, "Service", "dr")] == ["sr-strongroom-orders-dr"]
    (pdb,) = of_component(r, "PodDisruptionBudget", "persistence")
    assert pdb["spec"]["minAvailable"] == 2
    (role,) = of_component(r, "Role", "persistence")
    assert role["rules"][0]["resourceNames"] == [f"sr-strongroom-orders-{i}" for i in range(3)]


def test_a_dr_service_runs_per_cluster_with_a_standby_set_in_either_release(scenario: Rendered) -> None:
    """At the primary site as at the standby site: one per cluster with a standby set, none for a
    cluster without one (nor in a release without DR)."""
    fn = fullname(scenario.values)
    wanted = [f"{fn}-{c['name']}-dr" for c in scenario.values["persistence"]["clusters"] if c.get("standby")]
    assert [d["metadata"]["name"] for d in of_component(scenario, "Deployment", "dr")] == wanted
    assert [d["metadata"]["name"] for d in of_component(scenario, "Service", "dr")] == wanted
    for deploy in of_component(scenario, "Deployment", "dr"):
        cluster = deploy["metadata"]["name"].removeprefix(f"{fn}-").removesuffix("-dr")
        assert deploy["metadata"]["labels"]["strongroom.io/cluster"] == cluster
        assert dr_container(deploy)["args"][0] == f"--cluster={cluster}"


def test_both_releases_of_the_pair_run_the_same_dr_service_but_for_names() -> None:
    """Site A's DR Deployment and Service are site B's with the release's names: the same command,
    arguments, probes, strategy and pod, against the site's own etcd (its own release's)."""
    primary, standby = render_pair()
    for kind in ("Deployment", "Service"):
        (p,) = of_component(primary, kind, "dr")
        (s,) = of_component(standby, kind, "dr")
        assert p["metadata"]["name"] == "sr-strongroom-default-dr"
        assert renamed(p, "sr-strongroom", "sr-standby-strongroom", "sr", "sr-standby") == s
    etcd = env_of(dr_container(primary.get("Deployment", "sr-strongroom-default-dr")))["STRONGROOM_ETCD"]
    assert etcd.startswith("https://sr-strongroom-etcd-0.sr-strongroom-etcd-headless.messaging.svc.")
    assert "standby" not in etcd


def _recorder(seen: list[Any]) -> Callable[[Any], Awaitable[int]]:
    """A stand-in for strongroom-dr's serve(): notes the parsed arguments, ships nothing."""

    async def serve(args: Any) -> int:
        seen.append(args)
        return 0

    return serve


@pytest.mark.parametrize("which", DR_RELEASES)
def test_dr_command_line_is_what_strongroom_dr_parses(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DR pod's arguments, with Kubernetes' $(VAR) expanded, parsed by strongroom-dr's own
    main(): this release's etcd (the site's own: the primary site's in the primary release, where
    it finds the primary set registered and the site's record), the cluster, the listen port, the
    heartbeat and report periods; the local launcher's flags (dr_argv) among them."""
    r = dr_release(which)
    d = r.values["dr"]
    deploys = of_component(r, "Deployment", "dr")
    assert deploys
    for deploy in deploys:
        cluster = deploy["metadata"]["labels"]["strongroom.io/cluster"]
        container = dr_container(deploy)
        assert container["command"] == ["strongroom-dr"]
        assert {a for a in dr_argv("E", "C") if a.startswith("--")} <= {a.split("=")[0] for a in container["args"]}
        env = env_of(container)
        members = member_container(r.get("StatefulSet", deploy["metadata"]["name"].removesuffix("-dr")))
        assert env["STRONGROOM_ETCD"] == env_of(members)["STRONGROOM_ETCD"]  # this site's members' etcd
        argv = [a.replace("$(STRONGROOM_ETCD)", env["STRONGROOM_ETCD"]) for a in container["args"]]
        assert "$(" not in " ".join(argv)

        seen: list[Any] = []
        monkeypatch.setattr(dr_main, "serve", _recorder(seen))
        with pytest.raises(SystemExit) as exit_:
            dr_main.main(argv)
        assert exit_.value.code == 0
        (args,) = seen
        assert args.etcd == env["STRONGROOM_ETCD"]
        assert args.etcd.startswith(f"https://{fullname(r.values, r.release)}-etcd-0.")
        assert args.cluster == cluster
        assert args.listen == f"0.0.0.0:{d['port']}"
        assert args.heartbeat == float(d["heartbeatSeconds"])
        assert args.report == float(d["reportSeconds"])
        assert args.log_level == d["logLevel"]
    assert render_scenario(STANDBY).values["dr"]["heartbeatSeconds"] == 0.5  # a fraction passes as one


@pytest.mark.parametrize("which", DR_RELEASES)
def test_dr_probes_ask_the_grpc_health_service_the_dr_service_serves(which: str) -> None:
    """Startup and liveness on "", readiness on strongroom.v1.DrService: the DR server sets both
    SERVING when it listens, whatever its site's role (an idle DR service at the primary site is
    ready; tests/integration/test_dr_up.py asks one)."""
    r = dr_release(which)
    probes = r.values["dr"]["probes"]
    assert DR_SERVICE == "strongroom.v1.DrService"
    deploys = of_component(r, "Deployment", "dr")
    assert deploys
    for deploy in deploys:
        container = dr_container(deploy)
        port, metrics = container["ports"]
        assert port == {"name": "grpc", "containerPort": r.values["dr"]["port"], "protocol": "TCP"}
        assert metrics == {"name": "metrics", "containerPort": r.values["dr"]["metricsPort"], "protocol": "TCP"}
        for probe in ("startupProbe", "livenessProbe"):
            assert check_of(container[probe]) == health_check(r.values, port["containerPort"])
        assert check_of(container["readinessProbe"]) == health_check(r.values, port["containerPort"], DR_SERVICE)
        assert container["startupProbe"]["failureThreshold"] == probes["startupFailureThreshold"]
        assert container["livenessProbe"]["failureThreshold"] == probes["livenessFailureThreshold"]
        assert {container[p]["periodSeconds"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == \
            {probes["periodSeconds"]}


@pytest.mark.parametrize(("which", "name"), [("standby scenario", "sr-strongroom-orders-dr"),
                                             ("pair's primary release", "sr-strongroom-default-dr")])
def test_dr_deployment_is_one_locked_down_replica_never_two(which: str, name: str) -> None:
    r = dr_release(which)
    deploy = r.get("Deployment", name)
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}  # a rollout stops the old one first
    pod = spec["template"]["spec"]
    container = dr_container(deploy)
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"] == r.values["podSecurityContext"]
    assert container["securityContext"] == r.values["securityContext"]
    assert {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]} == \
        {"/tmp": False, TLS_DIR: True}
    if which == "standby scenario":  # the scenario's resources over the chart's defaults (Helm merges them)
        assert container["resources"] == r.values["dr"]["resources"] == \
            {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    else:  # the chart's defaults: every container has requests and limits (checkov)
        assert container["resources"] == r.values["dr"]["resources"] == \
            {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    assert container["image"] == "strongroom:0.1.0"


@pytest.mark.parametrize(("which", "name"), [("standby scenario", "sr-strongroom-orders-dr"),
                                             ("pair's primary release", "sr-strongroom-default-dr")])
def test_dr_service_selects_its_dr_pod_only(which: str, name: str) -> None:
    r = dr_release(which)
    deploy = r.get("Deployment", name)
    svc = r.get("Service", name)
    if which == "standby scenario":
        assert svc["spec"]["type"] == "LoadBalancer"
        assert svc["metadata"]["annotations"] == r.values["dr"]["service"]["annotations"]
    else:
        assert svc["spec"]["type"] == "ClusterIP" and "annotations" not in svc["metadata"]
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 7600, "targetPort": "grpc", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert selects(svc["spec"]["selector"], deploy["spec"]["template"]["metadata"]["labels"])
    for other in r.all("StatefulSet") + r.all("Deployment"):
        if other is not deploy:
            assert not selects(svc["spec"]["selector"], other["spec"]["template"]["metadata"]["labels"])
    # ... and no member Service selects the DR pod.
    for member_svc in of_component(r, "Service", "persistence"):
        assert not selects(member_svc["spec"]["selector"], deploy["spec"]["template"]["metadata"]["labels"])


def test_a_standby_site_runs_no_router() -> None:
    values = load_values(CHART / "ci" / "values-zones.yaml")
    values["persistence"]["clusters"][0]["standby"] = {"members": 3, "primary": ["rio.site-a.example:7101"]}
    values["dr"] = {"sites": {"primary": {"release": "sr"}, "standby": {"release": "sr-standby"}}}
    values["tls"] = SHARED_ISSUER
    assert of_component(render(values, release="sr"), "Deployment", "router")
    values["dr"]["role"] = "standby"
    standby = render(values, release="sr-standby")
    assert not of_component(standby, "Deployment", "router") and not of_component(standby, "Service", "router")
    assert [d["metadata"]["name"] for d in of_component(standby, "Deployment", "dr")] == \
        ["sr-standby-strongroom-rio-dr"]


def test_with_an_existing_realm_the_standby_release_needs_only_the_member_count() -> None:
    """The operator's realm declares the standby set (and where the primary is read); the chart
    cannot read it, so it neither needs standby.primary nor dr.sites."""
    values = load_values(CHART / "ci" / "values-existing-realm.yaml")
    values["persistence"] = {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                           "standby": {"members": 1}}]}
    values["dr"] = {"role": "standby"}
    values["tls"] = SHARED_ISSUER
    r = render(values)
    assert r.get("StatefulSet", "sr-strongroom-default")["spec"]["replicas"] == 1
    assert dr_container(r.get("Deployment", "sr-strongroom-default-dr"))["args"][0] == "--cluster=default"
    assert not r.all("ConfigMap")


def test_notes_of_the_standby_release_say_what_it_is() -> None:
    notes = render_scenario(STANDBY).notes
    assert "STANDBY site" in notes and "strongroom dr activate" in notes
    assert "strongroom dr status --dr sr-strongroom-orders-dr:7600" in notes
    assert "sr-strongroom-orders-dr.messaging.svc:7600, reading the primary at " \
           "orders-0.site-a.strongroom.example:7101,orders-1.site-a.strongroom.example:7101" in notes
    assert "PRIMARY site" not in notes


def test_notes_of_the_primary_release_say_how_to_fail_back() -> None:
    """Its DR service, and the demotion at this site's members (the realm's), after which that DR
    service ships here; nothing of it in a release without a standby set."""
    r = render_scenario(PAIR)
    notes = r.notes
    assert "standby set: 3 members at the standby site (release sr-standby), reading this cluster at " \
           "default.site-a.strongroom.example:7101" in notes
    assert "DR service:  sr-strongroom-default-dr.messaging.svc:7600, idle while this site is the primary; " \
           "ships here from the new primary once this site is demoted" in notes
    assert "PRIMARY site" in notes and "STANDBY site" not in notes
    (demote,) = [line.split() for line in notes.splitlines() if "strongroom dr demote" in line]
    assert demote[:5] == ["strongroom", "dr", "demote", "--cluster", "default"]
    (cluster,) = realm_of(r).clusters
    assert demote[demote.index("-s") + 1].split(",") == [m.address for m in cluster.members]
    assert demote[demote.index("--manifest") + 1].startswith("/tmp/")  # the realm pod's writable emptyDir
    assert "strongroom dr status --dr sr-strongroom-default-dr:7600" in notes
    assert "PRIMARY site" not in render_scenario("values-default.yaml").notes


# --- the primary release: what it was without DR, and a DR service ---------------------------------


def _without_dr(values: dict[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(values)
    plain.pop("dr", None)
    for c in plain["persistence"]["clusters"]:
        c.pop("standby", None)
    return plain


@pytest.mark.parametrize("name", [PAIR, "values-multi-cluster.yaml", "values-prod.yaml"])
def test_primary_release_renders_what_it_renders_without_dr_but_the_realms_standby_set_and_a_dr_service(
        name: str) -> None:
    """Adding a standby set changes nothing of the primary release's members and realm but the
    realm file's clusters[].standby: the same objects, byte for byte, and the same realm
    otherwise; what it adds is the cluster's DR Deployment and Service (dr.yaml) and the DR
    service's certificate, and the cluster's member certificates name the standby.primary
    hosts (the standby site's DR service reads them there), nothing else."""
    values = load_values(CHART / "ci" / name)
    if name != PAIR:
        values["persistence"]["clusters"][0]["standby"] = {"members": 3, "primary": ["a.example:7101"]}
        values["dr"] = {"sites": {"standby": {"release": "sr-b"}}}
        values["tls"] = SHARED_ISSUER
    with_dr, plain = render(values), render(_without_dr(values))
    realm_name = f"{fullname(plain.values)}-realm"
    differing = {k for k in plain.templates.keys() | with_dr.templates.keys()
                 if plain.templates.get(k, "").strip() != with_dr.templates.get(k, "").strip()}
    assert differing == {"strongroom/templates/realm-configmap.yaml", "strongroom/templates/NOTES.txt",
                         "strongroom/templates/dr.yaml", "strongroom/templates/networkpolicy.yaml",
                         "strongroom/templates/certificates.yaml", "strongroom/templates/members-hook.yaml"}
    # members-hook.yaml: its copy of the realm file for the pre-upgrade hook, the same as the realm's.
    for r in (with_dr, plain):
        assert r.get("ConfigMap", f"{fullname(plain.values)}-realm-upcoming")["data"] == \
            r.get("ConfigMap", f"{fullname(plain.values)}-realm")["data"]
    hooks = {t: [d for d in yaml.safe_load_all(r.templates["strongroom/templates/members-hook.yaml"])
                 if d and d["kind"] != "ConfigMap"] for t, r in (("with", with_dr), ("plain", plain))}
    assert hooks["with"] == hooks["plain"]
    # certificates.yaml: the DR service's added; the cluster's members' name the primary's hosts.
    cluster = values["persistence"]["clusters"][0]["name"]
    certs = {t: {d["metadata"]["name"]: d for d in yaml.safe_load_all(r.templates["strongroom/templates/certificates.yaml"])
                 if d} for t, r in (("with", with_dr), ("plain", plain))}
    assert certs["with"].keys() - certs["plain"].keys() == {f"{fullname(plain.values)}-{cluster}-dr-tls"}
    hosts = [a.rsplit(":", 1)[0] for a in values["persistence"]["clusters"][0]["standby"]["primary"]]
    for cert_name, cert in certs["plain"].items():
        if cert["metadata"]["labels"].get("strongroom.io/cluster") == cluster and \
                cert["metadata"]["labels"]["app.kubernetes.io/component"] == "persistence":
            expected = copy.deepcopy(cert)
            names = expected["spec"]["dnsNames"]
            expected["spec"]["dnsNames"] = names[:-1] + hosts + names[-1:]  # before localhost
            assert certs["with"][cert_name] == expected
        else:
            assert certs["with"][cert_name] == cert
    # networkpolicy.yaml: the DR service's policy added, the others the same.
    policies = {t: {d["metadata"]["name"]: d for d in yaml.safe_load_all(r.templates["strongroom/templates/networkpolicy.yaml"])
                    if d} for t, r in (("with", with_dr), ("plain", plain))}
    added = policies["with"].keys() - policies["plain"].keys()
    assert added == {f"{fullname(plain.values)}-dr"}
    assert {k: policies["with"][k] for k in policies["plain"]} == policies["plain"]
    with_doc = yaml.safe_load(with_dr.get("ConfigMap", realm_name)["data"]["realm.yaml"])
    plain_doc = yaml.safe_load(plain.get("ConfigMap", realm_name)["data"]["realm.yaml"])
    assert with_doc["clusters"][0].pop("standby")["primary"] == \
        values["persistence"]["clusters"][0]["standby"]["primary"]
    assert with_doc == plain_doc
    # dr.yaml: the DR Deployment and Service of the cluster with the standby set, and no more.
    dr_name = f"{fullname(plain.values)}-{values['persistence']['clusters'][0]['name']}-dr"
    dr_yaml = with_dr.templates["strongroom/templates/dr.yaml"]
    dr_docs = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(dr_yaml) if d]
    assert dr_docs == [("Deployment", dr_name), ("Service", dr_name)]
    assert not plain.templates.get("strongroom/templates/dr.yaml", "").strip()
    assert not of_component(plain, "Deployment", "dr")


def test_with_an_existing_realm_the_primary_release_runs_the_dr_service_of_a_cluster_given_a_standby_set() -> None:
    """The chart cannot read the operator's realm: a cluster given `standby` in the primary
    release's values gets its DR service there (its members unchanged)."""
    values = load_values(CHART / "ci" / "values-existing-realm.yaml")
    values["persistence"] = {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                           "standby": {"members": 1}},
                                          {"name": "other", "members": 1, "storage": "memory"}]}
    values["tls"] = SHARED_ISSUER
    r = render(values)
    assert r.values["dr"]["role"] == "primary"
    assert r.get("StatefulSet", "sr-strongroom-default")["spec"]["replicas"] == 3
    assert [d["metadata"]["name"] for d in of_component(r, "Deployment", "dr")] == ["sr-strongroom-default-dr"]
    assert dr_container(r.get("Deployment", "sr-strongroom-default-dr"))["args"][0] == "--cluster=default"


def test_the_default_role_is_primary() -> None:
    assert render({}).templates == render({"dr": {"role": "primary"}}).templates


# --- values that cannot run --------------------------------------------------------------------------


def _refused(values: dict[str, Any], release: str = PRIMARY_RELEASE) -> str:
    with pytest.raises(helm.HelmError) as exc:
        render(values, release=release)
    assert "STRONGROOM VALUES:" in str(exc.value)
    return str(exc.value)


def test_standby_role_without_a_standby_set_is_refused() -> None:
    assert ("dr.role is standby but no cluster of persistence.clusters has a standby set: give the cluster(s) "
            "whose standby set this release runs persistence.clusters[].standby (members, and primary: where "
            "the primary site is read), the same as in the primary release's values.") in \
        _refused({"dr": {"role": "standby"}})


@pytest.mark.parametrize("role", ["primary", "standby"])
def test_a_standby_set_without_primary_addresses_is_refused(role: str) -> None:
    values = pair_values(role)
    del values["persistence"]["clusters"][0]["standby"]["primary"]
    message = _refused(values, PRIMARY_RELEASE if role == "primary" else STANDBY_RELEASE)
    assert ("persistence.clusters[0] (default) has a standby set but persistence.clusters[0].standby.primary is "
            "empty: list the host:port addresses at which the standby site's DR service reads the primary's "
            "committed log (the primary site's members, or one address in front of them such as the client "
            "Service sr-strongroom-default of the primary release exposed to the standby site); the generated "
            "realm declares them for both sites.") in message


def test_an_even_standby_set_is_refused() -> None:
    values = pair_values("standby")
    values["persistence"]["clusters"][0]["standby"]["members"] = 2
    assert ("persistence.clusters[0] (default): its standby set has 2 members "
            "(persistence.clusters[0].standby.members); use an odd count (1, 3, 5 ...) so the standby set's "
            "majority is well defined.") in _refused(values, STANDBY_RELEASE)


@pytest.mark.parametrize(("role", "other"), [("primary", "standby"), ("standby", "primary")])
def test_the_other_release_of_the_pair_must_be_named(role: str, other: str) -> None:
    values = pair_values(role)
    values["dr"]["sites"][other]["release"] = ""
    assert (f"persistence.clusters has a standby set but dr.sites.{other}.release is empty: name the Helm "
            f"release that runs the {other} sets at the other site (and its namespace and clusterDomain in "
            f"dr.sites.{other} when they differ from this release's), so the realm this release generates lists "
            f"the members of both sites, as the other release's does.") in \
        _refused(values, PRIMARY_RELEASE if role == "primary" else STANDBY_RELEASE)


def test_the_release_must_be_the_one_the_values_name() -> None:
    # Site B installed under the primary's name: its realm would name the wrong pods.
    assert ('dr.sites.standby.release is "sr-standby" but this release, which runs the standby sets (dr.role '
            'standby), is "sr": install it under the name the values give both sites, or correct '
            'dr.sites.standby.release.') in _refused(pair_values("standby"), "sr")
    values = pair_values("primary")
    values["dr"]["sites"]["primary"]["namespace"] = "elsewhere"
    assert ('dr.sites.primary.namespace is "elsewhere" but this release, which runs the primary sets, is installed '
            'in namespace "messaging": install it there, or correct dr.sites.primary.namespace.') in _refused(values)


def test_two_releases_of_one_name_are_refused() -> None:
    values = pair_values("standby")
    values["dr"]["sites"] = {"primary": {"release": "sr"}, "standby": {}}
    assert ("dr.sites.primary.release (sr) names its members sr-strongroom-<cluster>-<n>, as this release names "
            "its own: the standby members must be other members than the primary's; install the two releases of "
            "a disaster-recovery pair under different names.") in _refused(values, "sr")


def test_fullname_override_is_refused_in_a_pair() -> None:
    values = pair_values("primary")
    values["fullnameOverride"] = "site-a"
    assert ("fullnameOverride is set while a cluster has a standby set: the other release of the pair names this "
            "release's members from its release name (dr.sites.primary.release); leave fullnameOverride "
            "empty.") in _refused(values)


def test_a_standby_site_without_a_storage_class_is_refused_when_one_is_required() -> None:
    values = pair_values("standby")
    values["persistence"]["requireStorageClass"] = True
    render(values, release=STANDBY_RELEASE)  # standby.volume names one
    del values["persistence"]["clusters"][0]["standby"]["volume"]
    render(values, release=STANDBY_RELEASE)  # the cluster's volume names one
    del values["persistence"]["clusters"][0]["volume"]
    assert ("persistence.clusters[0] (default) keeps its data on disk (storage disk-sync) but neither "
            "persistence.clusters[0].standby.volume.storageClass nor .volume.storageClass is set while "
            "persistence.requireStorageClass is true: name the StorageClass the standby site provisions its "
            "volumes from.") in _refused(values, STANDBY_RELEASE)


@pytest.mark.parametrize(("values", "where"), [
    ({"dr": {"role": "secondary"}}, "/dr/role"),
    ({"dr": {"sites": {"primary": {"release": "Site_A"}}}}, "/dr/sites/primary/release"),
    ({"dr": {"sites": {"tertiary": {}}}}, "tertiary"),
    ({"dr": {"heartbeatSeconds": 0}}, "/dr/heartbeatSeconds"),
    ({"dr": {"port": 0}}, "/dr/port"),
    ({"persistence": {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                    "standby": {"primary": ["a:1"]}}]}}, "members"),
    ({"persistence": {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                    "standby": {"members": 3, "primary": ["no-port"]}}]}},
     "/persistence/clusters/0/standby/primary/0"),
    ({"persistence": {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                    "standby": {"members": 3, "primary": ["a:1"], "replicas": 3}}]}}, "replicas"),
])
def test_schema_types_the_dr_keys(values: dict[str, Any], where: str) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as exc:
        chart.validate_schema(values)
    assert where in str(exc.value)
