"""Loopback TCP proxies that know which process is connecting: per-link network faults.

Every member advertises the address of its own inbound proxy, so peers and clients reach it
only through that proxy. On accept the proxy finds the process that owns the connecting socket
(the kernel's sock_diag, asked by the connection's ports, gives the socket's inode;
`/proc/<pid>/fd` the process holding it) and labels the connection with that process's name
(`m1`, `m2`, `client`, ...). Blocking a label at a member's proxy cuts that one direction of
that one link; blocking each side at the other's proxy partitions the pair. No product hook is
needed and nothing leaves loopback.

Two things made a cluster behind these proxies lose its majority on a loaded machine, before
any fault: the inode came from reading `/proc/net/tcp`, and every read walks the kernel's whole
connection table (10 ms and more of kernel time here, however few sockets there are), once per
accepted connection and per retry, so a burst of reconnections kept the proxies' loop busy for
seconds (sampled with py-spy: nine tenths of its time); and the proxies ran as a thread of the
caller, sharing its interpreter lock with the workload. Now the lookup is sock_diag's (some 50
microseconds; `/proc/net/tcp` only where a kernel lacks it) and the proxies run in a process of
their own (`python -m strongroom.chaos.netproxy`). `Network` is the caller's handle: it starts
that process, sends it commands over a socket pair whose other end the process inherits (one
JSON line each way), and pushes the process labels whenever they change. The process exits when
its end closes, so it never outlives the caller.

Modes of a cut:
- `reset`: open connections are aborted, new ones are accepted and closed at once;
- `stall`: nothing is read or written until the link heals, then the held bytes flow (late
  delivery of stale requests, as after a long network stall).
A proxy can also delay every chunk by a fixed time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.local.etcdproc import free_port
from strongroom.local.process import spawn, stop_pid

__all__ = ["RESET", "STALL", "Network", "Proxy", "owner_pid"]

log = logging.getLogger("strongroom.chaos.net")

RESET = "reset"
STALL = "stall"
ALL = "*"
CALL_SECONDS = 10.0
"""How long a command to the proxies' process may take before the caller gives up on it."""
LABEL_POLL_SECONDS = 0.05
"""How often the caller's labels are read and, when they changed, pushed to the proxies (a
backstop: whoever starts a process pushes at once with `Network.refresh_labels`)."""


_SOCK_DIAG = 4  # NETLINK_SOCK_DIAG
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_NO_COOKIE = 0xFFFFFFFF
_INODE_AT = 16 + 68  # after the netlink header: family..wqueue, uid, then the inode


def _diag_inode(host: str, local_port: int, remote_port: int) -> str | None:
    """The inode of the TCP socket host:local_port -> host:remote_port, asked of the kernel by
    its four-tuple (sock_diag): a lookup in its hash table, some 50 microseconds. Raises OSError
    where the kernel has no sock_diag."""
    address = socket.inet_aton(host)
    sockid = (struct.pack("!HH", local_port, remote_port) + address + bytes(12) + address + bytes(12)
              + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))
    request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as nl:
        nl.send(header + request)
        reply = nl.recv(8192)
    if struct.unpack_from("=H", reply, 4)[0] == _NLMSG_ERROR or len(reply) < _INODE_AT + 4:
        return None  # no such socket (ENOENT)
    return str(struct.unpack_from("=I", reply, _INODE_AT)[0])


def _ports_of(hexaddr: str) -> int:
    return int(hexaddr.rsplit(":", 1)[1], 16)


def _table_inode(local_port: int, remote_port: int) -> str | None:
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


def _diag_works() -> bool:
    """Whether sock_diag finds a live loopback connection, asked of a connection of our own (a
    kernel may have the netlink family and still answer "no such socket" to every question,
    when its inet_diag module is missing)."""
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=5) as client:
                accepted, _ = server.accept()
                with accepted:
                    found = _diag_inode("127.0.0.1", client.getsockname()[1], server.getsockname()[1])
                    return found == os.readlink(f"/proc/self/fd/{client.fileno()}")[len("socket:["):-1]
    except OSError:
        return False


_USE_DIAG: bool | None = None


def _socket_inode(local_port: int, remote_port: int, host: str = "127.0.0.1") -> str | None:
    """The inode of a loopback socket ("0" once it is closed and lingers; None if there is none).

    By sock_diag where it works here (`_diag_works`, asked once); else from /proc/net/tcp, whose
    every read walks the kernel's whole table of connections (262,144 buckets on a 24 GiB
    machine: 10 ms or more of kernel time, however few sockets there are), which a burst of
    connections turned into seconds of a busy proxies' loop."""
    global _USE_DIAG
    if _USE_DIAG is None:
        _USE_DIAG = _diag_works()
        if not _USE_DIAG:
            log.warning("sock_diag does not find loopback sockets here: reading /proc/net/tcp (slow)")
    if _USE_DIAG:
        return _diag_inode(host, local_port, remote_port)
    return _table_inode(local_port, remote_port)


