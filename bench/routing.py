"""The `routing` workload group (issue 21): forwarding between two clusters of one zone,
London and Rio, beside London's local pipelined publishes, in one run.

Strongroom (`routing`): a realm of two 3-member disk-sync clusters, each a site of its own (its
own etcd and realm service) with its router on a free port, one zone holding both; a routed
store `wide` (topics `wide.*`) and a store `main` at London only (queues `*.queue`). In order:

- `pipelined`: one pipelined publisher at London, 256 in flight, on a local queue
  (`StrongroomTarget.pipelined`: the bench's local pipelined figure);
- `forwarded`: a standard durable at Rio on `wide.bench` (created first, then probe messages
  published at London until one arrives at Rio: London's router knows Rio's interest and its
  route durable exists), then as many messages as `pipelined` through one pipelined publisher
  at London (the same settings) while the durable at Rio receives and acknowledges them. Each
  body starts with its publish time (Unix seconds, taken just before `send`) and its index.

Figures of `forwarded`: messages/s stored at Rio (n over the time from the first publish at
London to the last message's store time at Rio, as Rio's leader stamped it), end-to-end latency
(publish at London to delivery at Rio) and store latency (to Rio's store time), p50 and p99; the
publish rate London saw meanwhile; CPU of both routers per 1k messages. The target: forwarded
messages/s at least 0.8x `pipelined` (same cluster, same run).

The peer (`nats-sources`, bench/peer.py): two 3-node JetStream clusters joined by gateways, a
stream at London and a stream at Rio that sources it, the same steps.

`routing-pinned` (run only when named: `--only routing,routing-pinned`): the same realm and
steps with each site on a core of its own, as two regions have: every thread of London's
processes (members, router, etcd, realm service) and of the benchmark's own process (London's
publisher) on the first CPU the benchmark may use, every thread of Rio's and of the durable's
receiver, a process of its own there (bench/routing_receiver.py), on the second. So the local
pipelined figure is London alone on its core (Rio's processes idle on theirs), and forwarding has
London's core for what London does and Rio's for what Rio does. Each core's share in use is
measured beside the machine's.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    CREDIT,
    CpuMeter,
    MESSAGE_BYTES,
    WINDOW,
    Params,
    Progress,
    free_port,
    machine_busy,
    percentile,
    proc_cpu_seconds,
    ratio_of,
    self_cpu,
)
from bench.ours import StrongroomTarget

__all__ = ["PEER_CONFIG", "PINNED_CONFIG", "ROUTING_CONFIG", "ROUTING_FIGURES", "ROUTING_RATIOS", "CpuSplit", "RoutingTarget",
           "Stamped",
           "core_busy", "pin", "routing_headline", "routing_ratios", "run_routing"]

ROUTING_CONFIG = "routing"
PINNED_CONFIG = "routing-pinned"
PEER_CONFIG = "nats-sources"
LONDON, RIO = "london", "rio"
MEMBERS = 3
TOPIC = "wide.bench"
DURABLE = "bench"
INTEREST_TIMEOUT = 30.0
RECEIVE_TIMEOUT = 30.0

# figure key -> (label, unit, higher is better)
ROUTING_FIGURES: dict[str, tuple[str, str, bool]] = {
    "pipelined.msgs_per_s": ("local pipelined publishes at London (256 in flight)", "msgs/s", True),
    "forwarded.msgs_per_s": ("forwarded London → Rio (stored at Rio)", "msgs/s", True),
    "forwarded.vs_local": ("forwarded / local pipelined, same round", "ratio", True),
    "forwarded.e2e_p50_ms": ("publish at London → delivery at Rio p50", "ms", False),
    "forwarded.e2e_p99_ms": ("publish at London → delivery at Rio p99", "ms", False),
    "forwarded.store_p50_ms": ("publish at London → stored at Rio p50", "ms", False),
    "forwarded.store_p99_ms": ("publish at London → stored at Rio p99", "ms", False),
    "forwarded.publish_msgs_per_s": ("publishes at London while forwarding", "msgs/s", True),
    "forwarded.delivered_msgs_per_s": ("delivered at Rio", "msgs/s", True),
    "forwarded.routers_cpu_s_per_1k": ("both routers' CPU, forwarding", "s/1k msgs", False),
    "forwarded.london_cpu_s_per_1k": ("London servers' CPU, forwarding", "s/1k msgs", False),
    "forwarded.rio_cpu_s_per_1k": ("Rio servers' CPU, forwarding", "s/1k msgs", False),
    "forwarded.client_cpu_s_per_1k": ("client CPU (publisher + receiver), forwarding", "s/1k msgs", False),
    "forwarded.machine_busy_pct": ("machine's CPUs busy, forwarding", "%", False),
    "pipelined.servers_cpu_s_per_1k": ("London servers' CPU, local pipelined", "s/1k msgs", False),
    "pipelined.client_cpu_s_per_1k": ("client CPU, local pipelined", "s/1k msgs", False),
}

# (figure, against figure, target, higher is better): within one configuration.
ROUTING_RATIOS: list[tuple[str, str, float | None, bool]] = [
    ("forwarded.msgs_per_s", "pipelined.msgs_per_s", 0.8, True),
    ("forwarded.publish_msgs_per_s", "pipelined.msgs_per_s", None, True),
]

# The stamp at the start of each body: publish time (Unix seconds) and index.
_STAMP = struct.Struct("<dQ")
_PAD = b"x" * (MESSAGE_BYTES - _STAMP.size)


class CpuSplit:
    """CPU seconds per 1k messages of the routers, London's servers, Rio's servers and the client
    between `start()` and `stop()`, and the share of the machine's CPUs in use meanwhile. A part
    without processes (the peer has no routers) is left out. `processes` (label -> pid): each
    one's own figure too, as `proc.<label>` (the per-process table of docs/routing.md)."""

    def __init__(self, routers: list[int], london: list[int], rio: list[int],
                 processes: dict[str, int] | None = None, clients: list[int] | None = None,
                 cores: dict[str, int] | None = None) -> None:
        self.pids = {part: pids for part, pids in {"routers": routers, "london": london, "rio": rio}.items() if pids}
        self.processes = dict(processes or {})
        # Client processes besides this one (the pinned receiver); `cores`: label -> CPU whose
        # share in use is measured too (`<label>_core_busy_pct`).
        self.clients = list(clients or [])
        self.cores = dict(cores or {})
        self._cpu0: dict[str, float] = {}
        self._busy0 = (0.0, 0.0)
        self._cores0: dict[int, tuple[float, float]] = {}

    def _read(self) -> dict[str, float]:
        return {**{part: sum(proc_cpu_seconds(p) for p in pids) for part, pids in self.pids.items()},
                **{f"proc.{label}": proc_cpu_seconds(pid) for label, pid in self.processes.items()},
                "client": self_cpu() + sum(proc_cpu_seconds(p) for p in self.clients)}

    def start(self) -> CpuSplit:
        self._cpu0, self._busy0, self._cores0 = self._read(), machine_busy(), core_busy(self.cores.values())
        return self

    def stop(self, messages: int) -> dict[str, float]:
        cpu, busy, cores = self._read(), machine_busy(), core_busy(self.cores.values())
        k = max(messages, 1) / 1000.0
        total = busy[1] - self._busy0[1]

        def share(now: tuple[float, float], then: tuple[float, float]) -> float:
            return 100.0 * (now[0] - then[0]) / (now[1] - then[1]) if now[1] > then[1] else 0.0

        return {**{f"{part}_cpu_s_per_1k": (cpu[part] - self._cpu0[part]) / k for part in cpu},
                "machine_busy_pct": 100.0 * (busy[0] - self._busy0[0]) / total if total else 0.0,
                **{f"{label}_core_busy_pct": share(cores[c], self._cores0[c]) for label, c in self.cores.items()}}


