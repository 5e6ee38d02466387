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

Run: `python -m bench.backlog [--sizes 100000,2000000] [--json]`; progress lines go to stderr,
the table to stdout, the JSON to bench/results/backlog/<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import MESSAGE_BYTES, free_port
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.client import Client
from strongroom.local.etcdproc import start_etcd
from strongroom.local.leader import NoLeader, wait_for_leader
from strongroom.local.process import member_argv, spawn, stop_processes
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.snapshots import snapshot_parts
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storage import DiskStorage
from strongroom.realm.store import store_realm

__all__ = ["main", "run"]

OPS_PER_ENTRY = 4096
DESTINATION = "backlog.queue"


def say(text: str) -> None:
    print(f"backlog: {text}", file=sys.stderr, flush=True)


# Random bytes the bodies are cut from, so the disk cannot compress the backlog away.
_POOL = os.urandom(1 << 20)


def body(i: int) -> bytes:
    """1 KiB, incompressible, its index first (checked on delivery)."""
    head = f"{i:010d}".encode()
    at = (i * 4099) % (len(_POOL) - MESSAGE_BYTES)
    return head + _POOL[at:at + MESSAGE_BYTES - len(head)]


def realm_yaml(indexes_on_disk: bool) -> str:
    return f"""\
clusters:
  - name: default
    storage: disk-sync
    lease_ttl_seconds: 3
    indexes_on_disk: {str(indexes_on_disk).lower()}
    members:
      - name: m1
stores:
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


def run(sizes: list[int], modes: list[bool], work: Path | None = None) -> list[dict[str, Any]]:
    """Every (indexes_on_disk, size) point; each in a fresh data directory and etcd."""
    results = []
    for size in sizes:
        for indexes_on_disk in modes:
            root = Path(tempfile.mkdtemp(prefix="backlog-", dir=work))
            try:
                say(f"indexes_on_disk={indexes_on_disk} messages={size:,}: building the backlog")
                built = build(root / "default" / "m1", size, indexes_on_disk)
                say(f"  built in {built['build_seconds']} s ({built['data_bytes'] / 2**20:,.0f} MiB on disk); "
                    f"starting the member")
                etcd = start_etcd(root / "etcd")
                try:
                    asyncio.run(store_realm(etcd.endpoint, realm_yaml(indexes_on_disk), "bench-backlog.yaml"))
                    measured = asyncio.run(measure(root, etcd.endpoint, size))
                except Exception as exc:  # noqa: BLE001 - a failed point is reported, not hidden
                    member_log = root / "member.log"
                    tail = member_log.read_text(errors="replace")[-3000:] if member_log.exists() else ""
                    say(f"  FAILED: {exc}\n{tail}")
                    results.append({"indexes_on_disk": indexes_on_disk, "messages": size, **built,
                                    "error": str(exc), "member_log_tail": tail})
                    continue
                finally:
                    etcd.stop()
                point = {"indexes_on_disk": indexes_on_disk, "messages": size, **built, **measured}
                say(f"  leader after {measured['leader_seconds']} s, first message after "
                    f"{measured['first_message_seconds']} s, RSS {measured['rss_mib']} MiB")
                results.append(point)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| indexes on disk | pending messages | restart: leader (s) | restart: first message (s) | RSS (MiB) | peak RSS (MiB) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {'yes' if r['indexes_on_disk'] else 'no'} | {r['messages']:,} | failed: {r['error']} | | | |")
            continue
        lines.append(f"| {'yes' if r['indexes_on_disk'] else 'no'} | {r['messages']:,} | {r['leader_seconds']} | "
                     f"{r['first_message_seconds']} | {r['rss_mib']} | {r['peak_rss_mib']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.backlog`."""
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,2000000", help="pending message counts, comma-separated")
    parser.add_argument("--modes", default="false,true", help="indexes_on_disk settings to run")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    parser.add_argument("--work-dir", type=Path, default=None, help="where data directories are built")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    modes = [m.strip().lower() in ("true", "yes", "1") for m in args.modes.split(",") if m]
    started = time.time()
    results = run(sizes, modes, args.work_dir)
    doc = {"benchmark": "backlog", "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
           "message_bytes": MESSAGE_BYTES, "results": results,
           "wall_seconds": round(time.time() - started, 1)}
    # A directory of its own: bench.readme takes the newest *.json of bench/results as the suite's.
    out_dir = Path(__file__).parent / "results" / "backlog"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.json else table(results))
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
