"""Trace where a round goes: a timestamp at every step, in the client, the leader and both followers.

    python -m bench.trace [--config disk-sync] [--workload confirm|pipelined] [--messages N] [--json]

Starts a fresh cluster of the configuration with every member (and this client) writing a line
`<monotonic ns> <pid> <event>` at the start (`>`) and end (`<`) of the steps below, runs the
workload, and prints for each step the median time from the client's write of a round (one
publish-stream write: one confirmed publish, or one pipelined window) to the step's first
occurrence in that round. CLOCK_MONOTONIC is one clock for every process of the machine, so the
times line up across processes.

Steps: `cwrite` / `cread` (client: a publish-stream write / read), `submit` (leader: a batch of
publishes accepted), `outc` (leader: a batch's outcomes awaited), `xchg` (leader: one append sent
and answered on a replication link), `lwrite` (leader: its own write of a round's entry),
`match` (leader: a follower's answer counted), `apply` (applying committed entries), `rx`
(a link end reading bytes), `fappend` (follower: an append handled), `gc0`/`gc1`/`gc2` (a
collection of more than 0.2 ms, or any full one, with its duration). Followers are F<last digit
of their pid>. The hooks are installed by a `sitecustomize` module put on the members'
PYTHONPATH; nothing in Strongroom knows about them. Rounds overlap a little (a round's slower
follower may answer after the next round started), so read a step as "when it first happened".
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Progress

__all__ = ["HOOKS", "main", "summarize"]

# Installed in every traced process (members through sitecustomize, this client directly).
HOOKS = r'''
import functools, gc, importlib.abc, importlib.util, os, sys, time

_fd = os.open(os.path.join(os.environ["STRONGROOM_TRACE_DIR"], f"{os.getpid()}.log"),
              os.O_WRONLY | os.O_CREAT | os.O_APPEND)
_pid = os.getpid()


def mark(event):
    os.write(_fd, f"{time.monotonic_ns()} {_pid} {event}\n".encode())


def wrap(owner, name, label, is_async):
    original = getattr(owner, name)
    if is_async:
        @functools.wraps(original)
        async def traced(*args, **kwargs):
            mark(label + ">")
            try:
                return await original(*args, **kwargs)
            finally:
                mark(label + "<")
    else:
        @functools.wraps(original)
        def traced(*args, **kwargs):
            mark(label + ">")
            try:
                return original(*args, **kwargs)
            finally:
                mark(label + "<")
    setattr(owner, name, traced)


def _hook(module):
    name = module.__name__
    if name == "strongroom.persistence.node":
        node = module.PersistenceNode
        wrap(node, "submit_publishes", "submit", False)
        wrap(node, "handle_append", "fappend", True)
        wrap(node, "_apply_committed", "apply", False)
        wrap(node, "on_match", "match", False)
        wrap(module.PendingPublishes, "outcomes", "outc", True)
    elif name == "strongroom.persistence.link":
        wrap(module.LinkConnection, "exchange", "xchg", True)
        wrap(module._Frames, "buffer_updated", "rx", False)
    elif name == "strongroom.persistence.log":
        wrap(module.ReplicatedLog, "store_last", "lwrite", False)


class _Finder(importlib.abc.MetaPathFinder):
    NAMES = ("strongroom.persistence.node", "strongroom.persistence.link", "strongroom.persistence.log")

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.NAMES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _hook(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())

_gc_started = [0]


def _gc(phase, info):
    if phase == "start":
        _gc_started[0] = time.monotonic_ns()
        return
    took = (time.monotonic_ns() - _gc_started[0]) // 1000
    if took > 200 or info["generation"] == 2:
        mark(f"gc{info['generation']}:{took}us")


gc.callbacks.append(_gc)
'''


def summarize(trace_dir: Path, client: int, leader: int) -> dict[str, Any]:
    """Median time of each step from the start of its round (the client's write), in µs."""
    events: list[tuple[int, int, str]] = []
    for path in trace_dir.glob("*.log"):
        for line in path.read_text().splitlines():
            t, pid, event = line.split(" ", 2)
            events.append((int(t), int(pid), event))
    events.sort()
    begin = next(t for t, p, e in events if e == "BEGIN")
    end = next(t for t, p, e in events if e == "END")
    events = [ev for ev in events if begin <= ev[0] <= end]

    def role(pid: int) -> str:
        return "client" if pid == client else "leader" if pid == leader else f"F{pid % 10}"

    rounds: list[list[tuple[int, str]]] = []
    for t, pid, event in events:
        if pid == client and event == "cwrite>":
            rounds.append([])
        if rounds and not event.startswith("gc"):
            rounds[-1].append((t, f"{role(pid)}:{event}"))
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for r in rounds[2:-2]:  # the first and last rounds are partial
        t0, seen = r[0][0], set()
        for t, key in r:
            if key not in seen:
                seen.add(key)
                steps[key].append((t - t0) / 1000)
    gcs: dict[str, list[int]] = collections.defaultdict(list)
    for _t, pid, event in events:
        if event.startswith("gc"):
            gen, took = event.split(":")
            gcs[f"{role(pid)}:{gen}"].append(int(took[:-2]))
    return {
        "rounds": len(rounds),
        "window_ms": (end - begin) / 1e6,
        "steps_us": {k: statistics.median(v) for k, v in sorted(steps.items(), key=lambda kv: statistics.median(kv[1]))
                     if len(v) >= len(rounds) // 2},
        "gc": {k: {"count": len(v), "total_ms": sum(v) / 1000, "max_ms": max(v) / 1000} for k, v in sorted(gcs.items())},
    }


async def _run(config: str, workload: str, messages: int, trace_dir: Path) -> tuple[dict[str, Any], int, int]:
    from bench.ours import StrongroomTarget

    target = StrongroomTarget(config, trace_dir.parent / "cluster", Progress(out=lambda _s: None))
    await target.start()
    mark = sys.modules["_strongroom_trace"].mark
    try:
        if workload == "pipelined":
            await target.pipelined(max(messages // 4, 256), 1)  # warm-up
            mark("BEGIN")
            figures = await target.pipelined(messages, 1)
        else:
            await target.confirm(max(messages // 10, 50))
            mark("BEGIN")
            figures = await target.confirm(messages)
        mark("END")
        return figures, os.getpid(), target.leader_pid
    finally:
        await target.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="disk-sync", choices=["disk-sync", "disk-async", "non-replicated"])
    parser.add_argument("--workload", default="confirm", choices=["confirm", "pipelined"])
    parser.add_argument("--messages", type=int, default=0, help="default: 2000 confirm, 20000 pipelined")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if "grpc" in sys.modules or "strongroom" in sys.modules:
        raise SystemExit("bench.trace must install its hooks before grpc or strongroom is imported")
    messages = args.messages or (2000 if args.workload == "confirm" else 20000)
    work = Path(tempfile.mkdtemp(prefix="strongroom-trace-"))
    trace_dir, site = work / "trace", work / "site"
    trace_dir.mkdir()
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOOKS)
    os.environ["STRONGROOM_TRACE_DIR"] = str(trace_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    # This process: the same hooks, and the client's publish-stream writes and reads.
    module = type(sys)("_strongroom_trace")
    exec(compile(HOOKS, "<bench.trace hooks>", "exec"), module.__dict__)  # noqa: S102 - our own hook code
    sys.modules["_strongroom_trace"] = module
    importlib.import_module("strongroom")  # picks gRPC's pollers (Client API) before grpc is imported
    import grpc.aio._call as grpc_call  # noqa: PLC0415 - after the hooks and strongroom

    module.wrap(grpc_call._StreamRequestMixin, "write", "cwrite", True)
    module.wrap(grpc_call._StreamResponseMixin, "read", "cread", True)
    figures, client, leader = asyncio.run(_run(args.config, args.workload, messages, trace_dir))
    summary = summarize(trace_dir, client, leader)
    summary["figures"] = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.config} {args.workload}: {summary['rounds']} rounds in {summary['window_ms']:.0f} ms; "
              + ", ".join(f"{k} {v:.3g}" for k, v in summary["figures"].items() if k in ("msgs_per_s", "p50_ms", "p99_ms")))
        print("step (first occurrence in a round)      median µs from the client's write")
        for key, us in summary["steps_us"].items():
            print(f"  {key:38} {us:8.0f}")
        for key, g in summary["gc"].items():
            print(f"  collections {key:26} {g['count']:4d}, {g['total_ms']:.1f} ms in all, longest {g['max_ms']:.1f} ms")
    print(f"raw trace: {trace_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
