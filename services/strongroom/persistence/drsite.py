"""`DrSite`: a member's view of its site's DR role for its cluster (docs/dr.md).

The role and generation live in the site's etcd (`DrRecord`, `dr/record.py`); without a record
the realm decides (the standby set's members are the standby). The member reads the record
before it campaigns, follows it while it runs (activation, fencing and demotion take effect
without a restart: the node hands leadership over and campaigns again in the new role), and
answers the other site's `CompareGeneration`: a primary told of a newer primary fences its site.

A primary's new leader asks the other site (`superseded_by_peer`) before it writes anything: a
primary site that comes back after the standby was activated learns it at once, and its first
leader serves no write. When the other site does not answer (it is down, or cut off) the leader
serves: clients never wait for the standby; the activated site's DR service keeps telling the
old primary until it hears it (`dr/fencer.py`). A client that has seen a newer generation than
this primary's makes the member ask at once too (`heard_of`, persistence/generations.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.record import DrRecord, DrRole, generation_of, read_record, superseded, write_record
from strongroom.errors import (
    Fenced,
    InvalidArgument,
    PersistenceUnavailable,
    StandbyRefusal,
    StrongroomError,
    UnknownCluster,
    WrongDrRole,
)
from strongroom.etcd import EtcdClient
from strongroom.keys import dr_key
from strongroom.persistence.replica import Replica
from strongroom.persistence.transport import compare_generations

__all__ = ["ASK_AGAIN_SECONDS", "DrSite", "cut_back"]

log = logging.getLogger("strongroom.dr")

ASK_AGAIN_SECONDS = 2.0
"""While clients keep naming a newer generation, the other site is asked at most this often."""


class DrSite:
    """The DR role of the site a member runs at, for the member's cluster."""

    def __init__(self, etcd: EtcdClient, cluster: str, member: str, default: DrRecord,
                 own_addresses: Callable[[], Sequence[str]]) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.member = member
        self.default = default
        self.record = default
        """The record in force, as this member last read it."""
        self._own_addresses = own_addresses

        self.loaded = False
        """The record was read from etcd (until then `record` is the realm's default)."""
        self._asking: asyncio.Task[bool] | None = None
        self._asked_at = -ASK_AGAIN_SECONDS

    @property
    def role(self) -> DrRole:
        return self.record.role

    def refusal(self) -> StrongroomError | None:
        """What a client call gets from a member of this site while the site does not serve:
        FENCED (superseded by a newer primary) or STANDBY; None at a primary."""
        record = self.record
        if record.role is DrRole.FENCED:
            return Fenced(f"cluster {self.cluster} at this site was superseded by a primary of generation "
                          f"{record.newer_generation} ({','.join(record.peer) or 'the other site'}); it accepts no "
                          f"write until an operator demotes it", {"primary": ",".join(record.peer),
                                                                  "generation": str(record.newer_generation)})
        if record.role is DrRole.STANDBY:
            primary = ",".join(record.peer)
            return StandbyRefusal(f"member {self.member} belongs to the disaster-recovery standby set of cluster "
                                  f"{self.cluster}, which serves no clients; the primary site does ({primary})",
                                  {"primary": primary})
        return None

    def described(self) -> tuple[str, int, Sequence[str]]:
        """The role, generation and the other site's addresses, as the member last read them."""
        record = self.record
        return record.role.value, record.generation, record.peer

    def heard_of(self, generation: int) -> None:
        """A client named `generation`, newer than this site's: ask the other site now (at most
        once per `ASK_AGAIN_SECONDS`); when it is that newer primary, the site is fenced."""
        now = time.monotonic()
        if (self._asking is not None and not self._asking.done()) or now - self._asked_at < ASK_AGAIN_SECONDS:
            return
        self._asked_at = now
        log.warning("cluster %s: a client has seen the primary of generation %d (this site: %s); asking the "
                    "other site", self.cluster, generation, self.record.describe())
        self._asking = asyncio.create_task(self.superseded_by_peer(), name="dr-ask")
        self._asking.add_done_callback(self._asked)

    def _asked(self, task: asyncio.Task[bool]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("cluster %s: asking the other site failed: %s (the next client naming a newer generation "
                        "asks again)", self.cluster, task.exception())

    async def load(self) -> DrRecord:
        """Read the site's record (before campaigning)."""
        self.record = await read_record(self.etcd, self.cluster, self.default)
        self.loaded = True
        return self.record

    async def follow(self, on_change: Callable[[DrRecord, DrRecord], None]) -> None:
        """Keep `record` current; `on_change(old, new)` when the role or generation changes."""
        async for kind, kv in self.etcd.follow(dr_key(self.cluster)):
            new = DrRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else self.default
            old, self.record = self.record, new
            if (old.role, old.generation) != (new.role, new.generation):
                log.warning("cluster %s at this site: %s -> %s (%s)", self.cluster, old.describe(), new.describe(),
                            new.reason or "the realm's default")
                on_change(old, new)

    def info(self, record: DrRecord | None = None) -> rpb.GenerationInfo:
        """This site (as `record` says, else as this member last read it) as the other one is
        told it."""
        return (record or self.record).told(self.cluster, self._own_addresses(), self.member)

    async def learn(self, theirs: rpb.GenerationInfo) -> rpb.GenerationInfo:
        """The other site says what it is: fence this site if a newer primary superseded it.
        This site, after that."""
        return self.info(await self._learn(theirs))

    async def _learn(self, theirs: rpb.GenerationInfo) -> DrRecord:
        """`learn`: the site's record after it (`record` follows etcd, so every member,
        this one included, acts on a change the same way)."""
        if theirs.cluster != self.cluster:
            raise InvalidArgument(f"the call is about cluster {theirs.cluster!r}; this member is of {self.cluster!r}")
        try:
            role = DrRole(theirs.role)
        except ValueError:
            raise InvalidArgument(f"unknown DR role {theirs.role!r} (primary, standby or fenced)") from None
        while True:
            try:
                current = await read_record(self.etcd, self.cluster, self.default)
            except Exception as exc:  # noqa: BLE001 - etcd away: the caller asks again
                raise PersistenceUnavailable(f"cannot read the DR record of {self.cluster}: {exc}") from None
            if superseded(current, role, theirs.generation):
                since = theirs.since_index
            elif (current.role is DrRole.FENCED and role is DrRole.PRIMARY and current.newer_generation
                  == theirs.generation and theirs.since_index and not current.since_index):
                since = theirs.since_index  # fenced before the newer primary knew where it starts
            else:
                return current
            fenced = current.changed(role=DrRole.FENCED, newer_generation=theirs.generation, since_index=since,
                                     peer=tuple(theirs.addresses) or current.peer,
                                     reason=f"{theirs.member or 'the other site'} is the primary of generation "
                                            f"{theirs.generation}; this site was the primary of generation "
                                            f"{current.generation}")
            if await write_record(self.etcd, self.cluster, fenced, current):
                log.critical("cluster %s: fenced: %s", self.cluster, fenced.reason)
                return fenced

    async def demote(self, cluster: str) -> DrRecord:
        """A fenced site becomes the standby of the primary that superseded it (an operator's
        `strongroom dr demote`): its generation, the standby role, the newer primary as its
        peer. Every member follows the record and cuts its log back to `since_index`
        (`PersistenceNode`). WrongDrRole when the site is not fenced, or the newer primary has
        not said yet where the histories part; UnknownCluster for another `cluster`."""
        if cluster != self.cluster:
            raise UnknownCluster(f"this member is of cluster {self.cluster!r}, not {cluster!r}")
        try:
            current = await read_record(self.etcd, self.cluster, self.default)
        except Exception as exc:  # noqa: BLE001 - etcd away: the caller asks again
            raise PersistenceUnavailable(f"cannot read the DR record of {self.cluster}: {exc}") from None
        if current.role is not DrRole.FENCED:
            raise WrongDrRole(f"cluster {self.cluster} at this site is {current.describe()}: only a site fenced by a "
                              f"newer primary is demoted (demoting the only primary would leave the cluster "
                              f"without one)")
        if not current.since_index:
            raise WrongDrRole(f"the primary of generation {current.newer_generation} has not said yet where the two "
                              f"histories part (its DR service tells this site within seconds once it reaches "
                              f"it); try again")
        demoted = current.changed(role=DrRole.STANDBY, generation=current.newer_generation, newer_generation=0,
                                  reason=f"demoted by an operator: the standby of the primary of generation "
                                         f"{current.newer_generation}, from index {current.since_index + 1}")
        if not await write_record(self.etcd, self.cluster, demoted, current):
            raise WrongDrRole(f"the DR record of {self.cluster} at this site changed meanwhile; try again")
        log.critical("cluster %s at this site: %s", self.cluster, demoted.reason)
        return demoted

    async def superseded_by_peer(self) -> bool:
        """A primary's new leader, before its first write: ask the other site; True when it
        turned out to be a newer primary (this site is fenced now). False when this site is not
        a primary, knows no other site, or none of its addresses answered in time."""
        if self.record.role is not DrRole.PRIMARY or not self.record.peer:
            return False
        fenced = False
        for answer in await compare_generations(self.record.peer, self.info()):
            fenced = (await self._learn(answer)).role is DrRole.FENCED or fenced
        return fenced


def cut_back(replica: Replica, record: DrRecord) -> None:
    """A demoted site's member: cut its log back to the last index both sites share and rebuild
    its state there, when the entries after it are of an older generation (the old primary's
    lost tail, or what it took before it learnt it was fenced; not what the new primary shipped
    since). Logged; when the state cannot be rebuilt (`Replica.roll_back_to`: no restore point
    reaches that far back), the member drops its data, stops applying and says why: restarted,
    it starts empty and the DR service ships a full copy."""
    lg = replica.log
    index = record.since_index
    if record.role is not DrRole.STANDBY or not index or lg.last_index <= index:
        return
    # The entry after the shared one (in the snapshot, when the log was compacted past it).
    first = lg.snapshot_epoch if index < lg.snapshot_index else lg.epoch_at(index + 1)
    if first is None or generation_of(first) >= record.generation:
        return
    last, compacted = lg.last_index, lg.snapshot_index
    if replica.roll_back_to(index):
        log.warning("cluster %s: cut the log back from %d to %d (the entries after it are the old primary's "
                    "tail: `strongroom dr manifest` lists them) and rebuilt the state at %d (from the restore "
                    "point at %d)", replica.member, last, index, index, lg.snapshot_index)
        return
    # The log goes whole (no recovery may adopt the tail back into the standby), and with it
    # what the state was built from: restarted, the member starts empty and takes the standby
    # leader's state. Until then it applies nothing and never leads.
    replica.discard()
    replica.stop_applying(f"the log had to be cut back to index {index} for the demotion (entries {index + 1}-{last} "
                          f"are the old primary's tail) but no restore point reaches it (the log was compacted "
                          f"at {compacted}, and the oldest state kept is after {index}): the log and state are "
                          f"dropped; restart this member (it starts empty and takes the standby leader's state)")
