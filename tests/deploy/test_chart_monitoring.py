"""Prometheus on Kubernetes: every member serves /metrics on the chart's metrics port (the flag the
member parses, a named container port, the headless Service's port), its pods carry the scrape
annotations unless turned off, and with monitoring.serviceMonitor a ServiceMonitor per cluster
selects the Service that has that port."""

from __future__ import annotations

from chartkit import CHART, NAMESPACE, args_of, fullname, load_values, member_container, render

DEFAULT = CHART / "ci" / "values-default.yaml"
OPERATOR = CHART / "ci" / "values-monitoring.yaml"


def test_members_serve_metrics_on_the_metrics_port_and_are_annotated_for_scraping() -> None:
    r = render(load_values(DEFAULT))
    port = r.values["persistence"]["metricsPort"]
    sts = r.get("StatefulSet", f"{fullname(r.values)}-default")
    container = member_container(sts)
    args = args_of(container)
    assert args["--metrics-listen"] == f"0.0.0.0:{port}"
    assert args["--stats-interval"] == "60"
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
    assert len({p["containerPort"] for p in container["ports"]}) == len(container["ports"])
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                           "prometheus.io/path": "/metrics"}
    headless = r.get("Service", sts["spec"]["serviceName"])
    assert {"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"} in headless["spec"]["ports"]
    assert not r.all("ServiceMonitor")


def test_a_service_monitor_per_cluster_selects_the_service_with_the_metrics_port() -> None:
    r = render(load_values(OPERATOR))
    sts = r.get("StatefulSet", f"{fullname(r.values)}-default")
    assert "annotations" not in sts["spec"]["template"]["metadata"]
    assert args_of(member_container(sts))["--stats-interval"] == "30"
    (monitor,) = r.all("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert spec["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    selected = [s for s in r.all("Service")
                if all(s["metadata"]["labels"].get(k) == v for k, v in spec["selector"]["matchLabels"].items())]
    with_port = [s["metadata"]["name"] for s in selected if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    # The headless Service: every member, ready or not (one catching up is worth watching).
    assert with_port == [sts["spec"]["serviceName"]]
    headless = r.get("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["publishNotReadyAddresses"] is True


def test_router_and_dr_pods_serve_metrics_on_their_metrics_ports_and_are_annotated() -> None:
    for scenario, kind, container_name, key in (("values-zones.yaml", "router", "router", "router"),
                                                 ("values-dr.yaml", "dr", "dr", "dr")):
        r = render(load_values(CHART / "ci" / scenario))
        port = r.values[key]["metricsPort"]
        pods = [d for d in r.all("Deployment") if d["metadata"]["labels"].get("app.kubernetes.io/component") == kind]
        assert pods, (scenario, kind)
        for deployment in pods:
            template = deployment["spec"]["template"]
            (container,) = [c for c in template["spec"]["containers"] if c["name"] == container_name]
            assert args_of(container)["--metrics-listen"] == f"0.0.0.0:{port}"
            assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
            assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def test_the_realm_service_serves_metrics_on_its_metrics_port() -> None:
    r = render(load_values(DEFAULT))
    port = r.values["realm"]["metricsPort"]
    deployment = r.get("Deployment", f"{fullname(r.values)}-realm")
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert args_of(container)["--metrics-listen"] == f"0.0.0.0:{port}"
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    policy = r.get("NetworkPolicy", f"{fullname(r.values)}-realm")
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {r.values["realm"]["port"], port}
