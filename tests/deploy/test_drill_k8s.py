"""The Kubernetes failover drill (Python orchestrator and deploy/drills/failover.sh).

Without a cluster, kubectl is a stand-in (fake_kubectl.py) whose pods are the chart's rendered
pod templates: the drills only get anywhere if their label selectors select exactly what the
chart labels; the tests then check every kubectl command they ran against the rendered chart.
The in-cluster agent is checked for real in test_agent_against_a_real_local_cluster (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from chartkit import NAMESPACE, RELEASE, ROOT, Rendered, fullname, render_scenario

from strongroom.drill_k8s import KubectlCommands, failover_drill_kubernetes, member_endpoints
from strongroom.persistence.k8s import LEADER_VALUE, ROLE_LABEL

SCRIPT = ROOT / "deploy" / "drills" / "failover.sh"
FAKE = Path(__file__).with_name("fake_kubectl.py")


def pods_of(r: Rendered) -> list[dict[str, Any]]:
    """The pods the chart's workloads would create, as the API server would list them."""
    pods: list[dict[str, Any]] = []
    for sts in r.all("StatefulSet"):
        for i in range(sts["spec"]["replicas"]):
            name = f"{sts['metadata']['name']}-{i}"
            spec = {**sts["spec"]["template"]["spec"], "hostname": name, "subdomain": sts["spec"]["serviceName"]}
            pods.append(_pod(name, sts["spec"]["template"]["metadata"]["labels"], spec))
    for deploy in r.all("Deployment"):
        for i in range(deploy["spec"]["replicas"]):
            pods.append(_pod(f"{deploy['metadata']['name']}-7d9f8-{i}x",
                             deploy["spec"]["template"]["metadata"]["labels"], deploy["spec"]["template"]["spec"]))
    return pods


def _pod(name: str, labels: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid4()), "labels": dict(labels)},
            "spec": spec,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


