"""Backlog benchmark: resident memory and restart time of a member holding a large backlog,
with indexes on disk off and on (issue 3, item 5).

For each setting and backlog size (default 100 000 and 2 000 000 pending 1 KiB messages on one
durable, a queue):

1. The backlog is built into a member's data directory in this process, through the member's own
   code: log entries of 4096 publishes each are appended to its `DiskStorage` and applied to
   its state machine (`StateMachine` or `DiskStateMachine`), then the log is compacted the way
   the member compacts it (a serialised snapshot without indexes on disk; none with them). This
   is the fastest honest way: the same bytes a member would hold after receiving the messages,
   without the client round trips. The build time is reported but is not the measurement.
2. A real member process (`strongroom.persistence.main`) is started on that directory, as the
   single member of a disk-sync cluster, on a real etcd. Measured from process start: the time
   until a status call answers with role leader, and until a subscriber gets its first message
   (checked: the oldest message, intact). Resident memory (VmRSS, and the peak VmHWM) is read
   from /proc/<pid>/status once the first message arrived.

3. Catch-up (issue 25): the member's data directory is copied to a second member, and the two
   start as m1 and m2 of a 3-member disk-sync cluster on a fresh etcd. A publisher sends one
   confirmed 1 KiB publish at a time for the whole phase: first `--baseline-seconds` with m3 not
   running, then m3 starts with an empty data directory and catches up (a snapshot of the whole
   state from the leader's latest restore point, in parts, then the log) while the publisher goes
   on. Measured: the seconds until m3 reports itself synced and has applied what the leader had
   committed when it started, the confirm latency (p50, p99, max) before and during the catch-up,
   and m3's resident memory once caught up; checked: m3 then holds exactly the messages the
   leader holds (the backlog plus every confirmed publish).

Each member builds its state in a child process, so the memory of building is given back before
the members start. Run: `python -m bench.backlog [--sizes 100000,2200000] [--json]`; progress
lines go to stderr, the table to stdout, the JSON to bench/results/backlog/<date>.json. 2.2
million 1 KiB messages are over 2 GiB of state (2.25 GB of bodies alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import BODY, MESSAGE_BYTES, free_port, percentile
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.client import Client
from strongroom.local.etcdproc import start_etcd
from strongroom.local.leader import NoLeader, member_status, wait_for_leader
from strongroom.local.process import member_argv, spawn, stop_processes
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.snapshots import snapshot_parts
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storage import DiskStorage
from strongroom.realm.store import store_realm

__all__ = ["main", "modes_of", "run", "run_cli", "table"]

OPS_PER_ENTRY = 4096
DESTINATION = "backlog.queue"
CONFIRM_DESTINATION = "catchup.queue"
DEFAULT_SIZES = "100000,2200000"
BASELINE_SECONDS = 15.0
CATCH_UP_TIMEOUT = 1800.0


def say(text: str) -> None:
    print(f"backlog: {text}", file=sys.stderr, flush=True)


# Random bytes the bodies are cut from, so the disk cannot compress the backlog away; seeded,
# so the child process that builds a backlog and this one that checks it cut the same bodies.
_POOL = random.Random(20261122).randbytes(1 << 20)


def body(i: int) -> bytes:
    """1 KiB, incompressible, its index first (checked on delivery)."""
    head = f"{i:010d}".encode()
    at = (i * 4099) % (len(_POOL) - MESSAGE_BYTES)
    return head + _POOL[at:at + MESSAGE_BYTES - len(head)]


def realm_yaml(indexes_on_disk: bool, addresses: list[str] | None = None) -> str:
    """The single member m1 (the restart), or m1.. at `addresses` (the catch-up)."""
    members = ("".join(f'      - name: m{i}\n        address: "{a}"\n' for i, a in enumerate(addresses, 1))
               if addresses else "      - name: m1\n")
    return f"""\
clusters:
  - name: default
    storage: disk-sync
    lease_ttl_seconds: 3
    indexes_on_disk: {str(indexes_on_disk).lower()}
    members:
{members}stores:
  - name: default
    cluster: default
destinations:
  - name: "*.queue"
    kind: queue
    store: default
