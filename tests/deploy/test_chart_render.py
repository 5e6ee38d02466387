"""Every ci/values-*.yaml scenario renders, lints, passes the Kubernetes schemas (strict) and
keeps the invariants a running Strongroom depends on."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
from chartkit import (
    CHART,
    CUSTOM_KINDS,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    Rendered,
    args_of,
    check_of,
    etcd_args,
    expand,
    fullname,
    health_check,
    helm,
    load_values,
    member_container,
    member_sets,
    pods,
    shared_store,
    tls_on,
)

from strongroom.channels import PROCESS
from strongroom.etcd import endpoint_tls, parse_endpoints
from strongroom.persistence.k8s import LEADER_VALUE, ROLE_LABEL, patch_body
from strongroom.realm.model import parse_realm

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; gRPC probes are GA there)
# and the newest the schemas know.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Equality-based label selection, as a Service or matchLabels does it."""
    return all(labels.get(k) == v for k, v in selector.items())


def clusters(r: Rendered) -> list[dict[str, Any]]:
    """The clusters this release runs members of (at a standby site: the standby sets)."""
    return member_sets(r.values)


def standby_site(r: Rendered) -> bool:
    """The release runs the standby sets of a disaster-recovery pair (dr.role standby)."""
    return bool(r.values["dr"]["role"] == "standby")


# --- the engine: lint, schema, Kubernetes schemas ------------------------------------------------


