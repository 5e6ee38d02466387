"""The leader's side of a membership change: the realm's member list reached one member at a time.

A serving leader runs one `Reconfiguration` for its term. Whenever the realm's member list and
the voters (`configuration.py`) differ, it takes the next step (`next_step`: additions first):

1. **Catch up** (an addition): the new member is replicated to as a learner (its appends and
   snapshot parts sent like any follower's, its acknowledgments not counted) until it holds
   what was committed when the step began. Nothing waits for it meanwhile.
2. **Both counted**: from now on an entry commits only once a majority of the old voters *and*
   a majority of the new voters hold it; the step waits until a majority of the new voters
   holds everything committed before.
3. **The record**: the new voters are written to etcd in a transaction that holds only while
   this member still holds the leader key. From then on only the new voters count. A removed
   member is replicated to no more; a leader that removed itself hands over.

A leader that dies at any point leaves the old voters in etcd (steps 1 and 2 wrote nothing) or
the new ones (step 3 was one transaction); its successor reads them and goes on from there. A
step whose member the realm no longer asks for (a change of mind before step 3) is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from strongroom.etcd import EtcdClient
from strongroom.persistence.configuration import Step, majority_index, next_step, write_voters
from strongroom.persistence.membership import Membership

__all__ = ["ChangeTerm", "Reconfiguration"]

log = logging.getLogger("strongroom.reconfig")

PROGRESS_SECONDS = 10.0
"""How often a step that waits logs where it is."""


class ChangeTerm(Protocol):
    """What a membership change needs of the leader's term (`LeaderTerm`)."""

    epoch: int
    member: str
    joint: tuple[str, ...] | None

    def alive(self) -> bool: ...

    def match_of(self, name: str) -> int: ...

    @property
    def commit_index(self) -> int: ...

    def replicate_to(self, name: str) -> None: ...

    async def stop_replicating(self, name: str) -> None: ...

    def advance_commit(self) -> None: ...


class Reconfiguration:
    """Carries out a realm version's member list while this member leads."""

    def __init__(self, term: ChangeTerm, membership: Membership, etcd: EtcdClient, lease: Callable[[], int],
                 removed_self: Callable[[], None]) -> None:
        self.term = term
        self.membership = membership
        self.etcd = etcd
        self.lease = lease
        self.removed_self = removed_self
        self.step: Step | None = None
        """The step under way (None: the voters are the realm's members)."""
        self.phase = ""
        """Where the step is: "catching up", "both counted", "recording"."""

    def describe(self) -> str:
        """The step under way in a few words, "" when there is none (a member's status)."""
        return f"{self.step}: {self.phase}" if self.step is not None else ""

    async def run(self) -> None:
        """Until the term ends: take each step the realm asks for, then wait for the next change."""
        membership, term = self.membership, self.term
        while term.alive():
            membership.changed.clear()
            self._replicate_to_everyone()
            if not membership.record.settled:
                # Before any step: a step's joint counting would replace the members with
                # state counted beside the realm's list.
                await self._settle()
                if not membership.record.settled:
                    await self._changed(0.5)
                    continue
            step = next_step(membership.voters, membership.names)
            if step is None:
                await self._changed(1.0)
                continue
            try:
                done = await self._carry_out(step)
            finally:
                term.joint = None
                self.step, self.phase = None, ""
            if not done:
                await self._changed(0.5)

    async def _settle(self) -> None:
        """The first leader with no record (or a damaged one): the voters in force written down,
        so a member that starts later, after the realm changed, does not take the realm's new
        list for them. While the members that hold state count beside the realm's list
        (`VoterRecord.also`), every commit of this term counted both; the realm's list is
        written once a majority of it holds everything committed, as at the end of a step."""
        membership, term = self.membership, self.term
        voters = membership.voters
        if membership.record.also:
            self.phase = "both counted"
            held = term.commit_index
            log.info("cluster %s has no voters record: counting %s beside the realm's %s until a majority of "
                     "the realm's holds index %d", membership.cluster.name, ", ".join(membership.record.also),
                     ", ".join(voters), held)
            while majority_index(voters, term.match_of) < held:
                if not term.alive() or membership.voters != voters:
                    return
                await self._changed(0.05)
        try:
            if await self._record(voters):
                term.joint = None
                term.advance_commit()
        finally:
            self.phase = ""

    def _replicate_to_everyone(self) -> None:
        for name in self.membership.peers():
            self.term.replicate_to(name)

    async def _carry_out(self, step: Step) -> bool:
        term = self.term
        self.step = step
        log.info("membership change of %s: %s (voters %s -> %s)", self.membership.cluster.name, step,
                 ", ".join(step.old), ", ".join(step.new))
        if step.kind == "add":
            self.phase = "catching up"
            target = term.commit_index
            if not await self._until(lambda: term.match_of(step.member) >= target, step,
                                     lambda: f"{step.member} holds index {term.match_of(step.member)} of {target}"):
                return False
        self.phase = "both counted"
        term.joint = step.new
        held = term.commit_index
        if not await self._until(lambda: majority_index(step.new, term.match_of) >= held, step,
                                 lambda: f"a majority of {', '.join(step.new)} holds index "
                                         f"{majority_index(step.new, term.match_of)} of {held}"):
            return False
        self.phase = "recording"
        if not await self._record(step.new):
            return False
        term.joint = None
        term.advance_commit()
        log.info("membership change of %s done: voters %s", self.membership.cluster.name, ", ".join(step.new))
        if step.kind == "remove":
            if step.member == term.member:
                self.removed_self()
            elif step.member not in self.membership.names:
                await term.stop_replicating(step.member)
        return True

    async def _until(self, done: Callable[[], bool], step: Step, where: Callable[[], str]) -> bool:
        """Wait for `done`; False when the term ended or the realm no longer asks for `step`."""
        logged = time.monotonic()
        while not done():
            if not self.term.alive() or next_step(step.old, self.membership.names) != step:
                log.info("membership change %s dropped (%s)", step,
                         "no longer leading" if not self.term.alive() else "the realm changed its mind")
                return False
            if time.monotonic() - logged >= PROGRESS_SECONDS:
                log.info("membership change %s: %s; %s", step, self.phase, where())
                logged = time.monotonic()
            await self._changed(0.05)
        return True

    async def _record(self, voters: tuple[str, ...]) -> bool:
        """Write `voters` to etcd while this member holds the leader key (retried while etcd is
        away); False when the term ended or the record moved on (another leader wrote it)."""
        membership, delay = self.membership, 0.1
        while self.term.alive():
            try:
                record = await write_voters(self.etcd, membership.cluster.name, voters, self.term.epoch,
                                            membership.record.revision, self.lease())
            except Exception as exc:  # noqa: BLE001 - etcd away: again, while leading
                log.warning("cannot write the voters of %s: %s", membership.cluster.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if record is None:
                log.warning("the voters of %s were not written: the record moved on or this member no longer "
                            "holds the leader key", membership.cluster.name)
                return False
            membership.set_voters(record)
            return True
        return False

    async def _changed(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.membership.changed.wait(), timeout)
        except TimeoutError:
            pass
