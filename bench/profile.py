"""Profile a Strongroom workload with py-spy: where the leader (and the client) spend their time.

    python -m bench.profile [--config disk-sync] [--workload pipelined|confirm|consume|fanout|uow|routing]
                            [--publishers N] [--seconds 5] [--out DIR] [--gil] [--native]

Starts a fresh cluster of the configuration, runs the workload in a loop, records the leader,
one follower and this client process with `py-spy record -f raw` for `--seconds`, and prints the
functions that hold the most samples, by self time and by total (inclusive) time. The raw
collapsed stacks are kept under --out (default: a temp dir) for flame graphs.

`--workload routing` starts the routing group's two sites instead (bench/routing.py: London and
Rio, a router each), publishes at London through one pipelined publisher (256 in flight) while a
standard durable at Rio receives and acknowledges, records both routers, both leaders and this
client process, and prints each process's CPU seconds per 1,000 forwarded messages over the
same seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import BODY, Progress
from bench.ours import CONFIGS, StrongroomTarget
from bench.uow import UOW_MESSAGES, UOW_WINDOW

__all__ = ["main", "run_routing", "summarize_raw"]


def _py_spy() -> str:
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy not found: pip install py-spy")
    return found


def _frame_name(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(file).parts
    short = "/".join(parts[-2:]) if parts else file
    return f"{name} ({short})"


def summarize_raw(path: Path, top: int = 25) -> str:
    """Top functions of a py-spy raw (collapsed) profile, by self and by inclusive samples."""
    self_c: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame_name(f) for f in stack.split(";")]
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        if not frames:
            continue
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return f"{path}: no samples"
    out = [f"{path.name}: {total} samples", "  self:"]
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in self_c.most_common(top)]
    out += ["  inclusive:"]
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in incl.most_common(top)]
    return "\n".join(out)


async def _drain(sub: Any, stop: asyncio.Event) -> int:
    """Receive and ack until `stop` is set; the messages received."""
    n = 0
    while not stop.is_set():
        try:
            m = await sub.next(timeout=1.0)
        except TimeoutError:
            continue
        await sub.ack(m)
        n += 1
    return n


async def _workload_loop(target: StrongroomTarget, workload: str, publishers: int, stop: asyncio.Event) -> int:
    done = 0
    if workload == "confirm":
        while not stop.is_set():
            await target.client.publish("prof.queue", BODY)
            done += 1
        return done
    if workload in ("pipelined", "consume"):
        async def one() -> int:
            pub = target.client.publisher("prof.queue", window=256)
            n = 0
            try:
                while not stop.is_set():
                    await pub.send(BODY)
                    n += 1
            finally:
                await pub.close()
            return n

        if workload == "consume":
            sub = await target.client.subscribe("prof.queue", "", ack="explicit", credit=256)

            counts = await asyncio.gather(one(), _drain(sub, stop))
            await sub.close()
            return counts[1]
        return sum(await asyncio.gather(*(one() for _ in range(publishers))))
    if workload == "fanout":
        subs = [await target.client.subscribe("prof.fan", f"f{i}", kind="standard", credit=256) for i in range(4)]

        async def pub() -> int:
            p = target.client.publisher("prof.fan", window=256)
            n = 0
            try:
                while not stop.is_set():
                    await p.send(BODY)
                    n += 1
            finally:
                await p.close()
            return n

        counts = await asyncio.gather(pub(), *(_drain(s, stop) for s in subs))
        for s in subs:
            await s.close()
        return sum(counts[1:])
    if workload == "uow":
        # Whole UOWs of 10 × 1 KiB through one UowSender, 64 in flight (the `uow` group's
        # `uow_pipelined`); counted in messages.
        sender = target.client.uow_sender(target.dest("prof.queue"), window=UOW_WINDOW)
        bodies = [BODY] * UOW_MESSAGES
        try:
            while not stop.is_set():
                await sender.send(bodies)
                done += UOW_MESSAGES
            await sender.flush()
        finally:
            await sender.close()
        return done
    raise SystemExit(f"unknown workload {workload}")


def _spy(pid: int, seconds: float, raw: Path, gil: bool, native: bool = False) -> subprocess.Popen[bytes]:
    extra = (["--gil"] if gil else []) + (["--native"] if native else ["--nonblocking"])
    return subprocess.Popen([_py_spy(), "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200",
                             "-f", "raw", "-o", str(raw), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


Spies = list[tuple[str, subprocess.Popen[bytes], Path]]
"""py-spy recorders under way: (whom it records, its process, the raw file it writes)."""


async def _collect(spies: Spies) -> None:
    """Wait for every recorder to write its file."""
    for _, proc, _ in spies:
        await asyncio.to_thread(proc.wait, 30)


def _report(spies: Spies) -> None:
    for who, _, raw in spies:
        print(f"--- {who} ---")
        print(summarize_raw(raw) if raw.exists() else f"{raw}: not written")


def _stop(spies: Spies) -> None:
    """Stop recorders still running (the run failed)."""
    for _, proc, _ in spies:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait()


async def run(config: str, workload: str, publishers: int, seconds: float, out: Path, gil: bool = False,
              native: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    target = StrongroomTarget(config, out / "cluster", Progress(out=lambda _s: None))
    await target.start()
    spies: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        stop = asyncio.Event()
        task = asyncio.create_task(_workload_loop(target, workload, publishers, stop))
        await asyncio.sleep(1.0)  # warm up
        tag = f"{config}-{workload}" + (f"-x{publishers}" if workload == "pipelined" else "")
        follower = next(p.pid for n, p in target.cluster.members["bench"].items() if n != target.leader)
        for who, pid in (("leader", target.leader_pid), ("follower", follower), ("client", os.getpid())):
            raw = out / f"{tag}-{who}.txt"
            spies.append((who, _spy(pid, seconds, raw, gil, native), raw))
        t0 = time.perf_counter()
        await asyncio.sleep(seconds + 0.5)
        stop.set()
        done = await task
        rate = done / (time.perf_counter() - t0 + 1.0)
        await _collect(spies)
        print(f"{tag}: about {rate:,.0f} msgs/s while profiled (py-spy itself costs some)")
        _report(spies)
    finally:
        _stop(spies)
        await target.stop()


async def run_routing(seconds: float, out: Path, gil: bool = False, native: bool = False) -> None:
    """The routing group's forwarding London → Rio in a loop, profiled (see the module doc)."""
    from bench.common import CREDIT, WINDOW
    from bench.routing import DURABLE, ROUTING_CONFIG, TOPIC, CpuSplit, RoutingTarget

    out.mkdir(parents=True, exist_ok=True)
    target = RoutingTarget(ROUTING_CONFIG, out / "cluster", Progress(out=lambda _s: None))
    await target.start()
    spies: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        sub = await target.rio.subscribe(TOPIC, DURABLE, kind="standard", ack="explicit", credit=CREDIT)
        await target._await_interest(sub)
        stop = asyncio.Event()
        received = [0]

        async def publish() -> None:
            pub = target.client.publisher(TOPIC, window=WINDOW)
            try:
                while not stop.is_set():
                    await pub.send(BODY)
            finally:
                await pub.close()

        async def receive() -> None:
            while not stop.is_set():
                try:
                    m = await sub.next(timeout=1.0)
                except TimeoutError:
                    continue
                await sub.ack(m)
                received[0] += 1

        tasks = [asyncio.create_task(publish()), asyncio.create_task(receive())]
        await asyncio.sleep(2.0)  # warm up: the route runs at its pace
        for who, pid in [*((w, target.processes[w]) for w in ("london_router", "rio_router", "london_leader",
                                                              "rio_leader")), ("client", os.getpid())]:
            raw = out / f"routing-{who}.txt"
            spies.append((who, _spy(pid, seconds, raw, gil, native), raw))
        meter = CpuSplit(target.router_pids, target.server_pids, target.rio_pids, target.processes).start()
        n0, t0 = received[0], time.perf_counter()
        await asyncio.sleep(seconds)
        n, took = received[0] - n0, time.perf_counter() - t0
        cpu = meter.stop(n)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sub.close()
        await _collect(spies)
        print(f"routing: {n / took:,.0f} msgs/s received at Rio while profiled (py-spy itself costs some)")
        print("CPU seconds per 1,000 forwarded messages:")
        for key, value in cpu.items():
            print(f"  {key:<40} {value:.4f}")
        _report(spies)
    finally:
        _stop(spies)
        await target.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="disk-sync", choices=sorted(CONFIGS))
    p.add_argument("--workload", default="pipelined", choices=["confirm", "pipelined", "consume", "fanout", "uow", "routing"])
    p.add_argument("--publishers", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL (Python CPU time)")
    p.add_argument("--native", action="store_true",
                   help="include native frames (gRPC's Cython and C core, RocksDB); stops the process per sample")
    a = p.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="strongroom-profile-"))
    if a.workload == "routing":
        asyncio.run(run_routing(a.seconds, out, a.gil, a.native))
    else:
        asyncio.run(run(a.config, a.workload, a.publishers, a.seconds, out, a.gil, a.native))
    print(f"raw profiles: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