def test_scenarios_exist() -> None:
    names = {p.name for p in SCENARIOS}
    assert {"values-default.yaml", "values-dev.yaml", "values-prod.yaml", "values-external-etcd.yaml",
            "values-multi-cluster.yaml", "values-memory.yaml", "values-existing-realm.yaml"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_lint_strict(path: Any) -> None:
    report = helm.lint(str(CHART), load_values(path), strict=True, namespace=NAMESPACE,
                       kube_version="v1.30.0")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


def test_every_manifest_is_valid_kubernetes_strict(scenario: Rendered) -> None:
    assert scenario.docs
    for doc in scenario.docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        for version in KUBE_VERSIONS:
            # Strict: an unknown or misspelt field fails, as the API server's strict validation does.
            kubernetes_validate.validate(doc, version, strict=True)


def test_every_resource_carries_release_labels_and_namespace(scenario: Rendered) -> None:
    for doc in scenario.docs:
        meta = doc["metadata"]
        assert meta["namespace"] == NAMESPACE, (doc["kind"], meta["name"])
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta["labels"]["app.kubernetes.io/name"] == "strongroom"
        assert meta["name"].startswith(fullname(scenario.values)), meta["name"]
    assert not scenario.all("ClusterRole") and not scenario.all("ClusterRoleBinding")


# --- persistence clusters --------------------------------------------------------------------------


def test_member_counts_are_odd(scenario: Rendered) -> None:
    for c in clusters(scenario):
        sts = scenario.get("StatefulSet", f"{fullname(scenario.values)}-{c['name']}")
        assert c["members"] % 2 == 1
        # A shared-store pair runs its one member as two pods (tests/deploy/test_chart_shared_store.py).
        assert sts["spec"]["replicas"] == (2 if shared_store(c) else c["members"])


def test_peer_dns_names_in_the_realm_match_the_headless_service(scenario: Rendered) -> None:
    """The realm lists each member as its pod, at "<pod>.<headless>.<ns>.svc.<domain>:<port>",
    and the member process is started with that name and advertises that address."""
    if scenario.values["realm"]["existingConfigMap"]:
        pytest.skip("the realm comes from the operator's ConfigMap")
    fn = fullname(scenario.values)
    cm = scenario.get("ConfigMap", f"{fn}-realm")
    realm = parse_realm(cm["data"]["realm.yaml"], "realm ConfigMap")  # the service's own validator
    # The realm lists every cluster, also those this release runs no member of (a standby site's).
    assert [c.name for c in realm.clusters] == [c["name"] for c in scenario.values["persistence"]["clusters"]]
    for c in clusters(scenario):
        sts = scenario.get("StatefulSet", f"{fn}-{c['name']}")
        headless = scenario.get("Service", sts["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["publishNotReadyAddresses"] is True
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        assert headless["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert selects(headless["spec"]["selector"], pod_labels)
        container = member_container(sts)
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
        assert headless["spec"]["ports"][0]["port"] == port
        assert port == scenario.values["persistence"]["port"]
        link_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "replication")
        assert link_port == scenario.values["persistence"]["replicationPort"] != port
        assert {"name": "replication", "port": link_port, "targetPort": "replication", "protocol": "TCP"} \
            in headless["spec"]["ports"]
        domain = scenario.values["clusterDomain"]

        rc = realm.cluster(c["name"])
        assert rc is not None
        assert rc.storage.value == c["storage"]
        assert rc.lease_ttl_seconds == c.get("leaseTtlSeconds", 3)
        expected = [(f"{sts['metadata']['name']}-{i}",
                     f"{sts['metadata']['name']}-{i}.{headless['metadata']['name']}.{NAMESPACE}.svc.{domain}:{port}")
                    for i in range(pods(c))]
        if shared_store(c):
            # One member, named as the StatefulSet, reached at its two instances: the pods.
            assert [(m.name, m.address) for m in rc.members] == [(sts["metadata"]["name"], None)]
            assert rc.shared_store is not None
            assert rc.shared_store.instances == [address for _, address in expected]
            expected = [(sts["metadata"]["name"], address) for _, address in expected]
        elif standby_site(scenario):
            # The pods are the standby set's members, which the realm lists apart from the primary's.
            assert rc.standby is not None
            assert [(m.name, m.address) for m in rc.standby.members] == expected
            assert all(rc.is_standby_member(name) and rc.member(name) is None for name, _ in expected)
        else:
            assert [(m.name, m.address) for m in rc.members] == expected
            assert not any(rc.is_standby_member(name) for name, _ in expected)

        args = args_of(container)
        assert args["--cluster"] == c["name"]
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        for i, (name, address) in enumerate(expected):
            pod = {"POD_NAME": f"{sts['metadata']['name']}-{i}", "POD_NAMESPACE": NAMESPACE}
            assert expand(args["--member"], pod) == name
            assert expand(args["--advertise"], pod) == address
            # The leader reaches the member's replication link at the same DNS name.
            assert expand(args["--replication-advertise"], pod) == f"{address.rsplit(':', 1)[0]}:{link_port}"
        assert args["--listen"].endswith(f":{port}")
        assert args["--replication-listen"] == f"0.0.0.0:{link_port}"


def test_leader_service_selects_the_label_the_member_sets(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    patched = patch_body(True)["metadata"]["labels"]
    assert patched == {ROLE_LABEL: LEADER_VALUE}
    for c in clusters(scenario):
        sts = scenario.get("StatefulSet", f"{fn}-{c['name']}")
        selector = sts["spec"]["selector"]["matchLabels"]
        pod_labels = dict(sts["spec"]["template"]["metadata"]["labels"])
        # The StatefulSet must not select on the label that changes under it.
        assert ROLE_LABEL not in selector and ROLE_LABEL not in pod_labels
        leader = scenario.get("Service", f"{fn}-{c['name']}-leader")
        assert leader["spec"]["selector"] == {**selector, ROLE_LABEL: LEADER_VALUE}
        assert not selects(leader["spec"]["selector"], pod_labels)
        assert selects(leader["spec"]["selector"], {**pod_labels, **patched})
        # ... and nothing but this cluster's members, even with the label.
        for other in scenario.all("StatefulSet") + scenario.all("Deployment"):
            if other is not sts:
                labels = {**other["spec"]["template"]["metadata"]["labels"], **patched}
                assert not selects(leader["spec"]["selector"], labels)
        client = scenario.get("Service", f"{fn}-{c['name']}")
        assert client["spec"]["selector"] == selector
        assert leader["spec"]["ports"][0]["targetPort"] == "grpc"


def test_probes_ask_the_grpc_health_service_on_the_member_port(scenario: Rendered) -> None:
    """The health servicer's overall status ("") on the member's gRPC port: the kubelet's gRPC
    probe in plaintext; with TLS `python -m strongroom.probe PORT` in the container, which calls
    with the container's own certificate (tests/deploy/test_chart_tls.py runs it against a TLS
    server) and is allowed the interpreter's start."""
    paired = {f"{fullname(scenario.values)}-{c['name']}" for c in clusters(scenario) if shared_store(c)}
    for sts in scenario.all("StatefulSet"):
        if sts["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] != "persistence":
            continue
        if sts["metadata"]["name"] in paired:
            continue  # TCP probes: a standby answers no health check (test_chart_shared_store.py)
        container = member_container(sts)
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert check_of(container[probe]) == health_check(scenario.values, port)
            if tls_on(scenario.values):
                assert container[probe]["timeoutSeconds"] == 5
        assert container["livenessProbe"]["timeoutSeconds"] >= 3
    deploy = scenario.get("Deployment", f"{fullname(scenario.values)}-realm")
    realm = deploy["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert check_of(realm[probe]) == health_check(scenario.values, scenario.values["realm"]["port"])


def test_pod_scheduling_and_hand_off(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    p = scenario.values["persistence"]
    for c in clusters(scenario):
        sts = scenario.get("StatefulSet", f"{fn}-{c['name']}")
        spec = sts["spec"]["template"]["spec"]
        selector = sts["spec"]["selector"]["matchLabels"]
        assert spec["terminationGracePeriodSeconds"] > c.get("leaseTtlSeconds", 3) + 2
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        aff = spec.get("affinity", {}).get("podAntiAffinity", {})
        if p["antiAffinity"] == "hard":
            term = aff["requiredDuringSchedulingIgnoredDuringExecution"][0]
        elif p["antiAffinity"] == "soft":
            term = aff["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        else:
            assert not aff
            continue
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == selector

        pdbs = [d for d in scenario.all("PodDisruptionBudget") if d["metadata"]["name"] == sts["metadata"]["name"]]
        if p["podDisruptionBudget"]["enabled"] and shared_store(c):
            # One pod of the pair at a time: the other holds or takes over the store.
            assert pdbs[0]["spec"]["selector"]["matchLabels"] == selector
            assert pdbs[0]["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdbs[0]["spec"]
        elif p["podDisruptionBudget"]["enabled"] and c["members"] > 1:
            assert pdbs[0]["spec"]["selector"]["matchLabels"] == selector
            assert pdbs[0]["spec"]["minAvailable"] == c["members"] // 2 + 1
        else:
            assert not pdbs


def test_disk_storage_gets_a_claim_per_pod_memory_none(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    for c in clusters(scenario):
        sts = scenario.get("StatefulSet", f"{fn}-{c['name']}")
        claims = sts["spec"].get("volumeClaimTemplates", [])
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in member_container(sts)["volumeMounts"]}
        assert args_of(member_container(sts))["--data-dir"].startswith(mounts["data"])
        if c["storage"] == "memory":
            assert not claims and "emptyDir" in volumes["data"]
        elif shared_store(c):
            # One ReadWriteMany claim both pods mount (tests/deploy/test_chart_shared_store.py).
            assert not claims and "persistentVolumeClaim" in volumes["data"]
        else:
            assert [cl["metadata"]["name"] for cl in claims] == ["data"] and "data" not in volumes
            wanted = c.get("volume", {}).get("storageClass", "")
            assert claims[0]["spec"].get("storageClassName", "") == wanted
            assert claims[0]["spec"]["resources"]["requests"]["storage"] == c.get("volume", {}).get("size", "10Gi")


def test_role_grants_only_get_and_patch_of_the_members_pods(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    # The members' Role; the Spark jobs' own (metrics) is checked in test_chart_metrics.py, the
    # routers' own (their pod label) in test_chart_router.py.
    component = "app.kubernetes.io/component"
    assert {r["metadata"]["labels"][component] for r in scenario.all("Role")} <= {"persistence", "metrics", "router"}
    roles = [r for r in scenario.all("Role") if r["metadata"]["labels"][component] == "persistence"]
    assert len(roles) == 1
    role = roles[0]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert len(role["rules"]) == 1
    rule = role["rules"][0]
    assert rule["apiGroups"] == [""]
    assert rule["resources"] == ["pods"]
    assert sorted(rule["verbs"]) == ["get", "patch"]
    names = {f"{fn}-{c['name']}-{i}" for c in clusters(scenario) for i in range(pods(c))}
    assert set(rule["resourceNames"]) == names
    (binding,) = [b for b in scenario.all("RoleBinding") if b["metadata"]["labels"][component] == "persistence"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = scenario.values["serviceAccount"]["name"] or f"{fn}-persistence"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    for sts in scenario.all("StatefulSet"):
        spec = sts["spec"]["template"]["spec"]
        if "persistence" in [c["name"] for c in spec["containers"]]:
            assert spec["serviceAccountName"] == sa
            assert spec["automountServiceAccountToken"] is True
        else:
            assert spec["automountServiceAccountToken"] is False  # etcd needs no API access
    assert scenario.get("Deployment", f"{fn}-realm")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert bool(scenario.all("ServiceAccount")) == scenario.values["serviceAccount"]["create"]


def test_etcd_endpoints_reach_the_bundled_members_or_the_external_ones(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    etcd = scenario.values["etcd"]
    if etcd["enabled"]:
        sts = scenario.get("StatefulSet", f"{fn}-etcd")
        headless = scenario.get("Service", sts["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
        assert sts["spec"]["replicas"] == etcd["replicas"] and etcd["replicas"] % 2 == 1
        domain = f"{headless['metadata']['name']}.{NAMESPACE}.svc.{scenario.values['clusterDomain']}"
        # With TLS every endpoint says https:// (strongroom.etcd.endpoint_tls: the process's own
        # certificate), and etcd listens and advertises https on both ports.
        scheme = "https" if tls_on(scenario.values) else "http"
        prefix = "https://" if tls_on(scenario.values) else ""
        expected = [f"{prefix}{fn}-etcd-{i}.{domain}:{etcd['clientPort']}" for i in range(etcd["replicas"])]
        args = etcd_args(sts["spec"]["template"]["spec"]["containers"][0])
        peers = [f"{fn}-etcd-{i}={scheme}://{fn}-etcd-{i}.{domain}:{etcd['peerPort']}" for i in range(etcd["replicas"])]
        assert args["--initial-cluster"] == ",".join(peers)
        assert args["--listen-client-urls"] == f"{scheme}://0.0.0.0:{etcd['clientPort']}"
        assert args["--advertise-client-urls"] == f"{scheme}://$(POD_NAME).{domain}:{etcd['clientPort']}"
        assert args["--listen-peer-urls"] == f"{scheme}://0.0.0.0:{etcd['peerPort']}"
        assert args["--initial-advertise-peer-urls"] == f"{scheme}://$(POD_NAME).{domain}:{etcd['peerPort']}"
    else:
        assert not [s for s in scenario.all("StatefulSet") if s["metadata"]["name"] == f"{fn}-etcd"]
        expected = etcd["externalEndpoints"]
    users = [s for s in scenario.all("StatefulSet") if s["metadata"]["name"] != f"{fn}-etcd"]
    users += scenario.all("Deployment")
    for workload in users:
        env = {e["name"]: e.get("value") for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["STRONGROOM_ETCD"].split(",") == expected
        assert parse_endpoints(env["STRONGROOM_ETCD"]) == [e.removeprefix("https://") for e in expected]
        if tls_on(scenario.values):  # reached with the process's own certificate
            assert endpoint_tls(env["STRONGROOM_ETCD"]) is PROCESS


def test_realm_file_comes_from_values_or_the_existing_config_map(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    realm = scenario.values["realm"]
    deploy = scenario.get("Deployment", f"{fn}-realm")
    volume = next(v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "realm")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "realm")
    assert f"--realm-file={mount}/{volume['configMap']['items'][0]['path']}" in container["args"]
    if realm["existingConfigMap"]:
        assert volume["configMap"]["name"] == realm["existingConfigMap"]
        assert volume["configMap"]["items"][0]["key"] == realm["existingConfigMapKey"]
        assert not scenario.all("ConfigMap")
        assert "UNKNOWN_MEMBER" in scenario.notes  # tells the operator how members must be named
    else:
        assert volume["configMap"]["name"] == f"{fn}-realm"
        assert "realm.yaml" in scenario.get("ConfigMap", f"{fn}-realm")["data"]
    jobs = {j["metadata"]["name"]: j for j in scenario.all("Job")}
    if not realm["applyOnUpgrade"]:
        assert not jobs
        return
    # After an upgrade the realm file is applied; around it, unless the standby sets of a standby
    # site run here (their members are fixed), the membership hooks: before the StatefulSets
    # change, the upcoming member lists go in and removed members stop counting; after the
    # apply, until the new members count.
    file = realm["existingConfigMap"] or f"{fn}-realm"
    expected = {f"{fn}-realm-apply-1": ("post-upgrade,post-rollback", "0", file, ["realm", "apply"])}
    if scenario.values["dr"]["role"] != "standby":
        upcoming = realm["existingConfigMap"] or f"{fn}-realm-upcoming"
        if not realm["existingConfigMap"]:
            hook = scenario.get("ConfigMap", upcoming)
            assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade,pre-rollback"
            assert int(hook["metadata"]["annotations"]["helm.sh/hook-weight"]) < -5
            assert hook["data"] == scenario.get("ConfigMap", f"{fn}-realm")["data"]
        timeout = f"--timeout={realm['membershipTimeoutSeconds']}"
        expected[f"{fn}-realm-members-1"] = ("pre-upgrade,pre-rollback", "-5", upcoming,
                                             ["cluster", "sync-members", "/etc/strongroom/realm.yaml",
                                              "--wait=removed", timeout])
        expected[f"{fn}-realm-voters-1"] = ("post-upgrade,post-rollback", "5", file,
                                            ["cluster", "sync-members", "/etc/strongroom/realm.yaml",
                                             "--wait=all", timeout])
    assert jobs.keys() == expected.keys()
    svc = scenario.get("Service", f"{fn}-realm")
    for name, (hook_on, weight, config_map, command) in expected.items():
        job = jobs[name]
        assert job["metadata"]["annotations"]["helm.sh/hook"] == hook_on
        assert job["metadata"]["annotations"]["helm.sh/hook-weight"] == weight
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:len(command)] == command, args
        assert f"--realm-address={fn}-realm.{NAMESPACE}.svc.{scenario.values['clusterDomain']}:" \
               f"{svc['spec']['ports'][0]['port']}" in args
        (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "realm"]
        assert volume["configMap"]["name"] == config_map


def test_commands_and_flags_exist_in_the_image_entry_points(scenario: Rendered) -> None:
    """Every command the chart runs is a console script of the package, and takes those flags."""
    workloads = scenario.all("StatefulSet") + scenario.all("Deployment") + scenario.all("Job")
    seen: dict[tuple[str, ...], list[str]] = {}
    for w in workloads:
        for c in w["spec"]["template"]["spec"]["containers"]:
            if c["command"][0] == "etcd":
                continue
            key = tuple(c["command"]) + tuple(a for a in c["args"][:2] if not a.startswith("-"))
            seen.setdefault(key, []).extend(a.split("=")[0] for a in c["args"] if a.startswith("--"))
    for command, flags in seen.items():
        assert flags
        assert set(flags) <= _help_flags(command), command


_HELP: dict[tuple[str, ...], set[str]] = {}


def _help_flags(command: tuple[str, ...]) -> set[str]:
    if command not in _HELP:
        modules = {"strongroom-persistence": "strongroom.persistence.main",
                   "strongroom-realm": "strongroom.realm.main", "strongroom": "strongroom.cli.main",
                   "strongroom-router": "strongroom.routing.main", "strongroom-dr": "strongroom.dr.main"}
        argv = [sys.executable, "-c", f"import sys; from {modules[command[0]]} import main; main()",
                *command[1:], "--help"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
        _HELP[command] = {w.rstrip(",=") for w in out.replace("[", " ").replace("]", " ").split()
                          if w.startswith("--")}
    return _HELP[command]


def test_notes_tell_how_to_reach_the_cluster_and_run_the_drill(scenario: Rendered) -> None:
    fn = fullname(scenario.values)
    for c in clusters(scenario):
        assert f"{fn}-{c['name']}-leader.{NAMESPACE}.svc" in scenario.notes
    if standby_site(scenario):
        # No failover drill against a set that serves no client: its lag, and how to activate it.
        assert "drill failover" not in scenario.notes
        for c in clusters(scenario):
            assert f"strongroom dr status --dr {fn}-{c['name']}-dr:{scenario.values['dr']['port']}" in scenario.notes \
                or f"{fn}-{c['name']}-dr.{NAMESPACE}.svc:{scenario.values['dr']['port']}" in scenario.notes
        assert "strongroom dr activate" in scenario.notes
        return
    assert f"drill failover --platform kubernetes --namespace {NAMESPACE} --release {RELEASE}" in scenario.notes
    assert "deploy/drills/failover.sh" in scenario.notes


def test_release_name_containing_the_chart_name_is_not_doubled() -> None:
    from chartkit import render

    r = render({}, release="strongroom")
    assert r.get("StatefulSet", "strongroom-default")["spec"]["serviceName"] == "strongroom-default-headless"


def test_a_clusters_store_settings_reach_the_realm() -> None:
    """The dedup expiry, the indexes on disk and the persistent store (driver, the database's
    memory, capacity) of a cluster's values come out in the generated realm, which the realm
    service's own validator reads back as set."""
    from chartkit import render

    cluster = {"name": "default", "members": 3, "storage": "disk-sync", "producerIdleExpirySeconds": 3600.5,
               "indexesOnDisk": True,
               "persistentStore": {"driver": "sqlite", "writeBufferMb": 64, "readCacheMb": 256,
                                   "capacityMessages": 5_000_000_000, "capacityBytes": 1 << 40, "report": True}}
    r = render({"persistence": {"clusters": [cluster]}})
    realm = parse_realm(r.get("ConfigMap", f"{fullname(r.values)}-realm")["data"]["realm.yaml"], "realm ConfigMap")
    (c,) = realm.clusters
    assert c.producer_idle_expiry_seconds == 3600.5 and c.indexes_on_disk is True
    ps = c.persistent_store
    assert (ps.driver.value, ps.write_buffer_mb, ps.read_cache_mb) == ("sqlite", 64, 256)
    assert (ps.capacity_messages, ps.capacity_bytes, ps.report) == (5_000_000_000, 1 << 40, True)
    # Unset, the realm's defaults apply.
    (d,) = parse_realm(render({}).get("ConfigMap", f"{fullname({})}-realm")["data"]["realm.yaml"], "realm").clusters
    assert (d.producer_idle_expiry_seconds, d.persistent_store.write_buffer_mb) == (86400.0, 32)


@pytest.mark.parametrize(("store", "where"), [
    ({"writeBufferMb": 0}, "writeBufferMb"),
    ({"readCacheMb": 70000}, "readCacheMb"),
    ({"driver": "leveldb"}, "driver"),
    ({"bufferMb": 1}, "bufferMb"),
])
def test_the_schema_types_the_persistent_store(store: dict[str, Any], where: str) -> None:
    """Out of range, unknown and misspelled keys are refused before anything renders."""
    values = {"persistence": {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                            "persistentStore": store}]}}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as exc:
        chart.validate_schema(values)
    assert where in str(exc.value)


def test_a_dedup_expiry_is_never_or_at_least_a_second() -> None:
    """The realm reads 0 as never: a fraction of a second would print as 0.000, so the chart
    takes 0 or at least 1 s."""
    values = {"persistence": {"clusters": [{"name": "default", "members": 3, "storage": "disk-sync",
                                            "producerIdleExpirySeconds": 0.0001}]}}
    with helm.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm.HelmValuesError) as exc:
            chart.validate_schema(values)
        assert "producerIdleExpirySeconds" in str(exc.value)
        for ok in (0, 1, 86400):
            values["persistence"]["clusters"][0]["producerIdleExpirySeconds"] = ok  # type: ignore[index]
            chart.validate_schema(values)
