"""Activation of a standby site (`DrService.Activate`, `strongroom dr activate`; docs/dr.md).

The primary site is lost: the DR service stops shipping, asks the standby set's leader where its
log ends (waiting at most LEADER_TIMEOUT for one), writes the next DR generation and the role
primary into **this** site's etcd (the primary's may be gone with it), and waits for the standby
set's leader to serve as the primary. When the standby set has no leader in that time
(NoLeaderError, retriable) or this site's etcd does not take the record (PersistenceUnavailable),
nothing is written and shipping resumes: until the record is written the DR service keeps the
standby up to date. Every member follows the site's record
(`persistence/drsite.py`): the standby leader hands its leadership over, the set campaigns again
with epochs of the new generation, and the new leader commits its first entry after the last
one shipped. The report says what the new primary lacks of the old history (`TailLoss`).

Refused while the primary answers and has a leader, unless forced. Forced with a primary that
answers, activation is a planned switchover: the primary is told first that a newer generation
is taking over (it fences itself and accepts no further write), everything it committed is
shipped, and only then does this site take over: the tail loss is exactly nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.record import DrRecord, DrRole, read_record, write_record
from strongroom.dr.shipper import Shipper
from strongroom.errors import PersistenceUnavailable, PrimaryHealthy, WrongDrRole
from strongroom.etcd import EtcdClient, EtcdUnavailable
from strongroom.local.leader import NoLeader, wait_for_leader
from strongroom.persistence.transport import compare_generations

__all__ = ["LEADER_TIMEOUT", "Activation", "TailLoss"]

log = logging.getLogger("strongroom.dr")

LEADER_TIMEOUT = 15.0
"""Seconds an activation waits for the standby set's leader to say where its log ends; past it the
activation is refused (NO_LEADER), nothing written, shipping resumed. A set that lost its leader
elects one within a lease TTL or two."""
DRAIN_TIMEOUT = 30.0
"""Seconds a fenced primary has to ship everything it committed (planned switchover)."""
SERVE_TIMEOUT = 60.0
"""Seconds the activated set has to elect a leader that serves (the report says if it did not)."""


@dataclass(frozen=True)
class TailLoss:
    """What an activation found: the new generation and what the new primary lacks."""

    cluster: str
    generation: int
    primary_commit_index: int
    """The old primary's commit index as its stream last reported it (it committed at least this)."""
    heard_seconds_ago: float
    """Seconds between the old primary's last message and the activation (-1: never heard)."""
    standby_last_index: int
    """The last index of the old generation the new primary holds."""
    exact: bool
    """The old primary was fenced and drained first: nothing is lost."""
    leader: str
    seconds_to_serve: float
    messages_lost_at_least: int = 0
    """Messages the old primary had stored that the new primary lacks, at least: its count through
    its applied index as its stream last said, minus this site's through the last index held."""
    acks_lost_at_least: int = 0
    """Acknowledgments (messages acknowledged, per durable) the old primary had applied that the
    new primary lacks, at least: counted as `messages_lost_at_least`."""

    @property
    def entries_lost_at_least(self) -> int:
        return max(0, self.primary_commit_index - self.standby_last_index)

    def summary(self) -> str:
        head = (f"cluster {self.cluster}: this site is the primary of generation {self.generation}, from index "
                f"{self.standby_last_index + 1} on")
        if self.exact:
            tail = ("planned switchover: the old primary was fenced and everything it committed was shipped; "
                    "nothing is lost")
        else:
            heard = (f"{self.heard_seconds_ago:.1f} s before activation" if self.heard_seconds_ago >= 0
                     else "never")
            tail = (f"the old primary had committed at least index {self.primary_commit_index} (last heard {heard}); "
                    f"at least {self.entries_lost_at_least} of its committed entries, holding at least "
                    f"{self.messages_lost_at_least} stored messages and {self.acks_lost_at_least} acknowledgments, "
                    f"are not here. It may have committed more after that: which messages and acks were lost, and "
                    f"all of them, are known only from its log (`strongroom dr manifest` once its disk is back)")
        serving = (f"{self.leader} serves since {self.seconds_to_serve:.1f} s after the call" if self.leader
                   else f"no leader served within {SERVE_TIMEOUT:.0f} s (the set elects one as soon as a majority "
                        f"is up)")
        return f"{head}; {tail}; {serving}"


