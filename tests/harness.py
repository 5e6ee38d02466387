"""Test harness: real persistence member processes on a real etcd, started and stopped by pid."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from strongroom.api.v1 import admin_pb2
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.leader import NoLeader, member_status, wait_for_leader
from strongroom.local.process import member_argv, spawn, stop_processes
from strongroom.realm.store import store_realm
from strongroom.security import certs
from strongroom.security.identity import Identity, Kind
from strongroom.security.tls import Tls


def realm_yaml(cluster: str = "default", members: int = 3, storage: str = "disk-sync",
               extra_stores: str = "", extra_destinations: str = "", lease_ttl: int = 2,
               compact_after_entries: int = 20000, extra_sections: str = "", cluster_extra: str = "",
               memory_budget_mb: int = 0, indexes_on_disk: bool = False, driver: str = "") -> str:
    """A realm with one cluster and the default store/destinations plus extras
    (`extra_sections`: top-level YAML such as durable_templates and endpoints;
    `cluster_extra`: more keys of the cluster, indented by four spaces; `memory_budget_mb` and
    `indexes_on_disk`: the cluster settings, written only when set; `driver`: the storage
    driver, `persistent_store.driver`, written only when set)."""
    names = "\n".join(f"      - name: m{i}" for i in range(1, members + 1))
    settings = ""
    if memory_budget_mb:
        settings += f"    memory_budget_mb: {memory_budget_mb}\n"
    if indexes_on_disk:
        settings += "    indexes_on_disk: true\n"
    if driver:
        settings += f"    persistent_store:\n      driver: {driver}\n"
    return f"""\
clusters:
  - name: {cluster}
    storage: {storage}
    lease_ttl_seconds: {lease_ttl}
    compact_after_entries: {compact_after_entries}
{settings}{cluster_extra}    members:
{names}
stores:
  - name: default
    cluster: {cluster}
{extra_stores}
destinations:
{extra_destinations}
  - name: "*.queue"
    kind: queue
    store: default
  - name: "*"
    kind: topic
    store: default
{extra_sections}"""


# Extra stores and destinations of the shared semantics cluster (tests/integration/conftest.py).
SHARED_STORES = """\
  - name: volatile
    cluster: default
    replicated: false
  - name: small
    cluster: default
    max_message_bytes: 1024
"""
SHARED_DESTINATIONS = """\
  - name: "volatile.*"
    store: volatile
  - name: "small.*"
    store: small
"""


async def put_realm(etcd_endpoint: str, text: str, version: int) -> None:
    """Store a realm as `version` the way the realm service does, through `RealmStore` (tests of
    the persistence service do not depend on the realm service process). Version `version - 1`
    must be the current one (none for version 1)."""
    stored = await store_realm(etcd_endpoint, text, "test-realm.yaml", expected_version=version - 1)
    if stored.version != version:
        # The same document was current already: RealmStore stores no new version for it.
        raise RuntimeError(f"the realm in etcd is version {stored.version}, not {version}")


def put_realm_sync(etcd_endpoint: str, text: str, version: int) -> None:
    """`put_realm` callable from sync code, even inside a running event loop."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(put_realm(etcd_endpoint, text, version))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]



def tls_as(kind: Kind, name: str, cluster: str = "default") -> Tls:
    """TLS settings of the session's authority naming someone other than this process's user
    `test` (tests/conftest.py): a DR service reading a committed log, a member, a router."""
    ca = certs.active()
    assert ca is not None, "the test session runs with a local authority (tests/conftest.py)"
    return ca.issue(Identity(kind, name, cluster))


def as_dr(cluster: str = "default") -> Tls:
    """What the DR service of `cluster` is: the committed-entry stream and shipments are its."""
    return tls_as(Kind.DR, "dr", cluster)


