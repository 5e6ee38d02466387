"""Loopback TCP proxies that know which process is connecting: per-link network faults.

Every member advertises the address of its own inbound proxy, so peers and clients reach it
only through that proxy. On accept the proxy finds the process that owns the connecting socket
(`/proc/net/tcp` gives the socket's inode, `/proc/<pid>/fd` the process holding it) and labels
the connection with that process's name (`m1`, `m2`, `client`, ...). Blocking a label at a
member's proxy cuts that one direction of that one link; blocking each side at the other's proxy
partitions the pair. No product hook is needed and nothing leaves loopback.

Modes of a cut:
- `reset`: open connections are aborted, new ones are accepted and closed at once;
- `stall`: nothing is read or written until the link heals, then the held bytes flow (late
  delivery of stale requests, as after a long network stall).
A proxy can also delay every chunk by a fixed time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from strongroom.local.etcdproc import free_port

__all__ = ["RESET", "STALL", "Network", "Proxy", "owner_pid"]

log = logging.getLogger("strongroom.chaos.net")

RESET = "reset"
STALL = "stall"
ALL = "*"
CLOSE_SECONDS = 30.0
"""How long `Network.close` waits for the proxies' thread to close them and stop."""


def _ports_of(hexaddr: str) -> int:
    return int(hexaddr.rsplit(":", 1)[1], 16)


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    local, remote = f":{local_port:04X} ", f":{remote_port:04X} "
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    if local not in line or remote not in line:  # most lines: no split
                        continue
                    parts = line.split()
                    if len(parts) > 9 and _ports_of(parts[1]) == local_port and _ports_of(parts[2]) == remote_port:
                        return parts[9]
        except OSError:
            continue
    return None


def owner_pid(client_port: int, server_port: int, candidates: list[int]) -> int | None:
    """The process among `candidates` holding the loopback socket 127.0.0.1:client_port that is
    connected to server_port, or None."""
    inode = _socket_inode(client_port, server_port)
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for pid in candidates:
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(f"{fd_dir}/{name}") == target:
                    return pid
            except OSError:
                continue
    return None


@dataclass(eq=False)
class _Conn:
    label: str
    transports: list[asyncio.WriteTransport] = field(default_factory=list)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)


class Proxy:
    """One listening proxy in front of one target (a member, or etcd for one member)."""

    def __init__(self, network: Network, name: str, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.network = network
        self.name = name
        self.target = (host, int(port))
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.delay = 0.0
        # label -> mode; ALL blocks every source.
        self._blocked: dict[str, str] = {}
        self._conns: set[_Conn] = set()
        self._server: asyncio.base_events.Server | None = None

    # --- control (from any thread) -------------------------------------------------------------

    def block(self, labels: set[str] | None = None, mode: str = RESET) -> None:
        """Cut the sources named (every source if None) off from the target."""
        self.network.call(self._block, set(labels) if labels is not None else {ALL}, mode)

    def cut(self, mode: str = RESET) -> None:
        """Cut every source off (a partition of the target from everyone behind this proxy)."""
        self.block(None, mode)

    def heal(self) -> None:
        """Let every source through again (stalled bytes flow on)."""
        self.network.call(self._heal)

    def set_delay(self, seconds: float) -> None:
        """Delay every chunk in both directions by `seconds` (0 to stop)."""
        self.network.call(setattr, self, "delay", seconds)

    @property
    def blocked(self) -> dict[str, str]:
        """Currently blocked labels and their mode."""
        return dict(self._blocked)

    # --- inside the network's loop ------------------------------------------------------------

    def _mode_for(self, label: str) -> str | None:
        return self._blocked.get(label) or self._blocked.get(ALL)

    def _block(self, labels: set[str], mode: str) -> None:
        for label in labels:
            self._blocked[label] = mode
        for conn in list(self._conns):
            m = self._mode_for(conn.label)
            if m == RESET:
                for tr in conn.transports:
                    tr.abort()
                self._conns.discard(conn)
            elif m == STALL:
                conn.flowing.clear()

    def _heal(self) -> None:
        self._blocked.clear()
        for conn in self._conns:
            conn.flowing.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            for tr in conn.transports:
                tr.abort()
        self._conns.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        label = await self.network.identify(int(peer[1]), self.port) if peer else "?"
        conn = _Conn(label, [writer.transport])
        mode = self._mode_for(label)
        if mode == RESET:
            writer.transport.abort()
            return
        if mode != STALL:
            conn.flowing.set()
        self._conns.add(conn)
        try:
            await conn.flowing.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()
                return
            conn.transports.append(up_writer.transport)
            if conn not in self._conns:  # reset while connecting
                up_writer.transport.abort()
                return
            await asyncio.gather(self._pipe(conn, reader, up_writer), self._pipe(conn, up_reader, writer))
        finally:
            self._conns.discard(conn)
            for tr in conn.transports:
                tr.abort()

    async def _pipe(self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def pump_out() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    break
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await conn.flowing.wait()
                writer.write(data)
                await writer.drain()

        out = asyncio.create_task(pump_out())
        try:
            while True:
                await conn.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await conn.flowing.wait()
                queue.put_nowait((time.monotonic() + self.delay, data))
            queue.put_nowait(None)
            await out
        except (ConnectionError, OSError):
            pass
        finally:
            out.cancel()
            writer.transport.abort()


class Network:
    """All proxies of a run on one background event loop; labels connections by process."""

    def __init__(self, labels: Callable[[], dict[int, str]]) -> None:
        self._labels = labels
        self.proxies: dict[str, Proxy] = {}
        self.unidentified = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-network", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the network loop and wait for it."""
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return done.result(10)

    def proxy(self, name: str, target: str) -> Proxy:
        """A new proxy in front of `target`, listening on a free loopback port."""
        proxy = Proxy(self, name, target)
        asyncio.run_coroutine_threadsafe(proxy.start(), self._loop).result(10)
        self.proxies[name] = proxy
        return proxy

    def heal_all(self) -> None:
        """Heal every proxy and remove every delay."""
        for proxy in self.proxies.values():
            proxy.heal()
            proxy.set_delay(0.0)

    async def identify(self, client_port: int, server_port: int) -> str:
        """The label of the process that opened a connection (\"?\" if it cannot be told)."""
        labels = self._labels()
        for _ in range(5):
            # On the proxies' loop, one scan at a time (a pool of threads scanning /proc at once
            # competed with the workload for the process; the scan skips most lines unsplit).
            pid = owner_pid(client_port, server_port, list(labels))
            if pid is not None:
                return labels[pid]
            await asyncio.sleep(0.01)
        self.unidentified += 1
        log.warning("could not identify the process behind 127.0.0.1:%d -> %d", client_port, server_port)
        return "?"

    def close(self) -> None:
        """Close every proxy and stop the loop thread."""
        async def stop() -> None:
            for proxy in self.proxies.values():
                await proxy.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(CLOSE_SECONDS)
        except concurrent.futures.TimeoutError:
            # The proxies' thread is busy (identifying the processes behind many connections on
            # a loaded machine): the scenario's verdict is made; the thread is a daemon.
            log.warning("the proxies did not close within %.0f s; leaving their thread behind", CLOSE_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()
