"""The faults ("nemesis"): each a loop of rounds that inject, hold, heal and let the cluster settle.

Every round is bounded in time (a few seconds), every injection and heal is written to the
history (`f="fault"`), and a fault that fences a member (a leader paused past its lease, cut
off from etcd or from its peers, or with etcd gone) also records a `fence` the checker uses:
that member must confirm nothing inside it. Faults the storage mode documents as lossy record
a `loss-window`. The `dr` fault loses the whole primary site and activates its standby site
(`chaos.drsite`); what the activation lost is read from the old primary's log after heal and
recorded as `lost-tail` events (`chaos.losttail`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from strongroom.chaos import netloss
from strongroom.chaos.cluster import ChaosCluster, ClusterSpec
from strongroom.chaos.context import Fault, FaultContext
from strongroom.chaos.drsite import DrCluster
from strongroom.chaos.filedamage import damage_files, judge, rot_file
from strongroom.chaos.history import INFO
from strongroom.chaos.losttail import lost_tail_events
from strongroom.chaos.netproxy import RESET, STALL

__all__ = ["FAULTS", "Fault", "FaultContext", "heal_everything"]

FILLER = ".chaos-disk-filler"


class KillLeader(Fault):
    """SIGKILL the leader, restart it a second later."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        ctx.cluster.kill(leader)
        ctx.note("SIGKILL leader", leader)
        elected = ctx.expect_new_leader(3 * ctx.ttl + 3, f"SIGKILL of leader {leader}")
        await asyncio.sleep(1.0)
        ctx.cluster.start_member(leader)
        ctx.note("restart", leader)
        await elected
        await asyncio.sleep(2.0)


class KillFollower(Fault):
    """SIGKILL a follower, restart it 1.5 s later."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        victim = ctx.rng.choice(ctx.followers(leader))
        ctx.cluster.kill(victim)
        ctx.note("SIGKILL follower", victim)
        await asyncio.sleep(1.5)
        ctx.cluster.start_member(victim)
        ctx.note("restart", victim)
        await asyncio.sleep(2.5)


def _victim(ctx: FaultContext, leader: str) -> str:
    """The member whose files are damaged this round: a follower, every third round the leader."""
    return leader if ctx.round % 3 == 0 else ctx.rng.choice(ctx.followers(leader))


class CorruptMember(Fault):
    """SIGKILL a member (a follower, every third round the leader), damage one of its RocksDB
    files (`chaos.filedamage`), restart it. It must find the damage at start, move its store
    aside and rebuild from its peers; nothing confirmed may be lost (the others hold it)."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        victim = _victim(ctx, leader)
        cluster = ctx.cluster
        cluster.kill(victim)
        done = damage_files(victim, cluster.data_dir(victim), ctx.rng)
        ctx.note(f"SIGKILL and damage: {done.how if done else 'no file to damage yet'}", victim)
        elected = ctx.expect_new_leader(3 * ctx.ttl + 3, f"SIGKILL of leader {victim}") if victim == leader else None
        cluster.start_member(victim)
        ctx.note("restart on the damaged files", victim)
        deadline = time.monotonic() + 20
        while await cluster.status(victim) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # answering: its store is open
        for problem in judge([done] if done else [], {victim: cluster.data_dir(victim)}):
            ctx.history.record("nemesis", INFO, "violation", detail=problem)
        if elected is not None:
            await elected
        await asyncio.sleep(2.0)


