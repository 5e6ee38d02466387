"""Disaster-recovery drill on Kubernetes (`strongroom drill dr --platform kubernetes`): the pair of
Helm releases of docs/dr.md (site A's primary release, site B's `dr.role=standby` release).

**Not run on a live cluster yet** (none here): the commands are built from the chart's names and
labels and checked against the rendered chart (tests/deploy/test_drill_dr_k8s.py), and
`--dry-run` prints them in order. The steps are the local drill's (`strongroom.drill_dr`), with
kubectl doing the process work, and the client work done by an agent (`python -m
strongroom.drill_dr_k8s agent STEP`) run with `kubectl exec -i` in each site's realm pod, where
the members' names resolve:

1. `agent publish` at site A: confirmed publishing to a fresh queue; at half confirmed the
   orchestrator scales site A's member StatefulSet to 0 and deletes its pods with no grace
   period (site A's etcd and realm service stay: the agents of steps 4 and 5 run there);
2. `strongroom dr activate` in site B's realm pod, at site B's DR Service;
3. `agent resume` at site B: the rest published at the new primary (the orchestrator times the
   disaster to the agent's `first` event), then everything consumed and counted;
4. the StatefulSet scaled back; `agent tail` at site A: fenced, settled, the manifest's indexes;
5. `agent failback` at site A: demote; from then on site A's own DR service (the primary
   release's, `<fullname>-<cluster>-dr`, which follows its site's record) ships there from the
   new primary: nothing is started by hand. `agent more` at site B publishes a few messages at
   the new primary and says its last index and grid; the first agent waits until site A holds
   them and reports the bytes and snapshots that DR service shipped. (The agents at site A never
   resolve site B's names; site A's DR service does: it reads the new primary at the addresses
   the realm gives the standby release's members.)

The report has the local drill's keys; `judge` decides `ok` the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from strongroom.drill import (
    WINDOW,
    ConfirmTracker,
    DrillAborted,
    body_for,
    collect_deliveries,
    delivery_counts,
)
from strongroom.drill_dr import manifest_indexes, tail_check
from strongroom.drill_k8s import (
    CLIENT_CONTAINER,
    CLUSTER_LABEL,
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    PERSISTENCE_COMPONENT,
    REALM_COMPONENT,
    _ready,
    member_endpoints,
)

__all__ = ["AGENT", "DrSites", "SiteCommands", "agent_main", "agent_parser", "chart_fullname", "dr_drill_kubernetes"]

STEP_TIMEOUT = 300.0
AGENT = ["python", "-m", "strongroom.drill_dr_k8s", "agent"]

Progress = Callable[[str], None]


def chart_fullname(release: str, name: str = "strongroom") -> str:
    """The chart's "strongroom.fullname" (a DR pair refuses fullnameOverride)."""
    return release if name in release else f"{release}-{name}"


@dataclass(frozen=True)
class SiteCommands:
    """The kubectl commands against one site's release."""

    namespace: str
    release: str
    cluster: str = "default"
    context: str | None = None
    kubectl: str = "kubectl"

    @property
    def fullname(self) -> str:
        return chart_fullname(self.release)

    @property
    def statefulset(self) -> str:
        """The cluster's member StatefulSet (the standby members' in a standby release)."""
        return f"{self.fullname}-{self.cluster}"

    @property
    def dr_service(self) -> str:
        """The cluster's DR Service (each release of the pair runs one for the cluster)."""
        return f"{self.fullname}-{self.cluster}-dr"

    @property
    def member_selector(self) -> str:
        return (f"{INSTANCE_LABEL}={self.release},{COMPONENT_LABEL}={PERSISTENCE_COMPONENT},"
                f"{CLUSTER_LABEL}={self.cluster}")

    @property
    def client_selector(self) -> str:
        return f"{INSTANCE_LABEL}={self.release},{COMPONENT_LABEL}={REALM_COMPONENT}"

    def _base(self) -> list[str]:
        return [self.kubectl, *(["--context", self.context] if self.context else []), "--namespace", self.namespace]

    def get_pods(self, selector: str) -> list[str]:
        return [*self._base(), "get", "pods", "--selector", selector, "--output", "json"]

    def get(self, kind: str, name: str) -> list[str]:
        return [*self._base(), "get", kind, name, "--output", "json"]

    def scale(self, replicas: int) -> list[str]:
        return [*self._base(), "scale", "statefulset", self.statefulset, f"--replicas={replicas}"]

    def delete_members(self) -> list[str]:
        """Every member pod at once, no grace period (a kill -9 of the site's members)."""
        return [*self._base(), "delete", "pods", "--selector", self.member_selector, "--grace-period=0", "--force",
                "--wait=false"]

    def exec(self, pod: str, argv: Sequence[str]) -> list[str]:
        return [*self._base(), "exec", "-i", pod, "--container", CLIENT_CONTAINER, "--", *argv]