def core_busy(cpus: Any) -> dict[int, tuple[float, float]]:
    """CPU -> (busy, total) jiffies since boot of each CPU of `cpus`, from /proc/stat (as
    `machine_busy` for the machine)."""
    wanted = {f"cpu{c}": c for c in cpus}
    out: dict[int, tuple[float, float]] = {}
    if not wanted:
        return out
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, _, rest = line.partition(" ")
                if name in wanted:
                    values = [int(v) for v in rest.split()]
                    idle = values[3] + (values[4] if len(values) > 4 else 0)
                    total = sum(values[:8])
                    out[wanted[name]] = (float(total - idle), float(total))
    except (OSError, ValueError):
        pass
    return out


def pin(pid: int, cpu: int) -> None:
    """Every thread of process `pid` on CPU `cpu` (threads it starts later inherit it)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:
            pass  # the thread ended meanwhile


class Stamped:
    """1 KiB bodies carrying their publish time and index; what the receiver makes of them."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.e2e: list[float] = []
        self.store: list[float] = []
        self.seen = bytearray(n)
        self.duplicates = 0
        self.last_stored = 0.0
        self.last_delivered = 0.0

    @staticmethod
    def body(i: int) -> bytes:
        return _STAMP.pack(time.time(), i) + _PAD

    def received(self, body: bytes, stored_at: float) -> bool:
        """Record one delivery (stored_at: Unix seconds the receiving side stored it); False for
        a body that is not one of the n (a probe)."""
        now = time.time()
        if len(body) != MESSAGE_BYTES or body[_STAMP.size:] != _PAD:
            return False
        sent, i = _STAMP.unpack_from(body)
        if i >= self.n:
            return False
        if self.seen[i]:
            self.duplicates += 1
            return True
        self.seen[i] = 1
        self.e2e.append(now - sent)
        self.store.append(stored_at - sent)
        self.last_stored = max(self.last_stored, stored_at)
        self.last_delivered = now
        return True

    @property
    def got(self) -> int:
        return len(self.e2e)

    def figures(self, t0: float, publish_seconds: float) -> dict[str, float]:
        """t0: Unix seconds of the first publish."""
        e2e, store = sorted(self.e2e), sorted(self.store)
        stored_s = max(self.last_stored - t0, 1e-9)
        return {"msgs_per_s": self.n / stored_s, "seconds": stored_s,
                "publish_msgs_per_s": self.n / publish_seconds,
                "delivered_msgs_per_s": self.n / max(self.last_delivered - t0, 1e-9),
                "e2e_p50_ms": percentile(e2e, 50) * 1e3, "e2e_p99_ms": percentile(e2e, 99) * 1e3,
                "e2e_max_ms": e2e[-1] * 1e3, "store_p50_ms": percentile(store, 50) * 1e3,
                "store_p99_ms": percentile(store, 99) * 1e3, "duplicates": self.duplicates}


