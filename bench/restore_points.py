"""What restore points cost (docs/dr.md, "Roll back"): a member's disk bytes and compaction time
with them and without them, and what a roll back to the oldest one takes.

Each configuration runs in a process of its own on a source tree: this one, and a baseline
revision before restore points (`--baseline REV`, extracted with `git archive`). In it, one
member's own code (`Replica`: log, state machine, compaction; storage disk-sync) takes ENTRIES
log entries, each publishing PUBLISHES incompressible 1 KiB messages to a queue and acking as
many of the oldest (a steady backlog of BACKLOG messages), committed and applied one at a time,
with `compact_after_entries` EVERY; the state in memory, or indexes on disk. Measured:

- the time spent compacting (`ReplicatedLog.compact`: the serialised snapshot or the RocksDB
  checkpoint, the synced write, the log dropped; serialising the snapshot is the caller's and
  counts too), per compaction;
- the data directory's bytes (allocated blocks, each file counted once however many hard links
  it has) right after each compaction, at the end, and at the end once RocksDB has flushed and
  compacted everything ("settled": what is left is the live data plus, with restore points, the
  older snapshot, the log kept from it and the checkpoints' files the live database no longer
  shares);
- on a tree with restore points, the time of a roll back to the entry before the newest one:
  the oldest restore point restored and the longest replay (about `compact_after_entries`
  entries).

Every configuration runs `--rounds` times (default 3), the configurations interleaved, and the
table gives the median of the rounds (the machine is shared; the JSON keeps every round).

Run: `python -m bench.restore_points [--baseline REV] [--rounds N] [--json]`; progress goes to
stderr, the table to stdout, the JSON to bench/results/restore_points/<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "run_here"]

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = 6000
PUBLISHES = 20
BACKLOG = 20000
EVERY = 1000
MESSAGE_BYTES = 1024


def say(text: str) -> None:
    print(f"restore_points: {text}", file=sys.stderr, flush=True)


def disk_bytes(path: Path) -> int:
    """Allocated bytes under `path`, each inode once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def run_here(indexes_on_disk: bool, data_dir: Path) -> dict[str, Any]:
    """The workload on the `strongroom` package this process imports."""
    from strongroom.api.v1 import common_pb2 as cpb
    from strongroom.api.v1 import replication_pb2 as rpb
    from strongroom.persistence.log import ReplicatedLog
    from strongroom.persistence.replica import Replica
    from strongroom.persistence.state import durable_key
    from strongroom.realm.model import parse_realm

    realm = parse_realm(f"clusters:\n  - name: c1\n    storage: disk-sync\n    compact_after_entries: {EVERY}\n"
                        f"    indexes_on_disk: {str(indexes_on_disk).lower()}\n    members:\n      - name: m1\n"
                        "stores:\n  - name: s\n    cluster: c1\n")
    cluster = realm.cluster("c1")
    assert cluster is not None

    async def stored() -> None:
        pass

    compactions: list[float] = []
    sizes: list[int] = []
    real = ReplicatedLog.compact
    replica: Any = None

    def timed_compact(self: Any, through_index: int, epoch: int, snapshot: bytes) -> None:
        real(self, through_index, epoch, snapshot)
        compactions[-1] = time.perf_counter() - compactions[-1]
        sizes.append(disk_bytes(data_dir))

    ReplicatedLog.compact = timed_compact  # type: ignore[method-assign]
    replica = Replica(lambda: cluster, "m1", data_dir, stored)
    # The snapshot is serialised before `compact` is called: the clock starts there.
    real_compact = replica._maybe_compact

    def maybe_compact() -> None:
        compactions.append(time.perf_counter())
        before = len(sizes)
        real_compact()
        if len(sizes) == before:
            compactions.pop()

    replica._maybe_compact = maybe_compact
    pool = os.urandom(1 << 20)
    queue = durable_key("q.queue", "")
    started = time.perf_counter()
    seq = 0
    for index in range(1, ENTRIES + 1):
        messages = []
        for _ in range(PUBLISHES):
            seq += 1
            at = (seq * 4099) % (len(pool) - MESSAGE_BYTES)
            messages.append(cpb.Message(body=pool[at:at + MESSAGE_BYTES]))
        ops = [rpb.Operation(publish_batch=rpb.PublishBatchOp(
            publish=rpb.PublishOp(store="s", destination="q.queue", queue=True, published_at=float(index)),
            messages=messages))]
        if seq > BACKLOG:
            ops.append(rpb.Operation(ack=rpb.AckOp(store="s", durable_key=queue,
                                                   message_seqs=list(range(seq - BACKLOG - PUBLISHES + 1,
                                                                           seq - BACKLOG + 1)))))
        replica.log.append_local(rpb.LogEntry(index=index, epoch=1, ops=ops))
        replica.commit_index = index
        replica.apply_committed()
        if index % 1000 == 0:
            say(f"  {'indexes on disk' if indexes_on_disk else 'state in memory'}: {index}/{ENTRIES}")
    run_seconds = time.perf_counter() - started
    out: dict[str, Any] = {
        "compactions": len(compactions),
        "compaction_ms_mean": round(1000 * sum(compactions) / len(compactions), 1),
        "compaction_ms_max": round(1000 * max(compactions), 1),
        "compaction_seconds_total": round(sum(compactions), 2),
        "run_seconds": round(run_seconds, 1),
        "disk_bytes_after_compaction_max": max(sizes),
        "disk_bytes_after_compaction_mean": round(sum(sizes) / len(sizes)),
        "disk_bytes_end": disk_bytes(data_dir),
        "snapshot_index": replica.log.snapshot_index,
    }
    out["disk_bytes_settled"] = _settled(replica.storage, data_dir)
    points = getattr(replica.storage, "restore_points", None)
    if points is not None:
        kept = points()
        target = kept[-1][0] - 1
        started = time.perf_counter()
        assert replica.roll_back_to(target)
        out["restore_points"] = kept
        out["roll_back_to"] = target
        out["roll_back_seconds"] = round(time.perf_counter() - started, 2)
        out["roll_back_replayed_entries"] = target - replica.log.snapshot_index
        assert replica.state.applied_index == target
    replica.close()
    return out


