"""Strongroom as a benchmark target: a fresh local 3-member cluster (etcd, realm service, members
on loopback) per configuration, driven through the Python client."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BODY,
    CREDIT,
    FANOUT_DURABLES,
    WARMUP_MESSAGES,
    WINDOW,
    CpuMeter,
    Progress,
    percentile,
)

__all__ = ["CONFIGS", "DRIVER_CONFIGS", "StrongroomTarget", "realm_for"]

CLUSTER = "bench"
# configuration name -> (cluster storage mode, destination prefix). The non-replicated store
# lives on a disk-async cluster; its messages never enter the log, so the mode does not matter.
# `disk-sync-events`: disk-sync with the store event log on (beside disk-sync: the pair the
# event log must stay within 5 % of).
CONFIGS: dict[str, tuple[str, str]] = {
    "disk-sync": ("disk-sync", ""),
    "disk-sync-events": ("disk-sync", ""),
    "disk-sync-plaintext": ("disk-sync", ""),  # TLS off (`strongroom up --insecure`); the others run with it
    # The realm's auth on: the client calls as user `bench` with a bearer token, every call checked.
    "disk-sync-auth": ("disk-sync", ""),
    "disk-async": ("disk-async", ""),
    "non-replicated": ("disk-async", "nr."),
    "uow": ("disk-sync", ""),
    "routing": ("disk-sync", ""),  # bench/routing.py: London and Rio, both disk-sync
    "routing-pinned": ("disk-sync", ""),  # the same, each site on a core of its own
    # bench/standby.py: disk-sync with a standby set attached (shipping, niced, or stopped).
    "disk-sync-standby": ("disk-sync", ""),
    "disk-sync-standby-niced": ("disk-sync", ""),
    "disk-sync-standby-stopped": ("disk-sync", ""),
    # The SQLite storage driver (persistent_store.driver) beside RocksDB's disk-sync and disk-async.
    "disk-sync-sqlite": ("disk-sync", ""),
    "disk-async-sqlite": ("disk-async", ""),
    # Indexes on disk (`clusters[].indexes_on_disk: true`) beside the default, state in memory:
    # the throughput half of deciding that default (the backlog half: bench/backlog.py).
    "disk-sync-indexed": ("disk-sync", ""),
    "disk-async-indexed": ("disk-async", ""),
}
DRIVER_CONFIGS: dict[str, str] = {"disk-sync-sqlite": "sqlite", "disk-async-sqlite": "sqlite"}
"""Configurations on another storage driver than the default (RocksDB): configuration -> driver."""
INDEXED_SUFFIX = "-indexed"
"""Configurations whose cluster keeps its indexes on disk."""
EVENTS_SUFFIX = "-events"
PLAINTEXT_SUFFIX = "-plaintext"
AUTH_SUFFIX = "-auth"
AUTH_SECTIONS = """\
auth:
  enabled: true
roles:
  - name: operator
    permissions:
      - actions: [administer, publish, subscribe]
  - name: benchmark
    permissions:
      - actions: [publish, subscribe]
        store: main
        destinations: ["bench.*", "*.queue", "*"]
      - actions: [browse]
users:
  - name: admin
    roles: [operator]
  - name: bench
    roles: [benchmark]
"""
"""What `-auth` configurations add to the realm: the benchmark's client is user `bench`, whose
grants are checked at every call (three destination globs, the last one matching)."""
EVENT_LOG_INTERVAL = 10.0
"""The event log's default publish interval (seconds), which the benchmark keeps."""