"""


def build(data_dir: Path, messages: int, indexes_on_disk: bool) -> dict[str, Any]:
    """Write the backlog into a member's data directory through its storage and state code."""
    started = time.monotonic()
    storage = DiskStorage(data_dir, sync=False, state_families=STATE_COLUMN_FAMILIES if indexes_on_disk else ())
    loaded = storage.load()
    lg = ReplicatedLog(storage, loaded)
    state: StateMachine = DiskStateMachine.open(storage) if indexes_on_disk else StateMachine()
    index = 0
    done = 0
    last_report = time.monotonic()
    while done < messages:
        n = min(OPS_PER_ENTRY, messages - done)
        index += 1
        entry = rpb.LogEntry(index=index, epoch=1, ops=[
            rpb.Operation(publish=rpb.PublishOp(store="default", destination=DESTINATION, queue=True,
                                                message=cpb.Message(body=body(done + i)), published_at=time.time()))
            for i in range(n)])
        lg.append_local(entry)  # the storage does not fsync (sync=False)
        state.apply_entry(entry)
        done += n
        if time.monotonic() - last_report > 10:
            say(f"  built {done:,}/{messages:,}")
            last_report = time.monotonic()
        if indexes_on_disk and index % 50 == 0:
            # As the member does every compact_after_entries: no snapshot (a checkpoint, the
            # restore point), the log dropped.
            lg.compact(index, 1, [])
    snapshot_note = ""
    if indexes_on_disk:
        lg.compact(index, 1, [])
    else:
        try:
            lg.compact(index, 1, snapshot_parts(state))
            snapshot_note = "snapshot"
        except Exception as exc:  # noqa: BLE001 - reported: the restart then replays the log
            snapshot_note = f"no snapshot ({type(exc).__name__}: {exc}); restart replays the log"
            say(f"  {snapshot_note}")
    storage.set_promised(1)
    storage.set_meta(commit_index=index, synced=True, stored=True)
    storage.close()
    del state, lg
    return {"build_seconds": round(time.monotonic() - started, 1), "entries": index, "compaction": snapshot_note or "no snapshot (indexes on disk)",
            "data_bytes": sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file())}


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


async def measure(root: Path, etcd_endpoint: str, messages: int) -> dict[str, Any]:
    """Start the member on its data directory; time to leader and to first delivery; memory."""
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = spawn(member_argv(etcd_endpoint, "default", "m1", address, root / "default" / "m1"),
                 root / "member.log")

    def exited() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"member exited with {proc.returncode}; see {root / 'member.log'}")

    try:
        try:
            leader = await wait_for_leader([address], 1800 - (time.monotonic() - started), interval=0.05,
                                           status_timeout=2, each_round=exited)
        except NoLeader:
            raise RuntimeError("member did not become leader in 30 minutes") from None
        leader_at = time.monotonic() - started
        st = leader.status
        client = Client([address], timeout=120)
        sub = await client.subscribe(DESTINATION, "", credit=16)
        first = await sub.next(timeout=600)
        first_at = time.monotonic() - started
        assert first.body == body(0), "first message altered"
        memory = proc_memory(proc.pid)
        await sub.close()
        await client.close()
        stored = next(s.messages for s in st.stores if s.name == "default")
        assert stored == messages, f"member holds {stored} messages, expected {messages}"
        return {"leader_seconds": round(leader_at, 2), "first_message_seconds": round(first_at, 2),
                "rss_mib": round(memory["VmRSS"] / 1024, 1), "peak_rss_mib": round(memory["VmHWM"] / 1024, 1)}
    finally:
        stop_processes([proc], grace=60)