class RotMember(Fault):
    """Flip a bit in a table file of a running member (a follower, every third round the
    leader) without stopping it. Its scrub (every `spec.scrub_seconds`) must find the damage, the
    member start again in place, move its store aside and rebuild from its peers; nothing
    confirmed may be lost. Damage not found within two scrubs and a restart is a violation."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        victim = _victim(ctx, leader)
        cluster = ctx.cluster
        done = rot_file(victim, cluster.data_dir(victim), ctx.rng)
        ctx.note(f"damage while running: {done.how if done else 'no table file yet'}", victim)
        if done is None:
            await asyncio.sleep(1.0)
            return
        within = 2 * ctx.cluster.spec.scrub_seconds + 10
        elected = ctx.expect_new_leader(within + 3 * ctx.ttl, f"damage to leader {victim}'s files") \
            if victim == leader else None
        data_dirs = {victim: cluster.data_dir(victim)}
        deadline = time.monotonic() + within
        while judge([done], data_dirs) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        for problem in judge([done], data_dirs):
            ctx.history.record("nemesis", INFO, "violation", detail=problem)
        if not judge([done], data_dirs):
            ctx.note("found by its scrub: store moved aside, rebuilding in place", victim)
        if elected is not None:
            await elected
        await asyncio.sleep(2.0)


class KillMajority(Fault):
    """SIGKILL the leader and a follower, restart both 2.5 s later."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        victims = [leader, ctx.rng.choice(ctx.followers(leader))]
        for v in victims:
            ctx.cluster.kill(v)
        ctx.note(f"SIGKILL majority {victims}")
        await asyncio.sleep(2.5)
        for v in victims:
            ctx.cluster.start_member(v)
        ctx.note(f"restart {victims}")
        await ctx.expect_new_leader(3 * ctx.ttl + 5, f"restart of {victims}")
        await asyncio.sleep(2.0)


class PauseLeader(Fault):
    """SIGSTOP the leader past its lease, probe it, SIGCONT."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        hold = ctx.ttl + 3.0
        ctx.cluster.pause(leader)
        t0 = time.monotonic()
        ctx.note(f"SIGSTOP leader for {hold:.1f}s (lease TTL {ctx.ttl:.0f}s)", leader)
        elected = ctx.expect_new_leader(hold, f"SIGSTOP of leader {leader}")
        # Requests queued at the paused leader must all be refused once it runs again.
        ctx.workload.probe(leader, ctx.cluster.direct(leader), until=t0 + hold - 0.2, interval=0.1)
        await asyncio.sleep(hold)
        await elected
        ctx.cluster.resume(leader)
        t1 = time.monotonic()
        ctx.note("SIGCONT", leader)
        ctx.fence(leader, "invoked", t0, t1, "paused past its lease")
        await asyncio.sleep(3.0)


class ClockJump(Fault):
    """Step the real-time clock of the leader (odd rounds) or of every member (even rounds)
    minutes ahead or behind, hold, step it back; the monotonic clock runs on."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        if leader is None:
            return
        jump = ctx.rng.choice([-1, 1]) * ctx.rng.uniform(60, 600)
        victims = [leader] if ctx.round % 2 == 1 else list(cluster.names)
        for name in victims:
            cluster.step_clock(name, jump)
        ctx.note(f"real-time clock of {', '.join(victims)} stepped {jump:+.0f}s", leader)
        await asyncio.sleep(ctx.ttl + 2.0)
        for name in victims:
            cluster.step_clock(name, 0.0)
        ctx.note("clocks stepped back", leader)
        await asyncio.sleep(1.0)


class PacketLoss(Fault):
    """Drop 2-15% and duplicate 0-5% of the packets on the loopback (every connection: clients,
    members, the replication link, etcd) for TTL+3s, then heal."""

    async def round(self, ctx: FaultContext) -> None:
        loss, duplicate = ctx.rng.uniform(0.02, 0.15), ctx.rng.uniform(0.0, 0.05)
        netloss.impair(loss, duplicate)
        ctx.note(f"packets on the loopback: {loss:.0%} dropped, {duplicate:.0%} duplicated")
        await asyncio.sleep(ctx.ttl + 3.0)
        netloss.clear()
        ctx.note("packets healed")
        await asyncio.sleep(2.0)


class PartitionEtcd(Fault):
    """Cut one member (mostly the leader) off from etcd."""

    async def round(self, ctx: FaultContext) -> None:
        leader = await ctx.leader()
        if leader is None:
            return
        target = leader if ctx.rng.random() < 0.7 else ctx.rng.choice(ctx.followers(leader))
        mode = ctx.rng.choice([RESET, STALL])
        hold = ctx.ttl + 3.0
        proxy = ctx.cluster.etcd_proxy[target]
        proxy.cut(mode)
        t0 = time.monotonic()
        role = "leader" if target == leader else "follower"
        ctx.note(f"cut {role} from etcd ({mode}) for {hold:.1f}s", target)
        elected = None
        if target == leader:
            ctx.workload.probe(target, ctx.cluster.direct(target), until=t0 + hold - 0.2, interval=0.1)
            elected = ctx.expect_new_leader(hold, f"cutting leader {target} from etcd")
        await asyncio.sleep(hold)
        if elected is not None:
            await elected
        proxy.heal()
        t1 = time.monotonic()
        ctx.note("etcd link healed", target)
        if target == leader:
            ctx.fence(target, "completed", t0 + ctx.ttl, t1, "cut off from etcd longer than its lease")
        await asyncio.sleep(2.5)


