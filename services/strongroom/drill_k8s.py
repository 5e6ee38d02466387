"""Failover drill on Kubernetes: delete the leader's pod under confirmed publishing, lose nothing.

Two halves, so the client runs where the members' DNS names resolve:

- the **orchestrator** (`failover_drill_kubernetes`, `strongroom drill failover --platform
  kubernetes`) runs wherever `kubectl` reaches the cluster. It finds the cluster's members and its
  leader by the chart's labels, starts the agent with `kubectl exec -i` in the release's realm pod
  (same image), deletes the leader's pod when the agent says half is confirmed, and watches for a
  new pod carrying the leader label;
- the **agent** (`python -m strongroom.drill_k8s agent`) publishes with confirmation to a fresh
  queue, holds the last quarter until the orchestrator says the leader is gone, keeps publishing
  through the new leader, then consumes everything and compares it with what was confirmed.

Both speak JSON lines: the agent prints `{"event": "half", ...}` and waits for a line on stdin,
then prints `{"event": "report", ...}`. deploy/drills/failover.sh is the same orchestrator in
plain bash and kubectl. The report has the local drill's keys (strongroom.drill).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from strongroom.drill import WINDOW, ConfirmTracker, DrillAborted, body_for, consume_and_count
from strongroom.persistence.k8s import LEADER_VALUE, ROLE_LABEL

__all__ = [
    "CLUSTER_LABEL",
    "COMPONENT_LABEL",
    "INSTANCE_LABEL",
    "KubectlCommands",
    "agent_main",
    "failover_drill_kubernetes",
    "member_endpoints",
    "run_agent",
]

# The chart's labels (deploy/helm/strongroom/templates/_helpers.tpl). app.kubernetes.io/name is
# left out on purpose: a nameOverride changes it, while the instance label is the release name.
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
CLUSTER_LABEL = "strongroom.io/cluster"
PERSISTENCE_COMPONENT = "persistence"
REALM_COMPONENT = "realm"
CLIENT_CONTAINER = "realm"  # the realm Deployment's container: it carries the strongroom package
MEMBER_CONTAINER = "persistence"
GRPC_PORT_NAME = "grpc"

LEADER_TIMEOUT = 90.0  # a new pod must be scheduled, or a peer elected and its label patched
AGENT_TIMEOUT = 600.0
HALF_TIMEOUT = 300.0
POLL_SECONDS = 0.5

Progress = Callable[[str], None]


@dataclass(frozen=True)
class KubectlCommands:
    """Every kubectl command the drill runs; deploy/drills/failover.sh runs the same ones."""

    namespace: str
    release: str
    cluster: str = "default"
    kubectl: str = "kubectl"

    @property
    def member_selector(self) -> str:
        """Every member pod of the cluster."""
        return (f"{INSTANCE_LABEL}={self.release},{COMPONENT_LABEL}={PERSISTENCE_COMPONENT},"
                f"{CLUSTER_LABEL}={self.cluster}")

    @property
    def leader_selector(self) -> str:
        """The member pod that labelled itself leader."""
        return f"{self.member_selector},{ROLE_LABEL}={LEADER_VALUE}"

    @property
    def client_selector(self) -> str:
        """The realm service pods, where the agent runs."""
        return f"{INSTANCE_LABEL}={self.release},{COMPONENT_LABEL}={REALM_COMPONENT}"

    def _base(self) -> list[str]:
        return [self.kubectl, "--namespace", self.namespace]

    def get_pods(self, selector: str) -> list[str]:
        """List pods matching a label selector, as JSON."""
        return [*self._base(), "get", "pods", "--selector", selector, "--output", "json"]

    def delete_pod(self, name: str, force: bool = False) -> list[str]:
        """Delete a pod without waiting; `force` skips the grace period (a kill -9)."""
        extra = ["--grace-period=0", "--force"] if force else []
        return [*self._base(), "delete", "pod", name, "--wait=false", *extra]

    def exec_agent(self, pod: str, endpoints: Sequence[str], destination: str, messages: int) -> list[str]:
        """Run the agent in `pod` with stdin attached (it waits there for "killed")."""
        return [*self._base(), "exec", "-i", pod, "--container", CLIENT_CONTAINER, "--",
                "python", "-m", "strongroom.drill_k8s", "agent", "--endpoints", ",".join(endpoints),
                "--destination", destination, "--messages", str(messages)]


def _ready(pod: dict[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status", {})
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))


def member_endpoints(pods: Sequence[dict[str, Any]], namespace: str) -> list[str]:
    """`<hostname>.<subdomain>.<namespace>.svc:<grpc port>` of each member pod (StatefulSet DNS)."""
    out: list[str] = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        spec = pod["spec"]
        port = next(p["containerPort"] for c in spec["containers"] if c["name"] == MEMBER_CONTAINER
                    for p in c.get("ports", []) if p.get("name") == GRPC_PORT_NAME)
        out.append(f"{spec.get('hostname') or pod['metadata']['name']}.{spec['subdomain']}.{namespace}.svc:{port}")
    return out


async def _kubectl_json(argv: list[str]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise DrillAborted(f"{' '.join(argv[:6])} ... failed: {err.decode(errors='replace').strip()}")
    result: dict[str, Any] = json.loads(out)
    return result


async def _run(argv: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise DrillAborted(f"{' '.join(argv)} failed: {err.decode(errors='replace').strip()}")


async def failover_drill_kubernetes(namespace: str, release: str, cluster: str = "default",
                                    messages: int = 1000, destination: str | None = None,
                                    force: bool = False, kubectl: str = "kubectl",
                                    progress: Progress | None = None) -> dict[str, Any]:
    """Run the drill against release `release` in `namespace`; returns the report.

    The report holds the local drill's keys (confirmed, received, lost, duplicated,
    out_of_order, leaderless_seconds, publish_gap_seconds, old_leader, new_leader,
    publish_errors, ok, problem) plus platform, namespace, release, cluster and destination.
    leaderless_seconds runs from the delete until a new pod carries the leader label.
    """
    say: Progress = progress or (lambda _line: None)
    cmd = KubectlCommands(namespace, release, cluster, kubectl)
    dest = destination or f"drill-{int(time.time())}.queue"
    report: dict[str, Any] = {
        "platform": "kubernetes", "namespace": namespace, "release": release, "cluster": cluster,
        "destination": dest, "messages": messages, "confirmed": 0, "received": 0, "lost": 0,
        "duplicated": 0, "out_of_order": 0, "leaderless_seconds": None, "publish_gap_seconds": None,
        "old_leader": None, "new_leader": None, "publish_errors": 0, "ok": False,
    }
    agent: asyncio.subprocess.Process | None = None
    try:
        members = (await _kubectl_json(cmd.get_pods(cmd.member_selector))).get("items", [])
        if not members:
            raise DrillAborted(f"no pod in namespace {namespace} matches {cmd.member_selector}")
        not_ready = [p["metadata"]["name"] for p in members if not _ready(p)]
        if not_ready:
            raise DrillAborted(f"members not ready before the drill: {', '.join(not_ready)}")
        leaders = (await _kubectl_json(cmd.get_pods(cmd.leader_selector))).get("items", [])
        if len(leaders) != 1:
            names = ", ".join(p["metadata"]["name"] for p in leaders) or "none"
            raise DrillAborted(f"expected one pod labelled {ROLE_LABEL}={LEADER_VALUE}, found {names} "
                               f"(selector {cmd.leader_selector})")
        old = leaders[0]["metadata"]
        report["old_leader"] = old["name"]
        clients = [p for p in (await _kubectl_json(cmd.get_pods(cmd.client_selector))).get("items", [])
                   if _ready(p)]
        if not clients:
            raise DrillAborted(f"no ready realm pod ({cmd.client_selector}) to run the drill client in")
        client_pod = clients[0]["metadata"]["name"]
        endpoints = member_endpoints(members, namespace)
        say(f"leader is {old['name']}; publishing {messages} messages to {dest} from pod {client_pod}")

        agent = await asyncio.create_subprocess_exec(
            *cmd.exec_agent(client_pod, endpoints, dest, messages),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        watcher: asyncio.Task[tuple[str, float] | None] | None = None
        killed_at = 0.0

        async def watch_for_new_leader() -> tuple[str, float] | None:
            deadline = time.monotonic() + LEADER_TIMEOUT
            while time.monotonic() < deadline:
                for pod in (await _kubectl_json(cmd.get_pods(cmd.leader_selector))).get("items", []):
                    if pod["metadata"].get("uid") != old.get("uid") and not pod["metadata"].get("deletionTimestamp"):
                        return str(pod["metadata"]["name"]), time.monotonic()
                await asyncio.sleep(POLL_SECONDS)
            return None

        agent_report: dict[str, Any] | None = None
        deadline = time.monotonic() + AGENT_TIMEOUT
        while agent_report is None:
            line = await asyncio.wait_for(agent.stdout.readline(), max(1.0, deadline - time.monotonic()))
            if not line:
                break
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not ours (a warning printed by kubectl or python)
            if event.get("event") == "half" and watcher is None:
                say(f"{event.get('confirmed')} confirmed: deleting leader pod {old['name']}"
                    + (" (forced)" if force else ""))
                await _run(cmd.delete_pod(old["name"], force))
                killed_at = time.monotonic()
                agent.stdin.write(b"killed\n")
                await agent.stdin.drain()
                watcher = asyncio.create_task(watch_for_new_leader())
            elif event.get("event") == "report":
                agent_report = event
        await asyncio.wait_for(agent.wait(), 30)
        if agent_report is None:
            raise DrillAborted(f"the drill agent in pod {client_pod} ended without a report "
                               f"(exit status {agent.returncode})")
        for key in ("confirmed", "received", "lost", "duplicated", "out_of_order", "publish_gap_seconds",
                    "publish_errors", "first_error", "lost_sample", "unconfirmed_received", "problem"):
            if key in agent_report:
                report[key] = agent_report[key]
        found = await watcher if watcher is not None else None
        if found is not None:
            report["new_leader"] = found[0]
            report["leaderless_seconds"] = round(found[1] - killed_at, 3)
        elif watcher is not None and "problem" not in report:
            report["problem"] = (f"no new pod labelled {ROLE_LABEL}={LEADER_VALUE} within "
                                 f"{LEADER_TIMEOUT:.0f} s after deleting {old['name']}")
        report["ok"] = bool(agent_report.get("data_ok")) and report["new_leader"] is not None
        say(f"received {report['received']} of {report['confirmed']} confirmed: lost {report['lost']}, "
            f"duplicated {report['duplicated']}, out of order {report['out_of_order']}; "
            f"new leader {report['new_leader']} after {report['leaderless_seconds']} s")
    except (DrillAborted, OSError, TimeoutError, ValueError, KeyError) as exc:
        report["ok"] = False
        report["problem"] = f"{type(exc).__name__}: {exc}"
        say(f"drill failed: {report['problem']}")
    finally:
        if agent is not None and agent.returncode is None:
            agent.kill()
            await agent.wait()
    return report


# --- the agent, inside the cluster ---------------------------------------------------------------


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def run_agent(endpoints: str, destination: str, messages: int,
                    wait_killed: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Publish, pause at half for the kill, publish the rest, consume; returns the report.

    `wait_killed` is awaited after the half event (default: a line on stdin).
    """
    from strongroom.client import Client

    async def stdin_line() -> None:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    waiter = wait_killed or stdin_line
    report: dict[str, Any] = {"confirmed": 0, "received": 0, "lost": 0, "duplicated": 0,
                              "out_of_order": 0, "publish_gap_seconds": None, "publish_errors": 0,
                              "data_ok": False}
    client = Client(endpoints, client_name="strongroom-drill-k8s")
    try:
        tracker = ConfirmTracker(messages)
        confirmed, errors, timing, half, pending = (tracker.confirmed, tracker.errors, tracker.timing,
                                                    tracker.half, tracker.pending)
        hold_at, on_done = tracker.hold_at, tracker.on_done

        async def pause_for_kill(next_index: int) -> None:
            await asyncio.wait_for(half.wait(), HALF_TIMEOUT)
            _emit("half", confirmed=len(confirmed), next_index=next_index)
            await waiter()
            timing["kill"] = time.monotonic()
            timing["next_index"] = next_index

        killed = False
        pub = client.publisher(destination, window=WINDOW)
        try:
            for i in range(messages):
                if errors:
                    break
                if not killed and (half.is_set() or i >= hold_at):
                    await pause_for_kill(i)
                    killed = True
                fut = await pub.send(body_for(i))
                pending.add(fut)
                fut.add_done_callback(functools.partial(on_done, i))
            if not killed and not errors:
                await pause_for_kill(messages)
            if pending:
                await asyncio.wait(set(pending), timeout=HALF_TIMEOUT)
            if pending:
                errors.append(f"{len(pending)} messages not confirmed within {HALF_TIMEOUT:.0f} s")
        finally:
            for f in list(pending):
                f.cancel()
            await pub.close()
        await asyncio.sleep(0)
        report["confirmed"] = len(confirmed)
        report["publish_errors"] = len(errors)
        if errors:
            report["first_error"] = errors[0]
        if "first_confirm" in timing:
            report["publish_gap_seconds"] = round(timing["first_confirm"] - timing["kill"], 3)

        report.update(await consume_and_count(client, destination, confirmed))
        report["data_ok"] = (report["lost"] == 0 and report["duplicated"] == 0
                             and report["out_of_order"] == 0 and report["confirmed"] == messages)
    except Exception as exc:  # noqa: BLE001 - the agent always reports
        report["problem"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            await asyncio.wait_for(client.close(), 10)
        except Exception:  # noqa: BLE001, S110 - exiting anyway
            pass
    return report


def agent_main(argv: Sequence[str] | None = None) -> int:
    """`python -m strongroom.drill_k8s agent --endpoints E --destination D --messages N`."""
    parser = argparse.ArgumentParser(prog="python -m strongroom.drill_k8s",
                                     description="In-cluster half of the Kubernetes failover drill.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("agent", help="publish, wait for the leader's deletion, consume, report")
    p.add_argument("--endpoints", required=True, help="member addresses, comma-separated")
    p.add_argument("--destination", required=True, help="a fresh queue name")
    p.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args(argv)
    report = asyncio.run(run_agent(args.endpoints, args.destination, args.messages))
    _emit("report", **report)
    return 0 if report["data_ok"] else 1


if __name__ == "__main__":
    sys.exit(agent_main())
