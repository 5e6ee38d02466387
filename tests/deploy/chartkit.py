"""Render the Helm chart with the real Helm engine (helm-python-sdk, no binary, no cluster).

Shared by the tests of tests/deploy (imported as `chartkit`; the fixtures are in conftest.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "strongroom"
SCENARIOS = sorted(CHART.glob("ci/values-*.yaml"))
RELEASE = "sr"
NAMESPACE = "messaging"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a dev dependency")


@dataclass
class Rendered:
    """One rendered release: the merged values and every manifest, by kind and name."""

    values: dict[str, Any]
    templates: dict[str, str]
    docs: list[dict[str, Any]] = field(default_factory=list)
    release: str = RELEASE
    """The release name it was rendered for."""

    def __post_init__(self) -> None:
        for name, text in self.templates.items():
            if name.endswith("NOTES.txt"):
                continue
            self.docs.extend(d for d in yaml.safe_load_all(text) if d)

    def all(self, kind: str) -> list[dict[str, Any]]:
        """Every manifest of a kind."""
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        """The manifest of this kind and name (fails the test if absent)."""
        found = [d for d in self.all(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}: " + \
            ", ".join(d["metadata"]["name"] for d in self.all(kind))
        return found[0]

    @property
    def notes(self) -> str:
        """The rendered NOTES.txt."""
        return next(v for k, v in self.templates.items() if k.endswith("NOTES.txt"))


def load_values(path: Path) -> dict[str, Any]:
    """A values file as a dict (an empty file is no override)."""
    data = yaml.safe_load(path.read_text())
    return data or {}


def render(values: dict[str, Any] | None, release: str = RELEASE, namespace: str = NAMESPACE) -> Rendered:
    """Render the chart as `helm template` would (install, revision 1)."""
    with helm.Chart.load(str(CHART)) as chart:
        merged = chart.merge_values(values or {})
        templates = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
    return Rendered(merged, templates, release=release)


@functools.cache
def render_scenario(name: str) -> Rendered:
    """Render ci/<name> once per session."""
    return render(load_values(CHART / "ci" / name))


def member_sets(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The persistence clusters this release runs members of, recomputed from the values to check
    the templates against: every cluster (dr.role primary), or at a standby site (dr.role standby)
    each cluster with a standby set, its `members` the standby set's count and its `volume` with
    the standby set's volume keys over the cluster's."""
    if values["dr"]["role"] != "standby":
        return [dict(c) for c in values["persistence"]["clusters"]]
    out = []
    for c in values["persistence"]["clusters"]:
        standby = c.get("standby")
        if standby:
            volume = {**c.get("volume", {}), **{k: v for k, v in standby.get("volume", {}).items() if v}}
            out.append({**c, "members": standby["members"], "volume": volume})
    return out


def member_container(sts: dict[str, Any]) -> dict[str, Any]:
    """The member container of a persistence StatefulSet."""
    containers = sts["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "persistence")


def args_of(container: dict[str, Any]) -> dict[str, str]:
    """A container's `--flag=value` arguments as a dict."""
    out: dict[str, str] = {}
    for a in container["args"]:
        key, _, value = a.partition("=")
        out[key] = value
    return out


CUSTOM_KINDS = {"ScheduledSparkApplication", "ServiceMonitor", "Certificate", "Issuer"}
"""Kinds of a CRD the Kubernetes schemas do not know (the Kubeflow spark-operator's, the
Prometheus Operator's, cert-manager's): skipped by the Kubernetes schema checks, their fields
checked by tests/deploy/test_chart_metrics.py, test_chart_monitoring.py and test_chart_tls.py."""

TLS_DIR = "/etc/strongroom-tls"
"""Where every Strongroom container and etcd mount their certificate, key and authority."""
TLS_ENV = {"STRONGROOM_TLS_CA": f"{TLS_DIR}/ca.crt", "STRONGROOM_TLS_CERT": f"{TLS_DIR}/tls.crt",
           "STRONGROOM_TLS_KEY": f"{TLS_DIR}/tls.key"}
"""The environment naming them (the variables strongroom.security.tls reads)."""


def tls_on(values: dict[str, Any]) -> bool:
    """The release speaks mutual TLS (tls.enabled)."""
    return bool(values["tls"]["enabled"])


def health_check(values: dict[str, Any], port: int, service: str = "") -> dict[str, Any]:
    """The check a probe of a Strongroom process's gRPC health on `port` must make: the kubelet's
    gRPC probe in plaintext; with TLS, which that probe cannot speak, `python -m strongroom.probe`."""
    if tls_on(values):
        return {"exec": {"command": ["python", "-m", "strongroom.probe", str(port),
                                     *(["--service", service] if service else [])]}}
    return {"grpc": {"port": port, **({"service": service} if service else {})}}


def check_of(probe: dict[str, Any]) -> dict[str, Any]:
    """A probe's check (exec, grpc, tcpSocket or httpGet), without its timing."""
    return {k: v for k, v in probe.items() if k in ("exec", "grpc", "tcpSocket", "httpGet")}


def etcd_args(container: dict[str, Any]) -> dict[str, str]:
    """The bundled etcd's `--flag=value` arguments as a dict (its whole command line is its
    `command`, where checkov reads etcd's flags)."""
    assert container["command"][0] == "etcd" and "args" not in container
    return args_of({"args": container["command"][1:]})


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command arguments."""
    for k, v in env.items():
        text = text.replace(f"$({k})", v)
    return text


def shared_store(cluster: dict[str, Any]) -> bool:
    """The cluster runs as a shared-store pair (sharedStore.enabled): its one member as two pods."""
    return bool((cluster.get("sharedStore") or {}).get("enabled"))


def pods(cluster: dict[str, Any]) -> int:
    """How many pods a cluster of member_sets runs, recomputed to check the templates against:
    its members, or the two instances of a shared-store pair's one member."""
    return 2 if shared_store(cluster) else int(cluster["members"])


def fullname(values: dict[str, Any], release: str = RELEASE) -> str:
    """The chart's "strongroom.fullname", recomputed to check the templates against."""
    if values.get("fullnameOverride"):
        return str(values["fullnameOverride"])
    name = values.get("nameOverride") or "strongroom"
    return release if name in release else f"{release}-{name}"