class FakeCluster:
    """The fake kubectl's state: pods from a rendered scenario, one of them labelled leader."""

    def __init__(self, tmp_path: Path, r: Rendered, cluster: str = "default", leader: bool = True) -> None:
        self.rendered = r
        self.cluster = cluster
        self.state = tmp_path / "kube.json"
        self.log = tmp_path / "kubectl.log"
        self.kubectl = tmp_path / "kubectl"
        self.kubectl.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
        self.kubectl.chmod(0o755)
        pods = pods_of(r)
        self.first_leader = f"{fullname(r.values)}-{cluster}-0"
        if leader:
            next(p for p in pods if p["metadata"]["name"] == self.first_leader)["metadata"]["labels"][ROLE_LABEL] = LEADER_VALUE
        self.state.write_text(json.dumps({"pods": pods, "log": str(self.log)}))
        os.environ["FAKE_KUBE_STATE"] = str(self.state)

    def calls(self) -> list[list[str]]:
        """Every kubectl argv the drill ran."""
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def check_calls(self) -> None:
        """Each command is right for the chart: selectors select exactly the intended pods."""
        r, fn = self.rendered, fullname(self.rendered.values)
        sts = r.get("StatefulSet", f"{fn}-{self.cluster}")
        member_labels = sts["spec"]["template"]["metadata"]["labels"]
        members = {f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])}
        realm = r.get("Deployment", f"{fn}-realm")
        leader_service = r.get("Service", f"{fn}-{self.cluster}-leader")["spec"]["selector"]
        templates = r.all("StatefulSet") + r.all("Deployment")
        kinds = set()
        for argv in self.calls():
            assert argv[:2] == ["--namespace", NAMESPACE]
            verb = argv[2:4]
            if verb == ["get", "pods"]:
                sel = dict(t.split("=", 1) for t in argv[argv.index("--selector") + 1].split(","))
                chosen = {t["metadata"]["name"] for t in templates
                          if all(t["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items()
                                 if k != ROLE_LABEL)}
                if sel.get("app.kubernetes.io/component") == "realm":
                    kinds.add("client")
                    assert chosen == {realm["metadata"]["name"]}
                elif ROLE_LABEL in sel:
                    kinds.add("leader")
                    # What the leader Service selects, less the name label (nameOverride-proof).
                    assert sel == {k: v for k, v in leader_service.items() if k != "app.kubernetes.io/name"}
                    assert sel[ROLE_LABEL] == LEADER_VALUE and chosen == {sts["metadata"]["name"]}
                else:
                    kinds.add("members")
                    assert chosen == {sts["metadata"]["name"]}
                    assert all(member_labels[k] == v for k, v in sel.items())
            elif verb == ["get", "pod"]:
                assert argv[4] in members
            elif verb == ["delete", "pod"]:
                kinds.add("delete")
                assert argv[4] == self.first_leader
            elif argv[2] == "exec":
                kinds.add("exec")
                pod = argv[argv.index("-i") + 1]
                assert pod.startswith(realm["metadata"]["name"] + "-")
                container = argv[argv.index("--container") + 1]
                assert container in [c["name"] for c in realm["spec"]["template"]["spec"]["containers"]]
                endpoints = argv[argv.index("--endpoints") + 1].split(",")
                self.check_endpoints(endpoints)
            else:
                raise AssertionError(f"unexpected kubectl call {argv}")
        assert {"members", "leader", "client", "delete", "exec"} <= kinds

    def check_endpoints(self, endpoints: list[str]) -> None:
        """The agent dials the members at the addresses the realm lists (short DNS form)."""
        r, fn = self.rendered, fullname(self.rendered.values)
        if r.values["realm"]["existingConfigMap"]:
            return
        import yaml

        realm = yaml.safe_load(r.get("ConfigMap", f"{fn}-realm")["data"]["realm.yaml"])
        listed = next(c for c in realm["clusters"] if c["name"] == self.cluster)["members"]
        domain = "." + r.values["clusterDomain"]
        assert sorted(endpoints) == sorted(m["address"].replace(domain + ":", ":") for m in listed)


@pytest.fixture(autouse=True)
def _restore_env() -> Any:
    saved = os.environ.get("FAKE_KUBE_STATE")
    yield
    if saved is None:
        os.environ.pop("FAKE_KUBE_STATE", None)
    else:
        os.environ["FAKE_KUBE_STATE"] = saved


# --- the Python orchestrator -----------------------------------------------------------------------


@pytest.mark.parametrize(("scenario_name", "cluster"), [
    ("values-default.yaml", "default"), ("values-multi-cluster.yaml", "orders"), ("values-prod.yaml", "default"),
])
async def test_python_drill_deletes_the_leader_and_reports(tmp_path: Path, scenario_name: str, cluster: str) -> None:
    fake = FakeCluster(tmp_path, render_scenario(scenario_name), cluster)
    lines: list[str] = []
    report = await failover_drill_kubernetes(NAMESPACE, RELEASE, cluster, messages=40, kubectl=str(fake.kubectl),
                                             progress=lines.append)
    assert report["ok"] is True, report
    assert report["old_leader"] == fake.first_leader
    assert report["new_leader"] == fake.first_leader[:-1] + "1"
    assert report["leaderless_seconds"] is not None and report["leaderless_seconds"] >= 0
    assert (report["confirmed"], report["received"], report["lost"], report["duplicated"]) == (40, 40, 0, 0)
    # The local drill's report keys, so both platforms read the same.
    assert {"confirmed", "received", "lost", "duplicated", "out_of_order", "leaderless_seconds",
            "publish_gap_seconds", "old_leader", "new_leader", "publish_errors", "ok"} <= report.keys()
    fake.check_calls()


async def test_python_drill_without_a_labelled_leader_says_so(tmp_path: Path) -> None:
    fake = FakeCluster(tmp_path, render_scenario("values-default.yaml"), leader=False)
    report = await failover_drill_kubernetes(NAMESPACE, RELEASE, messages=10, kubectl=str(fake.kubectl))
    assert report["ok"] is False
    assert f"expected one pod labelled {ROLE_LABEL}={LEADER_VALUE}, found none" in report["problem"]
    assert not [c for c in fake.calls() if c[2] in ("delete", "exec")]


async def test_python_drill_for_an_unknown_release_says_so(tmp_path: Path) -> None:
    fake = FakeCluster(tmp_path, render_scenario("values-default.yaml"))
    report = await failover_drill_kubernetes(NAMESPACE, "other", messages=10, kubectl=str(fake.kubectl))
    assert report["ok"] is False and "no pod in namespace" in report["problem"]


def test_kubectl_commands_use_the_chart_labels() -> None:
    cmd = KubectlCommands("ns", "rel", "orders")
    assert cmd.member_selector == ("app.kubernetes.io/instance=rel,app.kubernetes.io/component=persistence,"
                                   "strongroom.io/cluster=orders")
    assert cmd.leader_selector == cmd.member_selector + f",{ROLE_LABEL}={LEADER_VALUE}"
    assert cmd.delete_pod("p", force=True)[-2:] == ["--grace-period=0", "--force"]
    assert "--force" not in cmd.delete_pod("p")


def test_member_endpoints_are_statefulset_dns_names() -> None:
    r = render_scenario("values-default.yaml")
    pods = [p for p in pods_of(r) if p["metadata"]["labels"].get("strongroom.io/cluster") == "default"]
    fn = fullname(r.values)
    assert member_endpoints(pods, NAMESPACE) == [
        f"{fn}-default-{i}.{fn}-default-headless.{NAMESPACE}.svc:7101" for i in range(3)]


# --- the kubectl script ----------------------------------------------------------------------------


def _run_script(fake: FakeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECTL": str(fake.kubectl), "FAKE_KUBE_STATE": str(fake.state)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60,
                          check=False)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("scenario_name", "cluster"), [("values-default.yaml", "default"),
                                                         ("values-multi-cluster.yaml", "orders")])
