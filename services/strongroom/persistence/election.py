"""Leader election through an etcd lease, with the epoch as fencing token.

A member campaigns by creating `/strongroom/clusters/<c>/leader` bound to its lease if the key
does not exist (a router replica the same way on `/strongroom/clusters/<c>/router`: `key`, and
no member registration, `register=False`). The leader's epoch is the key's create_revision under
the site's DR generation (`epoch_of`: `generation << 40 | create_revision`), strictly increasing
from leader to leader; the key's value names the generation, so every member reads a leader's
epoch the same way. The lease is kept alive every TTL/3; a leader that has not renewed it within
TTL minus a safety margin is told to step down at once, before etcd can hand the key to anyone
else.

etcd going back: restarted without its data (an operator's error, a lost volume), etcd issues
revisions from 1 again, so a new leader key can carry an epoch that members promised already.
The members' promises (on their disks) fence such a leader: a member never leads with an epoch
at or below one it promised, and a follower refuses an epoch promised to another member. To go
on, the member elected with such an epoch raises the cluster's *epoch base*
(`keys.epoch_base_key`) to its promise's revision and campaigns again: every leader key's value
names the base it was created under, and its epoch is `generation << 40 | base + create_revision`,
above every promise the member knew of (a member that promised more refuses, the candidate
learns that promise and raises the base again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strongroom.aio import cancel_and_wait
from strongroom.dr.record import GENERATION_SHIFT, epoch_of, generation_of
from strongroom.etcd import EtcdClient, EtcdUnavailable, KeyValue
from strongroom.keys import epoch_base_key, leader_key, member_key
from strongroom.persistence.log import LOG_FORMAT
from strongroom.persistence.membership import MemberRecord

__all__ = ["Election", "LeaderInfo", "epoch_base", "leader_epoch"]

log = logging.getLogger("strongroom.election")

# A member sitting out elections looks for a new leader this often while there is none.
PAUSED_POLL_SECONDS = 0.5
# A member that cannot lead above its promise (the site's DR record went with etcd's data)
# sits out elections this long before it looks again.
WENT_BACK_PAUSE_SECONDS = 5.0
# A member that is not a voter (being added, or removed) looks again this often whether it is.
NOT_VOTER_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads, as the leader key says."""

    member: str
    address: str
    epoch: int


def leader_epoch(kv: KeyValue) -> int:
    """The epoch of the leader holding key `kv`: its create revision plus the epoch base its
    value names, under the generation its value names (0 when the value names none)."""
    try:
        data = json.loads(kv.value)
        generation, base = int(data.get("generation", 0)), int(data.get("base", 0))
    except (ValueError, AttributeError, TypeError):
        generation, base = 0, 0
    return epoch_of(generation, base + kv.create_revision)


async def epoch_base(etcd: EtcdClient, cluster: str) -> tuple[int, int]:
    """The cluster's epoch base (0 while there is none) and its key's mod revision (0: absent)."""
    kv = await etcd.get(epoch_base_key(cluster))
    if kv is None:
        return 0, 0
    try:
        return int(kv.value), kv.mod_revision
    except ValueError:
        return 0, kv.mod_revision