def build_apart(data_dir: Path, messages: int, indexes_on_disk: bool) -> dict[str, Any]:
    """`build` in a child process: the memory of the built state goes back with it."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(build, data_dir, messages, indexes_on_disk).result()


def _latencies(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {"confirms": len(ordered), "p50_ms": round(percentile(ordered, 50) * 1000, 2),
            "p99_ms": round(percentile(ordered, 99) * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 1) if ordered else None}


def _stored(st: Any) -> int:
    return next(s.messages for s in st.stores if s.name == "default")


async def catch_up(root: Path, etcd_endpoint: str, messages: int, indexes_on_disk: bool,
                   baseline_seconds: float) -> dict[str, Any]:
    """m1 and m2 on the built state, a confirmed publish at a time; m3 starts empty and catches
    up. The confirm latencies before and during the catch-up, its duration, m3's memory."""
    data = root / "default"
    shutil.copytree(data / "m1", data / "m2")
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    await store_realm(etcd_endpoint, realm_yaml(indexes_on_disk, addresses), "bench-backlog-catchup.yaml")
    procs = {}

    def start(i: int) -> None:
        procs[i] = spawn(member_argv(etcd_endpoint, "default", f"m{i}", addresses[i - 1], data / f"m{i}"),
                         root / f"catchup-m{i}.log")

    def exited() -> None:
        for i, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"m{i} exited with {proc.returncode}; see {root / f'catchup-m{i}.log'}")

    started = time.monotonic()
    start(1)
    start(2)
    try:
        try:
            await wait_for_leader(addresses[:2], CATCH_UP_TIMEOUT, interval=0.1, status_timeout=2, each_round=exited)
        except NoLeader:
            raise RuntimeError("m1 and m2 elected no leader in 30 minutes") from None
        restart_seconds = time.monotonic() - started
        say(f"  m1 and m2 serve after {restart_seconds:.1f} s; {baseline_seconds:.0f} s of confirms without m3")
        client = Client(addresses, timeout=120)
        before: list[float] = []
        during: list[float] = []
        sink = before
        stop = asyncio.Event()

        async def publish() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                r = await client.publish(CONFIRM_DESTINATION, BODY)
                if not r.confirmed:
                    raise RuntimeError("a publish was not confirmed")
                sink.append(time.perf_counter() - t0)

        publisher = asyncio.create_task(publish())
        try:
            await asyncio.sleep(baseline_seconds)
            leader = await wait_for_leader(addresses[:2], 30, status_timeout=2)
            target = leader.status.commit_index
            sink = during
            began = time.monotonic()
            start(3)
            last_line = began
            while True:
                exited()
                if publisher.done():
                    publisher.result()  # raises what stopped it
                st = await member_status(addresses[2], 2.0)
                if st is not None and st.synced and st.applied_index >= target:
                    break
                if time.monotonic() - began > CATCH_UP_TIMEOUT:
                    raise RuntimeError("m3 did not catch up in 30 minutes")
                if time.monotonic() - last_line > 10:
                    applied = st.applied_index if st is not None else "no answer"
                    say(f"  m3 catching up: {time.monotonic() - began:.0f} s, applied {applied} of {target}")
                    last_line = time.monotonic()
                await asyncio.sleep(0.2)
            caught_up = time.monotonic() - began
        finally:
            stop.set()
            await asyncio.gather(publisher, return_exceptions=True)
        await client.close()
        memory = proc_memory(procs[3].pid)
        # Every member applies what the leader committed, then they hold the same messages.
        leader = await wait_for_leader(addresses, 30, status_timeout=2)
        expected = messages + len(before) + len(during)
        deadline = time.monotonic() + 120
        while True:
            st = await member_status(addresses[2], 2.0)
            if st is not None and st.applied_index >= leader.status.commit_index:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("m3 did not apply the leader's last commit within 120 s")
            await asyncio.sleep(0.1)
        held = {"leader": _stored(leader.status), "m3": _stored(st)}
        if held != {"leader": expected, "m3": expected}:
            raise RuntimeError(f"messages held {held}, expected {expected} at each")
        return {"catchup_restart_seconds": round(restart_seconds, 2), "catchup_seconds": round(caught_up, 2),
                "confirm_before": _latencies(before), "confirm_during": _latencies(during),
                "fresh_rss_mib": round(memory["VmRSS"] / 1024, 1), "fresh_peak_rss_mib": round(memory["VmHWM"] / 1024, 1),
                "fresh_data_bytes": sum(f.stat().st_size for f in (data / "m3").rglob("*") if f.is_file())}
    finally:
        stop_processes(list(procs.values()), grace=60)


