"""NetworkPolicies: every pod the chart runs is selected by exactly one, and each admits only what
its ports are for (a member's replication link from its own cluster's members, etcd from the
release's pods, the client and metrics ports from networkPolicy.clients or anyone)."""

from __future__ import annotations

from typing import Any

import pytest
from chartkit import CHART, Rendered, load_values, render

PEERS = [{"namespaceSelector": {"matchLabels": {"team": "payments"}}}]


def _pods(r: Rendered) -> list[tuple[str, dict[str, str]]]:
    out = []
    for d in r.docs:
        spec = d.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", {}).get("template") or spec.get("template")
        if d["kind"] in ("StatefulSet", "Deployment", "Job", "CronJob") and template:
            out.append((f"{d['kind']}/{d['metadata']['name']}", template["metadata"]["labels"]))
    return out


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())


@pytest.mark.parametrize("name", ["values-default.yaml", "values-dr.yaml", "values-zones.yaml", "values-metrics.yaml",
                                  "values-shared-store.yaml", "values-multi-cluster.yaml"])
def test_every_pod_is_selected_by_exactly_one_policy(name: str) -> None:
    r = render(load_values(CHART / "ci" / name))
    policies = r.all("NetworkPolicy")
    for pod, labels in _pods(r):
        chosen = [p["metadata"]["name"] for p in policies if _selects(p, labels)]
        assert len(chosen) == 1, (pod, chosen)
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)


def _rules_by_port(policy: dict[str, Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            out.setdefault(port["port"], []).append(rule.get("from"))
    return out


def test_members_admit_the_link_from_their_cluster_only_and_clients_as_configured() -> None:
    for clients in ([], PEERS):
        values = load_values(CHART / "ci" / "values-default.yaml")
        values["networkPolicy"] = {"clients": clients}
        r = render(values)
        v = r.values["persistence"]
        member = r.get("NetworkPolicy", "sr-strongroom-default")
        rules = _rules_by_port(member)
        assert rules[v["metricsPort"]] == [clients or None]
        # The gRPC port: clients, and the upgrade's membership hooks (which clients need not name).
        hooks = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "strongroom",
                                                  "app.kubernetes.io/instance": "sr",
                                                  "app.kubernetes.io/component": "realm-apply"}}}]
        assert rules[v["port"]] == ([clients, hooks] if clients else [None])
        (link,) = rules[v["replicationPort"]]
        assert link == [{"podSelector": {"matchLabels": member["spec"]["podSelector"]["matchLabels"]}}]
        assert member["spec"]["podSelector"]["matchLabels"]["strongroom.io/cluster"] == "default"
        etcd = _rules_by_port(r.get("NetworkPolicy", "sr-strongroom-etcd"))
        (from_release,) = etcd[r.values["etcd"]["clientPort"]]
        assert from_release == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "strongroom",
                                                                 "app.kubernetes.io/instance": "sr"}}}]
        assert r.get("NetworkPolicy", "sr-strongroom-realm")["spec"]["ingress"][0].get("from") == (clients or None)


def test_the_realm_apply_job_admits_nothing_and_policies_can_be_turned_off() -> None:
    values = load_values(CHART / "ci" / "values-default.yaml")
    values.setdefault("realm", {})["applyOnUpgrade"] = True
    r = render(values)
    assert r.get("NetworkPolicy", "sr-strongroom-realm-apply")["spec"]["ingress"] == []
    values["networkPolicy"] = {"enabled": False}
    assert not render(values).all("NetworkPolicy")
