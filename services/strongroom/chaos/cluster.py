"""A cluster under test: one etcd and the member processes, with the hooks faults need.

Members are real `strongroom.persistence.main` processes on loopback. Optionally each member
advertises the address of its own inbound proxy (peers and clients reach it only through it),
reaches etcd through a proxy of its own, journals its fsyncs (lost-write simulation) or keeps
its data dir on a small tmpfs (disk full). Every process is started here and stopped here by
pid.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.api.v1 import admin_pb2
from strongroom.chaos import netloss
from strongroom.chaos.clockshift import build_clock_shim, clock_env, set_offset
from strongroom.chaos.fsync import CrashImage, build_shim, shim_env, simulate_crash, snapshot_sizes
from strongroom.chaos.netproxy import Network, Proxy
from strongroom.security.certs import set_up_local
from strongroom.local.etcdproc import EtcdProcess, free_port, start_etcd
from strongroom.local.leader import Leader, NoLeader, find_leader, member_status, wait_for_leader
from strongroom.local.process import ProcessGroup, kill, member_argv, spawn
from strongroom.realm.store import store_realm

__all__ = ["ChaosCluster", "ClusterSpec", "FaultUnavailable", "mount_tmpfs", "realm_text", "unmount"]

log = logging.getLogger("strongroom.chaos.cluster")

CLUSTER = "default"


class FaultUnavailable(Exception):
    """This machine cannot host the fault (no root for a tmpfs, no C compiler for the shim)."""


@dataclass
class ClusterSpec:
    """How the cluster under test is built."""

    storage: str = "disk-sync"
    members: int = 3
    lease_ttl: int = 2
    compact_after_entries: int = 1000
    proxy_members: bool = False
    """Every member advertises its own inbound proxy (member-to-member partitions)."""
    proxy_etcd: bool = False
    """Every member reaches etcd through a proxy of its own (member-to-etcd partitions)."""
    packet_faults: bool = False
    """Packets on the loopback are dropped and duplicated (`chaos.netloss`: needs a network
    namespace of its own and iptables)."""
    clock_shift: bool = False
    """Members run with the clock shim: `step_clock` steps a member's real-time clock."""
    fsync_journal: bool = False
    """Members journal their fsyncs (lost un-fsynced writes)."""
    tmpfs_mb: int = 0
    """Each member's data dir on a tmpfs of this size (disk full); 0 for none."""
    extra_env: dict[str, str] = field(default_factory=dict)
    log_level: str = "INFO"
    scrub_seconds: float = 0.0
    """The realm's `persistent_store.scrub_interval_seconds` (0: the default, hours)."""
    standby: bool = False
    """The cluster has a disaster-recovery standby site (`chaos.drsite`: its own etcd, members
    s1-s3 and the DR service)."""


def realm_text(spec: ClusterSpec, standby: str = "") -> str:
    """The realm of the test cluster: one replicated store, a topic rule and a queue rule, and a
    rule for the units-of-work queues (`*.uow.q`) whose receivers' conversations time out after
    3 s of uptime: a UOW delivered to a receiver that never heard the answer (the leader died
    under the call) is offered again within the drain, not after the default 300 s; the soak's
    units-of-work queue `soak.uow.q`, the same but with a lifetime of 300 s, so the statuses of
    completed UOWs leave within a run instead of after the default day; and queues `*.ttl.q`
    whose messages live 30 s (the soak's, `chaos.soak`). `standby`:
    the cluster's `standby:` key, indented by four spaces (a DR pair; empty for none)."""
    members = "\n".join(f"      - name: m{i}" for i in range(1, spec.members + 1))
    scrub = f"    persistent_store:\n      scrub_interval_seconds: {spec.scrub_seconds:g}\n" if spec.scrub_seconds else ""
    return f"""\
clusters:
  - name: {CLUSTER}
    storage: {spec.storage}
    lease_ttl_seconds: {spec.lease_ttl}
    compact_after_entries: {spec.compact_after_entries}
{scrub}{standby}    members:
{members}
stores:
  - name: default
    cluster: {CLUSTER}
destinations:
  - name: "soak.uow.q"
    kind: queue
    store: default
    units_of_work:
      conversation_timeout_seconds: 3
      lifetime_seconds: 300
  - name: "*.uow.q"
    kind: queue
    store: default
    units_of_work:
      conversation_timeout_seconds: 3
  - name: "*.ttl.q"
    kind: queue
    store: default
    ttl_seconds: 30
  - name: "*.q"
    kind: queue
    store: default
  - name: "*"
    kind: topic
    store: default
"""


