"""Two sites of one cluster for the disaster-recovery tests (docs/dr.md): the primary site (etcd
A, m1-m3), the standby site (etcd B, s1-s3), each with its own real etcd and real members, and
the real `strongroom-dr` between them; and what the tests compare of them."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Cluster, put_realm_sync, realm_yaml, wait_for

from strongroom.api.v1 import admin_pb2
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel
from strongroom.client import Client
from strongroom.drill_dr import member_grid
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.process import dr_argv, spawn, stop_processes

__all__ = ["Sites", "caught_up", "committed_log", "grid", "load"]


class Sites:
    """The primary site (etcd A, m1-m3), the standby site (etcd B, s1-s3) and the DR service."""

    def __init__(self, root: Path, compact_after_entries: int = 20000, standby_addresses: bool = False,
                 primary_via: Callable[[list[str]], list[str]] | None = None, indexes_on_disk: bool = False) -> None:
        """`standby_addresses`: the realm names the standby members' addresses (the primary's
        members then ask the standby site for its DR role before they serve). `primary_via`: from
        the primary members' addresses, the ones the realm names as the primary's
        (`standby.primary`), e.g. proxies in front of them, so the standby site can be cut off.
        `indexes_on_disk`: the cluster keeps its state in RocksDB."""
        self.root = root
        self.etcd_a = start_etcd(root / "etcd-a")
        self.etcd_b = start_etcd(root / "etcd-b")
        self.primary = Cluster(self.etcd_a.endpoint, root / "a")
        self.standby = Cluster(self.etcd_b.endpoint, root / "b")
        self.standby.names = ["s1", "s2", "s3"]
        self.standby.ports = {n: free_port() for n in self.standby.names}
        primary = self.primary.addresses()
        addresses = ", ".join(primary_via(primary) if primary_via is not None else primary)
        standby = ("    standby:\n      members:\n"
                   + "".join(f"        - name: {n}\n" + (f"          address: {self.standby.address(n)}\n"
                                                          if standby_addresses else "")
                             for n in self.standby.names)
                   + f"      primary: [{addresses}]\n")
        self.realm = realm_yaml(cluster_extra=standby, compact_after_entries=compact_after_entries,
                                indexes_on_disk=indexes_on_disk)
        put_realm_sync(self.etcd_a.endpoint, self.realm, 1)
        put_realm_sync(self.etcd_b.endpoint, self.realm, 1)
        self.dr: Any = None

    def start(self) -> None:
        self.primary.start_all()
        self.start_standby()

    def start_standby(self) -> None:
        self.standby.start_all()
        self.start_dr()

    def start_dr(self, etcd: str | None = None) -> None:
        """Start the DR service (`etcd`: where it reaches the standby site's etcd, default
        directly)."""
        self.dr_address = f"127.0.0.1:{free_port()}"
        self.dr = spawn(dr_argv(etcd or self.etcd_b.endpoint, "default", ["--heartbeat", "0.2", "--report", "1",
                                                                          "--listen", self.dr_address]),
                        self.root / "dr.log")

    def pause_standby(self, sig: int = signal.SIGSTOP) -> None:
        """SIGSTOP (or SIGCONT) every standby member: a standby site that hangs (the DR service's
        ShipEntries gets no answer) and goes on."""
        for name in self.standby.names:
            self.standby.kill(name, sig)

    def lose_primary_site(self) -> None:
        """The disaster: SIGKILL every primary member and the primary site's etcd (their disks
        stay, for `restore_primary_site`)."""
        for name in self.primary.names:
            self.primary.kill(name, signal.SIGKILL)
        os.kill(self.etcd_a.pid, signal.SIGKILL)
        if self.etcd_a.process is not None:
            self.etcd_a.process.wait(timeout=30)

    def restore_primary_site(self) -> None:
        """The old primary site comes back: its etcd on the same data and port, its members on
        their disks."""
        port = int(self.etcd_a.endpoint.rpartition(":")[2])
        self.etcd_a = start_etcd(self.root / "etcd-a", port=port)
        self.primary.start_all()

    def stop(self) -> None:
        self.pause_standby(signal.SIGCONT)  # a stopped process would not see SIGTERM
        if self.dr is not None:
            stop_processes([self.dr])
        self.primary.stop_all()
        self.standby.stop_all()
        self.etcd_a.stop()
        self.etcd_b.stop()

    def logs(self) -> str:
        dr = (self.root / "dr.log").read_text()[-3000:] if (self.root / "dr.log").exists() else ""
        return f"{self.primary.logs()}\n{self.standby.logs()}\n--- dr ---\n{dr}"


grid = member_grid
"""The replicated state a member reports: per store its messages and bytes, per durable its
counts (the admin status grid; the DR drill compares the same)."""


async def committed_log(address: str, upto: int) -> dict[int, bytes]:
    """A member's committed entries through `upto` (from its snapshot on, when it compacted)."""
    out: dict[int, bytes] = {}
    async with open_channel(address, CHANNEL_OPTIONS) as channel:
        call = rgrpc.ReplicationServiceStub(channel).StreamCommitted(rpb.StreamCommittedRequest(from_index=1))
        try:
            while not out or max(out) < upto:
                msg = await asyncio.wait_for(call.read(), 10)
                for i, raw in enumerate(msg.entries, msg.first_index):
                    out[i] = raw
        finally:
            call.cancel()
    return {i: raw for i, raw in out.items() if i <= upto}


async def caught_up(sites: Sites) -> tuple[admin_pb2.ClusterStatus, list[admin_pb2.ClusterStatus]]:
    """Once the standby set applied everything the (quiet) primary committed: the primary
    leader's status and every running standby member's."""
    leader = await sites.primary.leader()
    # A quiet primary still writes its pseudo-clock into the log every CLOCK_IDLE_TICK_SECONDS:
    # when a tick lands while the standby catches up, the standby is awaited at the new index.
    for _ in range(3):
        target = (await sites.primary.status(leader)).commit_index  # type: ignore[union-attr]

        async def there() -> bool:
            statuses = [await sites.standby.status(n) for n in sites.standby.names if n in sites.standby.procs
                        and sites.standby.procs[n].poll() is None]
            return all(s is not None and s.applied_index >= target for s in statuses)
        try:
            await wait_for(there, timeout=60)
        except TimeoutError:
            raise AssertionError(f"the standby did not reach index {target}\n{sites.logs()}") from None
        primary = await sites.primary.status(leader)
        assert primary is not None
        if primary.commit_index == target:
            break
    else:
        raise AssertionError("the primary kept moving while quiet (more than a clock tick each time)")
    standby = [await sites.standby.status(n) for n in sites.standby.names
               if sites.standby.procs[n].poll() is None]
    return primary, [s for s in standby if s is not None]


async def load(client: Client, destination: str, count: int, acked: dict[str, int]) -> list[bytes]:
    """Publish `count` confirmed messages, consume and ack about two thirds of them."""
    sub = await client.subscribe(destination, "reader")
    publisher = client.publisher(destination, window=32)
    bodies = [f"{destination}-{i}".encode() for i in range(count)]
    for b in bodies:
        await publisher.send(b)
    await publisher.flush()
    for _ in range(count * 2 // 3):
        msg = await sub.next(timeout=10)
        await sub.ack(msg)
        acked[destination] = acked.get(destination, 0) + 1
    await sub.close()
    return bodies
