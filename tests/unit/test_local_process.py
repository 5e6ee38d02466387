"""Stopping processes by pid (`strongroom down`): a process counts as stopped only once all of
its threads are gone, not when its main thread is."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from strongroom.local.process import pid_alive, pid_exists, stop_processes

# On SIGTERM its main thread exits (pthread_exit) while another thread goes on for a second and
# then writes `done`: how a member looks while its gRPC and RocksDB threads close after `main`
# returned (the main thread shows as a zombie, the process still runs).
LINGERING = """
import ctypes, os, signal, sys, threading, time
from pathlib import Path

done, ready = Path(sys.argv[1]), Path(sys.argv[2])
stopping = threading.Event()

def linger():
    stopping.wait()
    time.sleep(1.0)
    done.write_text("finished")
    os._exit(0)

def on_term(signum, frame):
    stopping.set()
    ctypes.CDLL(None).pthread_exit(None)  # ctypes lets go of the GIL for the call, for good

threading.Thread(target=linger).start()
signal.signal(signal.SIGTERM, on_term)
ready.write_text("ready")
while True:
    time.sleep(0.1)
"""


def _lingering(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The helper started and ready; the path it writes once its last thread is done."""
    done, ready = tmp_path / "done", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", LINGERING, str(done), str(ready)])
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError("the helper did not start")
        time.sleep(0.02)
    return proc, done


def test_a_pid_is_stopped_only_once_its_last_thread_is_gone(tmp_path: Path) -> None:
    proc, done = _lingering(tmp_path)
    try:
        # Its parent reaps it, as `up --detach`'s processes are reaped by init, not by `down`.
        threading.Thread(target=proc.wait, daemon=True).start()
        stop_processes([proc.pid], grace=10)
        assert done.read_text() == "finished"  # the last thread had finished its work
        assert not pid_alive(proc.pid)
        assert not pid_exists(proc.pid)  # and the process had left the table
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_zombie_main_thread_with_threads_still_running_is_alive(tmp_path: Path) -> None:
    proc, done = _lingering(tmp_path)
    try:
        proc.terminate()
        time.sleep(0.3)  # the main thread has exited, the other sleeps on
        assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        assert pid_alive(proc.pid) and not done.exists()
        proc.wait(timeout=10)
        assert not pid_alive(proc.pid) and done.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_free_ports_are_below_the_range_outgoing_connections_take_ports_from() -> None:
    """A port from the kernel's ephemeral range can be taken by an outgoing connection between
    the pick and the bind (a member then fails to start with 'Failed to bind')."""
    import socket

    from strongroom.local.etcdproc import LOWEST_PORT, _ephemeral_start, free_port

    top = _ephemeral_start()
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST_PORT <= p < top for p in ports) and len(ports) > 40
    with socket.socket() as s:  # and free
        s.bind(("127.0.0.1", ports.pop()))


def test_free_port_never_gives_one_process_the_same_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two picks drawing the same free port (nobody holds it until a process binds it) put two
    members on one port: gRPC binds it twice (SO_REUSEPORT) and clients reach either at random.
    With a random draw that always lands on one port, the second pick must find another."""
    import random

    from strongroom.local import etcdproc

    class Stuck(random.SystemRandom):
        def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
            return 23456

    monkeypatch.setattr(etcdproc, "_HANDED_OUT", set())
    monkeypatch.setattr(etcdproc.random, "SystemRandom", Stuck)
    first, second = etcdproc.free_port(), etcdproc.free_port()
    assert first == 23456 and second != first


def test_ports_env_narrows_the_picks_and_shares_do_not_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's two workers pick ports side by side: a pick reserves a port only within its
    own process, so each worker (and what it starts) draws from a share of its own."""
    from strongroom.local import etcdproc

    monkeypatch.setattr(etcdproc, "_HANDED_OUT", set())
    monkeypatch.setenv(etcdproc.PORTS_ENV, "20000-20100")
    ports = {etcdproc.free_port() for _ in range(30)}
    assert len(ports) == 30 and all(20000 <= p < 20100 for p in ports)
    shares = [etcdproc.port_share(i, 3) for i in range(3)]
    assert etcdproc.port_range() == (20000, 20100)  # computing shares leaves the variable alone
    spans = [tuple(int(x) for x in share.split("-")) for share in shares]
    monkeypatch.delenv(etcdproc.PORTS_ENV)
    low, high = etcdproc.port_range()
    assert spans[0][0] == low and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] <= high and all(hi - lo > 1000 for lo, hi in spans)


@pytest.mark.parametrize("text", ["20000", "x-y", "30000-20000", "0-100", "100-70000"])
def test_a_malformed_ports_env_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                               text: str) -> None:
    from strongroom.local import etcdproc

    monkeypatch.setenv(etcdproc.PORTS_ENV, text)
    with pytest.raises(ValueError, match="STRONGROOM_PORTS"):
        etcdproc.free_port()
