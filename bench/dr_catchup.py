"""How fast a standby that fell behind catches up while the primary publishes one message at a
time (the figure in docs/dr.md, "Shipping").

    PYTHONPATH=services python -m bench.dr_catchup [--stall 8] [--dir DIR]

Two sites on this machine, as the DR tests run them: etcd A with m1-m3 (disk-sync), etcd B with
the standby set s1-s3 and `strongroom-dr`. A publisher sends one message at a time (each waits
for its confirmation: one log entry each) for the whole run. After a few seconds of shipping the
standby members are stopped (SIGSTOP) for `--stall` seconds, a standby that hangs: the DR
service's ShipEntries gets no answer, and the primary's entries pile up behind it. Then they go
on (SIGCONT), and the script times how long the standby leader takes to hold the primary's commit
index of that moment: entries behind / seconds is the catch-up rate. The publisher runs on, so
the standby catches up with a primary that keeps committing, as it would.

Every process shares this machine's cores and disk (with whatever else runs on it): the figures
are noisy; run it a few times before comparing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from strongroom.client import Client
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.leader import member_status
from strongroom.local.process import dr_argv, member_argv, spawn, stop_processes
from strongroom.realm.store import store_realm

def _realm(primary: list[str], standby: list[str], lease_ttl: int) -> str:
    members = "".join(f"      - name: m{i}\n        address: {a}\n" for i, a in enumerate(primary, 1))
    standby_members = "".join(f"        - name: s{i}\n" for i in range(1, len(standby) + 1))
    return f"""\
clusters:
  - name: default
    storage: disk-sync
    lease_ttl_seconds: {lease_ttl}
    standby:
      members:
{standby_members}      primary: [{", ".join(primary)}]
    members:
{members}stores:
  - name: default
    cluster: default
destinations:
  - name: "*.queue"
    kind: queue
    store: default
"""


async def _leader_status(addresses: list[str]) -> tuple[str, int, int]:
    """(leader address, its commit index, its last index); waits for a leader."""
    while True:
        for address in addresses:
            st = await member_status(address, 1.0)
            if st is not None and st.role == "leader":
                return address, st.commit_index, st.last_index
        await asyncio.sleep(0.05)


async def run(root: Path, stall: float) -> dict[str, float]:
    primary = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    standby = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    etcd_a, etcd_b = start_etcd(root / "etcd-a"), start_etcd(root / "etcd-b")
    procs = []
    try:
        # A lease longer than the stall: the standby set keeps its leader through it (no election
        # is timed).
        realm = _realm(primary, standby, min(60, int(stall) + 10))
        for etcd in (etcd_a, etcd_b):
            await store_realm(etcd.endpoint, realm, "dr-catchup.yaml", expected_version=0)
        for i, address in enumerate(primary, 1):
            procs.append(spawn(member_argv(etcd_a.endpoint, "default", f"m{i}", address, root / f"m{i}"),
                               root / f"m{i}.log"))
        members = []
        for i, address in enumerate(standby, 1):
            members.append(spawn(member_argv(etcd_b.endpoint, "default", f"s{i}", address, root / f"s{i}"),
                                 root / f"s{i}.log"))
        procs += members
        procs.append(spawn(dr_argv(etcd_b.endpoint, "default", ["--heartbeat", "0.2"]), root / "dr.log"))
        await _leader_status(primary)
        await _leader_status(standby)
        stop = asyncio.Event()
        published = 0

        async def publish() -> None:
            nonlocal published
            async with Client(primary, timeout=60) as client:
                while not stop.is_set():
                    await client.publish("catchup.queue", b"x" * 100)
                    published += 1

        publishing = asyncio.create_task(publish())
        try:
            await asyncio.sleep(3.0)
            for p in members:
                os.kill(p.pid, signal.SIGSTOP)
            await asyncio.sleep(stall)
            _, target, _ = await _leader_status(primary)
            for p in members:
                os.kill(p.pid, signal.SIGCONT)
            resumed = time.monotonic()
            _, _, held = await _leader_status(standby)
            behind = target - held
            while held < target:
                await asyncio.sleep(0.02)
                _, _, held = await _leader_status(standby)
            seconds = time.monotonic() - resumed
        finally:
            stop.set()
            await publishing
        return {"stall_s": stall, "entries_behind": behind, "catch_up_s": round(seconds, 2),
                "entries_per_s": round(behind / seconds), "published": published}
    finally:
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop_processes(procs)
        etcd_a.stop()
        etcd_b.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.dr_catchup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stall", type=float, default=8.0,
                        help="seconds the standby members are stopped (at most 50)")
    parser.add_argument("--dir", help="where the sites keep their data and logs (default: a temporary directory)")
    args = parser.parse_args()
    if args.dir:
        print(json.dumps(asyncio.run(run(Path(args.dir), args.stall))))
        return
    with tempfile.TemporaryDirectory(prefix="dr-catchup-") as tmp:
        print(json.dumps(asyncio.run(run(Path(tmp), args.stall))))


if __name__ == "__main__":
    main()