def mount_tmpfs(path: Path, size_mb: int) -> str | None:
    """Mount a tmpfs of `size_mb` at `path`; the reason it failed, or None on success."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
                              check=False, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


def unmount(path: Path) -> None:
    """Unmount (lazily if busy); errors are ignored."""
    subprocess.run(["umount", str(path)], check=False, capture_output=True, timeout=20)
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=20)


class ChaosCluster:
    """etcd + member processes (+ proxies) for one chaos scenario."""

    def __init__(self, root: Path, spec: ClusterSpec, prefix: str = "m") -> None:
        self.root = root
        self.spec = spec
        self.names = [f"{prefix}{i}" for i in range(1, spec.members + 1)]
        self.listen = {n: free_port() for n in self.names}
        self.link_listen = {n: free_port() for n in self.names}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.etcd: EtcdProcess | None = None
        self.etcd_paused = False
        self.network: Network | None = None
        self.member_proxy: dict[str, Proxy] = {}
        # In front of each member's replication link (the leader's appends), cut with member_proxy.
        self.link_proxy: dict[str, Proxy] = {}
        self.etcd_proxy: dict[str, Proxy] = {}
        self.shim: Path | None = None
        self.clock_shim: Path | None = None
        self.baselines: dict[str, dict[str, int]] = {}
        self.mounts: list[Path] = []
        self.started_at: dict[str, float] = {}
        (root / "logs").mkdir(parents=True, exist_ok=True)

    # --- addresses ------------------------------------------------------------------------------

    def direct(self, name: str) -> str:
        """Where a member listens (bypasses its proxy)."""
        return f"127.0.0.1:{self.listen[name]}"

    def advertised(self, name: str) -> str:
        """Where peers and clients reach a member."""
        proxy = self.member_proxy.get(name)
        return proxy.endpoint if proxy else self.direct(name)

    def inbound(self, name: str) -> list[Proxy]:
        """The proxies every connection to a member goes through (gRPC and replication link)."""
        return [p[name] for p in (self.member_proxy, self.link_proxy) if name in p]

    def inbound_proxies(self) -> list[Proxy]:
        """Every proxy in front of a member."""
        return [*self.member_proxy.values(), *self.link_proxy.values()]

    def endpoints(self) -> list[str]:
        """Client endpoints (advertised addresses)."""
        return [self.advertised(n) for n in self.names]

    def member_of(self, address: str) -> str:
        """The member behind an advertised or direct address ('?' if none)."""
        for n in self.names:
            if address in (self.advertised(n), self.direct(n)):
                return n
        return "?"

    def data_dir(self, name: str) -> Path:
        return self.root / "data" / name

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def journal(self, name: str) -> Path:
        return self.root / "fsync" / f"{name}.journal"

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start etcd, store the realm, start proxies and members; return once a leader serves.
        Every connection is mutual TLS, as `strongroom up` runs it (the proxies pass the TLS
        bytes through), with the authority already active or one kept in `<root>/tls`."""
        spec = self.spec
        set_up_local(self.root / "tls")
        self.etcd = start_etcd(self.root / "etcd", log_path=self.root / "logs" / "etcd.log", own_group=True)
        await store_realm(self.etcd.endpoint, self.realm(), "chaos-realm.yaml")
        if spec.proxy_members or spec.proxy_etcd:
            self.network = Network(self.pid_labels, self.root / "logs" / "net.log")
            for n in self.names:
                if spec.proxy_members:
                    self.member_proxy[n] = self.network.proxy(f"{n}-in", self.direct(n))
                    self.link_proxy[n] = self.network.proxy(f"{n}-link", f"127.0.0.1:{self.link_listen[n]}")
                if spec.proxy_etcd:
                    self.etcd_proxy[n] = self.network.proxy(f"{n}-etcd", self.etcd.endpoint)
        if spec.packet_faults:
            reason = netloss.unavailable_reason()
            if reason is not None:
                raise FaultUnavailable(reason)
        if spec.clock_shift:
            self.clock_shim = build_clock_shim(self.root / "clock")
            if self.clock_shim is None:
                raise FaultUnavailable("no C compiler: the clock shim cannot be built")
        if spec.fsync_journal:
            self.shim = build_shim(self.root / "fsync")
            if self.shim is None:
                raise FaultUnavailable("no C compiler: the fsync journal shim cannot be built")
        if spec.tmpfs_mb:
            for n in self.names:
                reason = mount_tmpfs(self.data_dir(n), spec.tmpfs_mb)
                if reason is not None:
                    raise FaultUnavailable(f"cannot mount a tmpfs for {n}: {reason}")
                self.mounts.append(self.data_dir(n))
        for n in self.names:
            self.start_member(n)
        await self.leader(timeout=60)

    def realm(self) -> str:
        """The realm stored in this cluster's etcd."""
        return realm_text(self.spec)

    def serving(self) -> ChaosCluster:
        """The set of members that serves the cluster's clients: this one (a DR pair's standby
        site once it was activated, `chaos.drsite`)."""
        return self

    def pid_labels(self) -> dict[int, str]:
        """Live process ids and the label the proxies give their connections."""
        out = {os.getpid(): "client"}
        for n, proc in list(self.procs.items()):  # read from the proxies' label thread too
            if proc.poll() is None:
                out[proc.pid] = n
        return out

    def start_member(self, name: str) -> None:
        """Start (or restart) a member on its data dir, ports and proxies."""
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            return
        data = self.data_dir(name)
        data.mkdir(parents=True, exist_ok=True)
        assert self.etcd is not None
        etcd = self.etcd_proxy[name].endpoint if name in self.etcd_proxy else self.etcd.endpoint
        proxied = name in self.member_proxy
        args = member_argv(
            etcd, CLUSTER, name, self.direct(name), data, log_level=self.spec.log_level,
            advertise=self.member_proxy[name].endpoint if proxied else None,
            replication_listen=f"127.0.0.1:{self.link_listen[name]}" if proxied else None,
            replication_advertise=self.link_proxy[name].endpoint if proxied else None)
        env = dict(self.spec.extra_env)
        if self.shim is not None:
            self.journal(name).parent.mkdir(parents=True, exist_ok=True)
            self.baselines[name] = snapshot_sizes(data)
            env.update(shim_env(self.shim, self.journal(name), data))
        if self.clock_shim is not None:
            shift = clock_env(self.clock_shim, self.root / "clock" / f"{name}.offset")
            if "LD_PRELOAD" in env:  # both shims: the loader takes a space-separated list
                shift["LD_PRELOAD"] = f"{env['LD_PRELOAD']} {shift['LD_PRELOAD']}"
            env.update(shift)
        # A group of its own: a Ctrl-C of the soak reaches only the run, which stops it in order.
        self.procs[name] = spawn(args, self.log_path(name), extra_env=env, group=ProcessGroup.OWN,
                                 banner=f"=== start {name} at monotonic {time.monotonic():.3f}\n")
        if self.network is not None:
            self.network.refresh_labels()  # before the member can open a connection
        self.paused.discard(name)
        self.started_at[name] = time.monotonic()

    def step_clock(self, name: str, seconds: float) -> None:
        """Step `name`'s real-time clock to `seconds` from the true time (needs `clock_shift`)."""
        set_offset(self.root / "clock" / f"{name}.offset", seconds)

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str) -> None:
        """SIGKILL a member and reap it."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        kill(proc)
        self.paused.discard(name)

    def crash(self, name: str) -> CrashImage:
        """A machine crash of a member: freeze, SIGKILL, then drop what fsync had not made
        durable (needs `fsync_journal`)."""
        self.pause(name)
        self.kill(name)
        return simulate_crash(self.data_dir(name), self.journal(name), self.baselines.get(name, {}))

    def pause(self, name: str) -> None:
        """SIGSTOP a member."""
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            self.paused.add(name)

    def resume(self, name: str) -> None:
        """SIGCONT a member."""
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        self.paused.discard(name)

    def pause_etcd(self) -> None:
        assert self.etcd is not None
        os.kill(self.etcd.pid, signal.SIGSTOP)
        self.etcd_paused = True

    def resume_etcd(self) -> None:
        assert self.etcd is not None
        os.kill(self.etcd.pid, signal.SIGCONT)
        self.etcd_paused = False

    def stop_etcd(self) -> None:
        """Stop etcd (SIGTERM, then SIGKILL); `restart_etcd` brings it back on the same port."""
        assert self.etcd is not None
        if self.etcd_paused:
            self.resume_etcd()
        self.etcd.stop()

    def kill_etcd(self) -> None:
        """SIGKILL etcd and reap it; `restart_etcd` brings it back on the same port and data."""
        assert self.etcd is not None
        try:
            os.kill(self.etcd.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.etcd.process is not None:
            self.etcd.process.wait(timeout=30)
        self.etcd_paused = False

    def restart_etcd(self) -> None:
        """Start etcd again on the same port and data dir."""
        assert self.etcd is not None
        port = int(self.etcd.endpoint.rsplit(":", 1)[1])
        self.etcd = start_etcd(self.root / "etcd", port=port, log_path=self.root / "logs" / "etcd.log",
                               own_group=True)

    def etcd_running(self) -> bool:
        return self.etcd is not None and self.etcd.process is not None and self.etcd.process.poll() is None

    def stop(self) -> None:
        """Stop every process this cluster started (by pid), close proxies, unmount."""
        for proc in self.procs.values():
            kill(proc)
        if self.etcd is not None:
            if self.etcd_paused:
                try:
                    self.resume_etcd()
                except ProcessLookupError:
                    pass
            self.etcd.stop()
        if self.network is not None:
            self.network.close()
            self.network = None
        for path in self.mounts:
            unmount(path)
        self.mounts.clear()

    # --- observation ----------------------------------------------------------------------------

    async def status(self, name: str, timeout: float = 1.0) -> admin_pb2.ClusterStatus | None:
        """A member's own view (directly, not through its proxy); None if it does not answer."""
        if not self.alive(name) or name in self.paused:
            return None
        return await member_status(self.direct(name), timeout)

    async def statuses(self, timeout: float = 1.0) -> dict[str, admin_pb2.ClusterStatus]:
        """Every answering member's status."""
        replies = await asyncio.gather(*(self.status(n, timeout) for n in self.names))
        return {n: st for n, st in zip(self.names, replies) if st is not None}

    def answering(self) -> list[str]:
        """Where to ask the members that can answer (running, not paused), bypassing proxies."""
        return [self.direct(n) for n in self.names if self.alive(n) and n not in self.paused]

    async def current_leader(self) -> Leader | None:
        """The member serving as leader (the highest epoch, if two claim to), or None."""
        return await find_leader(self.answering())

    async def leader(self, timeout: float = 30.0, exclude: set[str] | None = None) -> str:
        """Wait for a serving leader (not in `exclude`)."""
        try:
            found = await wait_for_leader(self.answering, timeout, exclude=exclude or set())
        except NoLeader:
            raise TimeoutError(f"no leader within {timeout:.0f}s\n{self.log_tails()}") from None
        return found.member

    async def converged(self, timeout: float = 30.0) -> tuple[bool, str]:
        """Wait until every member runs, one leads, and all applied the leader's commit index
        with the same per-durable pending counts. Returns (ok, description)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            sts = await self.statuses()
            leaders = [(n, st) for n, st in sts.items() if st.role == "leader"]
            if len(sts) == len(self.names) and len(leaders) == 1:
                commit = leaders[0][1].commit_index
                views = {n: _pending(st) for n, st in sts.items()}
                applied = {n: st.applied_index for n, st in sts.items()}
                if all(a >= commit for a in applied.values()) and len({repr(v) for v in views.values()}) == 1:
                    return True, f"leader {leaders[0][0]} commit {commit}; applied {applied}"
                last = f"commit {commit}; applied {applied}; pending {views}"
            else:
                last = f"answering {sorted(sts)}; leaders {[n for n, _ in leaders]}"
            await asyncio.sleep(0.3)
        return False, last

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every member's log."""
        out = []
        for n in self.names:
            path = self.log_path(n)
            if path.exists():
                out.append(f"--- {n} ---\n" + path.read_text(errors="replace")[-chars:])
        return "\n".join(out)

    def copy_logs(self, dest: Path) -> None:
        """Keep the logs (for a failed scenario)."""
        shutil.copytree(self.root / "logs", dest, dirs_exist_ok=True)


def _pending(st: admin_pb2.ClusterStatus) -> dict[str, int]:
    return {f"{d.destination}/{d.name}": d.pending_messages for s in st.stores for d in s.durables}