@dataclass(frozen=True)
class DrSites:
    """Site A's primary release and site B's standby release of one cluster."""

    primary: SiteCommands
    standby: SiteCommands

    @classmethod
    def of(cls, namespace: str, release: str, standby_namespace: str, standby_release: str, cluster: str = "default",
           context: str | None = None, standby_context: str | None = None, kubectl: str = "kubectl") -> DrSites:
        return cls(SiteCommands(namespace, release, cluster, context, kubectl),
                   SiteCommands(standby_namespace, standby_release, cluster, standby_context, kubectl))

    def plan(self, messages: int, failback_messages: int = 50,
             destination: str = "drill-dr-<time>.queue") -> list[str]:
        """The commands of a run, in order (`--dry-run`); <...> stands for what is found then."""
        a, b, c = self.primary, self.standby, self.primary.cluster
        steps = [
            a.get_pods(a.member_selector), a.get_pods(a.client_selector), a.get("statefulset", a.statefulset),
            a.get("service", a.dr_service),
            b.get_pods(b.member_selector), b.get_pods(b.client_selector), b.get("service", b.dr_service),
            a.exec("<site A realm pod>", [*AGENT, "publish", "--endpoints", "<site A members>", "--destination",
                                          destination, "--messages", str(messages)]),
            a.scale(0), a.delete_members(),
            b.exec("<site B realm pod>", ["strongroom", "dr", "activate", "--cluster", c, "--dr",
                                          f"{b.dr_service}:<port>", "--json"]),
            b.exec("<site B realm pod>", [*AGENT, "resume", "--endpoints", "<site B members>", "--destination",
                                          destination, "--messages", str(messages)]),
            a.scale(-1),
            a.exec("<site A realm pod>", [*AGENT, "tail", "--endpoints", "<site A members>", "--cluster", c,
                                          "--destination", destination]),
            a.exec("<site A realm pod>", [*AGENT, "failback", "--endpoints", "<site A members>", "--cluster", c,
                                          "--dr", f"{a.dr_service}:<port>"]),
            b.exec("<site B realm pod>", [*AGENT, "more", "--endpoints", "<site B members>", "--cluster", c,
                                          "--messages", str(failback_messages)]),
        ]
        return [" ".join(argv).replace("--replicas=-1", "--replicas=<as before>") for argv in steps]


async def _kubectl(argv: list[str], stdin: bytes | None = None) -> bytes:
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), STEP_TIMEOUT)
    if proc.returncode != 0:
        raise DrillAborted(f"{' '.join(argv[:8])} ... failed: {err.decode(errors='replace').strip()[-500:]}")
    return out


