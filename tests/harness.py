"""Test harness: real persistence member processes on a real etcd, started and stopped by pid."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc
from strongroom.etcd import EtcdClient
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.realm.model import parse_realm

REALM_KEY = "/strongroom/realm/current"


def realm_yaml(cluster: str = "default", members: int = 3, storage: str = "disk-sync",
               extra_stores: str = "", extra_destinations: str = "", lease_ttl: int = 2,
               compact_after_entries: int = 20000, extra_sections: str = "", cluster_extra: str = "",
               memory_budget_mb: int = 0, indexes_on_disk: bool = False) -> str:
    """A realm with one cluster and the default store/destinations plus extras
    (`extra_sections`: top-level YAML such as durable_templates and endpoints;
    `cluster_extra`: more keys of the cluster, indented by four spaces; `memory_budget_mb` and
    `indexes_on_disk`: the cluster settings, written only when set)."""
    names = "\n".join(f"      - name: m{i}" for i in range(1, members + 1))
    settings = ""
    if memory_budget_mb:
        settings += f"    memory_budget_mb: {memory_budget_mb}\n"
    if indexes_on_disk:
        settings += "    indexes_on_disk: true\n"
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
    """Store a realm version the way the realm service does (tests of the persistence service
    do not depend on the realm service process)."""
    parse_realm(text, "test-realm.yaml")
    doc = {"version": version, "yaml": text, "normalized_json": "", "applied_at": time.time(),
           "digest": hashlib.sha256(text.encode()).hexdigest(), "source_name": "test-realm.yaml"}
    client = EtcdClient(etcd_endpoint)
    try:
        await client.put(REALM_KEY, json.dumps(doc).encode())
    finally:
        await client.close()


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
        log = open(self.log_path(name), "ab")  # noqa: SIM115 - owned by the child
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "strongroom.persistence.main", "--etcd", etcd or self.etcd,
             "--cluster", self.cluster, "--member", name, "--listen", self.address(name),
             "--data-dir", str(self.data_dir(name)), *self.extra_args.get(name, [])],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()
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
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()

    def logs(self) -> str:
        out = []
        for name in self.names:
            path = self.log_path(name)
            if path.exists():
                out.append(f"--- {name} ---\n" + path.read_text()[-4000:])
        return "\n".join(out)

    async def status(self, name: str, timeout: float = 2.0) -> admin_pb2.ClusterStatus | None:
        try:
            async with grpc.aio.insecure_channel(self.address(name)) as ch:
                return await admin_pb2_grpc.AdminServiceStub(ch).Status(admin_pb2.StatusRequest(), timeout=timeout)
        except grpc.aio.AioRpcError:
            return None

    async def leader(self, timeout: float = 30.0, exclude: str | None = None) -> str:
        """The member serving as leader (waits for one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in self.names:
                if name == exclude or name not in self.procs or self.procs[name].poll() is not None:
                    continue
                st = await self.status(name)
                if st is not None and st.role == "leader":
                    return name
            await asyncio.sleep(0.1)
        raise TimeoutError("no leader in time\n" + self.logs())


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
