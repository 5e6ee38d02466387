"""Run chaos scenarios: a fresh cluster per fault, the workload, the fault for a bounded time,
heal, drain, check, and a table of the results.

    python -m strongroom.chaos [--seconds 15] [--faults kill-leader,pause-leader] [--out DIR]

Environment: CHAOS_SECONDS (fault time per scenario), CHAOS_FAULTS (comma-separated names),
CHAOS_SEED. Exit status 1 if any scenario failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.chaos.checker import CheckResult, check
from strongroom.chaos.cluster import ChaosCluster, FaultUnavailable
from strongroom.chaos.context import Fault
from strongroom.chaos.drsite import DrCluster
from strongroom.chaos.faults import FAULTS, FaultContext, heal_everything
from strongroom.chaos.history import INFO, History
from strongroom.chaos.pairs import fault_named, random_pairs
from strongroom.chaos.workload import Workload, WorkloadConfig

__all__ = ["ScenarioResult", "format_table", "main", "run_scenario", "run_scenario_sync"]

log = logging.getLogger("strongroom.chaos")

WARMUP_SECONDS = 1.5


@dataclass
class ScenarioResult:
    """The outcome of one fault scenario."""

    fault: str
    seconds: float
    root: Path
    check: CheckResult = field(default_factory=CheckResult)
    converged: bool = False
    convergence: str = ""
    missing_after_drain: int = 0
    """Confirmed (message, durable) pairs the consumers had not received, and confirmed UOWs no
    receiver's commit was confirmed for, when draining ended."""
    missing_after_audit: int = 0
    """... and that a fresh subscriber did not receive either."""
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    wall_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Skipped, or: nothing lost, phantom, reordered, duplicated or fenced, no UOW partial,
        lost, delivered after an abort or after a confirmed receiver commit; members agree."""
        if self.skipped is not None:
            return True
        return (self.check.ok and not self.check.duplicated and not self.check.liveness and self.converged
                and not self.errors and not self.missing_after_drain)

    def describe(self) -> str:
        """Everything a failure report needs."""
        if self.skipped is not None:
            return f"{self.fault}: skipped: {self.skipped}"
        verdict = "PASS" if self.passed else "FAIL"
        where = f"history {self.root / 'history.jsonl'}, logs {self.root / 'logs'}"
        lines = [f"{self.fault}: {verdict} ({where})", self.check.summary(),
                 f"converged={self.converged}: {self.convergence}",
                 f"missing after drain: {self.missing_after_drain}, after the audit: {self.missing_after_audit}"]
        lines += [f"error: {e}" for e in self.errors]
        return "\n".join(lines)


async def _monitor(cluster: ChaosCluster, history: History) -> None:
    """Record every change of a member's role or epoch (a leadership timeline) of the members
    that serve (a DR pair's activated standby site once it took over)."""
    last: dict[str, tuple[str, int]] = {}
    while True:
        for name, st in (await cluster.serving().statuses(timeout=0.5)).items():
            view = (st.role, st.epoch)
            if last.get(name) != view:
                last[name] = view
                history.record("monitor", INFO, "status", member=name, kind=st.role, detail=f"epoch {st.epoch}")
        await asyncio.sleep(0.5)


async def run_scenario(fault_name: str | Fault, seconds: float, root: Path, seed: int = 1,
                       config: WorkloadConfig | None = None) -> ScenarioResult:
    """One scenario in `root` (created): a fault of the catalogue by name, or a `Fault` (the
    soak's); the cluster is gone when this returns."""
    fault = fault_named(fault_name) if isinstance(fault_name, str) else fault_name
    root.mkdir(parents=True, exist_ok=True)
    result = ScenarioResult(fault.name, seconds, root)
    started = time.monotonic()
    history = History(root / "history.jsonl")
    cluster = DrCluster(root, fault.spec) if fault.spec.standby else ChaosCluster(root, fault.spec)
    workload: Workload | None = None
    monitor: asyncio.Task[None] | None = None
    try:
        try:
            await cluster.start()
        except FaultUnavailable as exc:
            result.skipped = str(exc)
            return result
        workload = Workload(cluster.endpoints(), history, config or WorkloadConfig(), cluster.member_of)
        monitor = asyncio.create_task(_monitor(cluster, history))
        await workload.start()
        await asyncio.sleep(WARMUP_SECONDS)
        ctx = FaultContext(cluster, history, workload, random.Random(seed))
        history.record("nemesis", INFO, "phase", detail="faults-start")
        await fault.run(ctx, time.monotonic() + seconds)
        history.record("nemesis", INFO, "phase", detail="faults-end")
        await heal_everything(ctx)
        try:
            await cluster.serving().leader(timeout=60)
        except TimeoutError:
            result.errors.append("no leader within 60s after every fault was healed")
        result.errors.extend(await fault.after_heal(ctx))
        await workload.stop_publishing(timeout=30)
        result.missing_after_drain = await workload.drain(timeout=30)
        history.record("nemesis", INFO, "phase", detail="drained", kind=str(result.missing_after_drain))
        if result.missing_after_drain:
            (root / "consumer-stacks.txt").write_text(workload.consumer_stacks())
        await workload.stop_consumers()
        await workload.audit()
        result.missing_after_audit = workload.missing()
        history.record("nemesis", INFO, "phase", detail="audited", kind=str(result.missing_after_audit))
        await workload.close()
        result.errors.extend(workload.errors)
        result.converged, result.convergence = await cluster.serving().converged(timeout=30)
    except Exception:  # noqa: BLE001 - the scenario fails with the reason; the next one runs
        result.errors.append("scenario aborted:\n" + traceback.format_exc())
    finally:
        if monitor is not None:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
        if workload is not None:
            await workload.close()
        cluster.stop()
        history.close()
        result.wall_seconds = time.monotonic() - started
    result.check = check(history.events)
    (root / "result.txt").write_text(result.describe() + "\n")
    return result


def run_scenario_sync(fault_name: str, seconds: float, root: Path, seed: int = 1,
                      config: WorkloadConfig | None = None) -> ScenarioResult:
    """`run_scenario` from sync code."""
    return asyncio.run(run_scenario(fault_name, seconds, root, seed, config))


def format_table(results: list[ScenarioResult]) -> str:
    """One row per scenario: operations, confirmed publishes, lost, duplicated, phantom, order and
    fence violations, UOWs their senders saw committed and the findings of the UOW rules
    (partial, lost, delivered after an abort, delivered after a confirmed receiver commit),
    (message, durable) pairs and UOWs the consumers never got (`stuck`), liveness violations (no
    leader of a newer epoch in time after a fault), seconds without a confirmed publish during
    the faults, the longest such gap, wall time and verdict."""
    head = ("fault", "ops", "confirmed", "lost", "dup", "phantom", "order", "fenced", "uows", "uow bad", "stuck",
            "liveness", "unavail s", "max gap s", "wall s", "result")
    rows: list[tuple[str, ...]] = [head]
    for r in results:
        c = r.check
        if r.skipped is not None:
            rows.append((r.fault, *["-"] * 13, f"{r.wall_seconds:.0f}", "SKIP"))
            continue
        lost = str(c.lost_messages) + (f" (+{len(c.lost_allowed)} allowed)" if c.lost_allowed else "")
        dup = str(len(c.duplicated)) + (f" (+{len(c.ack_redelivered_allowed)} allowed)"
                                        if c.ack_redelivered_allowed else "")
        uow_bad = str(c.uow_violations) + (f" (+{len(c.uow_allowed)} allowed)" if c.uow_allowed else "")
        rows.append((r.fault, str(c.operations), str(c.confirmed), lost, dup, str(len(c.phantom)),
                     str(len(c.order)), str(len(c.fence)), str(c.uows_confirmed), uow_bad,
                     str(r.missing_after_drain), str(len(c.liveness)), f"{c.unavailable_seconds:.1f}",
                     f"{c.longest_gap_seconds:.1f}", f"{r.wall_seconds:.0f}", "PASS" if r.passed else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def _run_all(names: list[str], seconds: float, out: Path, seed: int,
                   config: WorkloadConfig) -> list[ScenarioResult]:
    # One event loop for every scenario: grpc.aio does not like a new loop per scenario.
    results = []
    for i, name in enumerate(names):
        print(f"[{i + 1}/{len(names)}] {name}: {fault_named(name).description} ({seconds:.0f}s)", flush=True)
        res = await run_scenario(name, seconds, out / name, seed=seed + i, config=config)
        results.append(res)
        print(res.describe() if not res.passed else f"    {'skipped' if res.skipped else 'passed'} "
              f"in {res.wall_seconds:.0f}s", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    """The `make chaos` entry point."""
    parser = argparse.ArgumentParser(prog="python -m strongroom.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("CHAOS_SECONDS", "15")),
                        help="fault time per scenario (default 15, env CHAOS_SECONDS)")
    parser.add_argument("--faults", default=os.environ.get("CHAOS_FAULTS", ",".join(FAULTS)),
                        help="comma-separated fault names (default: all): " + ", ".join(FAULTS))
    parser.add_argument("--pairs", type=int, default=int(os.environ.get("CHAOS_PAIRS", "0")),
                        help="also this many pairs of faults at once, drawn with --seed (env CHAOS_PAIRS; "
                             "a pair can be named too: kill-leader+etcd-down)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    parser.add_argument("--rate", type=float, default=WorkloadConfig.rate, help="messages/s per publisher")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep histories and logs here (default: a temp dir, removed if all pass)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    names = [n.strip() for n in args.faults.split(",") if n.strip()] + random_pairs(args.pairs, args.seed)
    for n in names:
        try:
            fault_named(n)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
    out = args.out or Path(tempfile.mkdtemp(prefix="strongroom-chaos-"))
    results = asyncio.run(_run_all(names, args.seconds, out, args.seed, WorkloadConfig(rate=args.rate)))
    print()
    print(format_table(results))
    failed = [r for r in results if not r.passed]
    if args.json:
        print(json.dumps([{"fault": r.fault, "passed": r.passed, "skipped": r.skipped,
                           "operations": r.check.operations, "confirmed": r.check.confirmed,
                           "lost": r.check.lost_messages, "lost_allowed": len(r.check.lost_allowed),
                           "duplicated": len(r.check.duplicated), "phantom": len(r.check.phantom),
                           "order": len(r.check.order), "fence": len(r.check.fence),
                           "uows_confirmed": r.check.uows_confirmed, "uow_violations": r.check.uow_violations,
                           "unavailable_seconds": round(r.check.unavailable_seconds, 2)} for r in results], indent=1))
    if failed or args.out:
        print(f"\nhistories and logs: {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failed else 0)