class Cluster:
    """Member processes of one persistence cluster."""

    def __init__(self, etcd_endpoint: str, root: Path, cluster: str = "default", members: int = 3) -> None:
        self.etcd = etcd_endpoint
        self.root = root
        self.cluster = cluster
        self.names = [f"m{i}" for i in range(1, members + 1)]
        self.ports = {n: free_port() for n in self.names}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # More command-line arguments for a member's process.
        self.extra_args: dict[str, list[str]] = {}
        # More environment for a member's process (e.g. an LD_PRELOAD shim).
        self.extra_env: dict[str, dict[str, str]] = {}

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def addresses(self) -> list[str]:
        return [self.address(n) for n in self.names]

    def data_dir(self, name: str) -> Path:
        return self.root / self.cluster / name

    def log_path(self, name: str) -> Path:
        return self.root / f"{self.cluster}-{name}.log"

    def start(self, name: str, wipe: bool = False, etcd: str | None = None) -> subprocess.Popen[bytes]:
        """Start (or restart) a member on its data dir; `wipe` empties the dir first."""
        if wipe:
            shutil.rmtree(self.data_dir(name), ignore_errors=True)
        proc = spawn(member_argv(etcd or self.etcd, self.cluster, name, self.address(name), self.data_dir(name),
                                 extra=self.extra_args.get(name, [])), self.log_path(name),
                     extra_env=self.extra_env.get(name))
        self.procs[name] = proc
        return proc

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                proc.wait(timeout=30)

    def stop_all(self) -> None:
        stop_processes(list(self.procs.values()), grace=10)

    def logs(self) -> str:
        out = []
        for name in self.names:
            path = self.log_path(name)
            if path.exists():
                out.append(f"--- {name} ---\n" + path.read_text()[-4000:])
        return "\n".join(out)

    async def status(self, name: str, timeout: float = 2.0) -> admin_pb2.ClusterStatus | None:
        return await member_status(self.address(name), timeout)

    def running(self) -> list[str]:
        """Addresses of the members whose processes run."""
        return [self.address(n) for n in self.names if n in self.procs and self.procs[n].poll() is None]

    async def leader(self, timeout: float = 30.0, exclude: str | None = None) -> str:
        """The member serving as leader (waits for one)."""
        try:
            found = await wait_for_leader(self.running, timeout, exclude={exclude} if exclude else set(),
                                          status_timeout=2.0)
        except NoLeader:
            raise TimeoutError("no leader in time\n" + self.logs()) from None
        return found.member


def start_cluster(root: Path, text: str, members: int = 3) -> tuple[Any, Cluster]:
    """A real etcd under `root`, the realm stored, and every member started; stop both."""
    etcd = start_etcd(root / "etcd")
    try:
        put_realm_sync(etcd.endpoint, text, 1)
        cluster = Cluster(etcd.endpoint, root, members=members)
        cluster.start_all()
    except BaseException:
        etcd.stop()
        raise
    return etcd, cluster


@contextmanager
def running_cluster(root: Path, text: str, members: int = 3) -> Iterator[Cluster]:
    """`start_cluster`, stopped (members, then etcd) when the block ends."""
    etcd, cluster = start_cluster(root, text, members)
    try:
        yield cluster
    finally:
        cluster.stop_all()
        etcd.stop()


@asynccontextmanager
async def leader_client(cluster: Cluster, timeout: float = 20.0) -> AsyncIterator[Any]:
    """A client of `cluster` once it has a leader (a test's `client` fixture), closed after."""
    from strongroom.client import Client

    await cluster.leader()
    async with Client(cluster.addresses(), timeout=timeout) as client:
        yield client


async def drain(sub: Any, n: int, timeout: float = 10.0, ack: bool = True) -> list[Any]:
    """Up to `n` messages of a subscription (fewer if none comes for `timeout` s), acked."""
    out = []
    while len(out) < n:
        try:
            msg = await sub.next(timeout=timeout)
        except TimeoutError:
            break
        out.append(msg)
        if ack:
            await sub.ack(msg)
    return out


