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
of their pid>. The steps are Strongroom's own trace points (`strongroom.tracing`: functions
marked `@traced`), turned on in every process by STRONGROOM_TRACE_DIR; this module only patches
the client's gRPC stream read and write, which are gRPC's. Rounds overlap a little (a round's
slower follower may answer after the next round started), so read a step as "when it first
happened".
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

__all__ = ["main", "summarize"]


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
    from strongroom.tracing import mark

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
    trace_dir = work / "trace"
    trace_dir.mkdir()
    # Read when strongroom.tracing is imported: in this process below, and in every member
    # process, which inherits the environment.
    os.environ["STRONGROOM_TRACE_DIR"] = str(trace_dir)
    tracing = importlib.import_module("strongroom.tracing")  # also picks gRPC's pollers (Client API)
    import grpc.aio._call as grpc_call  # noqa: PLC0415 - after strongroom

    tracing.wrap(grpc_call._StreamRequestMixin, "write", "cwrite")
    tracing.wrap(grpc_call._StreamResponseMixin, "read", "cread")
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
