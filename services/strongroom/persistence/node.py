"""One member of a persistence cluster: the public facade of the persistence service.

It ties together the election (etcd lease + epoch), the replicated log, the state machine,
the followers' replicators, the group-commit proposer and the leader's dispatcher. Servicers
call into it; it raises domain errors only.

Roles: `follower` (accepts appends from the leader of the highest promised epoch),
`recovering` (elected; gathering promises, adopting the most advanced log, committing its
no-op) and `leader` (serving clients). A leader that loses its lease or sees a newer epoch
becomes a follower at once and fails everything not yet confirmed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import grpc

from strongroom.aio import cancel_and_wait, wait_event
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.errors import (
    DurableMismatch,
    InvalidArgument,
    InvalidMatcher,
    MessageTooLarge,
    NoLeaderError,
    NoQuorumError,
    NotLeaderError,
    PersistenceUnavailable,
    SequenceOutsideWindow,
    StaleEpochError,
    StoreLimitExceeded,
    StrongroomError,
    UnknownDestination,
    UnknownDurableKind,
    UnknownMember,
    UnknownOperation,
)
from strongroom.etcd import EtcdClient
from strongroom.keys import leader_key, members_prefix, stored_key
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.dispatcher import Dispatcher, Subscription
from strongroom.persistence.election import Election, LeaderInfo
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.matcher import (
    compile_matcher,
    key_of,
    matcher_text,
    same_matcher,
    validate_matcher,
)
from strongroom.persistence.replicator import PEER_CHANNEL_OPTIONS, PeerReplicator
from strongroom.persistence.state import (
    Durable,
    PublishResult,
    StateMachine,
    content_durable_key,
    durable_key,
)
from strongroom.persistence.storage import RocksStorage, Storage, open_storage
from strongroom.persistence.swap import SwapSpace
from strongroom.realm.model import (
    AckSync,
    Cluster,
    LimitPolicyName,
    PublisherMode,
    Realm,
    Route,
    Store,
    TemplateKind,
)
from strongroom.wire import (
    ENTRY_OPS,
    OPERATION_PUBLISH,
    OPERATION_PUBLISH_BATCH,
    PUBLISH_BATCH_HEAD,
    PUBLISH_BATCH_MESSAGES,
    PUBLISH_MESSAGE,
    length_delimited,
    repeated_after,
)

__all__ = ["PersistenceNode", "NodeConfig", "PublishOutcome"]

log = logging.getLogger("strongroom.node")

# A member whose storage failed while leading sits out elections this long (seconds).
STORAGE_FAILURE_PAUSE = 30.0
# A message past its redelivery limit whose dead-letter destination refused it (store limit)
# stays pending, is not delivered, and is offered to the dead-letter destination again after
# this long (seconds).
DEAD_LETTER_RETRY = 5.0

FOLLOWER = "follower"
RECOVERING = "recovering"
LEADER = "leader"


@dataclass(frozen=True)
class NodeConfig:
    """How a member is started."""

    cluster: str
    member: str
    address: str
    """host:port peers and clients reach this member on."""
    data_dir: Path
    etcd_endpoints: str
    link_address: str = ""
    """host:port the leader sends appends to (the replication link); empty: over gRPC."""


class PublishOutcome(NamedTuple):
    """What a publisher is told (one per published message)."""

    message_seq: int
    duplicate: bool
    confirmed: bool
    log_index: int


_MODES = (mpb.PUBLISH_MODE_STORE_DEFAULT, mpb.PUBLISH_MODE_STORE_CONFIRM_SEND, mpb.PUBLISH_MODE_STORE_SEND_NOCONFIRM)


def check_publish(req: mpb.PublishRequest) -> None:
    """Refuse a malformed publish request (InvalidArgument) before it reaches the log."""
    if not req.destination:
        raise InvalidArgument("destination is required")
    if req.mode not in _MODES:
        raise InvalidArgument(f"unknown publish mode {req.mode}")
    if req.message.sequence and not req.message.producer_id:
        raise InvalidArgument("a message sequence needs a producer_id")


def _invalid(req: mpb.PublishRequest) -> StrongroomError | None:
    try:
        check_publish(req)
    except StrongroomError as err:
        return err
    return None


def publish_outcome(result: object, message: cpb.Message, index: int) -> PublishOutcome | StrongroomError:
    """What the publisher of `message` is told of its applied publish."""
    assert isinstance(result, PublishResult)
    if result.outside_window:
        return SequenceOutsideWindow(
            f"sequence {message.sequence} of producer {message.producer_id!r} is older than the "
            f"deduplication window; it was not stored")
    if result.rejected:
        return StoreLimitExceeded(f"{result.limit}; the message was not stored")
    return PublishOutcome(result.message_seq, result.duplicate, True, index)


def _publish_op(head: bytes, body: bytes) -> bytes:
    """An encoded Operation carrying a PublishOp: `head` (an encoded PublishOp without its
    message) and the serialised message."""
    return length_delimited(OPERATION_PUBLISH, head + length_delimited(PUBLISH_MESSAGE, body))


def _publish_batch_op(head: bytes, bodies: list[bytes]) -> bytes:
    """An encoded Operation carrying a PublishBatchOp: `head` as for `_publish_op`, and the
    serialised messages."""
    return length_delimited(OPERATION_PUBLISH_BATCH, repeated_after(
        length_delimited(PUBLISH_BATCH_HEAD, head), PUBLISH_BATCH_MESSAGES, bodies))


def _publish_ops(head: bytes, bodies: list[bytes], batch: bool) -> list[bytes]:
    """A run of messages to one destination as operations: one PublishBatchOp (log format 2)
    or one PublishOp each."""
    if batch:
        return [_publish_batch_op(head, bodies)]
    return [_publish_op(head, body) for body in bodies]


class PendingPublishes:
    """Publishes submitted to the log together; `outcomes()` waits for their round."""

    __slots__ = ("_outcomes", "_positions", "_fut", "_requests", "_broken")

    def __init__(self, outcomes: list[PublishOutcome | StrongroomError | None], positions: list[int],
                 fut: asyncio.Future[object] | None, requests: Sequence[mpb.PublishRequest],
                 broken: list[StrongroomError]) -> None:
        self._outcomes = outcomes
        self._positions = positions  # the requests in the round, in order
        self._fut = fut
        self._requests = requests
        self._broken = broken

    async def outcomes(self) -> list[PublishOutcome | StrongroomError]:
        """One outcome or error per request, in order."""
        outcomes = self._outcomes
        if self._fut is not None:
            try:
                results, index = await self._fut  # type: ignore[misc]
            except StrongroomError as err:
                if err.retriable and not self._broken:
                    self._broken.append(err)
                for pos in self._positions:
                    outcomes[pos] = err
            else:
                requests = self._requests
                for pos, result in zip(self._positions, results):
                    outcomes[pos] = publish_outcome(result, requests[pos].message, index)
        return [o for o in outcomes if o is not None]


class PersistenceNode:
    """A persistence cluster member."""

    def __init__(self, config: NodeConfig, realm: Realm, realm_version: int) -> None:
        cluster = realm.cluster(config.cluster)
        if cluster is None:
            raise UnknownMember(f"cluster {config.cluster!r} is not defined in the realm (version {realm_version})")
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
        self.cluster: Cluster = cluster
        self.storage_mode = cluster.storage.value
        self.etcd = EtcdClient(config.etcd_endpoints)
        # Indexes on disk: the replicated state lives in column families of this storage.
        self.indexes_on_disk = cluster.indexes_on_disk
        self.storage: Storage = open_storage(self.storage_mode, config.data_dir,
                                             STATE_COLUMN_FAMILIES if self.indexes_on_disk else ())
        loaded = self.storage.load()
        self.started_empty = loaded.empty
        self.promised_epoch = loaded.promised_epoch
        self.synced = loaded.synced
        # True once this member has (durably) recorded in etcd that it acknowledges entries.
        self.stored = loaded.stored
        self.log = ReplicatedLog(self.storage, loaded)
        # Message swapping (memory budget): payloads of the memory-storage replicated state and
        # of the non-replicated stores move to data_dir/swap past the budget.
        self.swap = SwapSpace(config.data_dir / "swap", cluster.memory_budget_mb * 1024 * 1024)
        self.state = self._new_state(replicated=True, snapshot=loaded.snapshot)
        # With indexes on disk the state resumes at its own applied index (at least the commit
        # index's hint, which is written lazily).
        self.commit_index = max(self.log.snapshot_index, min(loaded.commit_index, self.log.last_index),
                                self.state.applied_index)
        self.local_state = self._new_state(replicated=False)  # non-replicated stores, leader only
        # Highest index this member has durably stored (the leader's own vote in commits).
        self.durable_index = self.log.last_index
        self.role = FOLLOWER
        self.epoch = 0
        self.leader: LeaderInfo | None = None
        self.peer_addresses: dict[str, str] = {m.name: m.address for m in cluster.members if m.address}
        self.peer_addresses[config.member] = config.address
        # Peers' replication link addresses from their etcd registrations (None: none).
        self.peer_links: dict[str, str | None] = {}
        # The log format each peer registered it reads (1 if it registered none).
        self.peer_formats: dict[str, int] = {}
        self.replicators: dict[str, PeerReplicator] = {}
        self.dispatcher: Dispatcher | None = None
        self._apply_soon = False  # a follower's apply of newly committed entries is scheduled
        # Why this member stopped applying the log (`_stop_applying`); None while it applies.
        self.apply_stopped: str | None = None
        # Queued client work: (serialised operations, future or None, how many results they
        # give). A future resolves to (results, log index): one result per operation (per
        # message of a PublishBatchOp), in order.
        self._queue: list[tuple[list[bytes], asyncio.Future[object] | None, int]] = []
        self._resolved: dict[str, Route] = {}
        self._queue_wake = asyncio.Event()
        # index -> (epoch of the entry, [(future, how many of the entry's results are its)])
        self._waiters: dict[int, tuple[int, list[tuple[asyncio.Future[object] | None, int]]]] = {}
        self._commit_changed = asyncio.Event()
        self._leader_tasks: list[asyncio.Task[None]] = []
        self._serving = asyncio.Event()
        self._lock = asyncio.Lock()
        self._background: list[asyncio.Task[None]] = []
        self._prepared = False
        # Called with True when this member starts serving as leader and False when it stops
        # (e.g. the Kubernetes pod label). Exceptions are logged, never raised into the node.
        self.leadership_listeners: list[Callable[[bool], Awaitable[None]]] = []
        self._leader_since = 0.0
        self.election = Election(self.etcd, config.cluster, config.member, config.address,
                                 cluster.lease_ttl_seconds, self._on_elected, self._on_deposed,
                                 self._on_leader_info, link_address=config.link_address)
        # Re-apply what this member knew was committed (restart: snapshot + log suffix).
        self._apply_committed()

    def _new_state(self, replicated: bool, snapshot: bytes | None = None) -> StateMachine:
        """A state machine for the replicated stores or for the non-replicated ones, with its
        payloads in the swap space when they are swappable (in-memory data and a budget)."""
        if replicated and self.indexes_on_disk:
            assert isinstance(self.storage, RocksStorage)
            state = DiskStateMachine.open(self.storage)
            if snapshot and state.applied_index < self.log.snapshot_index:
                # A snapshot kept from before indexes on disk were turned on.
                state.install(snapshot)
            return state
        swappable = self.swap.enabled and (not replicated or self.storage_mode == "memory")
        payloads = self.swap.store() if swappable else None
        if snapshot:
            return StateMachine.from_snapshot(snapshot, payloads)
        return StateMachine(payloads)

    # --- lifecycle --------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before serving any replication call: if our state was lost, fence deposed leaders.

        Our promise was lost with our state, so we promise the newest epoch etcd may have
        issued: a deposed leader's appends are refused (it cannot use our amnesia to form a
        majority). The revision is read before the leader key so a leader key created in
        between cannot end up below the floor.
        """
        if self.started_empty or self.storage_mode == "memory":
            revision = await self.etcd.revision()
            leader = await self.etcd.get(leader_key(self.cluster_name))
            floor = leader.create_revision if leader is not None else revision
            self._promise(max(self.promised_epoch, floor))
            # Lost state we had acknowledged? Then catch up before counting toward a recovery
            # majority; a member that never acknowledged anything counts at once.
            had_state = await self.etcd.get(stored_key(self.cluster_name, self.member))
            self.stored = had_state is not None
            self.synced = not self.stored
            self.storage.set_meta(synced=self.synced, stored=self.stored)
        elif not self.stored:
            self.synced = True
        self._prepared = True

    async def start(self) -> None:
        """Join the election (after `prepare` and once the server is up)."""
        if not self._prepared:
            await self.prepare()
        self._background.append(asyncio.create_task(self._watch_members(), name="members"))
        self._background.append(asyncio.create_task(self._quorum_watchdog(), name="quorum"))
        self.election.start()

    async def stop(self) -> None:
        """Leave cleanly: step down, resign, close storage."""
        for task in self._background:
            task.cancel()
        await self._step_down("member stopping")
        await self.election.stop(resign=True)
        await self.etcd.close()
        self.storage.close()
        self.swap.close()

    def update_realm(self, realm: Realm, version: int) -> None:
        """A new realm version: new stores and destinations take effect without restart."""
        cluster = realm.cluster(self.cluster_name)
        if cluster is None or cluster.member(self.member) is None:
            log.error("realm version %d no longer lists this member; keeping version %d", version, self.realm_version)
            return
        if [m.name for m in cluster.members] != [m.name for m in self.cluster.members]:
            # Changing who counts toward a majority needs agreement on when it changes; until
            # that exists the member list is fixed for the life of the process.
            log.error("realm version %d changes the members of cluster %s; membership changes are "
                      "not applied to a running member (restart the cluster to change them)",
                      version, self.cluster_name)
        else:
            self.cluster = cluster
            for m in cluster.members:
                if m.address:
                    self.peer_addresses[m.name] = m.address
        self.realm = realm
        self.realm_version = version
        self._resolved = {}
        log.info("realm version %d in effect", version)
        if self.is_leader_role():
            self._background.append(asyncio.create_task(self._reconfigure(self.epoch)))

    # --- election callbacks ---------------------------------------------------------------------

    def _on_leader_info(self, info: LeaderInfo | None) -> None:
        self.leader = info

    async def _on_elected(self, epoch: int, lease_safe_until: float) -> None:
        task = asyncio.create_task(self._recover(epoch), name="recover")
        self._leader_tasks.append(task)

    async def _on_deposed(self, reason: str) -> None:
        await self._step_down(reason)

    async def observe_higher_epoch(self, epoch: int, reason: str) -> None:
        """A peer promised a newer epoch: someone else leads now. Called from replicator tasks,
        so the step-down (which stops them) runs in a task of its own."""
        if epoch > self.epoch and self.role != FOLLOWER:
            log.warning("stepping down: %s (epoch %d > %d)", reason, epoch, self.epoch)
            self._fail_pending(NotLeaderError(f"member {self.member} stepped down: {reason}"))

            async def go() -> None:
                await self._step_down(reason)
                await self.election.resign()

            self._background.append(asyncio.create_task(go()))

    async def step_down_and_resign(self, pause: float = 3.0) -> None:
        """Hand leadership over: stop serving, release the key, stay out of the next election."""
        self.election.pause(time.monotonic() + pause)
        await self._step_down("asked to step down")
        await self.election.resign()

    def is_leader_role(self) -> bool:
        """Elected and not deposed (recovering or serving)."""
        return self.role in (RECOVERING, LEADER) and self.election.is_leader

    def _notify_leadership(self, leading: bool) -> None:
        async def call(listener: Callable[[bool], Awaitable[None]]) -> None:
            try:
                await listener(leading)
            except Exception as exc:  # noqa: BLE001 - a listener never breaks the node
                log.warning("leadership listener failed: %s", exc)

        for listener in self.leadership_listeners:
            self._background.append(asyncio.create_task(call(listener)))

    def _fail_pending(self, err: Exception) -> None:
        """Fail every unconfirmed request now: nothing queued or in flight may be answered by a
        member that is no longer the leader."""
        waiters, self._waiters = self._waiters, {}
        for _, futs in waiters.values():
            for fut, _ in futs:
                if fut is not None and not fut.done():
                    fut.set_exception(err)
        queue, self._queue = self._queue, []
        for _, fut, _ in queue:
            if fut is not None and not fut.done():
                fut.set_exception(err)

    async def _step_down(self, reason: str, err: Exception | None = None) -> None:
        """Stop leading. The part that decides (role, pending requests) happens at once; the
        clean-up (leader tasks, replicators, subscriptions) runs in its own task, shielded, so a
        caller cancelled half-way (e.g. the election task on lease loss) cannot leave it undone."""
        if self.role == FOLLOWER and not self._leader_tasks and not self.replicators and self.dispatcher is None:
            self._fail_pending(err or NotLeaderError(f"member {self.member} is not the leader"))
            return
        log.info("leaving role %s: %s", self.role, reason)
        if self.role == LEADER:
            self._notify_leadership(False)
        self.role = FOLLOWER
        self._serving.clear()
        self._fail_pending(err or NotLeaderError(f"member {self.member} stepped down: {reason}"))
        tasks, self._leader_tasks = self._leader_tasks, []
        replicators, self.replicators = self.replicators, {}
        dispatcher, self.dispatcher = self.dispatcher, None
        self.state.on_pending = self.state.on_acked = self.state.on_reset = None
        # Non-replicated stores live only on the leader; they are gone with its leadership.
        old_local, self.local_state = self.local_state, self._new_state(replicated=False)
        current = asyncio.current_task()
        cleanup = asyncio.ensure_future(self._clean_up_leadership(tasks, replicators, dispatcher, current))
        # Its swap goes once the dispatcher that may still read it has stopped.
        cleanup.add_done_callback(lambda _: old_local.close())
        self._background.append(cleanup)
        await asyncio.shield(cleanup)

    async def _clean_up_leadership(self, tasks: list[asyncio.Task[None]], replicators: dict[str, PeerReplicator],
                                   dispatcher: Dispatcher | None, current: asyncio.Task[object] | None) -> None:
        for task in tasks:
            if task is not current:
                task.cancel()
        for rep in replicators.values():
            await rep.stop()
        if dispatcher is not None:
            await dispatcher.stop("NOT_LEADER", f"member {self.member} is no longer the leader")
        for task in tasks:
            if task is not current:
                await cancel_and_wait(task)  # type: ignore[arg-type]

    def _majority_contact(self) -> float:
        """When a majority (counting ourselves) last answered us (monotonic time)."""
        acks = sorted((r.last_ack for r in self.replicators.values()), reverse=True)
        need = self._majority() - 1
        if need == 0:
            return time.monotonic()
        return acks[need - 1] if len(acks) >= need else 0.0

    async def _quorum_watchdog(self) -> None:
        """A leader that keeps its lease but cannot reach a majority steps aside, so members
        that can reach each other elect a leader that can commit."""
        while True:
            await asyncio.sleep(0.25)
            if self.role != LEADER:
                continue
            ttl = self.cluster.lease_ttl_seconds
            silent = time.monotonic() - max(self._majority_contact(), self._leader_since)
            if silent > ttl:
                log.warning("no majority answered for %.1fs; stepping down", silent)
                self.election.pause(time.monotonic() + ttl)
                await self._step_down("no quorum", NoQuorumError(
                    f"leader {self.member} cannot reach a majority of cluster {self.cluster_name}"))
                await self.election.resign()

    # --- recovery -------------------------------------------------------------------------------

    def _promise(self, epoch: int) -> None:
        if epoch > self.promised_epoch:
            self.storage.set_promised(epoch)
            self.promised_epoch = epoch

    def _peers(self) -> list[str]:
        return [m.name for m in self.cluster.members if m.name != self.member]

    def _majority(self) -> int:
        return len(self.cluster.members) // 2 + 1

    @property
    def batch_publishes(self) -> bool:
        """Whether publishes may go as PublishBatchOps (log format 2): every other member has
        registered that it reads format 2."""
        return all(self.peer_formats.get(m.name, 1) >= 2 for m in self.cluster.members if m.name != self.member)

    def peer_address(self, name: str) -> str | None:
        """Where a peer listens (realm address, else its etcd registration)."""
        return self.peer_addresses.get(name)

    def peer_link_address(self, name: str) -> str | None:
        """Where a peer takes appends on its replication link (its etcd registration); None:
        it registered none, appends go to it over gRPC."""
        return self.peer_links.get(name)

    async def _watch_members(self) -> None:
        prefix = members_prefix(self.cluster_name)
        while True:
            try:
                kvs, revision = await self.etcd.get_prefix_at(prefix)
                for kv in kvs:
                    self._note_member(kv.key[len(prefix):], kv.value)
                async for events in self.etcd.watch(prefix, prefix=True, start_revision=revision + 1):
                    for kind, kv in events:
                        if kind == "PUT":
                            self._note_member(kv.key[len(prefix):], kv.value)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away: retry
                log.debug("member watch broke: %s", exc)
                await asyncio.sleep(0.5)

    def _note_member(self, name: str, value: bytes) -> None:
        member = self.cluster.member(name)
        if member is None:
            return
        try:
            record = json.loads(value)
            address = record["address"]
        except (ValueError, KeyError, TypeError):
            return
        link = record.get("replication") or None
        if self.peer_links.get(name, "") != link:  # "": not heard of yet (a link is None or an address)
            log.info("member %s takes appends %s", name, f"on its replication link at {link}" if link else "over gRPC")
            self.peer_links[name] = link
        fmt = record.get("log_format")
        fmt = fmt if isinstance(fmt, int) else 1
        if self.peer_formats.get(name) != fmt:
            log.info("member %s reads log format %d", name, fmt)
            self.peer_formats[name] = fmt
        if member.address:
            return
        if self.peer_addresses.get(name) != address:
            log.info("member %s registered at %s", name, address)
        self.peer_addresses[name] = address

    async def _recover(self, epoch: int) -> None:
        """Become a serving leader for `epoch`: promises, adopt the best log, commit a no-op."""
        if self.apply_stopped:
            # Elected all the same (the campaign was under way when the apply stopped).
            await self.election.resign()
            return
        self.epoch = epoch
        self.role = RECOVERING
        self._promise(epoch)
        self.leader = LeaderInfo(self.member, self.address, epoch)
        try:
            best = await self._gather_promises(epoch)
            if best is not None:
                await self._adopt_log(epoch, best)
            await self._mark_stored()
            self.durable_index = self.log.last_index
            for name in self._peers():
                rep = PeerReplicator(self, name, epoch, self.peer_address, self.peer_link_address)
                self.replicators[name] = rep
                rep.start()
            self._leader_tasks.append(asyncio.create_task(self._proposer(epoch), name="proposer"))
            noop = rpb.Operation(noop=rpb.Noop(leader=self.member))
            fut = self._submit([noop])
            assert fut is not None
            await fut
            # Store limits from the realm, in the log before the first client operation.
            await self._configure_stores(epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.warning("recovery for epoch %d failed: %s", epoch, exc)
            if self.election.is_leader and self.epoch == epoch:
                # Let another member try before we campaign again.
                self.election.pause(time.monotonic() + self.cluster.lease_ttl_seconds)
                await self.election.resign()
            return
        if self.epoch != epoch or not self.election.is_leader:
            return
        self._leader_tasks.append(asyncio.create_task(self._expirer(epoch), name="expirer"))
        self.role = LEADER
        self._leader_since = time.monotonic()
        self.synced = True
        self.storage.set_meta(synced=True)
        self.dispatcher = Dispatcher(f"{self.member}-{epoch}", redelivery_limit=self.redelivery_limit,
                                     dead_letter=self.dead_letter)
        self.dispatcher.attach(self.state)
        self.dispatcher.attach(self.local_state)
        self.dispatcher.start()
        self._serving.set()
        self._notify_leadership(True)
        log.info("leader of %s serving at epoch %d, commit index %d", self.cluster_name, epoch, self.commit_index)

    async def _mark_stored(self) -> None:
        """Before the first acknowledgment of entries: record in etcd that this member holds
        acknowledged state (see `stored_key`). Raises if etcd cannot be reached."""
        if self.stored:
            return
        await self.etcd.put(stored_key(self.cluster_name, self.member), b"1")
        self.stored = True
        self.storage.set_meta(stored=True)

    async def _gather_promises(self, epoch: int) -> tuple[str, rpb.PromiseResponse] | None:
        """Promises from a majority of synced members; returns the most advanced peer if it is
        ahead of us (None if we are the most advanced)."""
        mine = rpb.PromiseResponse(ok=True, promised_epoch=epoch, last_index=self.log.last_index,
                                   last_epoch=self.log.last_epoch, commit_index=self.commit_index,
                                   synced=self.synced, member=self.member)
        delay = 0.05
        waits = 0
        give_up = time.monotonic() + 2 * self.cluster.lease_ttl_seconds
        while True:
            if self.epoch != epoch or not self.election.is_leader:
                raise PersistenceUnavailable("deposed during recovery")
            if time.monotonic() > give_up:
                raise NoQuorumError(f"no majority of synced members answered epoch {epoch}")
            replies = await asyncio.gather(*(self._ask_promise(p, epoch) for p in self._peers()))
            answered = [mine] + [r for r in replies if r is not None and r.ok]
            for r in replies:
                if r is not None and not r.ok and r.promised_epoch > epoch:
                    raise StaleEpochError(f"{r.member} promised epoch {r.promised_epoch}")
            synced = [r for r in answered if r.synced]
            if len(synced) >= self._majority():
                best = max(synced, key=lambda r: (r.last_epoch, r.last_index))
                if (best.last_epoch, best.last_index) > (self.log.last_epoch, self.log.last_index):
                    return best.member, best
                return None
            if len(answered) == len(self.cluster.members) and not synced:
                # Every member lost its state (a memory cluster restarted whole): there is
                # nothing left to recover; start over from the empty state.
                log.warning("no member holds state; cluster %s starts empty", self.cluster_name)
                return None
            waits += 1
            if waits % 20 == 1:
                log.info("epoch %d: waiting for promises from a majority of synced members "
                         "(answered: %s; synced: %s)", epoch, [r.member for r in answered],
                         [r.member for r in synced])
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _ask_promise(self, peer: str, epoch: int) -> rpb.PromiseResponse | None:
        address = self.peer_address(peer)
        if address is None:
            return None
        try:
            async with grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS) as channel:
                stub = rgrpc.ReplicationServiceStub(channel)
                return await stub.Promise(rpb.PromiseRequest(epoch=epoch, leader=self.member), timeout=1.0)
        except grpc.aio.AioRpcError:
            return None

    async def _adopt_log(self, epoch: int, best: tuple[str, rpb.PromiseResponse]) -> None:
        """Fetch the entries the most advanced member has beyond our committed prefix."""
        name, resp = best
        address = self.peer_address(name)
        if address is None:
            raise PersistenceUnavailable(f"no address for {name}")
        log.info("adopting log of %s (last %d/%d) from index %d", name, resp.last_epoch, resp.last_index,
                 self.commit_index + 1)
        async with grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS) as channel:
            stub = rgrpc.ReplicationServiceStub(channel)
            next_index = self.commit_index + 1
            while next_index <= resp.last_index:
                fetched = await stub.Fetch(rpb.FetchRequest(epoch=epoch, from_index=next_index, max_entries=512),
                                           timeout=30.0)
                if fetched.snapshot:
                    self._install(fetched.snapshot_index, fetched.snapshot_epoch, fetched.snapshot)
                    next_index = fetched.snapshot_index + 1
                if not fetched.entries:
                    break
                # Our committed prefix matches theirs; the first entry that differs truncates
                # our (uncommitted) suffix.
                outcome = self.log.append_from_leader(next_index - 1, self.log.epoch_at(next_index - 1) or 0,
                                                      list(fetched.entries))
                if not outcome.ok:
                    raise PersistenceUnavailable("adopted log does not match our committed prefix")
                next_index = fetched.entries[-1].index + 1
            # Entries of ours beyond the adopted log's end are from older epochs: drop them.
            self.log.truncate_after(resp.last_index)

    # --- the write path ----------------------------------------------------------------------

    def require_leader(self) -> None:
        if self.role == LEADER and self.election.is_leader:
            return
        if self.leader is not None and self.leader.member != self.member:
            raise NotLeaderError(f"member {self.member} is not the leader of {self.cluster_name}; "
                                 f"{self.leader.member} is", self.leader.member, self.leader.address)
        if self.role == RECOVERING:
            raise PersistenceUnavailable(f"member {self.member} is recovering leadership")
        raise NoLeaderError(f"cluster {self.cluster_name} has no leader at the moment")

    def _submit(self, ops: list[rpb.Operation], want_result: bool = True) -> asyncio.Future[object] | None:
        """Queue operations for the next round; the future resolves to (results, log index)."""
        return self._submit_raw([op.SerializeToString() for op in ops], want_result)

    def _submit_raw(self, ops: list[bytes], want_result: bool = True,
                    results: int | None = None) -> asyncio.Future[object] | None:
        """Like `_submit`, the operations already serialised; `results`: how many results
        they give (one per operation unless some are PublishBatchOps)."""
        fut = asyncio.get_running_loop().create_future() if want_result else None
        self._queue.append((ops, fut, len(ops) if results is None else results))
        self._queue_wake.set()
        return fut

    async def _commit_one(self, op: rpb.Operation) -> tuple[object, int]:
        fut = self._submit([op])
        assert fut is not None
        results, index = await fut  # type: ignore[misc]
        return results[0], index

    async def _proposer(self, epoch: int) -> None:
        """Run the group commit; if this member's storage fails (disk full, I/O error), stop
        leading at once so the others elect a leader that can store, and stay out of
        elections for a while."""
        try:
            await self._proposer_rounds(epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - storage failure: hand over
            log.error("storage failed while leading (%s); stepping down", exc)
            self.election.pause(time.monotonic() + STORAGE_FAILURE_PAUSE)
            await self._step_down("storage failed", PersistenceUnavailable(
                f"member {self.member} cannot write its storage: {exc}"))
            await self.election.resign()

    async def _proposer_rounds(self, epoch: int) -> None:
        """Group commit: everything queued during the previous round goes out as one entry, one
        storage write (one fsync) and one Append per follower."""
        max_ops = self.cluster.max_batch_ops
        while self.epoch == epoch and self.is_leader_role():
            if not self._queue:
                self._queue_wake.clear()
                await self._queue_wake.wait()
                continue
            taken = 0
            count = 0
            for _, _, n in self._queue:
                taken += 1
                count += n
                if count >= max_ops:
                    break
            batch, self._queue = self._queue[:taken], self._queue[taken:]
            if not self.election.lease_valid():
                for _, fut, _ in batch:
                    if fut is not None and not fut.done():
                        fut.set_exception(NotLeaderError("leader lease expired"))
                await self._step_down("lease could not be renewed in time")
                return
            # The entry is made as bytes (its head, then every operation as it was queued) and
            # parsed once for the log and this member's apply.
            index = self.log.last_index + 1
            raw = repeated_after(rpb.LogEntry(index=index, epoch=epoch).SerializeToString(), ENTRY_OPS,
                                 [op for ops, _, _ in batch for op in ops])
            entry = rpb.LogEntry.FromString(raw)
            self._waiters[index] = (epoch, [(fut, n) for _, fut, n in batch])
            # The followers get the entry before this member stores it: the replicators kicked
            # here write their appends in the one loop turn given to them, and this member's
            # own write (with its fsync, disk-sync) then runs while the followers store theirs.
            # The write runs on the loop thread (a worker thread cost the leader about 0.2 ms
            # of CPU per round in handing it over and back, and the round no less time), and
            # even if this task is cancelled meanwhile (stepping down): the log in memory never
            # holds an entry its storage does not. This member counts itself toward the
            # majority only once its write returned.
            self.log.add_local(entry, raw)
            for rep in self.replicators.values():
                rep.kick()
            try:
                await asyncio.sleep(0)
            finally:
                self.log.store_last()
            if self.epoch != epoch or not self.is_leader_role():
                return
            self.durable_index = entry.index
            self._advance_commit()
            while self.commit_index < entry.index and self.epoch == epoch and self.is_leader_role():
                self._commit_changed.clear()
                await self._commit_changed.wait()

    def on_match(self, peer: str) -> None:
        """A follower stored more entries: maybe commit."""
        self._advance_commit()

    def _advance_commit(self) -> None:
        if not self.is_leader_role():
            return
        matches = sorted([self.durable_index] + [r.match_index for r in self.replicators.values()], reverse=True)
        candidate = matches[self._majority() - 1]
        # Only an entry of our own epoch commits by counting; earlier ones commit with it.
        if candidate > self.commit_index and self.log.epoch_at(candidate) == self.epoch:
            if not self.election.lease_valid():
                # Never confirm after the lease may have expired: another leader may exist.
                asyncio.create_task(self._step_down("lease could not be renewed in time"))
                return
            self.commit_index = candidate
            self._apply_committed()
            self._commit_changed.set()
            for rep in self.replicators.values():
                rep.commit_advanced()

    def _apply_committed(self) -> None:
        state = self.state
        lg = self.log
        if self.apply_stopped:
            lg.release(self.commit_index)
            return
        while state.applied_index < self.commit_index:
            index = state.applied_index + 1
            if index <= lg.snapshot_index:
                raise AssertionError("applied index behind the snapshot")
            entry = lg.entry(index)
            try:
                results = state.apply_entry(entry)
            except UnknownOperation as err:
                self._stop_applying(err)
                return
            waiting = self._waiters.pop(index, None)
            # Only the entry our own round appended answers our callers: a later leader may
            # have put another entry at this index.
            if waiting is not None and waiting[0] == entry.epoch:
                at = 0
                for fut, n in waiting[1]:
                    if fut is not None and not fut.done():
                        fut.set_result((results[at:at + n], index))
                    at += n
        lg.release(state.applied_index)
        self._maybe_compact()

    def _stop_applying(self, err: UnknownOperation) -> None:
        """A committed entry holds an operation this version does not know (a newer version
        wrote it; see "Log format" in the README). Skipping it would leave this member's state
        different from the others', so applying stops before it: the state stays whole at
        the entry before. The member goes on storing and acknowledging entries (its log still
        counts toward majorities) and answers status with the reason, but it never leads
        again until it runs a version that knows the operation (a restart re-applies)."""
        self.apply_stopped = (f"stopped applying the log after index {self.state.applied_index}: {err.message}; "
                              f"run a version that knows the operation")
        log.critical("%s", self.apply_stopped)
        self.election.pause(math.inf)
        if self.is_leader_role():
            self._background.append(asyncio.create_task(self.step_down_and_resign(math.inf)))

    def _apply_deferred(self) -> None:
        self._apply_soon = False
        self._apply_committed()

    def _maybe_compact(self) -> None:
        applied = self.state.applied_index
        if applied - self.log.snapshot_index < self.cluster.compact_after_entries:
            return
        if self.is_leader_role():
            # Keep what reachable followers still need unless the log has grown far too long.
            lagging = [r.match_index for r in self.replicators.values() if r.reachable]
            floor = min(lagging) if lagging else applied
            if floor - self.log.snapshot_index < self.cluster.compact_after_entries and \
                    applied - self.log.snapshot_index < 4 * self.cluster.compact_after_entries:
                return
        # A snapshot is the state at its index, and only the applied state is at hand. With
        # indexes on disk the state itself is on disk at that index: no snapshot is kept.
        snapshot = b"" if self.indexes_on_disk else self.state.to_snapshot()
        self.log.compact(applied, self.state.applied_epoch, snapshot)

    def snapshot_for_peer(self) -> tuple[int, int, bytes]:
        """The state machine at the applied index, for a follower that is too far behind."""
        return self.state.applied_index, self.state.applied_epoch, self.state.to_snapshot()

    # --- client operations ---------------------------------------------------------------------

    def resolve(self, destination: str) -> Route:
        """The route of a destination or endpoint name, or UnknownDestination (cached per realm
        version)."""
        hit = self._resolved.get(destination)
        if hit is not None:
            return hit
        route = self.realm.route(destination)
        if route.store.cluster != self.cluster_name:
            raise UnknownDestination(f"destination {destination!r} maps to store {route.store.name!r} "
                                     f"of cluster {route.store.cluster!r}, not {self.cluster_name!r}")
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[destination] = route
        return route

    async def publish(self, destination: str, message: cpb.Message, mode: int) -> PublishOutcome:
        """Store one message; with confirm-send, return once committed."""
        req = mpb.PublishRequest(destination=destination, message=message, mode=mode)
        (outcome,) = await self.publish_batch([req], None, [])
        if isinstance(outcome, StrongroomError):
            raise outcome
        return outcome

    async def publish_batch(self, requests: Sequence[mpb.PublishRequest], term: list[int] | None,
                            broken: list[StrongroomError]) -> list[PublishOutcome | StrongroomError]:
        """Store several messages; one outcome or error per request, in order."""
        return await self.submit_publishes(requests, term, broken).outcomes()

    def submit_publishes(self, requests: Sequence[mpb.PublishRequest], term: list[int] | None,
                         broken: list[StrongroomError]) -> PendingPublishes:
        """Store several messages: the replicated ones go into the next round as one group, now
        (a publish stream submits each batch as it reads it, with no task per batch); the
        returned `PendingPublishes` waits for their outcomes.

        `term` (owned by a publish stream) pins the stream to one leadership epoch: a stream
        that outlives a change of epoch, even back to this member, is refused so the client
        re-sends its unconfirmed messages in order on a fresh stream. `broken` (also owned by
        the stream) holds the first retriable error: every later request fails with it, which
        keeps one publisher's messages in order.
        """
        # Leadership cannot change while this synchronous part runs: check it once per batch.
        try:
            if broken:
                raise broken[0]
            self.require_leader()
            if term is not None:
                if not term:
                    term.append(self.epoch)
                elif term[0] != self.epoch:
                    raise PersistenceUnavailable("leadership changed during this publish stream; reconnect")
        except StrongroomError as err:
            if err.retriable and not broken:
                broken.append(err)
            # A malformed request is refused as such; the rest share the stream's error.
            return PendingPublishes([_invalid(req) or err for req in requests], [], None, requests, broken)
        outcomes: list[PublishOutcome | StrongroomError | None] = [None] * len(requests)
        ops: list[bytes] = []
        positions: list[int] = []
        confirm_any = False
        # Consecutive messages to one destination form a run: one PublishBatchOp in log format
        # 2 (its head once, then the messages), else one PublishOp each; applied in order.
        batching = self.batch_publishes
        run_head = b""
        run: list[bytes] = []
        # The leader's clock stamps the batch; members never read their own clocks to decide.
        now = time.time()
        # Per destination of this batch: its route and the encoded PublishOp without the message.
        heads: dict[str, tuple[Route, bytes]] = {}
        for i, req in enumerate(requests):
            try:
                check_publish(req)
                destination = req.destination
                known = heads.get(destination)
                if known is None:
                    route = self.resolve(destination)
                    known = heads[destination] = (route, self._publish_head(route, destination, now))
                route, head = known
                store = route.store
                message = req.message
                body = message.SerializeToString()
                if len(body) > store.max_message_bytes:
                    raise MessageTooLarge(f"message of {len(body)} bytes exceeds store {store.name!r} limit of "
                                          f"{store.max_message_bytes} bytes")
                if not store.replicated:
                    result = self.local_state.apply_op(rpb.Operation.FromString(_publish_op(head, body)))
                    outcomes[i] = publish_outcome(result, message, 0)
                    continue
                if head is not run_head and run:
                    ops += _publish_ops(run_head, run, batching)
                    run = []
                run_head = head
                run.append(body)
                positions.append(i)
                confirm_any = confirm_any or req.mode == mpb.PUBLISH_MODE_STORE_CONFIRM_SEND or (
                    req.mode == mpb.PUBLISH_MODE_STORE_DEFAULT
                    and store.publisher_mode == PublisherMode.STORE_CONFIRM_SEND)
            except StrongroomError as err:
                outcomes[i] = err
        if run:
            ops += _publish_ops(run_head, run, batching)
        fut = self._submit_raw(ops, want_result=confirm_any, results=len(positions)) if ops else None
        if ops and fut is None:
            for pos in positions:
                outcomes[pos] = PublishOutcome(0, False, False, 0)
            positions = []
        return PendingPublishes(outcomes, positions, fut, requests, broken)

    @staticmethod
    def _publish_head(route: Route, destination: str, now: float) -> bytes:
        """A PublishOp to `destination` at `now`, without its message, encoded."""
        rule = route.rule
        return rpb.PublishOp(
            store=route.store.name, destination=destination, queue=route.queue, content=route.endpoint,
            published_at=now, expires_at=now + rule.ttl_seconds if rule.ttl_seconds else 0.0,
            retain_until=now + rule.retain_seconds if rule.retain_seconds else 0.0).SerializeToString()

    def _state_for(self, store: Store) -> StateMachine:
        return self.state if store.replicated else self.local_state

    # --- store settings and message lifetimes -------------------------------------------------------

    def _store_config(self, store: Store) -> rpb.ConfigureStoreOp:
        policy = (cpb.LIMIT_POLICY_DISCARD_OLDEST if store.limit_policy == LimitPolicyName.DISCARD_OLDEST
                  else cpb.LIMIT_POLICY_REJECT)
        return rpb.ConfigureStoreOp(store=store.name, max_messages=store.max_messages, max_bytes=store.max_bytes,
                                    policy=policy)

    async def _configure_stores(self, epoch: int) -> None:
        """Put the realm's store limits into the state machines where they differ, so every
        member enforces the same limits from the same log index on."""
        ops = []
        for store in self.realm.stores:
            if store.cluster != self.cluster_name:
                continue
            wanted = self._store_config(store)
            state = self._state_for(store)
            if state.store_configs.get(store.name) == wanted:
                continue
            if store.replicated:
                ops.append(rpb.Operation(configure_store=wanted))
            else:
                state.apply_op(rpb.Operation(configure_store=wanted))
        if ops and self.epoch == epoch and self.is_leader_role():
            fut = self._submit(ops)
            assert fut is not None
            await fut

    async def _reconfigure(self, epoch: int) -> None:
        try:
            await self._configure_stores(epoch)
        except StrongroomError as err:
            log.info("store limits of the new realm not applied yet (%s); the next leader applies them", err)

    async def _expirer(self, epoch: int) -> None:
        """Turn ended time-to-lives and retentions into ExpireOps (the leader's clock decides,
        the log carries the decision to every member)."""
        while self.epoch == epoch and self.is_leader_role():
            now = time.time()
            try:
                due = self.local_state.due(now)
                if due:
                    self.local_state.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=now)))
                due = self.state.due(now)
                if due:
                    await self._commit_one(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=now)))
                    continue
            except StrongroomError as err:
                log.info("expiry round failed: %s", err)
            timers = [t for t in (self.state.next_timer(), self.local_state.next_timer()) if t]
            await asyncio.sleep(min(0.25, max(0.01, min(timers) - time.time())) if timers else 0.25)

    def _rule_of(self, durable: Durable) -> Route | None:
        try:
            return self.resolve(durable.destination)
        except StrongroomError:
            return None

    def redelivery_limit(self, durable: Durable) -> int:
        """Deliveries of a message to this durable before it is dead-lettered (0: no limit)."""
        route = self._rule_of(durable)
        return route.rule.redelivery_limit if route is not None else 0

    def dead_letter(self, durable: Durable, seq: int, deliveries: int) -> None:
        """A message reached its redelivery limit: move it (through the log for replicated
        stores) out of the durable and into the dead-letter destination, if any."""
        route = self._rule_of(durable)
        op = rpb.DeadLetterOp(durable_key=durable.key, message_seq=seq, deliveries=deliveries,
                              published_at=time.time())
        target = route.rule.dead_letter if route is not None else None
        if target:
            try:
                to = self.resolve(target)
            except StrongroomError as err:
                log.warning("dead-letter destination %r of %r is not usable (%s); message %d stays pending",
                            target, durable.destination, err, seq)
                self._dead_letter_later(durable, seq, target)
                return
            if to.store.replicated != route.store.replicated:  # type: ignore[union-attr]
                log.warning("dead-letter destination %r is in a store of another replication mode than %r; "
                            "message %d stays pending", target, durable.destination, seq)
                self._dead_letter_later(durable, seq, target)
                return
            op.target_store = to.store.name
            op.target_destination = target
            op.target_queue = to.queue
        log.info("message %d of %r reached %d deliveries on durable %r; dead-lettering to %s",
                 seq, durable.destination, deliveries, durable.name, target or "(discarded)")
        wrapped = rpb.Operation(dead_letter=op)
        store = self.realm.store(durable.store)
        if store is not None and not store.replicated:
            if not self.local_state.apply_op(wrapped):
                self._dead_letter_later(durable, seq, target)
            return
        fut = self._submit([wrapped])
        assert fut is not None

        def done(f: asyncio.Future[object]) -> None:
            if f.cancelled() or f.exception() is not None:
                return  # the leadership ended: the next leader redelivers and counts again
            results, _ = f.result()  # type: ignore[misc]
            if not results[0]:
                self._dead_letter_later(durable, seq, target)

        fut.add_done_callback(done)

    def _dead_letter_later(self, durable: Durable, seq: int, target: str | None) -> None:
        log.warning("dead-letter destination %r refused message %d of %r (store limit); retrying in %.0f s",
                    target, seq, durable.destination, DEAD_LETTER_RETRY)
        if self.dispatcher is not None:
            self.dispatcher.unpark(durable.key, seq, DEAD_LETTER_RETRY)

    # --- subscriptions -----------------------------------------------------------------------------

    async def open_subscription(self, destination: str, durable_name: str, kind: int,
                                client_name: str, credit: int,
                                matcher: cpb.ContentMatcher | None = None, ack_sync_mode: int = 0,
                                replay: mpb.ReplayFrom | None = None) -> Subscription:
        """Open a subscription; the durable is created (through the log) if it does not exist,
        repositioned first when `replay` is given."""
        self.require_leader()
        route = self.resolve(destination)
        store = route.store
        matcher = matcher if matcher is not None else cpb.ContentMatcher()
        validate_matcher(matcher)
        key_field = ""
        if route.queue:
            if kind not in (cpb.DURABLE_KIND_UNSPECIFIED, cpb.DURABLE_KIND_SHARED):
                raise InvalidArgument(f"queue {destination!r} is shared; durable kind "
                                      f"{cpb.DurableKind.Name(kind)} does not apply")
            if matcher.fields:
                raise InvalidMatcher(f"queue {destination!r} delivers every message; a matcher does not apply")
            durable_name = ""
            kind = cpb.DURABLE_KIND_SHARED
        elif route.template is not None:
            if not durable_name:
                raise InvalidArgument("an endpoint subscription needs a durable name")
            template = route.template
            template_kind = {TemplateKind.STANDARD: cpb.DURABLE_KIND_STANDARD,
                             TemplateKind.SHARED: cpb.DURABLE_KIND_SHARED,
                             TemplateKind.LAST_VALUE: cpb.DURABLE_KIND_LASTVALUE}[template.kind]
            if kind not in (cpb.DURABLE_KIND_UNSPECIFIED, template_kind):
                raise DurableMismatch(f"endpoint {destination!r} creates {template.kind.value} durables "
                                      f"(template {template.name!r}), not {cpb.DurableKind.Name(kind)}")
            kind = template_kind
            key_field = template.key_field or ""
        else:
            if not durable_name:
                raise InvalidArgument("a topic subscription needs a durable name")
            if kind == cpb.DURABLE_KIND_UNSPECIFIED:
                kind = cpb.DURABLE_KIND_STANDARD
            if kind not in (cpb.DURABLE_KIND_STANDARD, cpb.DURABLE_KIND_SHARED, cpb.DURABLE_KIND_LASTVALUE):
                raise UnknownDurableKind(f"unknown durable kind {kind}")
        slot = ""
        sub_matcher = None
        durable_matcher = matcher
        if key_field:
            # A keyed last-value durable holds every key; the subscriber names its key.
            cond = matcher.fields.get(key_field)
            if cond is None or cond.WhichOneof("condition") != "equals":
                raise InvalidMatcher(f"durable {durable_name!r} is last-value keyed on field {key_field!r}: the "
                                     f"matcher must name {key_field}=<value>")
            slot = key_of(cond.equals)
            sub_matcher = matcher
            durable_matcher = cpb.ContentMatcher()
        if replay is not None and replay.WhichOneof("start") is not None and kind == cpb.DURABLE_KIND_LASTVALUE:
            raise InvalidArgument("a last-value durable keeps only the latest message; replay does not apply")
        if replay is not None and replay.WhichOneof("start") == "time" and not replay.time > 0:
            raise InvalidArgument(f"replay time {replay.time} is not a positive unix time")
        if ack_sync_mode not in (cpb.ACK_SYNC_MODE_UNSPECIFIED, cpb.ACK_SYNC_MODE_SYNC, cpb.ACK_SYNC_MODE_ASYNC):
            raise InvalidArgument(f"unknown ack sync mode {ack_sync_mode}")
        if ack_sync_mode == cpb.ACK_SYNC_MODE_UNSPECIFIED:
            ack_sync_mode = cpb.ACK_SYNC_MODE_SYNC if route.ack_mode == AckSync.SYNC else cpb.ACK_SYNC_MODE_ASYNC
        state = self._state_for(store)
        key = self._durable_key(route, durable_name)
        durable = state.durables.get(key)
        if durable is None:
            create = rpb.CreateDurableOp(
                store=store.name, destination=destination, durable=durable_name, kind=kind, queue=route.queue,
                matcher=durable_matcher, key_field=key_field, content=route.endpoint, ack_sync_mode=ack_sync_mode)
            await self._apply_or_commit(store, rpb.Operation(create_durable=create))
            durable = state.durables.get(key)
            if durable is None:
                raise PersistenceUnavailable(f"durable {durable_name!r} was removed while it was created; retry")
        # Checked after a create too: another subscriber may have created it first, otherwise.
        if durable.kind != kind:
            raise DurableMismatch(f"durable {durable_name!r} on {destination!r} exists with kind "
                                  f"{cpb.DurableKind.Name(durable.kind)}, not {cpb.DurableKind.Name(kind)}")
        if not key_field and not same_matcher(durable.matcher, durable_matcher):
            raise DurableMismatch(f"durable {durable_name!r} on {destination!r} exists with matcher "
                                  f"[{matcher_text(durable.matcher)}], not [{matcher_text(durable_matcher)}]")
        start = replay.WhichOneof("start") if replay is not None else None
        if start is not None:
            # A separate operation even for a new durable: if another subscriber created it a
            # moment earlier, the replay still happens.
            op = rpb.ReplayOp(durable_key=key)
            if start == "sequence":
                op.sequence = replay.sequence  # type: ignore[union-attr]
            else:
                op.time = replay.time  # type: ignore[union-attr]
            await self._apply_or_commit(store, rpb.Operation(replay=op))
        self.require_leader()
        assert durable is not None and self.dispatcher is not None
        return self.dispatcher.open(durable, state, client_name, credit, slot=slot, match=compile_matcher(sub_matcher),
                                    ack_sync_mode=ack_sync_mode)

    @staticmethod
    def _durable_key(route: Route, name: str) -> str:
        """Endpoint durables are keyed by store, the others by destination."""
        return content_durable_key(route.store.name, name) if route.endpoint else durable_key(route.name, name)

    async def _apply_or_commit(self, store: Store, op: rpb.Operation) -> object:
        if store.replicated:
            result, _ = await self._commit_one(op)
            return result
        return self._state_for(store).apply_op(op)

    def grant(self, sub: Subscription, credit: int) -> None:
        """More credit for a subscription."""
        if self.dispatcher is not None:
            self.dispatcher.grant(sub, credit)

    def close_subscription(self, sub: Subscription) -> None:
        """A subscribe stream ended."""
        if self.dispatcher is not None:
            self.dispatcher.close(sub)

    async def ack(self, destination: str, durable_name: str, seqs: list[int], sub_id: str,
                  wait: bool) -> int:
        """Acknowledge messages of a durable; with `wait`, return once committed."""
        self.require_leader()
        route = self.resolve(destination)
        store = route.store
        if route.queue:
            durable_name = ""
        return await self.ack_durable(store, self._durable_key(route, durable_name), seqs, sub_id, wait)

    async def ack_durable(self, store: Store, key: str, seqs: list[int], sub_id: str, wait: bool) -> int:
        """Acknowledge messages of the durable with this key."""
        self.require_leader()
        state = self._state_for(store)
        durable = state.durables.get(key)
        if durable is None:
            raise InvalidArgument(f"no durable {key.split(chr(0))[-1]!r} in store {store.name!r}")
        assert self.dispatcher is not None
        self.dispatcher.check_ack(durable, seqs, sub_id)
        op = rpb.Operation(ack=rpb.AckOp(store=store.name, durable_key=durable.key, message_seqs=seqs))
        if not store.replicated:
            state.apply_op(op)
            return 0
        self.dispatcher.acking(durable, state, seqs)
        if not wait:
            self._submit([op], want_result=False)
            return 0
        _, index = await self._commit_one(op)
        return int(index)

    # --- follower side of replication -----------------------------------------------------------

    async def _accept_epoch(self, epoch: int, leader: str) -> bool:
        if epoch < self.promised_epoch:
            return False
        if epoch > self.promised_epoch:
            self._promise(epoch)
        if self.role != FOLLOWER and epoch > self.epoch:
            await self._step_down(f"member {leader} leads with epoch {epoch}")
        return True

    async def handle_promise(self, req: rpb.PromiseRequest) -> rpb.PromiseResponse:
        """A new leader asks for our promise."""
        ok = await self._accept_epoch(req.epoch, req.leader)
        return rpb.PromiseResponse(ok=ok, promised_epoch=self.promised_epoch, last_index=self.log.last_index,
                                   last_epoch=self.log.last_epoch, commit_index=self.commit_index,
                                   synced=self.synced, member=self.member)

    async def handle_append(self, req: rpb.AppendRequest | rpb.AppendRequestRaw,
                            entries: list[rpb.LogEntry] | None = None,
                            raws: list[bytes] | None = None) -> rpb.AppendResponse:
        """Entries from the leader of the promised epoch (`entries`, and their serialised form
        `raws`, when the request carries them serialised)."""
        if entries is None:
            assert isinstance(req, rpb.AppendRequest)
            entries = list(req.entries)
        async with self._lock:
            if not await self._accept_epoch(req.epoch, req.leader) or (
                    self.role != FOLLOWER and req.epoch == self.epoch):
                return rpb.AppendResponse(ok=False, promised_epoch=self.promised_epoch,
                                          last_index=self.log.last_index)
            if self.leader is None or self.leader.epoch != req.epoch:
                address = self.peer_address(req.leader) or ""
                self.leader = LeaderInfo(req.leader, address, req.epoch)
            if req.prev_index > self.log.last_index:
                return rpb.AppendResponse(ok=False, promised_epoch=self.promised_epoch,
                                          last_index=self.log.last_index, conflict_index=self.log.last_index)
            if entries and not self.stored:
                try:
                    await self._mark_stored()
                except Exception as exc:  # noqa: BLE001 - cannot record it: do not acknowledge
                    log.warning("cannot record stored state in etcd: %s", exc)
                    return rpb.AppendResponse(ok=False, promised_epoch=self.promised_epoch,
                                              last_index=self.log.last_index, conflict_index=self.log.last_index)
            matched = req.prev_index + len(entries)
            new_commit = min(req.commit_index, matched)
            outcome = self.log.append_from_leader(req.prev_index, req.prev_epoch, entries,
                                                  commit_index=max(new_commit, self.commit_index), raws=raws)
            if not outcome.ok:
                return rpb.AppendResponse(ok=False, promised_epoch=self.promised_epoch,
                                          last_index=self.log.last_index, conflict_index=outcome.conflict_index,
                                          needs_snapshot=outcome.needs_snapshot)
            if new_commit > self.commit_index:
                self.commit_index = new_commit
                # Applied right after this answer is written, not before: the leader waits
                # for the answer, nobody waits for a follower's apply.
                if not self._apply_soon:
                    self._apply_soon = True
                    asyncio.get_running_loop().call_soon(self._apply_deferred)
            if not self.synced and req.commit_index <= matched:
                # We hold everything the leader has committed: count toward majorities again.
                self.synced = True
                self.storage.set_meta(synced=True)
                log.info("caught up to the leader's commit index %d; synced", req.commit_index)
            return rpb.AppendResponse(ok=True, promised_epoch=self.promised_epoch, last_index=self.log.last_index)

    async def handle_fetch(self, req: rpb.FetchRequest) -> rpb.FetchResponse:
        """A recovering leader reads our log."""
        if req.epoch < self.promised_epoch:
            raise StaleEpochError(f"epoch {req.epoch} is older than promised {self.promised_epoch}")
        resp = rpb.FetchResponse(last_index=self.log.last_index)
        start = req.from_index
        if start <= self.log.snapshot_index:
            # Our applied state is at a known index and covers the compacted prefix.
            resp.snapshot = self.state.to_snapshot()
            resp.snapshot_index = self.state.applied_index
            resp.snapshot_epoch = self.state.applied_epoch
            start = self.state.applied_index + 1
        resp.entries.extend(self.log.slice(start, req.max_entries or 512))
        return resp

    async def handle_snapshot(self, chunks: AsyncIterator[rpb.SnapshotChunk]) -> rpb.InstallSnapshotResponse:
        """Replace our state by the leader's snapshot."""
        first: rpb.SnapshotChunk | None = None
        parts: list[bytes] = []
        async for chunk in chunks:
            if first is None:
                first = chunk
                if not await self._accept_epoch(chunk.epoch, chunk.leader):
                    return rpb.InstallSnapshotResponse(ok=False, promised_epoch=self.promised_epoch)
            parts.append(chunk.data)
        if first is None:
            return rpb.InstallSnapshotResponse(ok=False, promised_epoch=self.promised_epoch)
        async with self._lock:
            if first.epoch < self.promised_epoch:
                return rpb.InstallSnapshotResponse(ok=False, promised_epoch=self.promised_epoch)
            try:
                await self._mark_stored()
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot record stored state in etcd: %s", exc)
                return rpb.InstallSnapshotResponse(ok=False, promised_epoch=self.promised_epoch)
            self._install(first.last_index, first.last_epoch, b"".join(parts))
            log.info("installed snapshot at index %d from %s", first.last_index, first.leader)
            return rpb.InstallSnapshotResponse(ok=True, promised_epoch=self.promised_epoch,
                                               last_index=self.log.last_index)

    def _install(self, index: int, epoch: int, data: bytes) -> None:
        if self.apply_stopped:
            # The leader's state past the entry this member could not apply: whole, so it
            # applies again from there (and stops again at the next unknown operation). It
            # still sits out elections until restarted.
            log.warning("snapshot at index %d installed; applying again", index)
            self.apply_stopped = None
        if isinstance(self.state, DiskStateMachine):
            # The state first: it carries its own applied index, the log then drops its entries.
            self.state.install(data)
            self.log.install_snapshot(index, epoch, b"")
            self.commit_index = index
            return
        self.log.install_snapshot(index, epoch, data)
        self.state.close()
        self.state = self._new_state(replicated=True, snapshot=data)
        self.commit_index = index

    # --- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        """This member's view, as plain data (the admin servicer builds the proto)."""
        leader = self.leader
        members = []
        for m in self.cluster.members:
            rep = self.replicators.get(m.name)
            if m.name == self.member:
                match, reachable = self.log.last_index, True
            elif rep is not None:
                match, reachable = rep.match_index, rep.reachable
            else:
                match, reachable = 0, False
            if m.name == self.member or m.name not in self.peer_links:
                via = ""
            else:
                via = "link" if self.peer_links[m.name] else "grpc"
            members.append({"name": m.name, "address": self.peer_address(m.name) or "",
                            "match_index": match, "reachable": reachable, "replication": via})
        stores = []
        for store in self.realm.stores:
            if store.cluster != self.cluster_name:
                continue
            state = self._state_for(store)
            durables = []
            for d in state.durables_of_store(store.name):
                held = (1 if d.last_value_seq else 0) + len(d.last_values)
                durables.append({
                    "name": d.name, "destination": d.destination, "kind": d.kind,
                    "pending_messages": len(d.pending) if d.kind != cpb.DURABLE_KIND_LASTVALUE else held,
                    "pending_bytes": d.pending_bytes,
                    "unacked": self.dispatcher.unacked(d.key) if self.dispatcher else 0,
                    "subscribers": self.dispatcher.subscribers(d.key) if self.dispatcher else 0,
                    "matcher": matcher_text(d.matcher), "key_field": d.key_field,
                    "ack_sync_mode": d.ack_sync_mode, "content": d.content,
                })
            config = self._store_config(store)
            stores.append({"name": store.name, "replicated": store.replicated,
                           "messages": state.store_count.get(store.name, 0),
                           "bytes": state.store_bytes.get(store.name, 0), "durables": durables,
                           "cluster": store.cluster, "storage": self.storage_mode,
                           "publisher_mode": store.publisher_mode.value, "max_messages": config.max_messages,
                           "max_bytes": config.max_bytes, "limit_policy": config.policy,
                           "maps": bool(store.maps), "routed": store.routed,
                           "max_message_bytes": store.max_message_bytes,
                           "map_count": state.maps_of_store(store.name),
                           "swapped_messages": state.swapped_messages(store.name)})
        return {
            "cluster": self.cluster_name, "member": self.member, "role": self.role,
            "leader": leader.member if leader else "", "leader_address": leader.address if leader else "",
            "epoch": leader.epoch if leader else self.promised_epoch,
            "commit_index": self.commit_index, "last_index": self.log.last_index,
            "applied_index": self.state.applied_index, "snapshot_index": self.log.snapshot_index,
            "storage": self.storage_mode, "members": members, "stores": stores,
            "realm_version": self.realm_version, "synced": self.synced,
            "indexes_on_disk": self.cluster.indexes_on_disk,
            "memory_budget_bytes": self.swap.budget_bytes, "memory_payload_bytes": self.swap.resident_bytes,
            "apply_stopped": self.apply_stopped or "",
        }

    async def wait_serving(self, timeout: float) -> bool:
        """Wait until this member serves as leader."""
        try:
            return await wait_event(self._serving, timeout)
        except asyncio.TimeoutError:
            return False