async def _json(argv: list[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(await _kubectl(argv))
    return doc


def _events(out: bytes) -> dict[str, dict[str, Any]]:
    """The agent's JSON-line events by name (other lines are kubectl's or python's)."""
    found: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event:
            found[str(event["event"])] = event
    return found


async def _ready_pod(site: SiteCommands, selector: str) -> str:
    pods = [p for p in (await _json(site.get_pods(selector))).get("items", []) if _ready(p)]
    if not pods:
        raise DrillAborted(f"no ready pod in {site.namespace} matches {selector}")
    return str(pods[0]["metadata"]["name"])


async def dr_drill_kubernetes(sites: DrSites, messages: int = 1000, failback_messages: int = 50,
                              progress: Progress | None = None) -> dict[str, Any]:
    """Run the drill against the pair (see the module docstring); returns the report."""
    from strongroom.drill_dr import judge

    say: Progress = progress or (lambda _line: None)
    a, b = sites.primary, sites.standby
    dest = f"drill-dr-{int(time.time())}.queue"
    report: dict[str, Any] = {"platform": "kubernetes", "cluster": a.cluster, "messages": messages,
                              "destination": dest, "confirmed": 0, "received": 0, "lost": 0, "duplicated": 0,
                              "seconds_to_first_publish": None, "ok": False}
    try:
        members_a = (await _json(a.get_pods(a.member_selector))).get("items", [])
        if not members_a or not all(_ready(p) for p in members_a):
            raise DrillAborted(f"site A's members are not all ready ({a.member_selector})")
        client_a = await _ready_pod(a, a.client_selector)
        replicas = int((await _json(a.get("statefulset", a.statefulset)))["spec"]["replicas"])
        service_a = await _json(a.get("service", a.dr_service))
        dr_a = f"{a.dr_service}:{service_a['spec']['ports'][0]['port']}"
        members_b = (await _json(b.get_pods(b.member_selector))).get("items", [])
        client_b = await _ready_pod(b, b.client_selector)
        service = await _json(b.get("service", b.dr_service))
        dr = f"{b.dr_service}:{service['spec']['ports'][0]['port']}"
        ends_a, ends_b = member_endpoints(members_a, a.namespace), member_endpoints(members_b, b.namespace)

        say(f"publishing {messages} messages to {dest} from {client_a}; site A's members go at half confirmed")
        agent = await asyncio.create_subprocess_exec(
            *a.exec(client_a, [*AGENT, "publish", "--endpoints", ",".join(ends_a), "--destination", dest,
                               "--messages", str(messages)]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        published: dict[str, Any] = {}
        killed_at = 0.0
        while not published:
            line = await asyncio.wait_for(agent.stdout.readline(), STEP_TIMEOUT)
            if not line:
                raise DrillAborted("the publish agent ended without a report")
            event = _events(line)
            if "half" in event:
                await _kubectl(a.scale(0))
                await _kubectl(a.delete_members())
                killed_at = time.monotonic()
                say(f"{event['half'].get('confirmed')} confirmed: DISASTER, {a.statefulset} scaled to 0, pods deleted")
                agent.stdin.write(b"killed\n")
                await agent.stdin.drain()
            published = event.get("published", {})
        await agent.wait()
        confirmed = set(published.get("confirmed", []))

        activated = json.loads(await _kubectl(b.exec(client_b, ["strongroom", "dr", "activate", "--cluster",
                                                                a.cluster, "--dr", dr, "--json"])))
        report["activation"] = activated
        say(f"activated: {activated.get('summary')}")
        agent = await asyncio.create_subprocess_exec(
            *b.exec(client_b, [*AGENT, "resume", "--endpoints", ",".join(ends_b), "--destination", dest,
                               "--messages", str(messages)]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        agent.stdin.write(json.dumps({"confirmed": sorted(confirmed),
                                      "next_index": published.get("next_index")}).encode() + b"\n")
        await agent.stdin.drain()
        resumed: dict[str, Any] = {}
        while not resumed:
            line = await asyncio.wait_for(agent.stdout.readline(), STEP_TIMEOUT)
            if not line:
                raise DrillAborted("the resume agent ended without a report")
            event = _events(line)
            if "first" in event:
                report["seconds_to_first_publish"] = round(time.monotonic() - killed_at, 3)
            resumed = event.get("resumed", {})
        await agent.wait()
        for key in ("confirmed", "received", "lost", "duplicated", "out_of_order", "unconfirmed_received",
                    "unconfirmed_at_new_primary"):
            report[key] = resumed.get(key, report.get(key))
        delivered = set(resumed.get("delivered", []))
        all_confirmed = set(resumed.get("confirmed_indexes", []))

        await _kubectl(a.scale(replicas))
        say(f"{a.statefulset} scaled back to {replicas}: site A returns on its volumes")
        tail = _events(await _kubectl(a.exec(client_a, [*AGENT, "tail", "--endpoints", ",".join(ends_a),
                                                        "--cluster", a.cluster, "--destination", dest]))).get("tail")
        if tail is None:
            raise DrillAborted("the tail agent ended without a report")
        report["fenced"] = bool(tail.get("fenced"))
        report["tail"] = {**tail.get("header", {}), **tail_check(all_confirmed, delivered, set(tail.get("indexes", [])))}
        # Fail back: site A's agent demotes, and site A's DR service (the primary release's) ships
        # there; site B's agent publishes more and says where the new primary's log ends.
        agent = await asyncio.create_subprocess_exec(
            *a.exec(client_a, [*AGENT, "failback", "--endpoints", ",".join(ends_a), "--cluster", a.cluster,
                               "--dr", dr_a]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        fb: dict[str, Any] = {}
        while not fb:
            line = await asyncio.wait_for(agent.stdout.readline(), STEP_TIMEOUT)
            if not line:
                raise DrillAborted("the failback agent ended without a report")
            event = _events(line)
            if "shipping" in event:
                more = _events(await _kubectl(b.exec(client_b, [*AGENT, "more", "--endpoints", ",".join(ends_b),
                                                                "--cluster", a.cluster, "--messages",
                                                                str(failback_messages)]))).get("more")
                if more is None:
                    raise DrillAborted("the agent publishing at the new primary ended without a report")
                agent.stdin.write(json.dumps(more).encode() + b"\n")
                await agent.stdin.drain()
            fb = event.get("failback", {})
        await agent.wait()
        report["failback"] = fb
    except (DrillAborted, OSError, TimeoutError, ValueError, KeyError) as exc:
        report["problem"] = f"{type(exc).__name__}: {exc}"
        say(f"drill failed: {report['problem']}")
    report["failures"] = judge(report)
    report["ok"] = not report["failures"]
    return report


# --- the agent, in a realm pod ---------------------------------------------------------------------


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def _line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def agent_publish(endpoints: str, destination: str, messages: int) -> None:
    """Publish with confirmation at site A; at half confirmed say `half` and wait for `killed`."""
    from strongroom.client import Client
    from strongroom.client.retry import RetryPolicy

    tracker = ConfirmTracker(messages)
    client = Client(endpoints, client_name="strongroom-dr-drill-k8s", retry=RetryPolicy(timeout=3,
                                                                                       unreachable_timeout=3))
    pub = client.publisher(destination, window=WINDOW)
    next_index = messages
    for i in range(messages):
        if tracker.half.is_set() or i >= tracker.hold_at:
            next_index = i
            break
        fut = await pub.send(body_for(i))
        tracker.pending.add(fut)
        fut.add_done_callback(functools.partial(tracker.on_done, i))
    await asyncio.wait_for(tracker.half.wait(), STEP_TIMEOUT)
    _emit("half", confirmed=len(tracker.confirmed), next_index=next_index)
    await _line()
    if tracker.pending:
        await asyncio.wait(set(tracker.pending), timeout=15)
    for f in list(tracker.pending):
        f.cancel()
    _emit("published", confirmed=sorted(tracker.confirmed), next_index=next_index)
    os._exit(0)  # the publisher's retries toward the lost site need not be waited for


async def agent_resume(endpoints: str, destination: str, messages: int) -> None:
    """Publish the rest at the new primary (`first` once one is confirmed), consume, count."""
    from strongroom.client import Client

    given = json.loads(await _line())
    confirmed: set[int] = set(given["confirmed"])
    rest = range(int(given["next_index"]), messages)
    async with Client(endpoints, client_name="strongroom-dr-drill-k8s", timeout=60) as client:
        pub = client.publisher(destination, window=WINDOW)
        first = asyncio.Event()

        def on_done(i: int, fut: asyncio.Future[Any]) -> None:
            if fut.cancelled() or fut.exception() is not None:
                return  # counted as unconfirmed
            confirmed.add(i)
            if not first.is_set():
                first.set()
                _emit("first")
        futures = []
        for i in rest:
            fut = await pub.send(body_for(i))
            fut.add_done_callback(functools.partial(on_done, i))
            futures.append(fut)
        if futures:
            await asyncio.wait(futures, timeout=STEP_TIMEOUT)
        await asyncio.sleep(0)
        await pub.close()
        deliveries, order = await collect_deliveries(client, destination, confirmed, idle_timeout=5.0)
    _emit("resumed", **delivery_counts(confirmed, deliveries, order), confirmed=len(confirmed),
          confirmed_indexes=sorted(confirmed), delivered=sorted(deliveries),
          unconfirmed_at_new_primary=sum(1 for i in rest if i not in confirmed))


async def _site_states(addresses: list[str]) -> list[Any]:
    from strongroom.local.leader import fetch_statuses

    return [reply.status for reply in await fetch_statuses(addresses)]


async def _until(check: Callable[[list[Any]], bool], addresses: list[str], timeout: float = STEP_TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check(await _site_states(addresses)):
            return True
        await asyncio.sleep(0.5)
    return False


async def agent_tail(endpoints: str, cluster: str, destination: str) -> None:
    """Until site A is fenced and settled; then its lost tail's drill indexes."""
    from strongroom.cli.dr_cmd import site_member, write_manifest

    addresses = endpoints.split(",")
    fenced = await _until(lambda ss: all(s is not None and s.dr_role == "fenced" and s.newer_generation for s in ss),
                          addresses)
    address, status = await site_member(addresses, cluster)  # once its leader committed its whole log
    manifest, _ = await write_manifest(cluster, address, status, os.path.join(tempfile.gettempdir(), "lost-tail.jsonl"))
    _emit("tail", fenced=fenced, indexes=sorted(manifest_indexes(manifest.rows, destination)),
          header={"from_index": manifest.from_index, "to_index": manifest.to_index, "entries": manifest.entries,
                  "messages": manifest.messages, "acks": manifest.acks})


async def agent_more(endpoints: str, cluster: str, messages: int) -> None:
    """At the new primary: publish `messages` more; then its commit index and grid."""
    from strongroom.cli.dr_cmd import site_member
    from strongroom.client import Client
    from strongroom.drill_dr import FAILBACK_DESTINATION, member_grid

    async with Client(endpoints, timeout=60) as client:
        for i in range(messages):
            await client.publish(FAILBACK_DESTINATION, f"failback-{i}".encode())
    _, new = await site_member(endpoints.split(","), cluster)
    stores = [s for s in new.stores if s.replicated]
    _emit("more", target=int(new.commit_index), grid=json.loads(json.dumps(member_grid(new))),
          state_bytes=sum(int(s.bytes) for s in stores), state_messages=sum(int(s.messages) for s in stores))


async def agent_failback(endpoints: str, cluster: str, dr: str) -> None:
    """Demote site A, whose DR service at `dr` (the primary release's) then ships there from the
    new primary (`shipping` once every member cut its log back); given the new primary's last
    index and grid on stdin, until site A holds them; what that DR service shipped."""
    from strongroom.cli.dr_cmd import site_member
    from strongroom.dr.transport import demote_at, dr_status_at
    from strongroom.drill_dr import cut_back, member_grid
    from strongroom.local.leader import fetch_statuses

    addresses = endpoints.split(",")
    address, _ = await site_member(addresses, cluster)
    demoted = await demote_at(address, cluster)
    since, generation = int(demoted.since_index), int(demoted.generation)
    started = time.monotonic()
    deadline = started + STEP_TIMEOUT
    while time.monotonic() < deadline:
        # The DR service may already ship: a member past `since` must hold the new generation there.
        if all([await cut_back(reply, since, generation) for reply in await fetch_statuses(addresses)]):
            break
        await asyncio.sleep(0.5)
    _emit("shipping", since_index=since)
    more = json.loads(await _line())
    target = int(more["target"])
    await _until(lambda ss: all(s is not None and s.applied_index >= target for s in ss), addresses)
    states = await _site_states(addresses)
    shipped = await dr_status_at(dr)
    _emit("failback", since_index=since, generation=generation, target_index=target,
          entries=target - since, seconds=round(time.monotonic() - started, 3),
          converged=all(s is not None and json.loads(json.dumps(member_grid(s))) == more["grid"] for s in states),
          dr_state=shipped.state if shipped else None,
          bytes_shipped=int(shipped.bytes_shipped) if shipped else None,
          snapshots_shipped=int(shipped.snapshots_shipped) if shipped else None,
          state_bytes=more.get("state_bytes"), state_messages=more.get("state_messages"))


def agent_parser() -> argparse.ArgumentParser:
    """The agent's command line."""
    parser = argparse.ArgumentParser(prog="python -m strongroom.drill_dr_k8s",
                                     description="In-pod half of the Kubernetes DR drill.")
    sub = parser.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent").add_subparsers(dest="step", required=True)
    for step in ("publish", "resume", "tail", "failback", "more"):
        p = agent.add_parser(step)
        p.add_argument("--endpoints", required=True)
        p.add_argument("--destination", default="")
        p.add_argument("--messages", type=int, default=1000)
        p.add_argument("--cluster", default="default")
        if step == "failback":
            p.add_argument("--dr", required=True, metavar="HOST:PORT",
                           help="site A's DR service (the primary release's DR Service), which ships there")
    return parser


def agent_main(argv: Sequence[str] | None = None) -> int:
    """`python -m strongroom.drill_dr_k8s agent publish|resume|tail|failback|more ...`."""
    args = agent_parser().parse_args(argv)
    if args.step == "publish":
        asyncio.run(agent_publish(args.endpoints, args.destination, args.messages))
    elif args.step == "resume":
        asyncio.run(agent_resume(args.endpoints, args.destination, args.messages))
    elif args.step == "tail":
        asyncio.run(agent_tail(args.endpoints, args.cluster, args.destination))
    elif args.step == "more":
        asyncio.run(agent_more(args.endpoints, args.cluster, args.messages))
    else:
        asyncio.run(agent_failback(args.endpoints, args.cluster, args.dr))
    return 0


if __name__ == "__main__":
    sys.exit(agent_main())
