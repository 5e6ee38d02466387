"""The Kubernetes DR drill's commands (`strongroom drill dr --platform kubernetes`), checked
against the chart's two releases of a disaster-recovery pair, rendered: the StatefulSet it
scales, the pods it deletes, the realm pods its agents run in, the DR Service it activates at
(site B's) and the one that ships on fail back (site A's, the primary release's: the drill
starts no DR service by hand). Nothing here runs on a cluster (there is none): the drill end to
end is not verified."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from chartkit import NAMESPACE, Rendered
from test_chart_dr import render_pair

from strongroom.drill_dr_k8s import AGENT, DrSites, agent_parser, chart_fullname
from strongroom.drill_k8s import CLIENT_CONTAINER


def _selected(r: Rendered, selector: str) -> set[str]:
    """The workloads whose pods a label selector selects."""
    wanted = dict(term.split("=", 1) for term in selector.split(","))
    return {w["metadata"]["name"] for w in r.all("StatefulSet") + r.all("Deployment")
            if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in wanted.items())}


def _dr_port(r: Rendered, name: str) -> int:
    """The port of the DR Service `name`, checked to be its DR Deployment's container port."""
    service = r.get("Service", name)
    deployment = r.get("Deployment", name)
    ports = [p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
    port = int(service["spec"]["ports"][0]["port"])
    assert port in ports
    return port


def _sites(**kw: Any) -> DrSites:
    return DrSites.of(NAMESPACE, "sr", NAMESPACE, "sr-standby", "default", **kw)


def test_the_commands_name_what_the_pair_renders() -> None:
    primary, standby = render_pair()
    sites = _sites()
    a, b = sites.primary, sites.standby
    assert a.fullname == chart_fullname("sr") == "sr-strongroom"
    # Site A: the members' StatefulSet, scaled to 0; the selector of the pods deleted is exactly it.
    assert primary.get("StatefulSet", a.statefulset)["spec"]["replicas"] == 3
    assert _selected(primary, a.member_selector) == {a.statefulset}
    assert _selected(primary, a.client_selector) == {f"{a.fullname}-realm"}
    # Site A's DR Service, the primary release's, on its DR Deployment's port: it ships on fail back.
    assert _dr_port(primary, a.dr_service) == primary.values["dr"]["port"]
    assert _selected(primary, "app.kubernetes.io/instance=sr,app.kubernetes.io/component=dr") == {a.dr_service}
    # Site B: its standby members, its realm pods, its DR Service (on the DR Deployment's port).
    assert _selected(standby, b.member_selector) == {b.statefulset}
    assert _selected(standby, b.client_selector) == {f"{b.fullname}-realm"}
    assert _dr_port(standby, b.dr_service) == standby.values["dr"]["port"]
    assert a.dr_service != b.dr_service
    # The agents run in the realm container, which has the strongroom package.
    for r, site in ((primary, a), (standby, b)):
        realm = r.get("Deployment", f"{site.fullname}-realm")["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in realm if c["name"] == CLIENT_CONTAINER] == [CLIENT_CONTAINER]


def test_the_plan_scales_site_a_down_and_back_and_every_agent_step_parses() -> None:
    plan = _sites(context="site-a", standby_context="site-b").plan(400, 20)
    argvs = [shlex.split(line.replace("<", "'<").replace(">", ">'")) for line in plan]
    site_a = [argv for argv in argvs if argv[1:3] == ["--context", "site-a"]]
    site_b = [argv for argv in argvs if argv[1:3] == ["--context", "site-b"]]
    assert len(site_a) + len(site_b) == len(argvs)
    verbs = [" ".join(argv[5:7]) for argv in argvs]
    down = verbs.index("scale statefulset")
    assert argvs[down][-1] == "--replicas=0" and argvs[down] in site_a
    assert verbs[down + 1] == "delete pods" and "--grace-period=0" in argvs[down + 1]
    activate = next(i for i, argv in enumerate(argvs) if "activate" in argv)
    assert activate > down + 1 and argvs[activate] in site_b
    assert "sr-standby-strongroom-default-dr:<port>" in argvs[activate]
    assert verbs.index("scale statefulset", down + 1) > activate
    steps = []
    for argv in argvs:
        if argv[5] == "exec" and AGENT[0] in argv:
            tail = argv[argv.index("--") + 1:]
            assert tail[:len(AGENT)] == AGENT
            steps.append(agent_parser().parse_args(tail[len(AGENT) - 1:]).step)
    assert steps == ["publish", "resume", "tail", "failback", "more"]


def test_fail_back_uses_site_a_dr_service_and_starts_none() -> None:
    """The failback agent is given site A's DR Service, the one the primary release renders, and
    it looks it up first like site B's; nothing in the plan starts strongroom-dr."""
    primary, _ = render_pair()
    sites = _sites()
    a = sites.primary
    plan = sites.plan(400, 20)
    assert f"kubectl --namespace {NAMESPACE} get service {a.dr_service} --output json" in plan
    primary.get("Service", a.dr_service)
    (failback,) = [shlex.split(line.replace("<", "'<").replace(">", ">'")) for line in plan if " failback " in line]
    assert failback[failback.index("--") + 1:][:len(AGENT)] == AGENT
    args = agent_parser().parse_args(failback[failback.index("--") + len(AGENT):])
    assert args.step == "failback" and args.dr == f"{a.dr_service}:<port>"
    assert a.dr_service == "sr-strongroom-default-dr"
    assert not [line for line in plan if "strongroom-dr " in line or line.endswith("strongroom-dr")]
    # The agent's --dr is required: without it the failback step does not parse.
    tail = failback[failback.index("--") + len(AGENT):]
    cut = tail.index("--dr")
    with pytest.raises(SystemExit):
        agent_parser().parse_args(tail[:cut] + tail[cut + 2:])