def run(sizes: list[int], modes: list[bool], work: Path | None = None,
        baseline_seconds: float = BASELINE_SECONDS) -> list[dict[str, Any]]:
    """Every (indexes_on_disk, size) point; each in a fresh data directory and etcd (one for the
    restart, another for the catch-up)."""
    results = []
    for size in sizes:
        for indexes_on_disk in modes:
            root = Path(tempfile.mkdtemp(prefix="backlog-", dir=work))
            point: dict[str, Any] = {"indexes_on_disk": indexes_on_disk, "messages": size}
            try:
                say(f"indexes_on_disk={indexes_on_disk} messages={size:,}: building the backlog")
                point.update(build_apart(root / "default" / "m1", size, indexes_on_disk))
                say(f"  built in {point['build_seconds']} s ({point['data_bytes'] / 2**20:,.0f} MiB on disk); "
                    f"starting the member")
                for phase, etcd_dir in (("restart", "etcd"), ("catch-up", "etcd-catchup")):
                    etcd = start_etcd(root / etcd_dir)
                    try:
                        if phase == "restart":
                            asyncio.run(store_realm(etcd.endpoint, realm_yaml(indexes_on_disk), "bench-backlog.yaml"))
                            point.update(asyncio.run(measure(root, etcd.endpoint, size)))
                            say(f"  leader after {point['leader_seconds']} s, first message after "
                                f"{point['first_message_seconds']} s, RSS {point['rss_mib']} MiB")
                        else:
                            point.update(asyncio.run(catch_up(root, etcd.endpoint, size, indexes_on_disk,
                                                              baseline_seconds)))
                            say(f"  m3 caught up in {point['catchup_seconds']} s; confirm p99 "
                                f"{point['confirm_before']['p99_ms']} ms before, "
                                f"{point['confirm_during']['p99_ms']} ms during; m3 RSS {point['fresh_rss_mib']} MiB")
                    except Exception as exc:  # noqa: BLE001 - a failed point is reported, not hidden
                        logs = sorted(root.glob("*.log"), key=lambda f: f.stat().st_mtime)
                        tail = logs[-1].read_text(errors="replace")[-3000:] if logs else ""
                        say(f"  {phase} FAILED: {exc}\n{tail}")
                        point.update({"error": f"{phase}: {exc}", "member_log_tail": tail})
                        break
                    finally:
                        etcd.stop()
                results.append(point)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| indexes on disk | pending messages | restart: leader (s) | restart: first message (s) | RSS (MiB) "
             "| peak RSS (MiB) | fresh member caught up (s) | confirm p99 before / during (ms) "
             "| confirm max during (ms) | fresh member RSS (MiB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        setting = "yes" if r["indexes_on_disk"] else "no"
        if "leader_seconds" not in r:
            lines.append(f"| {setting} | {r['messages']:,} | failed: {r.get('error')} | | | | | | | |")
            continue
        row = (f"| {setting} | {r['messages']:,} | {r['leader_seconds']} | {r['first_message_seconds']} | "
               f"{r['rss_mib']} | {r['peak_rss_mib']} |")
        if "catchup_seconds" in r:
            row += (f" {r['catchup_seconds']} | {r['confirm_before']['p99_ms']} / {r['confirm_during']['p99_ms']} | "
                    f"{r['confirm_during']['max_ms']} | {r['fresh_rss_mib']} |")
        else:
            row += f" failed: {r.get('error')} | | | |"
        lines.append(row)
    return "\n".join(lines)


def run_cli(sizes: list[int], modes: list[bool], as_json: bool = False, work_dir: Path | None = None,
            baseline_seconds: float = BASELINE_SECONDS) -> int:
    """`strongroom bench backlog`: run every point, write the JSON, print the table; 1 when a
    point failed."""
    started = time.time()
    results = run(sizes, modes, work_dir, baseline_seconds)
    doc = {"benchmark": "backlog", "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
           "message_bytes": MESSAGE_BYTES, "baseline_seconds": baseline_seconds, "results": results,
           "wall_seconds": round(time.time() - started, 1)}
    # A directory of its own: bench.readme takes the newest *.json of bench/results as the suite's.
    out_dir = Path(__file__).parent / "results" / "backlog"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if as_json else table(results))
    say(f"wrote {path}")
    return 1 if any("error" in r for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.backlog`."""
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="pending message counts, comma-separated")
    parser.add_argument("--modes", default="false,true", help="indexes_on_disk settings to run")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    parser.add_argument("--work-dir", type=Path, default=None, help="where data directories are built")
    parser.add_argument("--baseline-seconds", type=float, default=BASELINE_SECONDS,
                        help="confirmed publishing before the fresh member starts")
    args = parser.parse_args(argv)
    return run_cli([int(s) for s in args.sizes.split(",") if s], modes_of(args.modes), args.json, args.work_dir,
                   args.baseline_seconds)


def modes_of(text: str) -> list[bool]:
    """`false,true` -> [False, True]; ValueError for another word."""
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    modes = []
    for word in (w.strip().lower() for w in text.split(",") if w.strip()):
        if word not in words:
            raise ValueError(f"{word!r} is not an indexes_on_disk setting (true or false)")
        modes.append(words[word])
    if not modes:
        raise ValueError("no indexes_on_disk setting given")
    return modes


if __name__ == "__main__":
    sys.exit(main())
