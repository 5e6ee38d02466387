"""The fault injectors themselves: the per-link proxy tells processes apart and cuts one link;
the fsync journal keeps exactly what fsync made durable. Real processes, no cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.chaos.fsync import build_shim, shim_env, simulate_crash, snapshot_sizes
from strongroom.chaos.netproxy import RESET, STALL, Network
from strongroom.local.process import kill, pid_alive

CHILD = """
import socket, sys, time
sys.stdin.readline()  # once its label is pushed
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while True:
    try:
        s.sendall(b"x\\n")
        data = s.recv(100)
    except OSError:
        data = b""
    print("ok" if data else "closed", flush=True)
    if not data:
        break
    time.sleep(0.05)
"""


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A line echo server on loopback."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield port
    finally:
        stop.set()
        t.join(2)
        srv.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            conn.sendall(data)


def _roundtrip(port: int, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"ping\n")
        return s.recv(100)


def test_proxy_labels_connections_by_process_and_cuts_one_source(echo_server: int, tmp_path: Path) -> None:
    child: subprocess.Popen[bytes] | None = None
    labels: dict[int, str] = {os.getpid(): "client"}
    net = Network(lambda: labels, tmp_path / "net.log")
    try:
        proxy = net.proxy("echo", f"127.0.0.1:{echo_server}")
        assert _roundtrip(proxy.port) == b"ping\n"
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(proxy.port)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE)
        labels[child.pid] = "child"
        net.refresh_labels()
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == b"ok"
        # Only the child is cut off: this process still gets through.
        proxy.block({"child"}, RESET)
        lines = child.stdout.read().split()  # until the child exits
        assert lines[-1] == b"closed"
        assert _roundtrip(proxy.port) == b"ping\n"
        proxy.cut(RESET)
        with pytest.raises((ConnectionError, OSError)):
            reply = _roundtrip(proxy.port, timeout=1.0)
            if not reply:
                raise ConnectionResetError("closed")
        proxy.heal()
        assert _roundtrip(proxy.port) == b"ping\n"
        assert net.unidentified == 0
    finally:
        if child is not None:
            child.kill()
            child.wait()
        net.close()


def test_a_stalled_link_holds_bytes_until_it_heals(echo_server: int, tmp_path: Path) -> None:
    net = Network(lambda: {os.getpid(): "client"}, tmp_path / "net.log")
    try:
        proxy = net.proxy("echo", f"127.0.0.1:{echo_server}")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            s.sendall(b"one\n")
            assert s.recv(100) == b"one\n"
            proxy.cut(STALL)
            s.sendall(b"late\n")
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(100)
            proxy.heal()
            s.settimeout(5)
            assert s.recv(100) == b"late\n"
        proxy.set_delay(0.3)
        started = time.monotonic()
        assert _roundtrip(proxy.port) == b"ping\n"
        assert time.monotonic() - started >= 0.5  # delayed both ways
    finally:
        net.close()


WRITER = """
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"a" * 100)
os.fsync(fd)
os.write(fd, b"b" * 50)
os.fdatasync(fd)
os.write(fd, b"c" * 25)          # never synced
tmp = path + ".tmp"
t = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
os.write(t, b"renamed")
os.fsync(t)
os.close(t)
os.rename(tmp, path + ".current")
u = os.open(path + ".unsynced", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(u, b"gone")
os.kill(os.getpid(), 9)
"""


def test_a_crash_image_keeps_only_what_fsync_made_durable(tmp_path: Path) -> None:
    shim = build_shim(tmp_path / "shim")
    if shim is None:
        pytest.skip("no C compiler to build the fsync journal shim")
    data = tmp_path / "data"
    data.mkdir()
    (data / "old").write_bytes(b"from an earlier life")
    baseline = snapshot_sizes(data)
    journal = tmp_path / "journal"
    env = dict(os.environ, **shim_env(shim, journal, data))
    subprocess.run([sys.executable, "-c", WRITER, str(data / "wal")], env=env, check=False)
    assert (data / "wal").stat().st_size == 175
    image = simulate_crash(data, journal, baseline)
    assert (data / "wal").read_bytes() == b"a" * 100 + b"b" * 50
    assert (data / "wal.current").read_bytes() == b"renamed"
    assert not (data / "wal.unsynced").exists()
    assert (data / "old").read_bytes() == b"from an earlier life"
    assert image.bytes_lost == 25 + 4
    assert image.last_wal_sync is None  # no file named *.log was synced
    assert journal.read_text() == ""


def test_closing_the_network_stops_its_process_and_thread(tmp_path: Path) -> None:
    before = threading.active_count()
    net = Network(dict, tmp_path / "net.log")
    proxy = net.proxy("x", "127.0.0.1:9")
    proxy.cut(STALL)
    assert proxy.blocked == {"*": STALL}
    pid = net.pid
    assert pid_alive(pid)
    net.close()
    assert threading.active_count() == before
    assert not pid_alive(pid)


OWNER = """
import sys
from pathlib import Path
from strongroom.chaos.netproxy import Network
net = Network(dict, Path(sys.argv[1]))
print(net.pid, flush=True)
sys.stdin.read()
"""


def test_the_proxies_do_not_outlive_their_caller(tmp_path: Path) -> None:
    """Killed with SIGKILL, the caller closes nothing: its proxies' process must still go."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "net.log")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert pid_alive(pid)
        kill(owner)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid)
    finally:
        kill(owner)


def test_the_kernel_names_the_inode_of_a_connecting_socket() -> None:
    """The inode sock_diag gives for a live loopback connection is the one /proc/self/fd holds
    (and /proc/net/tcp agrees); a four-tuple with no socket has none."""
    from strongroom.chaos.netproxy import _diag_inode, _diag_works, _table_inode, owner_pid

    assert _diag_works()  # this machine's kernel answers it: the proxies use it, not the table

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            with accepted:
                local, remote = client.getsockname()[1], server.getsockname()[1]
                held = os.readlink(f"/proc/self/fd/{client.fileno()}")
                assert held == f"socket:[{_diag_inode('127.0.0.1', local, remote)}]"
                assert _table_inode(local, remote) == _diag_inode("127.0.0.1", local, remote)
                assert owner_pid(local, remote, [os.getpid()]) == os.getpid()
                assert _diag_inode("127.0.0.1", local, remote + 1 if remote < 65535 else remote - 1) is None


def test_a_hung_proxies_process_is_stopped_and_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command the proxies' process does not answer in time stops it, and that call and every
    later one say so at once (a late answer can never be taken for the next command's)."""
    import signal

    from strongroom.chaos import netproxy

    monkeypatch.setattr(netproxy, "CALL_SECONDS", 1.0)
    net = Network(dict, tmp_path / "net.log")
    try:
        proxy = net.proxy("x", "127.0.0.1:9")
        os.kill(net.pid, signal.SIGSTOP)
        with pytest.raises(ConnectionError, match="did not answer 'heal' within 1 s"):
            proxy.heal()
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="did not answer 'heal'"):
            proxy.cut()
        assert time.monotonic() - started < 0.5
    finally:
        net.close()
    assert not pid_alive(net.pid)