def _holder(inode: str, candidates: list[int]) -> int | None:
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


def owner_pid(client_port: int, server_port: int, candidates: list[int], host: str = "127.0.0.1") -> int | None:
    """The process among `candidates` holding the loopback socket host:client_port that is
    connected to server_port, or None (also once that socket is closed)."""
    inode = _socket_inode(client_port, server_port, host)
    if inode is None or inode == "0":
        return None
    return _holder(inode, candidates)


# --- the caller's side -----------------------------------------------------------------------


class Proxy:
    """The caller's handle on one listening proxy in front of one target (a member, or etcd for
    one member)."""

    def __init__(self, network: Network, name: str, target: str, port: int) -> None:
        self.network = network
        self.name = name
        self.target = target
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"

    def block(self, labels: set[str] | None = None, mode: str = RESET) -> None:
        """Cut the sources named (every source if None) off from the target."""
        self.network.call("block", name=self.name, labels=sorted(labels) if labels is not None else [ALL],
                          mode=mode)

    def cut(self, mode: str = RESET) -> None:
        """Cut every source off (a partition of the target from everyone behind this proxy)."""
        self.block(None, mode)

    def heal(self) -> None:
        """Let every source through again (stalled bytes flow on)."""
        self.network.call("heal", name=self.name)

    def set_delay(self, seconds: float) -> None:
        """Delay every chunk in both directions by `seconds` (0 to stop)."""
        self.network.call("delay", name=self.name, seconds=seconds)

    @property
    def blocked(self) -> dict[str, str]:
        """Currently blocked labels and their mode."""
        return dict(self.network.call("blocked", name=self.name))


class Network:
    """All proxies of a run, in one process of their own; labels connections by process.

    `labels` maps the pid of every process whose connections should be told apart to its label
    (it is read every LABEL_POLL_SECONDS, from a thread); `log_path` takes the proxies' log."""

    def __init__(self, labels: Callable[[], dict[int, str]], log_path: Path) -> None:
        self._labels = labels
        self.proxies: dict[str, Proxy] = {}
        self._last_unidentified = 0
        self._lock = threading.Lock()
        # Commands go through a socket pair, one end inherited by the proxies' process: no port
        # another process could take or connect to, and its end closes when this process ends.
        self._sock, theirs = socket.socketpair()
        try:
            self._proc = spawn([sys.executable, "-m", __name__, "--control-fd", str(theirs.fileno())], log_path,
                               pass_fds=[theirs.fileno()])
        finally:
            theirs.close()
        self._buffer = b""
        self._dead: str | None = None
        self._pushed: dict[int, str] | None = None
        self._push_lock = threading.Lock()
        self._push_labels()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_labels, name="chaos-network-labels", daemon=True)
        self._watcher.start()

    @property
    def pid(self) -> int:
        """The process id of the proxies' process."""
        return self._proc.pid

    def call(self, op: str, **args: Any) -> Any:
        """Send one command to the proxies' process and return its answer. One that gets no
        answer within CALL_SECONDS stops that process (it is hung): this and every later call
        raise ConnectionError saying so."""
        with self._lock:
            if self._dead is not None:
                raise ConnectionError(self._dead)
            self._sock.sendall((json.dumps({"op": op, **args}) + "\n").encode())
            line = self._read_line(op)
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"proxies: {op}: {reply['error']}")
        return reply.get("ok")

    def _read_line(self, op: str) -> bytes:
        deadline = time.monotonic() + CALL_SECONDS
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._sock], [], [], max(0.0, left))
            if not ready:
                self._dead = f"the proxies' process did not answer {op!r} within {CALL_SECONDS:.0f} s: stopped it"
                self._proc.kill()
                raise ConnectionError(self._dead)
            chunk = self._sock.recv(65536)
            if not chunk:
                self._dead = f"the proxies' process closed its control connection (op {op!r})"
                raise ConnectionError(self._dead)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def refresh_labels(self) -> None:
        """Push the labels now: call it right after starting a process whose connections must be
        told apart, before it can connect (a connection from a process the proxies have no label
        for is labelled "?" at once, and no cut names it)."""
        self._push_labels()

    def _push_labels(self) -> None:
        with self._push_lock:  # one push at a time: an older map never overtakes a newer one
            labels = dict(self._labels())
            if labels != self._pushed:
                self.call("labels", labels={str(pid): label for pid, label in labels.items()})
                self._pushed = labels

    def _watch_labels(self) -> None:
        while not self._stop.wait(LABEL_POLL_SECONDS):
            try:
                self._push_labels()
            except (OSError, ConnectionError):
                return  # the proxies' process is gone
            except Exception:  # noqa: BLE001 - the backstop must go on (e.g. labels read mid-change)
                log.exception("could not push the process labels to the proxies; trying again")

    def proxy(self, name: str, target: str) -> Proxy:
        """A new proxy in front of `target`, listening on a free loopback port."""
        port = free_port()
        self.call("proxy", name=name, target=target, port=port)
        proxy = Proxy(self, name, target, port)
        self.proxies[name] = proxy
        return proxy

    def heal_all(self) -> None:
        """Heal every proxy and remove every delay."""
        self.call("heal_all")

    @property
    def unidentified(self) -> int:
        """Connections whose process could not be told (labelled "?")."""
        try:
            self._last_unidentified = int(self.call("stats")["unidentified"])
        except (OSError, ConnectionError, ValueError):
            pass
        return self._last_unidentified

    def close(self) -> None:
        """Close every proxy and stop the proxies' process (by its pid) and the label thread."""
        self._stop.set()
        self._watcher.join(CALL_SECONDS)
        try:
            self._last_unidentified = int(self.call("close")["unidentified"])
        except (OSError, ConnectionError, ValueError, RuntimeError):
            pass
        finally:
            self._sock.close()
            stop_pid(self._proc.pid, CALL_SECONDS, self._proc)