class Activation:
    """Activates the standby site of one cluster (one activation at a time)."""

    def __init__(self, etcd: EtcdClient, cluster: str, default: DrRecord, shipper: Shipper,
                 stop_shipping: Callable[[], Awaitable[None]], resume_shipping: Callable[[], None],
                 site_members: Sequence[str]) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.default = default
        self.shipper = shipper
        self.stop_shipping = stop_shipping
        self.resume_shipping = resume_shipping
        """Ship again (the activation failed before the record was written)."""
        self.site_members = list(site_members)
        self._lock = asyncio.Lock()

    def info(self, record: DrRecord) -> rpb.GenerationInfo:
        """This site, as `record` says, as the other is told it."""
        return record.told(self.cluster, self.site_members, "dr")

    async def activate(self, force: bool) -> TailLoss:
        async with self._lock:
            started = time.monotonic()
            try:
                record = await read_record(self.etcd, self.cluster, self.default)
            except EtcdUnavailable as exc:
                raise PersistenceUnavailable(f"this site's etcd does not answer ({exc}); nothing changed: activate "
                                             f"again when it does") from None
            if record.role is not DrRole.STANDBY:
                raise WrongDrRole(f"cluster {self.cluster} at this site is {record.describe()}: only a standby "
                                  f"is activated")
            newer = record.generation + 1
            answers = await compare_generations(record.peer, self.info(record))
            healthy = self.shipper.primary_fresh() and any(a.role == DrRole.PRIMARY.value for a in answers)
            if healthy and not force:
                raise PrimaryHealthy(f"the primary of {self.cluster} answers and has a leader "
                                     f"({', '.join(a.member for a in answers)}); activate with --force for a "
                                     f"planned switchover", {"primary": ",".join(record.peer)})
            exact = False
            if healthy:
                exact = await self._fence_and_drain(record, newer)
            written = False
            try:
                # Inside the try: a call cancelled while shipping stops still resumes it.
                await self.stop_shipping()
                end = await self.shipper.standby_end(LEADER_TIMEOUT)
                last, lag = end.last_index, self.shipper.lag
                primary_commit, heard = lag.source_commit, self.shipper.heard_seconds_ago()
                # The standby's count is at its applied index; its leader applies what it stores at
                # once, but one that stopped applying holds messages its count misses: no bound then.
                counted = end.applied_index >= last
                lost = max(0, lag.source_messages - end.stored_messages) if counted else 0
                acks_lost = max(0, lag.source_acks - end.acked_messages) if counted else 0
                how = "planned switchover" if exact else ("forced" if force else "primary unreachable")
                new = record.changed(role=DrRole.PRIMARY, generation=newer, since_index=last,
                                     reason=f"activated by the DR service ({how}); the old primary had committed at "
                                            f"least {primary_commit}, this site held {last}")
                written = await self._write(new, record)
            finally:
                if not written:
                    # Still the standby: the DR service keeps it up to date.
                    self.resume_shipping()
            if not written:
                raise WrongDrRole(f"the DR record of {self.cluster} at this site changed during the activation; "
                                  f"look at `strongroom dr status` and try again")
            log.critical("cluster %s activated at this site: generation %d from index %d (%s)", self.cluster, newer,
                         last + 1, how)
            leader = await self._wait_serving(newer)
            return TailLoss(self.cluster, newer, primary_commit, heard, last, exact and primary_commit <= last,
                            leader, time.monotonic() - started if leader else -1.0, lost, acks_lost)

    async def _write(self, new: DrRecord, read: DrRecord) -> bool:
        """Write the activated record over `read` (False: the record changed since it was read).
        PersistenceUnavailable when this site's etcd does not answer and the record is not there
        when read again."""
        try:
            return await write_record(self.etcd, self.cluster, new, read)
        except EtcdUnavailable as exc:
            # The write may have landed before etcd stopped answering: the record says.
            try:
                landed = await read_record(self.etcd, self.cluster, self.default) == new
            except EtcdUnavailable:
                landed = False
            if landed:
                return True
            raise PersistenceUnavailable(
                f"this site's etcd did not take the DR record of {self.cluster} ({exc}); this site stays the "
                f"standby and shipping resumes (`strongroom dr status` shows the record once etcd answers): "
                f"activate again when it does") from None

    async def _fence_and_drain(self, record: DrRecord, newer: int) -> bool:
        """Planned switchover: tell the primary a newer generation takes over (it fences itself),
        then wait until everything it committed is here. True once drained."""
        taking_over = replace(record, role=DrRole.PRIMARY, generation=newer, since_index=0)
        answers = await compare_generations(record.peer, self.info(taking_over))
        if not any(a.role == DrRole.FENCED.value for a in answers):
            return False
        fenced_at = time.monotonic()
        deadline = fenced_at + DRAIN_TIMEOUT
        lag, stable_since, seen = self.shipper.lag, 0.0, -1
        while time.monotonic() < deadline:
            commit = lag.source_commit
            if commit != seen:
                seen, stable_since = commit, time.monotonic()
            quiet = time.monotonic() - stable_since
            if lag.held >= commit and self.shipper.heard_at() > fenced_at and quiet >= 2 * self.shipper.heartbeat:
                return True
            await asyncio.sleep(self.shipper.heartbeat / 4)
        raise PersistenceUnavailable(f"the primary of {self.cluster} was fenced but did not ship everything it "
                                     f"committed within {DRAIN_TIMEOUT:.0f} s; it accepts no write now: activate "
                                     f"again (without --force) to take over with what was shipped")

    async def _wait_serving(self, generation: int) -> str:
        """The member that serves as the primary of `generation` ("" if none did in time)."""
        try:
            found = await wait_for_leader(self.site_members, SERVE_TIMEOUT, interval=0.2, accept=lambda st: (
                st.dr_role == DrRole.PRIMARY.value and st.generation == generation))
        except NoLeader:
            return ""
        return found.member