def realm_for(storage: str, events_dir: Path | None = None, primary: list[str] | None = None,
              driver: str = "", indexes_on_disk: bool = False) -> str:
    """The benchmark realm: one 3-member cluster, a replicated store and a non-replicated one.
    `*.queue` destinations are queues (stored without subscribers), the rest topics; the `nr.`
    prefix selects the non-replicated store. `events_dir`: the store event log on, there (the
    default publish interval, 10 s). `primary`: the three members' addresses, and a standby set
    of three (s1-s3) that reads the primary's committed log there (`clusters[].standby`,
    docs/dr.md). `driver`: the storage driver (`persistent_store.driver`; default RocksDB).
    `indexes_on_disk`: the cluster's state in RocksDB column families instead of memory."""
    event_log = f"    event_log:\n      directory: {events_dir}\n" if events_dir is not None else ""
    if driver:
        event_log += f"    persistent_store:\n      driver: {driver}\n"
    if indexes_on_disk:
        event_log += "    indexes_on_disk: true\n"
    names = ("m1", "m2", "m3")
    if primary is None:
        members = "".join(f"      - name: {m}\n" for m in names)
        standby = ""
    else:
        if len(primary) != len(names):
            raise ValueError(f"the standby realm needs {len(names)} primary addresses, not {len(primary)}")
        members = "".join(f'      - name: {m}\n        address: "{a}"\n' for m, a in zip(names, primary, strict=True))
        standby = ("    standby:\n      members: [{name: s1}, {name: s2}, {name: s3}]\n"
                   f"      primary: [{', '.join(f'{a!r}' for a in primary)}]\n")
    return f"""\
clusters:
  - name: {CLUSTER}
    storage: {storage}
{event_log}    members:
{members}{standby}stores:
  - name: main
    cluster: {CLUSTER}
  - name: volatile
    cluster: {CLUSTER}
    replicated: false
destinations:
  - name: "nr.*.queue"
    kind: queue
    store: volatile
  - name: "nr.*"
    kind: topic
    store: volatile
  - name: "*.queue"
    kind: queue
    store: main
  - name: "*"
    kind: topic
    store: main
"""