async def refused_at_once(call: Callable[[], Awaitable[object]]) -> tuple[Any, str]:
    """A raw gRPC call that must fail within a second (not after a timeout): its code and reason."""
    import grpc
    import pytest

    from strongroom.grpcerrors import from_rpc_error

    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call()
    assert time.monotonic() - started < 1.0, "refused, but not at once"
    err = from_rpc_error(info.value)
    assert err is not None, info.value
    return info.value.code(), err.reason


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout: float = 30.0, interval: float = 0.1) -> None:
    """Until `await pred()` is true, asking every `interval` s; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(interval)
    raise TimeoutError("condition not reached")


async def drain_all(client: Any, destination: str, durable: str = "", idle: float = 3.0) -> list[Any]:
    """Every message `destination` (its durable `durable`) holds, acknowledged one by one, until
    none comes for `idle` s."""
    sub = await client.subscribe(destination, durable, credit=512)
    out = []
    while True:
        try:
            msg = await sub.next(timeout=idle)
        except TimeoutError:
            break
        out.append(msg)
        await sub.ack(msg)
    await sub.close()
    return out


async def registered_leader(cluster: Cluster, timeout: float = 20.0) -> str:
    """The leader, once it has heard every other member register (with the log format it
    reads): a member it has not heard from counts as an older version, and what needs a newer
    log format (time-to-lives on the pseudo-clock, durable expiry, delivery counts) waits."""
    leader = await cluster.leader()

    async def heard() -> bool:
        st = await cluster.status(leader)
        return st is not None and all(m.replication for m in st.members if m.name != leader)

    await wait_for(heard, timeout=timeout)
    return leader


_SCRIPT = Path(sys.executable).parent / "strongroom"
STRONGROOM = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "strongroom.cli.main"]
"""The `strongroom` command as installed beside this interpreter."""


def local_strongroom(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """The `strongroom` command run as a process on a local deployment: the endpoints come from
    the data dir `args` name (none of the caller's environment points it elsewhere)."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRONGROOM_ENDPOINTS", "STRONGROOM_DATA_DIR")}
    return subprocess.run([*STRONGROOM, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def strongroom(servers: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The `strongroom` CLI run as a process against the members at `servers` (its `-s`)."""
    return subprocess.run([sys.executable, "-m", "strongroom.cli.main", *argv, "-s", servers],
                          capture_output=True, text=True, timeout=60, check=False)


class MixedLoad:
    """Persistent and non-persistent work side by side (the store-operation tests, with
    SHARED_STORES/SHARED_DESTINATIONS): `producer` publishes to `destination` every 0.05 s (each
    confirmed sequence appended to `confirmed`, each attempt's outcome to `p_outcomes`: "stored"
    or the refusal's reason); `volatile` publishes to the non-replicated store's topic and sends
    and receives units of work that are neither persistent nor of persistent status, every
    0.02 s (`np_got`: when the topic delivered, `np_errors`: what failed)."""

    def __init__(self, volatile: Any, producer: Any, destination: str, confirmed: list[int],
                 pad: bytes = b"") -> None:
        self.volatile, self.producer, self.destination, self.pad = volatile, producer, destination, pad
        self.confirmed = confirmed
        self.np_got: list[float] = []
        self.np_errors: list[str] = []
        self.p_outcomes: list[tuple[float, str]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        sub = await self.volatile.subscribe("volatile.load", "np", ack="auto")
        self._tasks = [asyncio.create_task(work) for work in (self._np_load(), self._np_receive(sub), self._p_load())]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stored_since(self, since: float) -> bool:
        return any(o == "stored" for t, o in self.p_outcomes if t > since)

    async def _np_load(self) -> None:
        from strongroom.errors import StrongroomError

        volatile, i = self.volatile, 0
        while not self._stop.is_set():
            try:
                await volatile.publish("volatile.load", f"v{i}".encode())
                uow = volatile.unit_of_work("np.queue", persistent=False, persistent_status=False)
                uow.add(f"np {i}".encode())
                await uow.commit()
                got = await volatile.receive_uow("np.queue", "np-worker", wait=2)
                assert got is not None and got.messages[0].body == f"np {i}".encode()
                await got.commit()
            except (StrongroomError, AssertionError) as err:
                self.np_errors.append(repr(err))
            i += 1
            await asyncio.sleep(0.02)

    async def _np_receive(self, sub: Any) -> None:
        while not self._stop.is_set():
            try:
                await sub.next(timeout=0.5)
                self.np_got.append(time.monotonic())
            except TimeoutError:
                pass

    async def _p_load(self) -> None:
        from strongroom.errors import StrongroomError

        i = 0
        while not self._stop.is_set():
            try:
                result = await self.producer.publish(self.destination, f"during {i}".encode() + self.pad)
                self.confirmed.append(result.message_seq)
                self.p_outcomes.append((time.monotonic(), "stored"))
            except StrongroomError as err:
                self.p_outcomes.append((time.monotonic(), err.reason))
            i += 1
            await asyncio.sleep(0.05)


Samples = dict[str, list[tuple[dict[str, str], float]]]
"""A scrape's samples by name: (labels, value) each."""


def scrape(url: str) -> Samples:
    """Every sample a process's Prometheus endpoint answers at `url`, over real HTTP."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels` (fails unless exactly one)."""
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]