class PartitionMembers(Fault):
    """Cut links between members: isolate the leader or a follower, a bridge, or delay."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        if leader is None:
            return
        followers = ctx.followers(leader)
        shapes = ["isolate-leader", "isolate-follower", "bridge", "delay"]
        if ctx.first_shape < 0:
            ctx.first_shape = ctx.rng.randrange(len(shapes))
        shape = shapes[(ctx.first_shape + ctx.round - 1) % len(shapes)]
        mode = ctx.rng.choice([RESET, STALL])
        hold = ctx.ttl + 3.0
        t0 = time.monotonic()
        if shape == "delay":
            for proxy in cluster.inbound_proxies():
                proxy.set_delay(0.2)
            ctx.note(f"delay every member link by 200 ms for {hold:.1f}s")
            await asyncio.sleep(hold)
            for proxy in cluster.inbound_proxies():
                proxy.set_delay(0.0)
            ctx.note("delay removed")
            await asyncio.sleep(2.0)
            return
        if shape == "bridge":
            # The leader and one follower cannot talk; the other follower talks to both.
            pairs = [(leader, followers[0])]
            detail = f"cut {leader} <-> {followers[0]} ({mode}); {followers[1]} bridges"
            isolated = None
        else:
            isolated = leader if shape == "isolate-leader" else ctx.rng.choice(followers)
            pairs = [(isolated, other) for other in cluster.names if other != isolated]
            detail = f"isolate {isolated} from its peers ({mode}); clients still reach it"
        for a, b in pairs:
            for proxy in cluster.inbound(a):
                proxy.block({b}, mode)
            for proxy in cluster.inbound(b):
                proxy.block({a}, mode)
        ctx.note(f"{detail} for {hold:.1f}s", isolated)
        elected = None
        if isolated == leader:
            ctx.workload.probe(leader, cluster.direct(leader), until=t0 + hold - 0.2, interval=0.1)
            elected = ctx.expect_new_leader(hold, f"isolating leader {leader} from its peers")
        await asyncio.sleep(hold)
        if elected is not None:
            await elected
        for proxy in cluster.inbound_proxies():
            proxy.heal()
        t1 = time.monotonic()
        ctx.note("partition healed")
        if isolated == leader:
            # It can reach no majority: nothing it answers after the cut (a second of grace for
            # answers already on their way) may be a confirmation.
            ctx.fence(leader, "completed", t0 + 1.0, t1, "isolated from every peer")
        await asyncio.sleep(2.5)


class EtcdDown(Fault):
    """Make etcd unavailable (SIGSTOP, or stop and restart) longer than the lease TTL."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        hold = ctx.ttl + 2.0
        how = "SIGSTOP" if ctx.round % 2 == 1 else "stop"
        if how == "SIGSTOP":
            cluster.pause_etcd()
        else:
            cluster.stop_etcd()
        t0 = time.monotonic()
        ctx.note(f"etcd unavailable ({how}) for {hold:.1f}s")
        if leader is not None:
            ctx.workload.probe(leader, cluster.direct(leader), until=t0 + hold - 0.2, interval=0.1)
        await asyncio.sleep(hold)
        if how == "SIGSTOP":
            cluster.resume_etcd()
        else:
            cluster.restart_etcd()
        t1 = time.monotonic()
        ctx.note("etcd back")
        if leader is not None:
            ctx.fence(leader, "completed", t0 + ctx.ttl, t1, "etcd unavailable longer than the lease")
        await ctx.expect_new_leader(3 * ctx.ttl + 3, "etcd came back")