class StrongroomTarget:
    """One configuration of Strongroom (disk-sync, disk-async or non-replicated)."""

    system = "strongroom"

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        self.config = config
        self.storage, self.prefix = CONFIGS[config]
        self.driver = DRIVER_CONFIGS.get(config, "")
        self.work_dir = work_dir
        self.events_dir = work_dir / "events" if config.endswith(EVENTS_SUFFIX) else None
        self.progress = progress
        self.cluster: Any = None
        self.client: Any = None
        self.leader = ""
        self.leader_pid = 0
        self.server_pids: list[int] = []
        self.notes: list[str] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def realm_text(self) -> str:
        """The realm this configuration runs."""
        text = realm_for(self.storage, self.events_dir, driver=self.driver,
                         indexes_on_disk=self.config.endswith(INDEXED_SUFFIX))
        return text + AUTH_SECTIONS if self.config.endswith(AUTH_SUFFIX) else text

    async def start(self) -> None:
        from strongroom.client import Client
        from strongroom.local.launcher import LocalCluster
        from strongroom.realm.model import parse_realm

        text = self.realm_text()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # Mutual TLS on every connection, as `strongroom up` runs, unless a plaintext configuration.
        self.cluster = LocalCluster(self.work_dir, write_state=False, tls=not self.config.endswith(PLAINTEXT_SUFFIX))
        leaders = await self.cluster.start(parse_realm(text, "bench-realm.yaml"), text, "bench-realm.yaml",
                                           progress=lambda _s: None)
        lagging = await self.cluster.wait_until_synced(30.0)
        if lagging:
            raise RuntimeError(f"members not synced: {lagging}")
        self.leader = leaders[CLUSTER]
        self.leader_pid = self.cluster.member(CLUSTER, self.leader).pid
        self.server_pids = [p.pid for p in self.cluster.members[CLUSTER].values()]
        token = await self._token() if self.config.endswith(AUTH_SUFFIX) else None
        self.client = Client(self.cluster.endpoints(CLUSTER), client_name="bench", timeout=60.0, token=token)

    async def _token(self) -> str:
        """A bearer token for user `bench`, once every member knows it (they follow etcd)."""
        from strongroom.etcd import EtcdClient
        from strongroom.security.tokens import TokenBook

        assert self.cluster.etcd is not None
        etcd = EtcdClient(self.cluster.etcd.endpoint)
        try:
            token, _record = await TokenBook(etcd).issue("bench", 0, "benchmark")
        finally:
            await etcd.close()
        await asyncio.sleep(0.5)
        return token

    async def event_log_size(self) -> dict[str, float]:
        """The event log's files once the last rows are published (one publish interval after
        the workloads, not timed): rows, bytes on disk, bytes per event."""
        import pyarrow.parquet as pq

        if self.events_dir is None:
            return {}
        await asyncio.sleep(EVENT_LOG_INTERVAL + 1.5)
        files = [p for p in self.events_dir.rglob("*.parquet") if not p.name.startswith(".")]
        rows = sum(pq.read_metadata(p).num_rows for p in files)
        size = sum(p.stat().st_size for p in files)
        return {"files": len(files), "rows": rows, "bytes": size, "bytes_per_event": size / rows if rows else 0.0}

    async def stop(self) -> None:
        try:
            if self.client is not None:
                await self.client.close()
        finally:
            if self.cluster is not None:
                await asyncio.to_thread(self.cluster.stop)
            shutil.rmtree(self.work_dir, ignore_errors=True)

    async def check_leader(self) -> None:
        """Note a leader change (the CPU figures would then mix two processes)."""
        leader = await self.cluster.leader_name(CLUSTER)
        if leader != self.leader:
            self.notes.append(f"leader changed from {self.leader} to {leader or 'none'}")

    def _meter(self) -> CpuMeter:
        return CpuMeter(self.leader_pid, self.server_pids).start()

    def dest(self, name: str) -> str:
        return self.prefix + name

    async def _backlog(self, dest: str) -> int | None:
        """Messages of `dest` still pending or unacknowledged in any durable (the leader's view)."""
        for st in await self.client.status():
            if st.role == "leader":
                return sum(d.pending_messages + d.unacked for s in st.stores for d in s.durables
                           if d.destination == dest)
        return None

    async def _settle(self, dest: str, timeout: float = 30.0) -> float:
        """Not timed: wait until every acknowledgment took effect; returns how long that took."""
        t0 = time.perf_counter()
        while True:
            left = await self._backlog(dest)
            if left == 0:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{dest}: {left} messages still pending {timeout:.0f} s after consuming")
            await asyncio.sleep(0.02)

    # --- workloads -------------------------------------------------------------------------------

    async def confirm(self, n: int) -> dict[str, Any]:
        """One publish in flight, each waiting for its confirmation."""
        dest = self.dest("confirm.queue")
        for _ in range(WARMUP_MESSAGES):
            await self.client.publish(dest, BODY)
        self.progress.begin(f"{self.config} confirm", n)
        lat: list[float] = []
        meter = self._meter()
        t0 = time.perf_counter()
        for _ in range(n):
            s = time.perf_counter()
            r = await self.client.publish(dest, BODY)
            lat.append(time.perf_counter() - s)
            if not r.confirmed:
                raise RuntimeError("confirm: a publish was not confirmed")
            self.progress.add()
        seconds = time.perf_counter() - t0
        # What 10 of them one after the other take (the `uow` group sets a UOW of 10 beside it).
        tens = sorted(sum(lat[i:i + 10]) for i in range(0, n - 9, 10))
        lat.sort()
        return {"msgs_per_s": n / seconds, "p50_ms": percentile(lat, 50) * 1e3,
                "p99_ms": percentile(lat, 99) * 1e3, "x10_p50_ms": percentile(tens, 50) * 1e3,
                "seconds": seconds, **meter.stop(n)}

    async def _publish(self, dest: str, n: int, publishers: int) -> None:
        counts = [n // publishers + (1 if i < n % publishers else 0) for i in range(publishers)]

        async def one(count: int) -> None:
            pub = self.client.publisher(dest, window=WINDOW)
            try:
                futs = []
                for _ in range(count):
                    futs.append(await pub.send(BODY))
                    self.progress.add()
                await pub.flush()
                for f in futs:
                    if f.exception() is not None:
                        raise f.exception()  # type: ignore[misc]
                    if not f.result().confirmed:
                        raise RuntimeError("pipelined: a publish was not confirmed")
            finally:
                await pub.close()

        await asyncio.gather(*(one(c) for c in counts))

    async def pipelined(self, n: int, publishers: int) -> dict[str, Any]:
        """`publishers` pipelined publishers (256 in flight each), n messages in all, all confirmed."""
        dest = self.dest(f"pipe{publishers}.queue")
        await self.client.publish(dest, BODY)  # warm-up: the stream's first call finds the leader
        self.progress.begin(f"{self.config} pipelined x{publishers}", n)
        meter = self._meter()
        t0 = time.perf_counter()
        await self._publish(dest, n, publishers)
        seconds = time.perf_counter() - t0
        return {"msgs_per_s": n / seconds, "seconds": seconds, **meter.stop(n)}

    async def consume(self, n: int) -> dict[str, Any]:
        """Drain the backlog of `pipelined` x1 (n messages + the warm-up one) with explicit acks."""
        dest = self.dest("pipe1.queue")
        total = n + 1
        self.progress.begin(f"{self.config} consume", total)
        meter = self._meter()
        t0 = time.perf_counter()
        sub = await self.client.subscribe(dest, "", ack="explicit", credit=CREDIT)
        try:
            got = 0
            while got < total:
                try:
                    m = await sub.next(timeout=30.0)
                except TimeoutError:
                    raise RuntimeError(f"consume: {got} of {total} messages, then none for 30 s") from None
                await sub.ack(m)
                got += 1
                self.progress.done = got
            await sub.acks_written()
            seconds = time.perf_counter() - t0
        finally:
            await sub.close()
        cpu = meter.stop(total)
        return {"msgs_per_s": total / seconds, "seconds": seconds, **cpu, "settle_s": await self._settle(dest)}

    async def fanout(self, n: int) -> dict[str, Any]:
        """One pipelined publisher; 4 standard durables (opened first) each receive every message."""
        dest = self.dest("fanout")
        subs = [await self.client.subscribe(dest, f"fan{i}", kind="standard", ack="explicit", credit=CREDIT)
                for i in range(FANOUT_DURABLES)]
        deliveries = n * FANOUT_DURABLES
        self.progress.begin(f"{self.config} fanout", deliveries)

        async def drain(sub: Any) -> None:
            got = 0
            while got < n:
                try:
                    m = await sub.next(timeout=30.0)
                except TimeoutError:
                    raise RuntimeError(f"fanout: a durable got {got} of {n} messages, then none for 30 s") from None
                await sub.ack(m)
                got += 1
                self.progress.add()
            await sub.acks_written()

        meter = self._meter()
        t0 = time.perf_counter()
        try:
            consumers = [asyncio.create_task(drain(s)) for s in subs]
            publisher = asyncio.create_task(self._publish_quiet(dest, n))
            await asyncio.gather(publisher, *consumers)
            seconds = time.perf_counter() - t0
        finally:
            for s in subs:
                await s.close()
        cpu = meter.stop(n)
        return {"deliveries_per_s": deliveries / seconds, "seconds": seconds, **cpu,
                "settle_s": await self._settle(dest)}

    async def _publish_quiet(self, dest: str, n: int) -> None:
        pub = self.client.publisher(dest, window=WINDOW)
        try:
            futs = [await pub.send(BODY) for _ in range(n)]
            await pub.flush()
            for f in futs:
                if f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        finally:
            await pub.close()