class Election:
    """Campaigns for leadership and reports changes through callbacks."""

    def __init__(self, etcd: EtcdClient, cluster: str, member: str, address: str, ttl: int,
                 on_elected: Callable[[int, float], Awaitable[None]],
                 on_deposed: Callable[[str], Awaitable[None]],
                 on_leader: Callable[[LeaderInfo | None], None], link_address: str = "",
                 key: str | None = None, register: bool = True,
                 promised: Callable[[], int] = lambda: 0,
                 on_registered: Callable[[], Awaitable[None]] | None = None,
                 may_lead: Callable[[], bool] = lambda: True) -> None:
        self.etcd = etcd
        # The key campaigned for: the cluster's leader key unless told (a router's key).
        self.key = key or leader_key(cluster)
        # Register the member's addresses under its lease (members do; a router does not).
        self.register = register
        self.cluster = cluster
        self.member = member
        self.address = address
        # Where the leader sends appends to this member (its replication link), if it has one.
        self.link_address = link_address
        self.ttl = ttl
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.on_leader = on_leader
        # The highest epoch this member promised (its disk's): it never leads at or below it.
        self.promised = promised
        # After each registration under a new lease (a member re-asserts what etcd must hold).
        self.on_registered = on_registered
        # Whether this member may lead now (a member that is not one of its cluster's voters
        # does not campaign: `persistence/configuration.py`).
        self.may_lead = may_lead
        self.lease = 0
        self.epoch = 0
        self.generation = 0
        """The site's DR generation: the high bits of the epochs this member campaigns for (the
        node sets it from the site's DR record before campaigning and whenever it changes)."""
        self.is_leader = False
        # Monotonic time before which our lease is certainly still alive at etcd.
        self.lease_safe_until = 0.0
        self.margin = max(0.5, ttl / 4)
        self.campaigning = True
        self._tasks: list[asyncio.Task[None]] = []
        self._lease_lost = asyncio.Event()
        # After a requested step-down, do not campaign again until then (monotonic time).
        self.pause_until = 0.0

    def start(self) -> None:
        """Start campaigning and keeping the lease alive."""
        self._tasks.append(asyncio.create_task(self._run(), name="election"))

    async def stop(self, resign: bool = True) -> None:
        """Stop; with `resign`, release the leader key so another member takes over at once."""
        self.campaigning = False
        for task in self._tasks:
            await cancel_and_wait(task)
        if resign and self.lease:
            try:
                await self.etcd.revoke(self.lease)
            except Exception:
                pass

    def lease_valid(self) -> bool:
        """True while the lease is certainly alive (checked before every commit answer)."""
        return time.monotonic() < self.lease_safe_until

    def pause(self, until: float) -> None:
        """Sit out elections until `until` (monotonic; math.inf: for good). A pause only ever
        grows: a shorter one set later (a failed recovery's) does not end a longer one."""
        self.pause_until = max(self.pause_until, until)

    async def resign(self) -> None:
        """Give up leadership now (step-down request): delete our key if still ours."""
        if self.is_leader and self.lease:
            try:
                await self.etcd.delete_if_lease(self.key, self.lease)
            except Exception:
                pass

    async def _grant(self) -> None:
        while True:
            try:
                sent = time.monotonic()
                self.lease = await self.etcd.grant(self.ttl)
                self.lease_safe_until = sent + self.ttl - self.margin
                self._lease_lost.clear()
                if self.register:
                    record = MemberRecord(self.address, self.link_address or None, LOG_FORMAT)
                    await self.etcd.put(member_key(self.cluster, self.member), record.to_bytes(), lease=self.lease)
                if self.on_registered is not None:
                    await self.on_registered()
                return
            except (EtcdUnavailable, Exception) as exc:  # noqa: BLE001 - etcd down: retry
                log.warning("cannot grant lease: %s", exc)
                await asyncio.sleep(0.5)

    async def _keepalive(self) -> None:
        """Renew every TTL/3; after a failed renewal retry at once (with a short backoff) while
        the lease is still safe; on expiry signal loss."""
        pause = self.ttl / 3
        while True:
            await asyncio.sleep(pause)
            sent = time.monotonic()
            budget = self.lease_safe_until - sent
            try:
                remaining = await self.etcd.keepalive_once(self.lease, timeout=max(0.2, min(self.ttl / 3, budget)))
            except Exception as exc:  # noqa: BLE001 - etcd unreachable: the watchdog decides
                log.warning("lease keep-alive failed: %s", exc)
                pause = 0.1
                continue
            pause = self.ttl / 3
            if remaining <= 0:
                self._lease_lost.set()
                return
            self.lease_safe_until = sent + self.ttl - self.margin

    async def _watchdog(self) -> None:
        """Step down the moment the lease can no longer be trusted."""
        while True:
            now = time.monotonic()
            if now >= self.lease_safe_until:
                self._lease_lost.set()
                return
            await asyncio.sleep(min(0.1, self.lease_safe_until - now))

    async def _run(self) -> None:
        while self.campaigning:
            previous = self.lease
            await self._grant()
            if previous:
                # Revoked again now that etcd answers: a revoke while etcd was down failed, and
                # a restarted etcd gives the old lease (the old leader key with it) a full TTL.
                try:
                    await self.etcd.revoke(previous)
                except Exception:  # noqa: BLE001 - gone already, or it expires
                    pass
            keep = asyncio.create_task(self._keepalive())
            dog = asyncio.create_task(self._watchdog())
            campaign = asyncio.create_task(self._campaign())
            lost = asyncio.create_task(self._lease_lost.wait())
            try:
                await asyncio.wait({lost, campaign}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (keep, dog, campaign, lost):
                    await cancel_and_wait(t)
            if self.is_leader:
                self.is_leader = False
                await self.on_deposed("lease lost")
            self.on_leader(None)
            # Drop the old lease (if etcd still has it) so its key goes at once.
            try:
                await self.etcd.revoke(self.lease)
            except Exception:
                pass

    async def _campaign(self) -> None:
        key = self.key
        while True:
            if not self.may_lead():
                self.pause(time.monotonic() + NOT_VOTER_POLL_SECONDS)
            if self.pause_until > time.monotonic():
                await self._follow_while_paused(key)
                continue
            try:
                base, _ = await epoch_base(self.etcd, self.cluster)
                value = json.dumps({"member": self.member, "address": self.address,
                                    "generation": self.generation, "base": base}).encode()
                created, kv = await self.etcd.create_if_absent(key, value, lease=self.lease)
            except Exception as exc:  # noqa: BLE001
                log.warning("campaign failed: %s", exc)
                await asyncio.sleep(0.3)
                continue
            if kv is None:
                continue
            # Created now, or our own key from before (a retried transaction): we hold it.
            if created or kv.lease == self.lease:
                if leader_epoch(kv) <= self.promised():
                    await self._went_back(key, leader_epoch(kv))
                    continue
                self.epoch = leader_epoch(kv)
                self.is_leader = True
                self.on_leader(LeaderInfo(self.member, self.address, self.epoch))
                log.info("elected leader of %s with epoch %d", self.cluster, self.epoch)
                await self.on_elected(self.epoch, self.lease_safe_until)
                await self._hold(key)
                # Our key vanished (resigned or revoked): no longer leader.
                if self.is_leader:
                    self.is_leader = False
                    await self.on_deposed("leader key gone")
                self.on_leader(None)
                continue
            self._name_leader(kv)
            await self._wait_gone(key, kv.mod_revision)
            # No leader until a member creates the key again (a member sitting out elections
            # must not keep naming the one that left).
            self.on_leader(None)

    async def _went_back(self, key: str, epoch: int) -> None:
        """Elected with `epoch`, at or below the epoch this member promised: etcd issued it
        before (it went back in revisions). Never lead with it: raise the epoch base above the
        promise, give the key up and campaign again."""
        promised = self.promised()
        try:
            if generation_of(promised) > self.generation:
                log.error("elected leader of %s with epoch %d, but this member promised epoch %d of DR generation "
                          "%d and the site's DR record says generation %d: etcd lost the record with its data; "
                          "not leading until it is restored (README: Reliability, when etcd loses its data)", self.cluster,
                          epoch, promised, generation_of(promised), self.generation)
                self.pause(time.monotonic() + WENT_BACK_PAUSE_SECONDS)
            else:
                needed = promised & ((1 << GENERATION_SHIFT) - 1)
                while True:
                    base, revision = await epoch_base(self.etcd, self.cluster)
                    if base >= needed or await self.etcd.put_if_version(epoch_base_key(self.cluster),
                                                                        str(needed).encode(), revision):
                        break
                log.warning("elected leader of %s with epoch %d, which this member promised already (up to %d): "
                            "etcd went back in revisions (restarted without its data?); epoch base raised to %d, "
                            "campaigning again", self.cluster, epoch, promised, max(base, needed))
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the key goes with the lease
            log.warning("cannot raise the epoch base of %s: %s", self.cluster, exc)
            await asyncio.sleep(0.3)
        try:
            await self.etcd.delete_if_lease(key, self.lease)
        except Exception:  # noqa: BLE001 - it goes with the lease
            pass

    def _name_leader(self, kv: KeyValue) -> None:
        """Tell the node who holds the leader key `kv` (no one, if its value is unreadable)."""
        try:
            data = json.loads(kv.value)
            self.on_leader(LeaderInfo(data.get("member", ""), data.get("address", ""), leader_epoch(kv)))
        except (ValueError, AttributeError):
            self.on_leader(None)

    async def _follow_while_paused(self, key: str) -> None:
        """Sitting out elections: name the leader there is, or none once it is gone, until the
        pause ends (a paused member must not keep naming one that left)."""
        pause = self.pause_until - time.monotonic()
        try:
            kv = await self.etcd.get(key)
        except Exception:  # noqa: BLE001 - etcd unreachable: look again shortly
            await asyncio.sleep(min(pause, 0.2))
            return
        if kv is None:
            self.on_leader(None)
            await asyncio.sleep(min(pause, PAUSED_POLL_SECONDS))
            return
        if kv.lease == self.lease:
            # Our own key (a campaign's create went through as the pause began): give it up.
            try:
                await self.etcd.delete_if_lease(key, self.lease)
            except Exception:  # noqa: BLE001 - look again shortly
                await asyncio.sleep(min(pause, 0.2))
            return
        self._name_leader(kv)
        try:
            await asyncio.wait_for(self._wait_gone(key, kv.mod_revision), pause)
        except asyncio.TimeoutError:
            return
        self.on_leader(None)

    async def _wait_gone(self, key: str, revision: int) -> None:
        """Return once the key is deleted (or the watch breaks, after re-checking)."""
        try:
            async for events in self.etcd.watch(key, start_revision=revision + 1):
                if any(kind == "DELETE" for kind, _ in events):
                    return
        except Exception as exc:  # noqa: BLE001
            log.debug("watch broke: %s", exc)
            await asyncio.sleep(0.2)

    async def _hold(self, key: str) -> None:
        """While leader: return when our key is deleted."""
        while True:
            try:
                current = await self.etcd.get(key)
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.2)
                continue
            if current is None or current.lease != self.lease:
                return
            await self._wait_gone(key, current.mod_revision)