class EtcdDataLoss(Fault):
    """etcd stopped, its data directory removed, started again on the same port: its revisions
    start from 1 again, below every epoch the members promised; the realm, leader keys,
    registrations and stored-state keys are gone."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        cluster.stop_etcd()
        shutil.rmtree(cluster.root / "etcd" / "etcd", ignore_errors=True)
        ctx.note(f"etcd stopped and its data removed (leader {leader}, epoch {ctx.leader_epoch})")
        cluster.restart_etcd()
        ctx.note("etcd back, empty")
        # The leader's lease went with etcd's data: it steps down at its next renewal. A new
        # leader (it may be the same member) must serve with an epoch above the old one.
        await ctx.expect_new_leader(3 * ctx.ttl + 3, "etcd lost its data")
        await asyncio.sleep(2.0)


class LoseUnsynced(Fault):
    """A machine crash: SIGKILL, then drop every byte fsync had not made durable."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        if leader is None:
            return
        lossy = cluster.spec.storage == "disk-async"
        victim = leader if ctx.round % 2 == 1 else ctx.rng.choice(ctx.followers(leader))
        role = "leader" if victim == leader else "follower"
        started = cluster.started_at.get(victim, 0.0)
        image = cluster.crash(victim)
        t_crash = time.monotonic()
        ctx.note(f"machine crash of {role}: {image.describe()}", victim)
        elected = ctx.expect_new_leader(3 * ctx.ttl + 3, f"crash of leader {victim}") if role == "leader" else None
        if lossy:
            # disk-async: what this member stored after its last WAL fsync may be gone; so may
            # messages whose commit counted on it (README, Storage).
            ctx.history.record("nemesis", INFO, "loss-window", member=victim,
                               start=image.last_wal_sync or started, end=t_crash,
                               detail=f"disk-async machine crash of {victim}")
        await asyncio.sleep(1.0)
        cluster.start_member(victim)
        ctx.note("restart on the crash image", victim)
        if lossy and role == "follower" and ctx.round % 4 == 2:
            # The case the documentation warns about: the crashed member is needed for the next
            # recovery majority before it has caught up.
            await asyncio.sleep(0.5)
            cluster.kill(leader)
            ctx.note("SIGKILL leader right after the crashed follower restarted", leader)
            await asyncio.sleep(1.0)
            cluster.start_member(leader)
            ctx.note("restart", leader)
        if elected is not None:
            await elected
        await asyncio.sleep(2.0)


@dataclass
class DrSiteLoss(Fault):
    """Lose the whole primary site mid-load, activate the standby site, carry on there."""

    lag: float = 1.0
    """Seconds the DR service is stopped (SIGSTOP) before the loss, so the standby lacks a tail."""

    async def run(self, ctx: FaultContext, until: float) -> None:
        cluster = ctx.cluster
        assert isinstance(cluster, DrCluster)
        standby = cluster.standby
        ctx.round = 1
        # About two fifths of the time at the primary (the DR service keeping up), the rest at
        # the activated site.
        await asyncio.sleep(max(1.0, (until - time.monotonic()) * 0.4 - self.lag))
        standby.pause_dr()
        ctx.note(f"DR service stopped (SIGSTOP) for {self.lag:.1f}s: the standby falls behind")
        await asyncio.sleep(self.lag)
        cluster.lose_site()
        t_lost = time.monotonic()
        ctx.note(f"primary site lost: SIGKILL of {', '.join(cluster.names)} and of its etcd")
        standby.resume_dr()
        answer = await standby.activate()
        cluster.activation = answer
        ctx.note(f"activated {time.monotonic() - t_lost:.1f}s after the loss: {answer.summary}", answer.leader)
        if not answer.leader:
            ctx.history.record("nemesis", INFO, "violation", detail="the activated site elected no serving leader "
                                                                     "within 60s")
        ctx.workload.repoint(standby.endpoints())
        ctx.note(f"clients pointed at the activated site: {', '.join(standby.endpoints())}")
        await asyncio.sleep(max(3.0, until - time.monotonic()))

    async def after_heal(self, ctx: FaultContext) -> list[str]:
        """The old site, back on its disks (`heal_everything`), is fenced and accepts no write;
        what the activation lost is read from its log."""
        cluster = ctx.cluster
        assert isinstance(cluster, DrCluster)
        t_heal = time.monotonic()
        ok, view = await cluster.fenced(timeout=60)
        ctx.note(f"old primary site after its restart: {view}")
        errors = [] if ok else [f"the old primary site was not fenced within 60s of its restart: {view}"]
        # Publishes straight to each old member: none may be confirmed (checker: fence).
        probing = time.monotonic() + 2.0
        probes = [ctx.workload.probe(n, cluster.direct(n), until=probing, interval=0.2, wait=3.0)
                  for n in cluster.names]
        await asyncio.gather(*probes, return_exceptions=True)
        for n in cluster.names:
            ctx.fence(n, "invoked", t_heal, time.monotonic(), "old primary site restarted after the activation")
        try:
            tail, where = await cluster.read_lost_tail()
        except Exception as exc:  # noqa: BLE001 - the scenario fails with the reason
            return [*errors, f"the lost tail could not be read from the old primary: {exc}"]
        lost_tail_events(ctx.history, tail)
        ctx.workload.excuse(tail.published, tail.uows_committed)
        ctx.note(f"lost tail: {tail.describe()}; {where}")
        return errors


