"""The second peer: RabbitMQ quorum queues (`rabbit-quorum`), three nodes on loopback.

The benchmark starts them itself from Debian's `rabbitmq-server` package (the scripts under
/usr/lib/rabbitmq/bin, as the current user): an Erlang port mapper of its own on a free port,
three nodes each with its own AMQP and distribution port, data and log directories and config
file under the configuration's work directory, no plugins, and one cookie; the second and third
join the first (`rabbitmqctl join_cluster`). The queues are quorum queues (Raft-replicated on the
three nodes) declared from a connection to the first node, so their leaders are on it
(RabbitMQ's default `client-local` leader placement) and every client talks to the leader
directly, as Strongroom's and JetStream's clients do. The client is aio-pika on one connection,
a channel with publisher confirms per publisher.

What it fsyncs: a quorum queue's Raft log is written to a write-ahead log that each node
fdatasyncs before it acknowledges an entry (Ra's default `wal_sync_method: datasync`), and a
publisher confirm is sent once a majority of the nodes has, so a confirmed message is on disk at
two of three nodes: the like-for-like match for Strongroom's disk-sync and `nats-fsync`.

Where the package or aio-pika is missing, `missing()` says what to install and the runner skips
this peer with that line instead of failing."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
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

__all__ = ["CONFIG", "RabbitTarget", "missing", "rabbit_version"]

CONFIG = "rabbit-quorum"
RABBIT_BIN = Path(os.environ.get("STRONGROOM_BENCH_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
NODES = ("r1", "r2", "r3")
READY_TIMEOUT = 120.0
COOKIE = "STRONGROOMBENCHCOOKIE"
FANOUT_EXCHANGE = "fan"


def missing() -> str | None:
    """Why this peer cannot run here (what to install), None when it can."""
    if not (RABBIT_BIN / "rabbitmq-server").exists() or shutil.which("epmd") is None:
        return ("RabbitMQ is not installed: `apt-get install rabbitmq-server` (Debian's package; the "
                "benchmark starts and stops its own nodes, the package's service need not run)")
    try:
        import aio_pika  # noqa: F401
    except ImportError:
        return "aio-pika is not installed: `pip install -e '.[bench]'`"
    return None


def rabbit_version() -> str:
    """RabbitMQ's version, from the package's library directory (no node started)."""
    found = sorted((RABBIT_BIN.parent / "lib").glob("rabbitmq_server-*"))
    return found[-1].name.removeprefix("rabbitmq_server-") if found else "not installed"


def _node(name: str) -> str:
    return f"bench-{name}@localhost"


class RabbitTarget:
    """The RabbitMQ peer: three nodes, quorum queues, publisher confirms, explicit acks."""

    system = "rabbitmq"

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        self.config = config
        self.work_dir = work_dir
        self.progress = progress
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.epmd: subprocess.Popen[bytes] | None = None
        self.epmd_port = 0
        self.amqp_ports: dict[str, int] = {}
        self.connection: Any = None
        self.channel: Any = None
        self.server_pids: list[int] = []
        self.notes: list[str] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def _env(self, name: str | None = None) -> dict[str, str]:
        env = {**os.environ, "HOME": str(self.work_dir), "ERL_EPMD_PORT": str(self.epmd_port),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.work_dir / "enabled_plugins")}
        if name is not None:
            base = self.work_dir / name
            env.update({"RABBITMQ_NODENAME": _node(name), "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
                        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
                        "RABBITMQ_PID_FILE": str(base / "pid"), "RABBITMQ_DIST_PORT": str(free_port()),
                        # The script then execs the VM, so its pid is the node's (the CPU meter's
                        # and the one SIGTERM stops), with an Erlang shell on stdin.
                        "RABBITMQ_ALLOW_INPUT": "1"})
        return env

    def _ctl(self, node: str, *args: str, timeout: float = 60.0) -> str:
        out = subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", _node(node), *args], env=self._env(),
                             capture_output=True, text=True, timeout=timeout, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl -n {_node(node)} {' '.join(args)}: exit {out.returncode}: "
                               f"{(out.stderr or out.stdout).strip()[-1500:]}")
        return out.stdout

    def _spawn(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cookie = self.work_dir / ".erlang.cookie"
        cookie.write_text(COOKIE)
        cookie.chmod(0o400)
        (self.work_dir / "enabled_plugins").write_text("[].\n")
        self.epmd_port = free_port()
        epmd = shutil.which("epmd") or "epmd"
        self.epmd = subprocess.Popen([epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for name in NODES:
            base = self.work_dir / name
            base.mkdir(parents=True, exist_ok=True)
            self.amqp_ports[name] = free_port()
            (base / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.amqp_ports[name]}\n"
                                                "loopback_users = none\n")
        for name in NODES:
            with open(self.work_dir / name / "console.log", "ab") as log:
                # stdin a pipe kept open: with RABBITMQ_ALLOW_INPUT the VM's shell reads it, and at
                # its end (a closed stdin) the node halts.
                self.procs[name] = subprocess.Popen([str(RABBIT_BIN / "rabbitmq-server")], env=self._env(name),
                                                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
        self.server_pids = [p.pid for p in self.procs.values()]

    def _check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.work_dir / name / "console.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"RabbitMQ node {name} exited with {p.returncode}:\n{tail}")

    def _form_cluster(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        for name in NODES:
            while True:  # until the node has registered with the port mapper and booted
                self._check_alive()
                try:
                    self._ctl(name, "await_startup", "--timeout", str(int(READY_TIMEOUT)), timeout=READY_TIMEOUT + 10)
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        for name in NODES[1:]:
            self._ctl(name, "stop_app")
            self._ctl(name, "join_cluster", _node(NODES[0]))
            self._ctl(name, "start_app", timeout=READY_TIMEOUT)
        status = json.loads(self._ctl(NODES[0], "cluster_status", "--formatter", "json"))
        running = status.get("running_nodes", [])
        if len(running) != len(NODES):
            raise RuntimeError(f"RabbitMQ cluster formed with {running}, not {len(NODES)} nodes")

    async def start(self) -> None:
        import aio_pika

        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            self._spawn()
            await asyncio.to_thread(self._form_cluster)
            self.connection = await aio_pika.connect(host="127.0.0.1", port=self.amqp_ports[NODES[0]],
                                                     login="guest", password="guest", timeout=30)
            self.channel = await self.connection.channel(publisher_confirms=True)
            quorum = {"x-queue-type": "quorum"}
            for name in ("confirm", *(f"pipe{k}" for k in SCALE_PUBLISHERS)):
                await self.channel.declare_queue(name, durable=True, arguments=quorum)
            fan = await self.channel.declare_exchange(FANOUT_EXCHANGE, aio_pika.ExchangeType.FANOUT, durable=True)
            for i in range(FANOUT_DURABLES):
                queue = await self.channel.declare_queue(f"fan{i}", durable=True, arguments=quorum)
                await queue.bind(fan)
            await asyncio.to_thread(self._await_quorum)
        except BaseException:
            await self.stop()
            raise

    def _queues(self) -> list[dict[str, Any]]:
        out = self._ctl(NODES[0], "list_queues", "name", "leader", "members", "online", "messages",
                        "--formatter", "json")
        return list(json.loads(out))

    def _await_quorum(self) -> None:
        """Every queue has a leader and all three members online before anything is measured."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            queues = self._queues()
            if queues and all(q.get("leader") and len(q.get("online") or []) == len(NODES) for q in queues):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"RabbitMQ quorum queues without a full group: {queues}")
            time.sleep(0.5)

    async def stop(self) -> None:
        try:
            if self.connection is not None:
                try:
                    await asyncio.wait_for(self.connection.close(), 10)
                except Exception as exc:  # noqa: BLE001 - stopping anyway
                    self.notes.append(f"closing the AMQP connection: {exc!r}")
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGTERM)
            for p in self.procs.values():
                try:
                    await asyncio.to_thread(p.wait, 30)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
            if self.epmd is not None and self.epmd.poll() is None:
                self.epmd.kill()
                self.epmd.wait()
            shutil.rmtree(self.work_dir, ignore_errors=True)

    async def check_leader(self) -> None:
        pass  # each queue's leader is looked up per workload

    async def _meter(self, queue: str) -> CpuMeter:
        queues = {q["name"]: q for q in await asyncio.to_thread(self._queues)}
        leader = str(queues.get(queue, {}).get("leader", ""))
        by_node = {_node(n): self.procs[n].pid for n in NODES}
        return CpuMeter(by_node.get(leader, 0), self.server_pids).start()

    # --- workloads -------------------------------------------------------------------------------

    def _message(self) -> Any:
        import aio_pika

        return aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    async def confirm(self, n: int) -> dict[str, Any]:
        exchange = self.channel.default_exchange
        for _ in range(WARMUP_MESSAGES):
            await exchange.publish(self._message(), routing_key="confirm")
        self.progress.begin(f"{self.config} confirm", n)
        lat: list[float] = []
        meter = await self._meter("confirm")
        t0 = time.perf_counter()
        for _ in range(n):
            s = time.perf_counter()
            await exchange.publish(self._message(), routing_key="confirm")
            lat.append(time.perf_counter() - s)
            self.progress.add()
        seconds = time.perf_counter() - t0
        lat.sort()
        return {"msgs_per_s": n / seconds, "p50_ms": percentile(lat, 50) * 1e3,
                "p99_ms": percentile(lat, 99) * 1e3, "seconds": seconds, **meter.stop(n)}

    async def _publish(self, exchange_name: str, routing_key: str, n: int, publishers: int,
                       count_progress: bool = True) -> None:
        """`publishers` channels with confirms, each keeping WINDOW publishes in flight."""
        counts = [n // publishers + (1 if i < n % publishers else 0) for i in range(publishers)]

        async def one(count: int) -> None:
            channel = await self.connection.channel(publisher_confirms=True)
            try:
                exchange = (channel.default_exchange if not exchange_name
                            else await channel.get_exchange(exchange_name))
                window = asyncio.Semaphore(WINDOW)

                async def send() -> None:
                    try:
                        await exchange.publish(self._message(), routing_key=routing_key)
                    finally:
                        window.release()

                sends = []
                for _ in range(count):
                    await window.acquire()
                    sends.append(asyncio.ensure_future(send()))
                    if count_progress:
                        self.progress.add()
                await asyncio.gather(*sends)  # raises the first failure (a nack)
            finally:
                await channel.close()

        await asyncio.gather(*(one(c) for c in counts))

    async def pipelined(self, n: int, publishers: int) -> dict[str, Any]:
        queue = f"pipe{publishers}"
        await self.channel.default_exchange.publish(self._message(), routing_key=queue)  # warm-up, as the others
        self.progress.begin(f"{self.config} pipelined x{publishers}", n)
        meter = await self._meter(queue)
        t0 = time.perf_counter()
        await self._publish("", queue, n, publishers)
        seconds = time.perf_counter() - t0
        return {"msgs_per_s": n / seconds, "seconds": seconds, **meter.stop(n)}

    async def _drain(self, queue_name: str, total: int, progress: bool) -> None:
        """Consume `total` messages of a queue, acknowledging each (prefetch 10 × CREDIT, as
        JetStream's max_ack_pending)."""
        channel = await self.connection.channel()
        try:
            await channel.set_qos(prefetch_count=10 * CREDIT)
            queue = await channel.get_queue(queue_name)
            got = 0
            async with queue.iterator() as messages:
                async for message in messages:
                    await message.ack()
                    got += 1
                    if progress:
                        self.progress.add()
                    if got >= total:
                        break
        finally:
            await channel.close()

    async def consume(self, n: int) -> dict[str, Any]:
        total = n + 1  # the pipelined workload's messages and its warm-up
        self.progress.begin(f"{self.config} consume", total)
        meter = await self._meter("pipe1")
        t0 = time.perf_counter()
        await asyncio.wait_for(self._drain("pipe1", total, True), 300)
        seconds = time.perf_counter() - t0
        cpu = meter.stop(total)
        settle = await self._settle(["pipe1"])
        return {"msgs_per_s": total / seconds, "seconds": seconds, **cpu, "settle_s": settle}

    async def fanout(self, n: int) -> dict[str, Any]:
        deliveries = n * FANOUT_DURABLES
        self.progress.begin(f"{self.config} fanout", deliveries)
        meter = await self._meter("fan0")
        t0 = time.perf_counter()
        consumers = [asyncio.create_task(self._drain(f"fan{i}", n, True)) for i in range(FANOUT_DURABLES)]
        publisher = asyncio.create_task(self._publish(FANOUT_EXCHANGE, "", n, 1, count_progress=False))
        await asyncio.wait_for(asyncio.gather(publisher, *consumers), 300)
        seconds = time.perf_counter() - t0
        cpu = meter.stop(n)
        settle = await self._settle([f"fan{i}" for i in range(FANOUT_DURABLES)])
        return {"deliveries_per_s": deliveries / seconds, "seconds": seconds, **cpu, "settle_s": settle}

    async def _settle(self, queues: list[str], timeout: float = 30.0) -> float:
        """Not timed: wait until every acknowledgment took effect; returns how long that took."""
        t0 = time.perf_counter()
        while True:
            counts = {q["name"]: int(q.get("messages") or 0) for q in await asyncio.to_thread(self._queues)}
            left = sum(counts.get(q, 0) for q in queues)
            if left == 0:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{queues}: {left} messages still in the queues {timeout:.0f} s after consuming")
            await asyncio.sleep(0.1)