def realm_text() -> str:
    """London and Rio, 3-member disk-sync clusters in one zone, each with a router on a free port;
    the routed store `wide` (topics `wide.*`) and London's own store `main` (queues `*.queue`)."""
    clusters = "".join(
        f"  - name: {c}\n    storage: disk-sync\n    members: ["
        + ", ".join(f"{{name: {c}{i}}}" for i in range(1, MEMBERS + 1))
        + f"]\n    router: {{address: \"127.0.0.1:{free_port()}\"}}\n" for c in (LONDON, RIO))
    return f"""\
clusters:
{clusters}zones:
  - {{name: z1, clusters: [{LONDON}, {RIO}]}}
stores:
  - {{name: wide, routed: true, zones: [z1]}}
  - {{name: main, cluster: {LONDON}}}
destinations:
  - {{name: "wide.*", kind: topic, store: wide}}
  - {{name: "*.queue", kind: queue, store: main}}
"""


def site_processes(cluster: Any, leaders: dict[str, str]) -> dict[str, int]:
    """label -> pid of both sites' processes: `<site>_leader`, `<site>_follower1` and 2 (as the
    leaders were at the start), `<site>_router`, `<site>_etcd`, `<site>_realm`."""
    out: dict[str, int] = {}
    for site in (LONDON, RIO):
        followers = [p.pid for name, p in sorted(cluster.members[site].items()) if name != leaders[site]]
        out[f"{site}_leader"] = cluster.member(site, leaders[site]).pid
        out.update({f"{site}_follower{i}": pid for i, pid in enumerate(followers, 1)})
        if site in cluster.routers:
            out[f"{site}_router"] = cluster.routers[site].pid
        s = cluster.site_of(site)
        out[f"{site}_etcd"] = s.etcd.pid
        if s.realm_service is not None:
            out[f"{site}_realm"] = s.realm_service.pid
    return out


