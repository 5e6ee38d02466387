"""One member of a persistence cluster: the facade that wires its parts together.

    Replica      the log, the replicated state machine, promises (always there)
    Membership   the cluster's members, its voters, and where they registered
    Reconfiguration   a serving leader's membership change, one member at a time
    Election     the etcd lease and the leader key; the epoch
    LeaderTerm   what exists while this member leads one epoch (group commit, replicators,
                 dispatcher, non-replicated stores, the leader's tasks)
    Recovery     how a new term adopts the most advanced log
    Follower     the answers to a leader's replication calls
    MessagingFront, MapFront, StoreKeeper   what clients ask, on the current term

The node owns the lifecycle (prepare, start, stop), realm updates, and the transitions between
roles: `_lead` when elected, `step_down` / `hand_over` when leadership ends. Servicers call the
fronts; nothing here knows about gRPC except through the peer transport it is given.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

from strongroom.aio import tell_listeners, wait_event
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.record import DrRecord, DrRole, default_record, epoch_of
from strongroom.errors import (NoLeaderError, NotLeaderError, NotOperational, NotStandby, PersistenceUnavailable,
                               StrongroomError, UnknownMember)
from strongroom.etcd import EtcdClient
from strongroom.events.publisher import EventPublisher
from strongroom.events.writer import DEFAULT_MAX_SECONDS
from strongroom.keys import REALM_SERVICE, leader_key, stored_key
from strongroom.persistence.committed import CommittedBatch, Lag, committed_entries, shipped_entries, stored_messages
from strongroom.persistence.config import MemberConfig, Role
from strongroom.persistence.dispatcher import Dispatcher
from strongroom.persistence.drsite import DrSite, cut_back
from strongroom.persistence.election import Election, LeaderInfo, epoch_base, leader_epoch
from strongroom.persistence.follower import Follower
from strongroom.persistence.lifetimes import StoreKeeper
from strongroom.persistence.maps import MapFront
from strongroom.persistence.membership import Membership
from strongroom.persistence.messaging import MessagingFront
from strongroom.persistence.pstore import PStore
from strongroom.persistence.reconfig import Reconfiguration
from strongroom.persistence.recovery import PeerCalls, Recovery
from strongroom.persistence.replica import Replica
from strongroom.persistence.replicator import PeerReplicator
from strongroom.persistence.state import DeleteResult
from strongroom.persistence.status import (ClusterStatus, DurableList, OriginMarkStatus, cluster_status, durable_list,
                                           origin_mark_list)
from strongroom.persistence.term import LeaderTerm
from strongroom.persistence.transport import FollowerConnection, PeerClient
from strongroom.realm.model import Cluster, Realm, StorageMode
from strongroom.security.tokens import TokenBook
from strongroom.uow.front import UowFront

__all__ = ["PersistenceNode"]

log = logging.getLogger("strongroom.node")


class PersistenceNode:
    """A persistence cluster member."""

    def __init__(self, config: MemberConfig, realm: Realm, realm_version: int,
                 peers: PeerCalls | None = None) -> None:
        cluster = realm.cluster(config.cluster)
        if cluster is None:
            raise UnknownMember(f"cluster {config.cluster!r} is not defined in the realm (version {realm_version})")
        self.in_standby_set = cluster.is_standby_member(config.member)
        """A member of the cluster's disaster-recovery standby set (docs/dr.md): its set elects
        and replicates among itself. What the set does (standby, primary after an activation) is
        its site's DR role (`site`)."""
        standby = cluster.standby
        self.lag = Lag()
        """A standby leader: how far behind the primary, as the DR service's shipments say."""
        cluster = cluster.as_seen_by(config.member)
        if cluster.member(config.member) is None:
            names = ", ".join(m.name for m in cluster.members)
            raise UnknownMember(f"member {config.member!r} is not in cluster {config.cluster!r} "
                                f"of the realm (version {realm_version}); its members are: {names}")
        self.config = config
        self.cluster_name = config.cluster
        self.member = config.member
        self.address = config.address
        self.realm = realm
        self.realm_version = realm_version
        self.etcd = EtcdClient(config.etcd_endpoints)
        self.membership = Membership(self.etcd, cluster, config.member, config.address, fixed=self.in_standby_set)
        self.site = DrSite(self.etcd, config.cluster, config.member, default_record(
            self.in_standby_set, standby.primary if standby else [],
            [m.address for m in standby.members if m.address] if standby else []), self._set_addresses)
        """The site's DR role: primary (serves clients), standby (takes what the DR service ships)
        or fenced (superseded by a newer primary: serves nothing until demoted)."""
        self.replica = Replica(lambda: self.membership.cluster, config.member, config.data_dir, self._record_stored,
                               config.pstore_report, None if self.in_standby_set else self._event_log())
        self.replica.on_apply_stopped = self._apply_stopped
        if self._event_log() is not None and not self.in_standby_set:
            # On from the start only: a member derives the events of every entry it applies. A
            # standby set writes no events (its leader publishes none; the primary's are written).
            self.replica.enable_events(config.cluster)
        self.peers: PeerCalls = peers if peers is not None else PeerClient()
        self.recovery = Recovery(self.replica, self.membership, self.peers, lambda: self.election.lease, lambda: self.standby)
        self.follower = Follower(self.replica, self.membership, self)
        self.messaging = MessagingFront(self)
        self.keeper = StoreKeeper(config.cluster, self.messaging)
        self.maps = MapFront(self)
        self.uows = UowFront(self, self.messaging)
        self.term: LeaderTerm | None = None
        """This member's leadership, while it leads (recovering or serving)."""
        self.tokens = TokenBook(self.etcd)  # this site's bearer tokens, followed (security/guard.py)
        self.pstore = PStore(self.etcd, self)  # the persistent store's state, enforced while leading
        self.leader: LeaderInfo | None = None
        """Who leads, as far as this member knows."""
        self.realm_service = ""
        """The realm service's address as it registered in etcd ("" while none is)."""
        self._serving = asyncio.Event()
        # Tasks the member owns (watches, clean-ups, listener calls), each dropped once done.
        self._background: set[asyncio.Future[None]] = set()
        self._prepared = False
        # Called with True when this member starts serving as leader and False when it stops
        # (e.g. the Kubernetes pod label). Exceptions are logged, never raised into the node.
        self.leadership_listeners: list[Callable[[bool], Awaitable[None]]] = []
        self.election = Election(self.etcd, config.cluster, config.member, config.address,
                                 cluster.lease_ttl_seconds, self._on_elected, self._on_deposed,
                                 self._on_leader_info, link_address=config.link_address,
                                 promised=lambda: self.replica.promised_epoch, on_registered=self._reassert_stored,
                                 may_lead=self.membership.votes)
        self.reconfiguration: Reconfiguration | None = None  # a serving leader's membership change
        # Re-apply what this member knew was committed (restart: snapshot + log suffix).
        self.replica.apply_committed()

    # --- what others read ------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        """The cluster's realm definition in force."""
        return self.membership.cluster

    @property
    def role(self) -> Role:
        """Follower, recovering or leader."""
        return self.term.role if self.term is not None else Role.FOLLOWER

    @property
    def standby(self) -> bool:
        """The site is a standby: its leader takes what the DR service ships, and serves no client."""
        return self.site.role is DrRole.STANDBY

    def _set_addresses(self) -> list[str]:
        return [a for m in self.membership.cluster.members if (a := self.membership.address_of(m.name))]

    @property
    def storage_mode(self) -> StorageMode:
        """Where the cluster keeps its log and state."""
        return self.replica.storage_mode

    def is_leader_role(self) -> bool:
        """Elected and not deposed (recovering or serving)."""
        return self.term is not None and self.election.is_leader

    def require_leader(self) -> LeaderTerm:
        """The serving term, or the error a client should see (NOT_LEADER with the leader's
        address, recovering, or no leader)."""
        term = self.term
        if term is not None and term.serving and self.election.is_leader:
            return term
        refusal = self.site.refusal()  # FENCED, STANDBY
        if refusal is not None:
            raise refusal
        if self.leader is not None and self.leader.member != self.member:
            raise NotLeaderError(f"member {self.member} is not the leader of {self.cluster_name}; "
                                 f"{self.leader.member} is", self.leader.member, self.leader.address)
        if self.config.partner:  # an instance of a shared store (shared_standby.py), not serving yet
            raise NotOperational(f"member {self.member}, holding the shared store of {self.cluster_name}, is not "
                                 f"operational yet (restoring the store, being elected)", {"partner": self.config.partner})
        if term is not None:
            raise PersistenceUnavailable(f"member {self.member} is recovering leadership")
        raise NoLeaderError(f"cluster {self.cluster_name} has no leader at the moment")

    def name_leader(self, err: StrongroomError) -> StrongroomError:
        """`err` as a client gets it: a NOT_LEADER that names no leader (raised when this member
        stepped down, before it knew who follows) names the leader this member knows of now,
        if it knows one other than itself; anything else unchanged."""
        if not isinstance(err, NotLeaderError) or err.leader_address:
            return err
        leader = self.leader
        if leader is None or leader.member == self.member or not leader.address:
            return err
        return NotLeaderError(err.message, leader.member, leader.address)

    def status(self) -> ClusterStatus:
        """This member's view of its cluster."""
        leader = self.leader
        status = cluster_status(self.replica, self.membership, self.term, self.realm, self.realm_version,
                                (leader.member, leader.address, leader.epoch) if leader else None,
                                self.realm_service)
        record = self.site.record
        term, change = self.term, self.reconfiguration
        status = replace(status, dr_role=record.role.value, generation=record.generation, metrics_url=self.config.metrics_url,
                         newer_generation=record.newer_generation, dr_since_index=record.since_index,
                         membership_change=change.describe() if change and term and term.alive() else "")
        if self.standby and term is not None and term.standby_ready:
            self.lag.note(held=self.replica.log.last_index, held_messages=stored_messages(self.replica))
            status = replace(status, primary_commit_index=self.lag.source_commit, seconds_behind_primary=self.lag.seconds,
                             messages_behind_primary=self.lag.messages)
        return status

    async def wait_serving(self, timeout: float) -> bool:
        """Wait until this member serves as leader."""
        try:
            return await wait_event(self._serving, timeout)
        except TimeoutError:
            return False

    # --- lifecycle --------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before serving any replication call: if our state was lost, fence deposed leaders.

        Our promise was lost with our state, so we promise the newest epoch etcd may have
        issued: a deposed leader's appends are refused (it cannot use our amnesia to form a
        majority). The revision is read before the leader key so a leader key created in
        between cannot end up below the floor.
        """
        replica = self.replica
        record = await self.site.load()
        generation = record.generation
        self.election.generation = generation
        self.replica.promise(epoch_of(generation, 0))
        cut_back(self.replica, record)
        if replica.started_empty or replica.storage_mode == StorageMode.MEMORY:
            base, _ = await epoch_base(self.etcd, self.cluster_name)
            revision = await self.etcd.revision()
            leader = await self.etcd.get(leader_key(self.cluster_name))
            floor = leader_epoch(leader) if leader is not None else epoch_of(generation, base + revision)
            replica.promise(max(replica.promised_epoch, floor))
            # Lost state we had acknowledged? Then catch up before counting toward a recovery
            # majority; a member that never acknowledged anything counts at once.
            had_state = await self.etcd.get(stored_key(self.cluster_name, self.member))
            replica.stored = had_state is not None
            replica.synced = not replica.stored
            replica.storage.set_meta(synced=replica.synced, stored=replica.stored)
        elif not replica.stored:
            replica.synced = True
        self._prepared = True

    async def start(self) -> None:
        """Join the election (after `prepare` and once the server is up)."""
        if not self._prepared:
            await self.prepare()
        self._own(asyncio.create_task(self.membership.watch(), name="members"))
        self._own(asyncio.create_task(self.membership.follow_voters(), name="voters"))
        self._own(asyncio.create_task(self._follow_realm_service(), name="realm-service"))
        self._own(asyncio.create_task(self.site.follow(self._dr_changed), name="dr-record"))
        self._own(asyncio.create_task(self.pstore.follow(), name="pstore"))
        self._own(asyncio.create_task(self.tokens.follow(), name="tokens"))
        self.election.start()

    async def stop(self) -> None:
        """Leave cleanly: step down, resign, close storage."""
        for task in list(self._background):
            task.cancel()
        await self.step_down("member stopping")
        await self.election.stop(resign=True)
        await self.etcd.close()
        await self.peers.close()
        self.replica.close()

    def update_realm(self, realm: Realm, version: int) -> None:
        """A new realm version: new stores and destinations take effect without restart."""
        cluster = realm.cluster(self.cluster_name)
        if cluster is not None:
            if cluster.is_standby_member(self.member) != self.in_standby_set:
                log.error("realm version %d moves member %s between the primary and the standby set; keeping "
                          "version %d (restart the member to change its set)", version, self.member,
                          self.realm_version)
                return
            cluster = cluster.as_seen_by(self.member)
        if cluster is None or (cluster.member(self.member) is None and self.in_standby_set):
            log.error("realm version %d no longer lists this member; keeping version %d", version, self.realm_version)
            return
        if cluster.member(self.member) is None:  # being removed: it counts until the leader's change is done
            log.warning("realm version %d no longer lists this member: it is being removed", version)
        if not self.membership.update(cluster):
            log.error("realm version %d changes the standby set of cluster %s; not applied to a running "
                      "member (restart the standby set to change it)", version, self.cluster_name)
        term = self.term
        if term is not None and term.serving and self.election.is_leader:
            # In the log before any publish resolved under the new version: a durable it
            # suspends takes none of their messages. (A term still recovering applies the
            # realm in force when it starts serving.)
            fut = self.keeper.submit_realm(term, realm)
            if fut is not None:
                self.in_background(self.keeper.realm_applied(fut))
        self.realm = realm
        self.realm_version = version
        self.messaging.realm_changed()
        log.info("realm version %d in effect", version)

    async def _follow_realm_service(self) -> None:
        """Keep `realm_service` current (status tells tools that know only the members where
        the realm service is)."""
        async for kind, kv in self.etcd.follow(REALM_SERVICE):
            self.realm_service = kv.value.decode() if kind == "PUT" else ""

    def _dr_changed(self, old: DrRecord, new: DrRecord) -> None:
        """The site's DR role or generation changed (activation, fencing, demotion): campaign in
        the new one (a leader hands its leadership over; every member campaigns with the new
        generation's epochs)."""
        self.election.generation = new.generation
        # No append or promise of an older generation from now on (a leader of the old role's
        # term included), then a demoted site's tail goes: nothing can bring it back.
        self.replica.promise(epoch_of(new.generation, 0))
        cut_back(self.replica, new)
        event_log = self._event_log()
        if new.role is DrRole.PRIMARY and event_log is not None:
            # An activated standby writes the events of its own generation on.
            self.replica.enable_events(self.cluster_name)
        elif new.role is not DrRole.PRIMARY:
            self.replica.disable_events()
        if self.term is not None:
            self.in_background(self.hand_over(f"the site is now {new.describe()}", term=self.term))

    async def _record_stored(self) -> None:
        await self.etcd.put(stored_key(self.cluster_name, self.member), b"1")

    async def _reassert_stored(self) -> None:
        """Registered under a new lease: the stored-state key again if etcd lost it with its data."""
        if self.replica.stored:
            await self.etcd.create_if_absent(stored_key(self.cluster_name, self.member), b"1")

    # --- becoming leader --------------------------------------------------------------------------

    def _on_leader_info(self, info: LeaderInfo | None) -> None:
        self.leader = info

    async def _on_elected(self, epoch: int, lease_safe_until: float) -> None:
        if self.replica.apply_stopped:
            # Elected all the same (the campaign was under way when the apply stopped).
            self.in_background(self.election.resign())
            return
        term = self.term = LeaderTerm(epoch, self.member, self.replica, self.membership, self)
        primary = self.site.role is DrRole.PRIMARY
        term.run(self._lead(term) if primary else self._lead_standby(term), "recover")

    async def _lead(self, term: LeaderTerm) -> None:
        """Become a serving leader for the term: promises, adopt the best log, commit a no-op,
        then serve."""
        epoch = term.epoch
        self.replica.promise(epoch, self.member)
        self.leader = LeaderInfo(self.member, self.address, epoch)
        # Before the first write: is the other site a newer primary (this one came back after
        # an activation)? Asked while recovering; an answer only bounds how long it may take.
        superseded = asyncio.ensure_future(self.site.superseded_by_peer())
        try:
            await self.recovery.recover(term)
            if await superseded:
                await self.hand_over("fenced by a newer primary", term=term)
                return
            term.start_replication(self._replicator)
            await term.commit(rpb.Operation(noop=rpb.Noop(leader=self.member)), bookkeeping=True)
            # What the realm decides for the stores, in the log before the first client operation.
            await self.keeper.apply_realm(term, self.realm)
            # The pseudo-clock runs on from what the adopted log carried; the store's state enforced.
            await self.pstore.lead(term)
            # What the previous leader held alone of the units of work is settled first.
            await self.uows.take_over(term)
            if not term.alive():
                return
            # A storage that cannot record this fails the recovery like any other write.
            self.replica.set_synced(True)
        except asyncio.CancelledError:
            superseded.cancel()
            raise
        except Exception as exc:  # noqa: BLE001
            superseded.cancel()
            log.warning("recovery for epoch %d failed: %s", epoch, exc)
            # Still elected for this epoch (even if the term was closed meanwhile, e.g. by a
            # newer epoch seen): let another member try before we campaign again.
            if self.election.is_leader and self.election.epoch == epoch:
                self.election.pause(time.monotonic() + self.cluster.lease_ttl_seconds)
                await self.election.resign()
            return
        term.run(self.keeper.expire(term), "expirer")
        term.run(self.uows.run(term), "uow-timers")
        term.serve(Dispatcher(f"{self.member}-{epoch}", redelivery_limit=self.keeper.redelivery_limit,
                              dead_letter=lambda durable, seq, count, why: self.keeper.dead_letter(
                                  term, self.realm, durable, seq, count, why), clock=term.clock))
        term.run(self.keeper.track_durables(term, lambda: self.realm), "durables")
        term.run(self.keeper.forget_producers(term, lambda: self.realm), "producers")
        term.run(self.keeper.record_deliveries(term), "deliveries")
        self.reconfiguration = Reconfiguration(term, self.membership, self.etcd, lambda: self.election.lease, lambda:
                                               self.in_background(self.hand_over("no longer a voter", term=term)))
        term.run(self.reconfiguration.run(), "membership")
        event_log = self._event_log()
        if event_log is not None and self.replica.events is not None:
            root, interval = event_log
            term.publish_events(EventPublisher(
                self.replica.events, root, self.cluster_name, epoch, interval,
                lambda: self.replica.state.applied_index, self.replica.log.entry,
                fence=lambda: term.alive() and self.lease_valid()))
        self._serving.set()
        self._notify_leadership(True)
        log.info("leader of %s serving at epoch %d, commit index %d", self.cluster_name, epoch,
                 self.replica.commit_index)

    async def _lead_standby(self, term: LeaderTerm) -> None:
        """Lead a standby set: promises, adopt the best log of the set (every standby log is a
        prefix of the primary's, so the longest holds the others), commit it, replicate; then
        take what the DR service ships (`ship`). No entry of its own (no no-op, no realm, clock,
        expiry or unit-of-work operations): the log stays the primary's, index for index."""
        epoch = term.epoch
        self.replica.promise(epoch, self.member)
        self.leader = LeaderInfo(self.member, self.address, epoch)
        try:
            await self.recovery.recover(term)
            term.start_replication(self._replicator)
            term.commit_held()
            self.replica.set_synced(True)
            # Cut off from its set, it steps aside: shipped entries must reach a majority's disks.
            term.watch_quorum()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.warning("standby recovery for epoch %d failed: %s", epoch, exc)
            if self.election.is_leader and self.election.epoch == epoch:
                self.election.pause(time.monotonic() + self.cluster.lease_ttl_seconds)
                await self.election.resign()
            return
        term.standby_ready = True
        log.info("leader of the standby set of %s at epoch %d, log at index %d", self.cluster_name, epoch,
                 self.replica.log.last_index)

    def ship(self, first_index: int, raws: list[bytes], snapshot: bytes = b"", snapshot_index: int = 0,
             snapshot_epoch: int = 0, primary_commit_index: int = 0, prev_epoch: int | None = None,
             primary_messages: int = 0) -> tuple[bool, int, int, int, int]:
        """The DR service ships entries of the primary's committed log (and its state, when the stream
        sent a snapshot) with the primary's commit index and stored messages as last heard (nothing
        to ship: those alone, for the lag): (accepted, last index, applied index, messages stored and
        acknowledged through it). `prev_epoch`: the primary's epoch at `first_index - 1`; entries that do not continue
        this log there are refused with LogDiverged, as is a snapshot at an index held with another epoch."""
        if not self.standby:
            raise NotStandby(f"cluster {self.cluster_name} at member {self.member}'s site is "
                             f"{self.site.record.describe()}; entries are shipped to a standby set's leader")
        term = self.term
        if term is None or not term.standby_ready or not self.election.is_leader:
            leader = self.leader
            if leader is not None and leader.member != self.member:
                raise NotLeaderError(f"member {self.member} does not lead the standby set of {self.cluster_name}; "
                                     f"{leader.member} does", leader.member, leader.address)
            raise NoLeaderError(f"the standby set of {self.cluster_name} has no leader ready at the moment")
        replica = self.replica
        entries = shipped_entries(replica.log, first_index, raws, snapshot, snapshot_index, snapshot_epoch, prev_epoch)
        if snapshot_index > replica.log.last_index:
            # The primary compacted past what this standby holds: its state replaces ours.
            replica.install(snapshot_index, snapshot_epoch, [snapshot])
            term.durable_index = replica.log.last_index
        accepted = term.ship(first_index, entries, raws)
        self.lag.note(primary_commit_index, replica.log.last_index, primary_messages, stored_messages(replica))
        return (accepted, replica.log.last_index, replica.state.applied_index, stored_messages(replica),
                replica.state.acked_messages)

    async def demote(self, cluster: str) -> tuple[DrRecord, int]:
        """An operator demotes this fenced site (`DrSite.demote`): the record written, and this
        member's last index before (its tail runs from the record's since_index + 1 to it)."""
        last = self.replica.log.last_index
        return await self.site.demote(cluster), last

    async def compare_generation(self, theirs: rpb.GenerationInfo) -> rpb.GenerationInfo:
        """The other site tells its DR role (`DrSite.learn`): this site, after that."""
        return await self.site.learn(theirs)

    def _event_log(self) -> tuple[Path, float] | None:
        """The store event log's directory and publish interval (None: off): the member's
        `event_log_dir` (option or environment) over the realm's cluster `event_log`."""
        settings = self.membership.cluster.event_log
        interval = settings.interval_seconds if settings is not None else DEFAULT_MAX_SECONDS
        if self.config.event_log_dir:
            return Path(self.config.event_log_dir), interval
        if settings is not None:
            return Path(settings.directory), interval
        return None

    def _replicator(self, term: LeaderTerm, peer: str) -> PeerReplicator:
        membership = self.membership
        return PeerReplicator(term, FollowerConnection(self.cluster_name, peer, membership.address_of,
                                                       membership.link_of))

    # --- leaving leadership (the Leadership a term holds) ------------------------------------------

    def elected(self) -> bool:
        """The election holds this member's leader key."""
        return self.election.is_leader

    def lease_valid(self) -> bool:
        """The lease is certainly alive."""
        return self.election.lease_valid()

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task the member owns (cancelled when it stops)."""
        self._own(asyncio.create_task(work))

    def _own(self, task: asyncio.Future[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def step_down(self, reason: str, err: Exception | None = None, term: LeaderTerm | None = None) -> None:
        """Stop leading (only if `term`, when given, is still this member's term). The part that
        decides (nothing pending is answered) happens at once; the clean-up (leader tasks,
        replicators, subscriptions) runs in its own task, shielded, so a caller cancelled
        half-way (the election task on lease loss) cannot leave it undone."""
        current = self.term
        if current is None or (term is not None and term is not current):
            return
        term = current
        self.term = None
        log.info("leaving role %s: %s", term.role.value, reason)
        if term.serving:
            self._notify_leadership(False)
        self._serving.clear()
        cleanup = term.close(err or NotLeaderError(f"member {self.member} stepped down: {reason}"))
        self._own(cleanup)
        await asyncio.shield(cleanup)
        if self.election.is_leader and self.election.epoch == term.epoch:
            # Not deposed by the election (a lease check, a storage failure): the key goes too, or
            # a keep-alive that succeeds later keeps it for a member that serves nothing (not a
            # key of a newer term elected while the clean-up ran).
            await self.election.resign()

    async def hand_over(self, reason: str, err: Exception | None = None, pause: float = 0.0,
                        term: LeaderTerm | None = None) -> None:
        """Stop leading, release the leader key and sit out elections for `pause` seconds (only
        if `term`, when given, is still this member's term: a late call of an ended term must
        not end the next one)."""
        if term is not None and term is not self.term:
            return
        if pause:
            self.election.pause(time.monotonic() + pause)
        await self.step_down(reason, err, term)
        if self.election.is_leader and (term is None or self.election.epoch == term.epoch):
            await self.election.resign()

    async def step_down_and_resign(self, pause: float = 3.0) -> None:
        """Hand leadership over on request: stop serving, release the key, sit out the next election."""
        await self.hand_over("asked to step down", None, pause)

    async def delete_durable(self, destination: str, name: str, content: bool) -> DeleteResult:
        """An operator deletes a durable (the leader does; others say NOT_LEADER, naming it)."""
        try:
            return await self.messaging.delete_durable(destination, name, content)
        except StrongroomError as err:
            raise self.name_leader(err) from None

    def list_durables(self, store: str, destination: str) -> DurableList:
        """Every durable of the cluster, as the leader sees them (others say NOT_LEADER, naming it)."""
        try:
            term = self.require_leader()
        except StrongroomError as err:
            raise self.name_leader(err) from None
        return durable_list(self.replica, self.membership, term, self.realm, store, destination)

    def list_origin_marks(self, store: str, destination: str) -> list[OriginMarkStatus]:
        """The origin marks of the routed stores, as the leader sees them (others: NOT_LEADER, naming it)."""
        try:
            term = self.require_leader()
        except StrongroomError as err:
            raise self.name_leader(err) from None
        return origin_mark_list(term, self.realm, self.cluster_name, store, destination)

    def committed_entries(self, from_index: int, max_entries: int = 0,
                          heartbeat: float = 0.0) -> AsyncIterator[CommittedBatch]:
        """This member's committed log entries from `from_index` on, as they commit
        (`committed.py`): served whatever the member's role."""
        return committed_entries(self.replica, from_index, max_entries, heartbeat, self._leader_silence)

    def _leader_silence(self) -> float:
        """Seconds since this member last heard from a leader: 0 while it serves as one (or, in a
        standby set, leads it), else since the leader's last accepted append."""
        term = self.term
        if term is not None and term.role is Role.LEADER and self.election.is_leader:
            return 0.0
        return time.monotonic() - self.follower.last_heard

    async def _on_deposed(self, reason: str) -> None:
        await self.step_down(reason)

    def _apply_stopped(self, why: str) -> None:
        """The replica stopped applying (an operation this version does not know): never lead."""
        self.election.pause(math.inf)
        if self.is_leader_role():
            self.in_background(self.step_down_and_resign(math.inf))

    def _notify_leadership(self, leading: bool) -> None:
        tell_listeners(self.leadership_listeners, leading, self.in_background, log)
