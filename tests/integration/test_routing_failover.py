"""Routing through a member or router failover: London publishes continuously (confirmed
publishes, each message's number in its body), Rio has a durable, and the leader of one side
(or Rio's active router) is killed with SIGKILL in the middle. Afterwards every message London
confirmed is at Rio exactly once and in London's order; one London did not confirm may be there
once or not at all. London's router, which lives through every one of these faults, counts as
forwarded exactly what Rio's marks say Rio holds of London's, whatever it had to send again.

The history (publishes at London, deliveries at Rio) is judged by the chaos history checker
(`strongroom.chaos.checker`: nothing confirmed lost, no phantom, per-origin order on the
durable, no duplicate beyond the redelivery rules), and stored-once by the store sequences:
each message has exactly one sequence in Rio's store, however often it was delivered.

The cluster whose leader dies has three members on `disk-async`: a kill -9 is a process crash,
which disk-async survives without loss (the page cache is the kernel's, not the process's), as
disk-sync does; what is under test is the routing across the failover, not fsync, and on a
2-core machine the fsyncs of disk-sync would only slow the run. The other cluster has one
memory member.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from routing_sites import Sites, sites, zoned_realm

from strongroom.chaos.checker import check
from strongroom.chaos.history import INFO, INVOKE, OK, History
from strongroom.chaos.operations import outcome_of, pace
from strongroom.client import PublishResult, Subscription

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ZONE = {"z": ["london", "rio"]}
FAILOVER = ("disk-async", 3)
DEST = "wide.a"
RATE = 400.0
"""Messages a second London publishes."""


class Forwarding:
    """London's publisher and Rio's consumer, recording a chaos history: publishes with the
    origin cluster as producer and the message's number as sequence, deliveries likewise (from
    the delivered message's origin and body)."""

    def __init__(self, s: Sites) -> None:
        self.s = s
        self.history = History()
        self.stop = asyncio.Event()
        self.published = 0
        self.delivered = 0
        self.london_seqs: dict[int, int] = {}  # number -> London store sequence, when confirmed
        self.rio_seqs: dict[int, set[int]] = defaultdict(set)  # number -> Rio store sequences
        self.origin_seqs: dict[int, int] = {}  # number -> origin sequence as Rio got it

    async def open_durable(self) -> Subscription:
        sub = await self.s.client("rio").subscribe(DEST, "billing")
        self.history.record("rio", OK, "durable", dest=DEST, durable="billing", kind="standard", ordered=True,
                            sub=sub.subscription_id)
        return sub

    def _published(self, n: int, fut: asyncio.Future[PublishResult]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            kind, text = outcome_of(exc) if exc is not None else (INFO, "cancelled")
            self.history.record("london", kind, "publish", producer="london", seq=n, dest=DEST, error=text)
            return
        result = fut.result()
        self.london_seqs[n] = result.message_seq
        self.history.record("london", OK, "publish", producer="london", seq=n, dest=DEST, mseq=result.message_seq)

    async def publish(self) -> None:
        """Publish at RATE until `stop`, then wait for every outcome."""
        pub = self.s.client("london").publisher(DEST, window=256, confirm=True)
        started = time.monotonic()
        try:
            while not self.stop.is_set():
                n = self.published + 1
                body = f"{n:06d}"
                self.history.record("london", INVOKE, "publish", producer="london", seq=n, dest=DEST, body=body,
                                    via="stream")
                fut = await pub.send(body.encode())
                self.published = n
                fut.add_done_callback(functools.partial(self._published, n))
                await pace(started, n, RATE)
        finally:
            await pub.close()

    async def consume(self, sub: Subscription) -> None:
        """Record and acknowledge every delivery until cancelled."""
        while True:
            m = await sub.next()
            n = int(m.body)
            origin = m.origin.cluster if m.origin is not None else ""
            self.history.record("rio", OK, "deliver", dest=DEST, durable="billing", producer=origin, seq=n,
                                body=m.body.decode(), mseq=m.seq, count=m.delivery_count, sub=sub.subscription_id)
            self.rio_seqs[n].add(m.seq)
            if m.origin is not None:
                self.origin_seqs[n] = m.origin.sequence
            self.delivered += 1
            await m.ack()

    async def until(self, what: Callable[[], bool], timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, why
            await asyncio.sleep(0.1)


async def forward_through(tmp_path: Path, shapes: dict[str, tuple[str, int]],
                          fault: Callable[[Sites], Awaitable[str]]) -> None:
    """Run London's publisher and Rio's consumer, apply `fault` in the middle, and check."""
    async with sites(tmp_path, zoned_realm(["london", "rio"], ZONE, shapes)) as s:
        run = Forwarding(s)
        sub = await run.open_durable()
        await s.wait_route("london", "rio", DEST)
        consuming = asyncio.create_task(run.consume(sub))
        publishing = asyncio.create_task(run.publish())
        try:
            # Forwarding flows (Rio got a second's worth), then the fault in the middle of it.
            await run.until(lambda: run.delivered >= RATE, 30, "nothing reached rio before the fault")
            before = run.published
            killed = await fault(s)
            # Go on publishing until the cluster served again for a while, then stop.
            await run.until(lambda: len(run.london_seqs) > before + 2 * RATE, 40,
                            f"london confirmed nothing new after {killed} was killed")
            run.stop.set()
            await asyncio.wait_for(publishing, 30)
            confirmed = set(run.london_seqs)
            await run.until(lambda: confirmed <= set(run.rio_seqs), 40,
                            f"rio lacks {len(confirmed - set(run.rio_seqs))} confirmed messages")
            await asyncio.sleep(1.5)  # anything more (a duplicate) would come now
        finally:
            run.stop.set()
            consuming.cancel()
            await asyncio.gather(consuming, publishing, return_exceptions=True)
        result = check(run.history.events)
        assert result.ok and not result.duplicated, result.summary()
        assert result.confirmed > 3 * RATE and result.confirmed == len(confirmed)
        # Stored once: one sequence in Rio's store per message, and each forwarded message
        # carries London's store sequence as its origin sequence.
        twice = {n: seqs for n, seqs in run.rio_seqs.items() if len(seqs) != 1}
        assert not twice, f"stored more than once at rio: {sorted(twice.items())[:5]}"
        assert all(run.origin_seqs.get(n) == seq for n, seq in run.london_seqs.items())
        # Rio's mark is the highest London sequence it stored; London's route has nothing left.
        marks = {(m.cluster, m.destination): m.sequence for m in await s.client("rio").origin_marks("wide")}
        assert marks == {("london", DEST): max(run.origin_seqs.values())}
        deadline = time.monotonic() + 10
        while True:
            peer = next(p for p in (await s.status("london")).peers if p.cluster == "rio")
            if peer.waiting_messages == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert peer.waiting_messages == 0
        # The counters add up against Rio's mark: London's messages are London's store sequences
        # 1, 2, ... (nothing else is stored there), so Rio holds `mark` of them, each once, and
        # London's router forwarded each once, however often it sent it; none was stored there
        # by anyone else's sending (London's router never restarted).
        mark = marks[("london", DEST)]
        assert sorted(run.origin_seqs.values()) == list(range(1, mark + 1))
        assert (peer.forwarded_messages, peer.duplicate_messages) == (mark, 0), (peer.forwarded_messages,
                                                                                 peer.resent_messages,
                                                                                 peer.duplicate_messages)
        # Rio's router, when it lived through the fault, stored each of them once too (what its
        # publisher sent again through a failover of Rio's leader, answered as a duplicate of its
        # own first attempt, included).
        if "router" not in killed:
            rio = next(p for p in (await s.status("rio")).peers if p.cluster == "london")
            assert rio.received_messages == mark
        # Neither router ever put a message on the wire with an impossible origin (a re-sent one
        # naming a `previous` above its own sequence: refused, the route broken and resumed).
        for router in s.local.routers.values():
            assert "INVALID_ORIGIN" not in Path(router.log).read_text(errors="replace"), router.log


async def kill_leader(cluster: str, s: Sites) -> str:
    """SIGKILL the cluster's leader and wait until another member leads."""
    killed = await s.kill_leader(cluster)
    await s.wait_leader(cluster, exclude=[killed])
    return f"{cluster}/{killed}"


async def test_kill_9_of_the_local_leader_under_forwarding(tmp_path: Path) -> None:
    """London's leader dies: the publisher re-sends what it had unconfirmed to the new leader,
    and London's router reads its route durable there and resumes from Rio's marks."""
    await forward_through(tmp_path, {"london": FAILOVER}, functools.partial(kill_leader, "london"))


async def test_kill_9_of_the_remote_leader_under_forwarding(tmp_path: Path) -> None:
    """Rio's leader dies: Rio's router stores what London forwards on the new leader, and
    London's route, whose batches fail meanwhile, re-sends from Rio's marks."""
    await forward_through(tmp_path, {"rio": FAILOVER}, functools.partial(kill_leader, "rio"))


async def kill_router(cluster: str, s: Sites) -> str:
    """Start a standby router replica of `cluster`, SIGKILL the active one in the middle of the
    stream and wait until the standby serves as the active router."""
    standby = s.start_replica(cluster, "r2")
    deadline = time.monotonic() + 20
    while "READY" not in Path(standby.log).read_text(errors="replace"):
        assert standby.alive() and time.monotonic() < deadline, standby.log_tail()
        await asyncio.sleep(0.1)
    active = s.local.routers[cluster]
    active.kill()
    while True:
        try:
            status = await s.status(cluster)
            if status.active and status.replica == "r2":
                return f"{cluster}/router"
        except Exception:  # noqa: BLE001 - r2 binds the address once elected
            pass
        assert time.monotonic() < deadline, standby.log_tail()
        await asyncio.sleep(0.2)


async def test_kill_9_of_the_remote_router_under_forwarding(tmp_path: Path) -> None:
    """Rio's active router dies with batches on the wire, some stored at Rio and never answered:
    Rio's standby takes over, London's route re-sends from Rio's marks, and London's counters
    count each message stored at Rio once (the ones the dead router stored included)."""
    await forward_through(tmp_path, {}, functools.partial(kill_router, "rio"))
