"""Fail back on the sites `strongroom up` runs (docs/dr.md), with nothing started by hand: real
etcds, realm services, six members and the DR service `up` runs at each site, driven through
the `strongroom` command.

The primary site is left by a planned switchover (`strongroom dr activate --force`): the old
site stays up, fenced, so no restart is needed and nothing is lost, and its DR service lives
through every change of its site's record (primary -> fenced -> standby). The realm is
examples/dr.yaml on free ports with the standby members' `address`es left out (the launcher
gives them free ports), so the old site's DR service starts knowing no address of the other
site and learns it only from its record when the site is fenced: it must ship from the peer the
record names at that moment, not from the one it started with. Site A's DR service answers the
gRPC health services the chart's probes ask, idle as when shipping (the chart runs the same DR
service in its primary release).

The Kubernetes drill's fail back agents (`python -m strongroom.drill_dr_k8s agent failback|more`,
run in the sites' realm pods there) run here against such sites too: the failback agent demotes
site A and is given site A's DR service, which ships (the agent starts none).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dr_sites import committed_log, grid
from grpc_health.v1 import health_pb2, health_pb2_grpc

from strongroom.client import Client
from strongroom.dr.server import SERVICE as DR_SERVICE
from strongroom.dr.transport import dr_status_at
from strongroom.local.etcdproc import free_port
from strongroom.local.launcher import load_state
from strongroom.local.leader import fetch_statuses
from strongroom.channels import open_channel
from tests.integration.test_local_cluster import kill_state_pids, strongroom

pytestmark = pytest.mark.slow

QUEUE = "jobs.queue"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dr.yaml"


def realm_text() -> str:
    """examples/dr.yaml on free ports, the standby members without addresses."""
    text = EXAMPLE.read_text()
    for fixed in (7501, 7502, 7503):
        text = text.replace(f"127.0.0.1:{fixed}", f"127.0.0.1:{free_port()}")
    text, found = re.subn(r'\{name: (s\d), address: "127\.0\.0\.1:751\d"\}', r"{name: \1}", text)
    assert found == 3, text
    return text


async def statuses(addresses: list[str]) -> list[Any]:
    return [reply.status for reply in await fetch_statuses(addresses, timeout=2.0)]


async def leader(addresses: list[str], timeout: float = 30.0) -> tuple[str, Any]:
    """The serving leader among `addresses`: (its address, its status). Asked again for up to
    `timeout` s while none answers as leader (a status that took over 2 s on a loaded machine,
    or a leader change under way); two at once is never right."""
    deadline = time.monotonic() + timeout
    while True:
        found = [(r.endpoint, r.status) for r in await fetch_statuses(addresses, timeout=2.0)
                 if r.status is not None and r.status.role == "leader"]
        assert len(found) <= 1, found
        if found or time.monotonic() >= deadline:
            (one,) = found
            return one
        await asyncio.sleep(0.2)


async def until(check: Any, what: str, data: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {p.name} ---\n{p.read_text()[-2500:]}" for p in sorted((data / "logs").glob("*dr*")))
            raise AssertionError(f"not after {timeout:.0f} s: {what}{logs}")
        await asyncio.sleep(0.2)


async def health(address: str, service: str) -> int:
    """The gRPC health status `address` gives `service` (what a Kubernetes gRPC probe asks)."""
    async with open_channel(address, []) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                                timeout=5)
    return int(reply.status)


async def cli(*args: str) -> Any:
    return await asyncio.to_thread(strongroom, *args)


async def up_sites(tmp_path: Path) -> tuple[Path, list[str], list[str], str, str]:
    """`strongroom up` of the realm above: (data dir, site A's members, site B's, site A's DR
    service, site B's)."""
    realm_file = tmp_path / "dr.yaml"
    realm_file.write_text(realm_text())
    data = tmp_path / "data"
    up = await cli("up", "--detach", "--realm", str(realm_file), "--data-dir", str(data))
    assert up.returncode == 0, up.stdout + up.stderr
    state = load_state(data)
    assert state is not None
    main = state["clusters"]["main"]
    return (data, [m["address"] for m in main["members"].values()],
            [m["address"] for m in main["standby"]["members"].values()], main["dr"]["address"],
            main["standby"]["dr"]["address"])


async def test_a_demoted_site_takes_the_new_primarys_log_from_the_dr_service_up_runs_there(tmp_path: Path) -> None:
    data = tmp_path / "data"
    where = ("--data-dir", str(data))
    try:
        data, site_a, site_b, dr_a, dr_b = await up_sites(tmp_path)

        # Site A's DR service idles while its site is the primary, and is healthy on both the
        # services the chart's probes ask (startup and liveness "", readiness DrService), so the
        # primary release's idle DR pod is ready.
        idle = await dr_status_at(dr_a)
        assert idle is not None and idle.state == "primary" and idle.role == "primary", idle
        assert idle.bytes_shipped == 0 and idle.generation == 0, idle
        for service in ("", DR_SERVICE):
            assert await health(dr_a, service) == health_pb2.HealthCheckResponse.SERVING, service

        # Confirmed publishing at the primary (site A).
        async with Client(site_a, timeout=30) as client:
            for i in range(20):
                await client.publish(QUEUE, f"before {i}".encode())

        # A planned switchover: site B is the primary of generation 1, nothing lost.
        activated = await cli("dr", "activate", "--cluster", "main", "--force", "--json", *where)
        assert activated.returncode == 0, activated.stdout + activated.stderr
        report = json.loads(activated.stdout)
        assert report["address"] == dr_b and report["exact"] is True and int(report["generation"]) == 1, report
        since = int(report["standby_last_index"])

        async def fenced() -> bool:
            return all(s is not None and s.dr_role == "fenced" and s.dr_since_index == since
                       for s in await statuses(site_a))
        await until(fenced, "site A is fenced and knows where the histories part", data)

        # Demote site A; from here on nobody starts anything.
        demoted = await cli("dr", "demote", "--cluster", "main", "--no-manifest", "--json", *where)
        assert demoted.returncode == 0, demoted.stdout + demoted.stderr
        answer = json.loads(demoted.stdout)
        assert int(answer["since_index"]) == since and int(answer["generation"]) == 1, answer
        assert set(answer["primary"]) == set(site_b), answer

        # The new primary commits more; site A receives it.
        async with Client(site_b, timeout=30) as client:
            for i in range(30):
                await client.publish(QUEUE, f"after {i}".encode())
            await client.publish("other.queue", b"a second destination")
        _, new = await leader(site_b)
        target = new.commit_index

        async def caught_up() -> bool:
            return all(s is not None and s.applied_index >= target for s in await statuses(site_a))
        await until(caught_up, f"site A's members applied index {target}", data)
        # (The new primary may commit clock ticks meanwhile: the grid is what was published.)
        new_address, new = await leader(site_b)
        for st in await statuses(site_a):
            assert st is not None and st.dr_role == "standby" and st.generation == 1
            assert grid(st) == grid(new), f"{st.member} differs from the new primary"
            assert grid(st)["orders"][0] == 51  # 20 before, 30 after, 1 elsewhere: none twice
        assert await committed_log(site_a[0], target) == await committed_log(new_address, target)

        # Each site's DR service says what it does now: A's ships from B (the peer its record
        # names since the site was fenced), B's is the activated primary.
        dr = await cli("dr", "status", "--json", *where)
        assert dr.returncode == 0, dr.stdout + dr.stderr
        by_address = {d["address"]: d for d in json.loads(dr.stdout)}
        a, b = by_address[dr_a], by_address[dr_b]
        assert a["site"] == "primary" and a["state"] == "shipping" and a["role"] == "standby", a
        assert int(a["generation"]) == 1 and set(a["primary"]) == set(site_b) and set(a["standby"]) == set(site_a)
        assert int(a["standby_last_index"]) >= target and 0 < int(a["bytes_shipped"]), a
        assert int(a.get("snapshots_shipped", 0)) == 0, a  # only what A lacked: no full copy
        assert b["site"] == "standby" and b["state"] == "primary" and int(b["generation"]) == 1, b
        for address in (dr_a, dr_b):  # ready in their new roles too, the same process throughout
            assert await health(address, DR_SERVICE) == health_pb2.HealthCheckResponse.SERVING, address
        # `dr activate` goes to the DR service whose site is the standby now: site A's, which
        # refuses while the primary (site B) is healthy, and nothing changes.
        again = await cli("dr", "activate", "--cluster", "main", "--json", *where)
        assert again.returncode == 1, again.stdout + again.stderr
        refusal = json.loads(again.stdout)
        assert refusal["address"] == dr_a and refusal["error"] == "PRIMARY_HEALTHY", refusal
        status = await cli("status", "--json", *where)
        assert status.returncode == 0, status.stderr
        states = {m["member"]: m["dr_service"]["state"] for m in json.loads(status.stdout)}
        assert states == {"m1": "shipping", "m2": "shipping", "m3": "shipping",
                          "s1": "primary", "s2": "primary", "s3": "primary"}, states

        down = await cli("down", *where)
        assert down.returncode == 0, down.stdout + down.stderr
    finally:
        kill_state_pids(load_state(data))


async def _agent(step: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "strongroom.drill_dr_k8s", "agent", step, *args,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)


async def _event(proc: asyncio.subprocess.Process, name: str, timeout: float = 120.0) -> dict[str, Any]:
    """The agent's next JSON event called `name` (other lines skipped)."""
    assert proc.stdout is not None
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        assert line, f"the agent ended before its {name!r} event"
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            return event


async def test_the_kubernetes_drills_fail_back_agents_use_site_a_dr_service(tmp_path: Path) -> None:
    data = tmp_path / "data"
    where = ("--data-dir", str(data))
    agents: list[asyncio.subprocess.Process] = []
    try:
        data, site_a, site_b, dr_a, dr_b = await up_sites(tmp_path)
        async with Client(site_a, timeout=30) as client:
            for i in range(20):
                await client.publish(QUEUE, f"before {i}".encode())
        activated = await cli("dr", "activate", "--cluster", "main", "--force", "--json", *where)
        assert activated.returncode == 0, activated.stdout + activated.stderr

        async def fenced() -> bool:
            return all(s is not None and s.dr_role == "fenced" and s.dr_since_index for s in await statuses(site_a))
        await until(fenced, "site A is fenced", data)

        failback = await _agent("failback", "--endpoints", ",".join(site_a), "--cluster", "main", "--dr", dr_a)
        agents.append(failback)
        shipping = await _event(failback, "shipping")
        more_agent = await _agent("more", "--endpoints", ",".join(site_b), "--cluster", "main", "--messages", "30")
        agents.append(more_agent)
        more = await _event(more_agent, "more")
        assert await more_agent.wait() == 0
        assert failback.stdin is not None
        failback.stdin.write(json.dumps(more).encode() + b"\n")
        await failback.stdin.drain()
        report = await _event(failback, "failback")
        assert await failback.wait() == 0
        assert report["since_index"] == shipping["since_index"] and report["generation"] == 1, report
        assert report["converged"] is True and report["target_index"] == more["target"], report
        # Shipped by site A's own DR service (the one `up` runs, as the primary release does),
        # only what site A lacked.
        assert report["dr_state"] == "shipping" and report["bytes_shipped"] > 0, report
        assert report["snapshots_shipped"] == 0, report
        for st in await statuses(site_a):
            assert st is not None and st.dr_role == "standby" and st.applied_index >= more["target"]

        down = await cli("down", *where)
        assert down.returncode == 0, down.stdout + down.stderr
    finally:
        for proc in agents:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        kill_state_pids(load_state(data))
