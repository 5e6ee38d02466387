"""Failover drills: kill the leader under confirmed publishing and check that nothing is lost.

`failover_drill_local` runs a temporary local cluster of its own (etcd, realm service, three
disk-sync members), publishes with confirmation to a queue, SIGKILLs the leader's process once
half the messages are confirmed, keeps publishing through the new leader, then consumes the
queue and compares what arrived with what was confirmed.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.local.launcher import ClusterStartError, LocalCluster
from strongroom.local.leader import NoLeader, wait_for_leader
from strongroom.local.process import ServiceProcess
from strongroom.realm.model import DEFAULT_REALM_YAML, parse_realm

__all__ = ["DRILL_DESTINATION", "ConfirmTracker", "DrillAborted", "body_for", "collect_deliveries", "consume_and_count",
           "delivery_counts", "failover_drill_local", "index_of"]

# A queue keeps its messages without subscribers, so consuming after publishing sees them all.
DRILL_DESTINATION = "drill.queue"
WINDOW = 64
LEADER_TIMEOUT = 60.0
FLUSH_TIMEOUT = 120.0
IDLE_TIMEOUT = 15.0  # stop consuming after this long without a message
SETTLE_SECONDS = 1.0  # after everything arrived, wait this long for duplicates

SYNC_TIMEOUT = 30.0  # for every member to hold the committed state before the drill starts

Progress = Callable[[str], None]


class DrillAborted(Exception):
    """The cluster did not reach a state the drill needs (replicating members, a new leader)."""


def body_for(index: int) -> bytes:
    """The body of drill message `index`; it carries the index so order and loss can be checked."""
    return f"drill-{index:09d}".encode()


class ConfirmTracker:
    """What a drill's publisher confirmed: the kill point (half confirmed), the last quarter
    held back until after the kill, errors, and when the first post-kill confirmation came."""

    def __init__(self, messages: int) -> None:
        self.confirmed: set[int] = set()
        self.errors: list[str] = []
        self.kill_at = max(1, messages // 2)
        self.hold_at = max(self.kill_at, messages - messages // 4)  # the last quarter goes after the kill
        self.half = asyncio.Event()
        self.timing: dict[str, float] = {}
        self.pending: set[asyncio.Future[Any]] = set()

    def on_done(self, index: int, fut: asyncio.Future[Any]) -> None:
        """Done-callback of message `index`'s confirmation future."""
        self.pending.discard(fut)
        if fut.cancelled():
            self.errors.append(f"message {index}: cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            self.errors.append(f"message {index}: {exc}")
            return
        self.confirmed.add(index)
        # Only a message sent after the kill proves the new leader confirms: responses the
        # old leader sent just before dying may still be arriving.
        timing = self.timing
        if "kill" in timing and index >= timing["next_index"] and "first_confirm" not in timing:
            timing["first_confirm"] = time.monotonic()
        if len(self.confirmed) >= self.kill_at:
            self.half.set()


async def collect_deliveries(client: Any, destination: str, confirmed: set[int],
                             idle_timeout: float = IDLE_TIMEOUT) -> tuple[dict[int, int], list[int]]:
    """Drain the drill's queue (acking): per drill index how often it came, and the order of first
    deliveries. Stops once every confirmed index came and `SETTLE_SECONDS` pass without more, or
    after `idle_timeout` s without a message while some are still missing."""
    deliveries: dict[int, int] = {}
    order: list[int] = []
    sub = await client.subscribe(destination, "", kind="shared", ack="auto", credit=256)
    try:
        while True:
            remaining = confirmed - deliveries.keys()
            try:
                m = await sub.next(timeout=SETTLE_SECONDS if not remaining else idle_timeout)
            except TimeoutError:
                break
            index = index_of(bytes(m.body))
            if index is None:
                continue
            deliveries[index] = deliveries.get(index, 0) + 1
            if deliveries[index] == 1:
                order.append(index)
    finally:
        await sub.close()
    return deliveries, order


def delivery_counts(confirmed: set[int], deliveries: dict[int, int], order: list[int]) -> dict[str, Any]:
    """Against the confirmed indexes: received, lost, duplicated, out of order (first
    deliveries) and delivered-but-unconfirmed; a sample of the lost ones."""
    counts: dict[str, Any] = {
        "received": len(deliveries.keys() & confirmed),
        "lost": len(confirmed - deliveries.keys()),
        "duplicated": sum(n - 1 for n in deliveries.values()),
        "out_of_order": sum(1 for a, b in itertools.pairwise(order) if b < a),
        "unconfirmed_received": len(deliveries.keys() - confirmed),
    }
    if counts["lost"]:
        counts["lost_sample"] = sorted(confirmed - deliveries.keys())[:20]
    return counts


async def consume_and_count(client: Any, destination: str, confirmed: set[int]) -> dict[str, Any]:
    """Drain the drill's queue and count, against the confirmed indexes: received, lost,
    duplicated, out of order (first deliveries) and delivered-but-unconfirmed."""
    deliveries, order = await collect_deliveries(client, destination, confirmed)
    return delivery_counts(confirmed, deliveries, order)


def index_of(body: bytes) -> int | None:
    """The index a drill body carries, or None for a foreign message."""
    if body.startswith(b"drill-"):
        try:
            return int(body[6:])
        except ValueError:
            return None
    return None


async def failover_drill_local(messages: int, data_dir: Path | None = None,
                               progress: Progress | None = None) -> dict[str, Any]:
    """Run the local failover drill; returns the report (see the module docstring).

    The report holds confirmed, received, lost, duplicated, out_of_order, leaderless_seconds
    (kill until a new leader serves, as its Status says), publish_gap_seconds (kill until the
    first confirmation of a message sent after it), old_leader, new_leader and ok; on failure also
    problem and logs. The temporary cluster lives in a new directory under `data_dir` (default:
    the system temp dir); it is removed when the drill passes and kept, with its logs, when not.
    """
    from strongroom.client import Client

    say: Progress = progress or (lambda _line: None)
    if data_dir is not None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="strongroom-drill-", dir=data_dir))
    realm = parse_realm(DEFAULT_REALM_YAML, "<built-in default realm>")
    cluster_name = realm.clusters[0].name
    cluster = LocalCluster(base, detach=False)
    report: dict[str, Any] = {
        "messages": messages, "confirmed": 0, "received": 0, "lost": 0, "duplicated": 0,
        "out_of_order": 0, "leaderless_seconds": None, "publish_gap_seconds": None,
        "old_leader": None, "new_leader": None, "publish_errors": 0, "ok": False,
    }
    client: Any = None
    try:
        say(f"starting a local cluster in {base}")
        leaders = await cluster.start(realm, DEFAULT_REALM_YAML, "<built-in default realm>", progress=say)
        # Killing the leader of a cluster whose followers do not all replicate tests nothing but
        # the missing redundancy: require every member to hold the committed state first.
        lagging = await cluster.wait_until_synced(SYNC_TIMEOUT, say)
        if lagging:
            raise DrillAborted(
                f"not every member replicates before the kill: {'; '.join(lagging)}")
        say(f"leader is {leaders[cluster_name]}; publishing {messages} messages to {DRILL_DESTINATION}")
        client = Client(cluster.endpoints(), client_name="strongroom-drill")

        tracker = ConfirmTracker(messages)
        confirmed, errors, timing, half, pending = (tracker.confirmed, tracker.errors, tracker.timing,
                                                    tracker.half, tracker.pending)
        hold_at, on_done = tracker.hold_at, tracker.on_done
        old_leader: dict[str, str] = {}
        new_leader: dict[str, str] = {}

        async def watch_for_new_leader() -> None:
            try:
                leader = await wait_for_leader(cluster.endpoints(cluster_name), LEADER_TIMEOUT,
                                               exclude={old_leader["name"]}, interval=0.05)
            except NoLeader:
                return
            new_leader["name"] = leader.member
            timing["new_leader"] = time.monotonic()

        async def kill_leader(next_index: int) -> asyncio.Task[None]:
            name = await cluster.leader_name(cluster_name) or leaders[cluster_name]
            victim: ServiceProcess = cluster.member(cluster_name, name)
            say(f"{len(confirmed)} confirmed: SIGKILL leader {name} (pid {victim.pid})")
            victim.kill()
            timing["kill"] = time.monotonic()
            timing["next_index"] = next_index
            old_leader["name"] = name
            return asyncio.create_task(watch_for_new_leader())

        watcher: asyncio.Task[None] | None = None
        start = time.monotonic()
        pub = client.publisher(DRILL_DESTINATION, window=WINDOW)
        try:
            for i in range(messages):
                if errors:  # the publisher failed for good: nothing more would be confirmed
                    break
                if watcher is None and (half.is_set() or i >= hold_at):
                    await asyncio.wait_for(half.wait(), FLUSH_TIMEOUT)
                    watcher = await kill_leader(i)
                fut = await pub.send(body_for(i))
                pending.add(fut)
                fut.add_done_callback(lambda f, i=i: on_done(i, f))
            if watcher is None and not errors:
                await asyncio.wait_for(half.wait(), FLUSH_TIMEOUT)
                watcher = await kill_leader(messages)
            if pending:
                await asyncio.wait(set(pending), timeout=FLUSH_TIMEOUT)
            if pending:
                errors.append(f"{len(pending)} messages not confirmed within {FLUSH_TIMEOUT:.0f} s")
        finally:
            for f in list(pending):
                f.cancel()  # so close() does not wait for confirmations that will not come
            await pub.close()
        await asyncio.sleep(0)  # let the last done-callbacks run
        say(f"published {messages} messages in {time.monotonic() - start:.1f} s, "
            f"{len(confirmed)} confirmed, {len(errors)} errors")
        if watcher is not None:
            await asyncio.wait_for(watcher, LEADER_TIMEOUT + 5)
        if "new_leader" in timing:
            report["leaderless_seconds"] = round(timing["new_leader"] - timing["kill"], 3)
        if "first_confirm" in timing:
            report["publish_gap_seconds"] = round(timing["first_confirm"] - timing["kill"], 3)
        report["old_leader"] = old_leader.get("name")
        report["new_leader"] = new_leader.get("name")
        report["confirmed"] = len(confirmed)
        report["publish_errors"] = len(errors)
        if errors:
            report["first_error"] = errors[0]
        if report["new_leader"] is None:
            raise DrillAborted(
                f"no member became a serving leader within {LEADER_TIMEOUT:.0f} s after the kill of "
                f"{report['old_leader']}")
        say(f"new leader {report['new_leader']} after {report['leaderless_seconds']} s; consuming")

        report.update(await consume_and_count(client, DRILL_DESTINATION, confirmed))
        report["ok"] = (report["lost"] == 0 and report["duplicated"] == 0 and report["out_of_order"] == 0
                        and report["confirmed"] == messages and report["new_leader"] is not None)
        say(f"received {report['received']} of {report['confirmed']} confirmed: lost {report['lost']}, "
            f"duplicated {report['duplicated']}, out of order {report['out_of_order']}")
    except Exception as exc:  # noqa: BLE001 - a drill always reports, with the logs kept
        report["ok"] = False
        report["problem"] = f"{type(exc).__name__}: {exc}"
        expected = isinstance(exc, ClusterStartError | DrillAborted)
        say(f"drill failed: {report['problem']}" + ("" if expected else f"\n{traceback.format_exc()}"))
    finally:
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 10)
            except Exception:  # noqa: BLE001, S110 - tearing down; the processes go next anyway
                pass
        await asyncio.to_thread(cluster.stop, 5.0)
        if report["ok"]:
            shutil.rmtree(base, ignore_errors=True)
        else:
            report["logs"] = str(base / "logs")
    return report