def _settled(storage: Any, data_dir: Path) -> int:
    """The data directory's bytes once RocksDB flushed its memtables and compacted every column
    family (the WAL then holds nothing and overwritten or deleted keys take no room)."""
    views = [storage._db, storage._log, storage._meta, *getattr(storage, "_state_cfs", {}).values()]
    for view in views:
        view.flush(True)
    for view in views:
        view.compact_range(None, None)
    storage._db.flush_wal(True)
    return disk_bytes(data_dir)


def _worker(services: Path, indexes_on_disk: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="restore-points-") as tmp:
        code = ("import json, sys; from pathlib import Path; from bench.restore_points import run_here; "
                f"print(json.dumps(run_here({indexes_on_disk}, Path(sys.argv[1]))))")
        done = subprocess.run([sys.executable, "-c", code, tmp], capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": f"{services}{os.pathsep}{ROOT}"})
        if done.returncode != 0:
            raise RuntimeError(f"the run on {services} failed:\n{done.stderr[-3000:]}")
        sys.stderr.write(done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.restore_points", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="", help="a git revision before restore points, run alike")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every configuration (median reported)")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    args = parser.parse_args(argv)
    trees = {"restore points": ROOT / "services"}
    with tempfile.TemporaryDirectory(prefix="restore-points-base-") as base:
        if args.baseline:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "services"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
            trees = {f"baseline {args.baseline[:12]}": Path(base) / "services", **trees}
        rounds: dict[str, list[dict[str, Any]]] = {}
        for n in range(args.rounds):
            for kind, on_disk in (("state in memory", False), ("indexes on disk", True)):
                for tree, services in trees.items():
                    say(f"round {n + 1}/{args.rounds}: {kind}, {tree}")
                    rounds.setdefault(f"{kind}, {tree}", []).append(_worker(services, on_disk))
    results = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]
                      if isinstance(runs[0][key], (int, float))} for name, runs in rounds.items()}
    doc = {"date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), "host": platform.node(),
           "cpus": os.cpu_count(), "entries": ENTRIES, "publishes_per_entry": PUBLISHES, "backlog": BACKLOG,
           "compact_after_entries": EVERY, "message_bytes": MESSAGE_BYTES, "baseline": args.baseline,
           "median": results, "rounds": rounds}
    out_dir = ROOT / "bench" / "results" / "restore_points"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{doc['date']}.json").write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    mib = 2**20
    print(f"{'configuration (median of ' + str(args.rounds) + ')':<36} {'ms mean':>8} {'ms max':>8} "
          f"{'MiB max':>8} {'MiB end':>8} {'settled':>8} {'roll back s':>11}")
    for name, r in results.items():
        print(f"{name:<36} {r['compaction_ms_mean']:>8.1f} {r['compaction_ms_max']:>8.1f} "
              f"{r['disk_bytes_after_compaction_max'] / mib:>8.1f} {r['disk_bytes_end'] / mib:>8.1f} "
              f"{r['disk_bytes_settled'] / mib:>8.1f} {r.get('roll_back_seconds', '-'):>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