def fill_disk(path: Path) -> int:
    """Fill the filesystem holding `path` up to the last byte; returns the bytes taken."""
    fd = os.open(path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    taken = 0
    try:
        for size in (1 << 20, 1 << 16, 4096, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    n = os.write(fd, chunk)
                except OSError:
                    break
                taken += n
                if n < size:
                    break
    finally:
        os.close(fd)
    return taken


def free_disk(path: Path) -> None:
    """Remove the filler of `fill_disk`."""
    try:
        (path / FILLER).unlink()
    except FileNotFoundError:
        pass


@dataclass
class DiskFull(Fault):
    """Fill a member's tmpfs data dir, hold, free it."""

    victims: str = "both"
    """leader, follower, or both (alternating, the leader first)."""

    async def round(self, ctx: FaultContext) -> None:
        cluster = ctx.cluster
        leader = await ctx.leader()
        if leader is None:
            return
        on_leader = self.victims == "leader" or (self.victims == "both" and ctx.round % 2 == 1)
        victim = leader if on_leader else ctx.rng.choice(ctx.followers(leader))
        role = "leader" if victim == leader else "follower"
        taken = await asyncio.get_running_loop().run_in_executor(None, fill_disk, cluster.data_dir(victim))
        ctx.note(f"disk of {role} full ({taken >> 20} MiB filler)", victim)
        # The full disk is noticed at the leader's next write: the workload writes all the time.
        hold = ctx.ttl + 3.0
        elected = ctx.expect_new_leader(hold, f"the disk of leader {victim} filled up") if on_leader else None
        await asyncio.sleep(hold)
        if elected is not None:
            await elected
        free_disk(cluster.data_dir(victim))
        ctx.note("disk space back", victim)
        # The member should recover by itself; if it does not within a few seconds (RocksDB
        # may stay read-only after a failed write), an operator restarts it.
        deadline = time.monotonic() + 5.0
        view = ""
        while time.monotonic() < deadline:
            healthy, view = await _caught_up(cluster, victim)
            if healthy:
                ctx.note(f"recovered by itself: {view}", victim)
                break
            await asyncio.sleep(0.3)
        else:
            cluster.kill(victim)
            cluster.start_member(victim)
            ctx.note(f"not recovered 5s after space came back ({view}): restarted", victim)
        await asyncio.sleep(2.0)


async def _caught_up(cluster: ChaosCluster, member: str) -> tuple[bool, str]:
    """Whether the serving leader sees `member` reachable and close behind (or is `member`)."""
    found = await cluster.current_leader()
    if found is None:
        return False, "no leader"
    st = await cluster.status(found.member)
    if st is None:
        return False, "leader does not answer"
    if found.member == member:
        return True, f"{member} leads at commit {st.commit_index}"
    for m in st.members:
        if m.name == member:
            ok = m.reachable and m.match_index >= st.commit_index - 50
            return ok, f"leader {found.member} commit {st.commit_index}, {member} reachable={m.reachable} match {m.match_index}"
    return False, f"{member} not in the leader's view"


async def heal_everything(ctx: FaultContext) -> None:
    """End of the fault phase: every process running, every link healed, disks freed."""
    cluster = ctx.cluster
    if cluster.network is not None:
        cluster.network.heal_all()
    if cluster.etcd_paused:
        cluster.resume_etcd()
    if not cluster.etcd_running():
        cluster.restart_etcd()
    if cluster.spec.packet_faults:
        netloss.clear()
    for name in cluster.names:
        if cluster.clock_shim is not None:
            cluster.step_clock(name, 0.0)
        if cluster.spec.tmpfs_mb:
            free_disk(cluster.data_dir(name))
        if name in cluster.paused:
            cluster.resume(name)
        if not cluster.alive(name):
            cluster.start_member(name)
    ctx.note("healed: all members running, links and etcd back")


FAULTS: dict[str, Fault] = {f.name: f for f in [
    KillLeader("kill-leader", "SIGKILL the leader, restart it 1s later; a newer leader within 3*TTL+3s"),
    KillFollower("kill-follower", "SIGKILL a follower, restart it 1.5s later"),
    CorruptMember("corrupt-member", "SIGKILL a follower (every third round the leader), flip a bit in its newest "
                  "WAL or SST or cut an SST short, restart it: it must find the damage, move its store "
                  "aside and rebuild from its peers"),
    RotMember("rot-member", "flip a bit in a table file of a running follower (every third round the leader): its "
              "scrub (every 1s here) must find it, and the member restart in place and rebuild from its peers",
              ClusterSpec(scrub_seconds=1.0)),
    KillMajority("kill-majority", "SIGKILL the leader and a follower, restart both 2.5s later"),
    PauseLeader("pause-leader", "SIGSTOP the leader for TTL+3s, then SIGCONT; what it was sent while "
                "paused must not be confirmed"),
    PartitionEtcd("partition-etcd", "cut a member (mostly the leader) from etcd for TTL+3s (reset or stall)",
                  ClusterSpec(proxy_etcd=True)),
    PartitionMembers("partition-members", "isolate the leader / isolate a follower / bridge / 200ms delay, "
                     "TTL+3s each (reset or stall)", ClusterSpec(proxy_members=True)),
    ClockJump("clock-jump", "the leader's (odd rounds) or every member's (even rounds) real-time clock stepped "
              "1-10 min ahead or behind for TTL+2s, then back (LD_PRELOAD shim; the monotonic clock runs on)",
              ClusterSpec(clock_shift=True)),
    PacketLoss("packet-loss", "2-15% of the loopback's packets dropped and 0-5% duplicated for TTL+3s (iptables in a "
               "network namespace of its own: tests/chaos/test_packet_loss.py runs it under unshare -n)",
               ClusterSpec(packet_faults=True)),
    EtcdDown("etcd-down", "etcd SIGSTOPped or stopped for TTL+2s, then back on the same port and data"),
    EtcdDataLoss("etcd-data-loss", "etcd stopped, its data dir removed, back on the same port empty; a leader "
                 "of an epoch above the old one within 3*TTL+3s"),
    LoseUnsynced("lose-unsynced-sync", "machine crash of a member: every byte not fsynced dropped (disk-sync)",
                 ClusterSpec(fsync_journal=True, compact_after_entries=300)),
    LoseUnsynced("lose-unsynced-async", "machine crash of a member: every byte not fsynced dropped "
                 "(disk-async; loss allowed only as documented)",
                 ClusterSpec(storage="disk-async", fsync_journal=True, compact_after_entries=300)),
    DiskFull("disk-full", "the leader's, then a follower's tmpfs data dir full for TTL+3s, then freed",
             ClusterSpec(tmpfs_mb=256)),
    DiskFull("disk-full-follower", "a follower's tmpfs data dir full for TTL+3s, then freed",
             ClusterSpec(tmpfs_mb=256), victims="follower"),
    DrSiteLoss("dr", "the DR service stopped 1s, then the whole primary site lost (SIGKILL of every member and "
               "of its etcd); the standby site activated and the clients pointed at it; the old site restarted "
               "fenced. Loss allowed only in the lost tail read from the old primary's log",
               ClusterSpec(standby=True, compact_after_entries=20000)),
]}