def test_script_deletes_the_leader_and_reports(tmp_path: Path, scenario_name: str, cluster: str) -> None:
    fake = FakeCluster(tmp_path, render_scenario(scenario_name), cluster)
    done = _run_script(fake, "--namespace", NAMESPACE, "--release", RELEASE, "--cluster", cluster,
                       "--messages", "30")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["old_leader"] == fake.first_leader
    assert report["new_leader"] == fake.first_leader[:-1] + "1"
    assert report["confirmed"] == 30 and report["lost"] == 0 and report["heard"] == "killed"
    assert report["leaderless_seconds"] >= 0
    fake.check_calls()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_script_fails_clearly_without_a_labelled_leader(tmp_path: Path) -> None:
    fake = FakeCluster(tmp_path, render_scenario("values-default.yaml"), leader=False)
    done = _run_script(fake, "--namespace", NAMESPACE, "--release", RELEASE)
    assert done.returncode == 1
    assert "expected one pod labelled strongroom.io/role=leader, found 0" in done.stderr


def test_script_and_module_use_the_same_selectors() -> None:
    text = SCRIPT.read_text()
    cmd = KubectlCommands(NAMESPACE, "${RELEASE}", "${CLUSTER}")
    assert f'MEMBERS="{cmd.member_selector}"' in text
    assert f'LEADER="${{MEMBERS}},{ROLE_LABEL}={LEADER_VALUE}"' in text
    assert f'CLIENTS="{cmd.client_selector}"' in text


def test_cli_routes_kubernetes_to_the_drill(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom import drill_k8s
    from strongroom.cli.main import run

    seen: dict[str, Any] = {}

    async def fake_drill(namespace: str, release: str, cluster: str, messages: int, **kw: Any) -> dict[str, Any]:
        seen.update(namespace=namespace, release=release, cluster=cluster, messages=messages, **kw)
        return {"ok": True, "confirmed": messages, "lost": 0}

    monkeypatch.setattr(drill_k8s, "failover_drill_kubernetes", fake_drill)
    code = run(["drill", "failover", "--platform", "kubernetes", "--namespace", "ns", "--release", "sr",
                "--messages", "20", "--force", "--json"])
    assert code == 0
    assert (seen["namespace"], seen["release"], seen["cluster"], seen["messages"], seen["force"]) == \
        ("ns", "sr", "default", 20, True)
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert run(["drill", "failover", "--platform", "kubernetes"]) == 2
    assert "--release" in capsys.readouterr().err


# --- the in-cluster agent, for real ------------------------------------------------------------------


@pytest.mark.slow
async def test_agent_against_a_real_local_cluster(tmp_path: Path) -> None:
    """The agent's publish / pause / consume against real members (etcd, three disk-sync members);
    the "deletion" is a SIGKILL of the leader's process, what `--force` does to a pod."""
    import asyncio

    from strongroom.drill_k8s import run_agent
    from strongroom.local.launcher import LocalCluster
    from strongroom.realm.model import DEFAULT_REALM_YAML, parse_realm

    realm = parse_realm(DEFAULT_REALM_YAML, "<built-in default realm>")
    name = realm.clusters[0].name
    cluster = LocalCluster(tmp_path / "cluster", detach=False)
    try:
        leaders = await cluster.start(realm, DEFAULT_REALM_YAML, "<built-in default realm>", progress=lambda _l: None)
        assert not await cluster.wait_until_synced(30.0)
        killed: list[str] = []

        async def kill_leader() -> None:
            leader = await cluster.leader_name(name) or leaders[name]
            cluster.member(name, leader).kill()
            killed.append(leader)

        report = await asyncio.wait_for(
            run_agent(",".join(cluster.endpoints(name)), "drill-test.queue", 400, wait_killed=kill_leader), 240)
        assert killed
        assert report["data_ok"] is True, report
        assert (report["confirmed"], report["received"], report["lost"], report["duplicated"],
                report["out_of_order"]) == (400, 400, 0, 0, 0)
        assert report["publish_gap_seconds"] is not None
    finally:
        await asyncio.to_thread(cluster.stop, 5.0)