# --- the proxies' process --------------------------------------------------------------------


@dataclass(eq=False)
class _Conn:
    label: str
    transports: list[asyncio.WriteTransport] = field(default_factory=list)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)


class _Relay:
    """One listening proxy in the proxies' process: accepts, labels, relays, cuts."""

    def __init__(self, relays: _Relays, name: str, target: str, port: int) -> None:
        host, target_port = target.rsplit(":", 1)
        self.relays = relays
        self.name = name
        self.target = (host, int(target_port))
        self.port = port
        self.delay = 0.0
        # label -> mode; ALL blocks every source.
        self._blocked: dict[str, str] = {}
        self._conns: set[_Conn] = set()
        self._server: asyncio.base_events.Server | None = None

    def _mode_for(self, label: str) -> str | None:
        return self._blocked.get(label) or self._blocked.get(ALL)

    def block(self, labels: set[str], mode: str) -> None:
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

    def heal(self) -> None:
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
        label = self.relays.identify(peer[0], int(peer[1]), self.port) if peer else "?"
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


class _Relays:
    """Every relay of the proxies' process, the labels the caller pushed, and the commands."""

    def __init__(self) -> None:
        self.relays: dict[str, _Relay] = {}
        self.labels: dict[int, str] = {}
        self.unidentified = 0
        self.closed = asyncio.Event()

    def identify(self, host: str, client_port: int, server_port: int) -> str:
        """The label of the process that opened a connection ("?" if it cannot be told: it has
        no label, or it has closed the connection already)."""
        pid = owner_pid(client_port, server_port, list(self.labels), host)
        if pid is not None:
            return self.labels[pid]
        self.unidentified += 1
        if self.labels:  # with none pushed, no connection is told apart (a proxy that only cuts)
            log.warning("could not identify the process behind 127.0.0.1:%d -> %d", client_port, server_port)
        return "?"

    async def command(self, op: str, args: dict[str, Any]) -> Any:
        if op == "labels":
            self.labels = {int(pid): label for pid, label in args["labels"].items()}
            return None
        if op == "proxy":
            relay = _Relay(self, args["name"], args["target"], int(args["port"]))
            await relay.start()
            self.relays[relay.name] = relay
            return relay.port
        if op == "heal_all":
            for relay in self.relays.values():
                relay.heal()
                relay.delay = 0.0
            return None
        if op in ("stats", "close"):
            if op == "close":
                for relay in self.relays.values():
                    await relay.close()
                self.closed.set()
            return {"unidentified": self.unidentified}
        relay = self.relays[args["name"]]
        if op == "block":
            relay.block(set(args["labels"]), args["mode"])
            return None
        if op == "heal":
            relay.heal()
            return None
        if op == "delay":
            relay.delay = float(args["seconds"])
            return None
        if op == "blocked":
            return dict(relay._blocked)
        raise ValueError(f"unknown command {op!r}")

    async def serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self.closed.is_set():
                line = await reader.readline()
                if not line:
                    break
                request = json.loads(line)
                try:
                    reply = {"ok": await self.command(request.pop("op"), request)}
                except Exception as exc:  # noqa: BLE001 - answered to the caller
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
        finally:
            self.closed.set()  # the caller has gone: nothing is left to serve
            writer.close()


async def _serve(control_fd: int) -> None:
    relays = _Relays()
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=control_fd))
    await relays.serve_control(reader, writer)  # until the caller closes it, or says "close"
    for relay in relays.relays.values():
        await relay.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the chaos suite's loopback proxies (started by Network)")
    parser.add_argument("--control-fd", type=int, required=True,
                        help="the inherited end of the caller's socket pair, to take commands on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s netproxy %(levelname)s %(message)s")
    asyncio.run(_serve(args.control_fd))


if __name__ == "__main__":
    main()