class _LocalMeter(CpuMeter):
    """`CpuMeter` (the local pipelined figure's) with each process's own figure as well (and
    each core's of `cores`, pinned)."""

    def __init__(self, leader_pid: int, server_pids: list[int], processes: dict[str, int],
                 cores: dict[str, int] | None = None) -> None:
        super().__init__(leader_pid, server_pids)
        self._split = CpuSplit([], [], [], processes, cores=cores)

    def start(self) -> _LocalMeter:
        super().start()
        self._split.start()
        return self

    def stop(self, messages: int) -> dict[str, float]:
        own = self._split.stop(messages)
        return {**super().stop(messages),
                **{k: v for k, v in own.items() if k.startswith("proc.") or k.endswith("_core_busy_pct")}}


class RoutingTarget(StrongroomTarget):
    """London and Rio, as `realm_text` says. `client` (and the CPU meter of `pipelined`) is
    London's, so the local pipelined figure is `StrongroomTarget.pipelined` as it is. For
    `PINNED_CONFIG`, each site on a core of its own (the module's doc)."""

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        super().__init__(config, work_dir, progress)
        self.rio: Any = None
        self.router_pids: list[int] = []
        self.rio_pids: list[int] = []
        # label -> pid of every process of both sites (`CpuSplit.processes`).
        self.processes: dict[str, int] = {}
        # site -> its CPU (pinned only), and this process's CPUs before it was pinned.
        self.cores: dict[str, int] = {}
        self._affinity: set[int] = set()

    async def start(self) -> None:
        from strongroom.client import Client
        from strongroom.local.launcher import LocalCluster
        from strongroom.realm.model import parse_realm

        text = realm_text()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = LocalCluster(self.work_dir, write_state=False)
        leaders = await self.cluster.start(parse_realm(text, "bench-routing.yaml"), text, "bench-routing.yaml",
                                           progress=lambda _s: None)
        lagging = await self.cluster.wait_until_synced(30.0)
        if lagging:
            raise RuntimeError(f"members not synced: {lagging}")
        self.leader = leaders[LONDON]
        self.leader_pid = self.cluster.member(LONDON, self.leader).pid
        self.server_pids = [p.pid for p in self.cluster.members[LONDON].values()]
        self.rio_pids = [p.pid for p in self.cluster.members[RIO].values()]
        self.router_pids = [r.pid for r in self.cluster.routers.values()]
        self.processes = site_processes(self.cluster, leaders)
        if self.config == PINNED_CONFIG:
            self._pin()
        self.client = Client(self.cluster.endpoints(LONDON), client_name="bench", timeout=60.0)
        self.rio = Client(self.cluster.endpoints(RIO), client_name="bench-rio", timeout=60.0)

    def _pin(self) -> None:
        """Each site's processes on a CPU of its own; this process (London's publisher) on
        London's."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise RuntimeError(f"{PINNED_CONFIG} needs 2 CPUs, this process may use {len(cpus)}")
        self._affinity = set(cpus)
        self.cores = {LONDON: cpus[0], RIO: cpus[1]}
        for label, pid in self.processes.items():
            pin(pid, self.cores[LONDON if label.startswith(LONDON) else RIO])
        pin(os.getpid(), self.cores[LONDON])
        self.notes.append(f"London's processes and the publisher on CPU {cpus[0]}, Rio's and the receiver on "
                          f"CPU {cpus[1]}")

    async def stop(self) -> None:
        try:
            if self.rio is not None:
                await self.rio.close()
        finally:
            try:
                await super().stop()
            finally:
                if self._affinity:  # this process goes on with the next configuration
                    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
                        try:
                            os.sched_setaffinity(int(tid), self._affinity)
                        except OSError:
                            pass

    def _meter(self) -> Any:
        return _LocalMeter(self.leader_pid, self.server_pids, self.processes,
                           {site: c for site, c in self.cores.items() if site == LONDON}).start()

    async def check_leader(self) -> None:
        leader = await self.cluster.leader_name(LONDON)
        if leader != self.leader:
            self.notes.append(f"London's leader changed from {self.leader} to {leader or 'none'}")

    async def _await_interest(self, sub: Any) -> None:
        """Probe messages at London until one reaches the durable at Rio; then drain the probes."""
        self.progress.begin(f"{self.config} forwarded: waiting for London's router to learn Rio's interest")
        deadline = time.monotonic() + INTEREST_TIMEOUT
        probes = 0
        while True:
            await self.client.publish(TOPIC, b"probe")
            probes += 1
            try:
                await sub.ack(await sub.next(timeout=0.5))
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no probe reached Rio within {INTEREST_TIMEOUT:.0f} s") from None
        # A last probe: once it arrives, every probe before it did (one route, in order).
        await self.client.publish(TOPIC, b"last probe")
        while True:
            m = await sub.next(timeout=RECEIVE_TIMEOUT)
            await sub.ack(m)
            if m.body == b"last probe":
                break
        self.notes.append(f"interest known after {probes} probe(s)")

    async def forwarded(self, n: int) -> dict[str, Any]:
        """n stamped messages published at London (one pipelined publisher, 256 in flight) and
        received and acknowledged by a standard durable at Rio (pinned: by the receiver process
        on Rio's core)."""
        sub = await self.rio.subscribe(TOPIC, DURABLE, kind="standard", ack="explicit", credit=CREDIT)
        try:
            await self._await_interest(sub)
            if self.cores:
                await sub.close()  # the receiver process takes the durable over
                sub = None
                return await self._forwarded_pinned(n)
            stamped = Stamped(n)
            self.progress.begin(f"{self.config} forwarded London → Rio (received at Rio)", n)

            async def receive() -> None:
                while stamped.got < n:
                    try:
                        m = await sub.next(timeout=RECEIVE_TIMEOUT)
                    except TimeoutError:
                        raise RuntimeError(f"forwarded: {stamped.got} of {n} messages at Rio, then none for "
                                           f"{RECEIVE_TIMEOUT:.0f} s") from None
                    stamped.received(m.body, m.published_at)
                    await sub.ack(m)
                    self.progress.done = stamped.got

            meter = CpuSplit(self.router_pids, self.server_pids, self.rio_pids, self.processes).start()
            t0 = time.time()
            receiver = asyncio.create_task(receive())
            publish_seconds = await self._publish_stamped(n)
            await receiver
            cpu = meter.stop(n)
            await sub.acks_written()
        finally:
            if sub is not None:
                await sub.close()
        return {**stamped.figures(t0, publish_seconds), **cpu}

    async def _publish_stamped(self, n: int) -> float:
        """n stamped messages through one pipelined publisher at London, all confirmed; seconds
        it took."""
        pub = self.client.publisher(TOPIC, window=WINDOW)
        try:
            s = time.perf_counter()
            futs = [await pub.send(Stamped.body(i)) for i in range(n)]
            await pub.flush()
            took = time.perf_counter() - s
            for f in futs:
                failed = f.exception()
                if failed is not None:
                    raise failed
                if not f.result().confirmed:
                    raise RuntimeError("forwarded: a publish was not confirmed")
            return took
        finally:
            await pub.close()

    async def _forwarded_pinned(self, n: int) -> dict[str, Any]:
        """`forwarded` with the durable's receiver in a process of its own on Rio's core
        (bench/routing_receiver.py); its CPU counts as the client's (and as `rio_receiver`'s)."""
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "services")])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.routing_receiver", "--endpoints", ",".join(self.cluster.endpoints(RIO)),
            "--topic", TOPIC, "--durable", DURABLE, "--n", str(n), "--credit", str(CREDIT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, limit=1 << 27)
        assert proc.stdin is not None and proc.stdout is not None
        pin(proc.pid, self.cores[RIO])
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), INTEREST_TIMEOUT)
            if ready.strip() != b"READY":
                raise RuntimeError(f"forwarded: the receiver process did not start ({ready!r})")
            pin(proc.pid, self.cores[RIO])  # the threads it started meanwhile
            self.progress.begin(f"{self.config} forwarded London → Rio (received at Rio by pid {proc.pid})", n)
            meter = CpuSplit(self.router_pids, self.server_pids, self.rio_pids,
                             {**self.processes, f"{RIO}_receiver": proc.pid}, clients=[proc.pid],
                             cores=self.cores).start()
            t0 = time.time()
            publish_seconds = await self._publish_stamped(n)
            line = await proc.stdout.readline()  # it gives up after RECEIVE_TIMEOUT without messages
            cpu = meter.stop(n)
            got = json.loads(line) if line.strip() else {"error": "the receiver process ended without a result"}
            if "error" in got:
                raise RuntimeError(got["error"])
            stamped = Stamped(n)
            stamped.e2e, stamped.store, stamped.duplicates = got["e2e"], got["store"], got["duplicates"]
            stamped.last_stored, stamped.last_delivered = got["last_stored"], got["last_delivered"]
            return {**stamped.figures(t0, publish_seconds), **cpu}
        finally:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def run_routing(target: Any, params: Params) -> dict[str, Any]:
    """The group's workloads on a started target (`RoutingTarget` or the peer's), in order."""
    results: dict[str, Any] = {}
    results["pipelined"] = await target.pipelined(params.pipelined, 1)
    results["forwarded"] = await target.forwarded(params.pipelined)
    results["forwarded"]["vs_local"] = results["forwarded"]["msgs_per_s"] / results["pipelined"]["msgs_per_s"]
    await target.check_leader()
    return results


def routing_ratios(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """ROUTING_RATIOS over one configuration's summary (medians)."""
    out = []
    for fig, against, target, higher in ROUTING_RATIOS:
        ratio, met = ratio_of(summary.get(fig, {}).get("median"), summary.get(against, {}).get("median"), target,
                              higher)
        out.append({"figure": fig, "against": against, "ratio": ratio, "target": target,
                    "higher_is_better": higher, "met": met})
    return out


def routing_headline(results: dict[str, Any]) -> str:
    """One progress line of a round."""
    p, f = results["pipelined"], results["forwarded"]
    cores = "".join(f", {site}'s core {f[f'{site}_core_busy_pct']:.0f} %" for site in (LONDON, RIO)
                    if f"{site}_core_busy_pct" in f)
    return (f"local pipelined {p['msgs_per_s']:,.0f} msgs/s; forwarded {f['msgs_per_s']:,.0f} msgs/s "
            f"({f['vs_local']:.2f}x); machine busy {f['machine_busy_pct']:.0f} %{cores}; publish→delivery p50 "
            f"{f['e2e_p50_ms']:.1f} ms p99 {f['e2e_p99_ms']:.1f} ms; publish→stored p50 {f['store_p50_ms']:.1f} ms")
