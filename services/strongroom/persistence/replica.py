"""This member's copy of the cluster's replicated log and of the state machine it applies.

A `Replica` exists for the whole life of a member, whatever its role: it holds the storage, the
log, the replicated state machine, the commit index, the highest epoch promised and whether
this member holds everything a leader committed (`synced`). It applies committed entries in
order, compacts the log prefix every member applied, and installs a leader's snapshot.

Whoever leads (a `LeaderTerm`) listens to what is applied (`on_applied`), to answer its callers,
and holds compaction back for followers it still replicates to (`compaction_floor`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from strongroom.errors import DataCorruption, UnknownOperation
from strongroom.events.journal import EventJournal
from strongroom.observability.tallies import Tallies
from strongroom.persistence import compaction
from strongroom.persistence.compaction import BackgroundCompaction
from strongroom.persistence.diskinstall import install_parts
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.drivers import DriverMemory
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.pstore_report import ReportWriter, report_path
from strongroom.persistence.shared_standby import software_version
from strongroom.persistence.snapshot_store import PartWriter
from strongroom.persistence.snapshots import IncomingSnapshot, restore_parts, snapshot_parts
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storage import DiskStorage, Storage, open_storage
from strongroom.persistence.scrub import Scrub
from strongroom.persistence.storehealth import StorageHealth
from strongroom.persistence.swap import SwapSpace
from strongroom.realm.model import Cluster, PersistentStore, StorageMode
from strongroom.tracing import traced

__all__ = ["Replica", "INCOMING_SNAPSHOT"]

INCOMING_SNAPSHOT = "snapshot.incoming"
"""The file in the data directory a snapshot being received is kept in until it is complete."""

log = logging.getLogger("strongroom.replica")

AppliedListener = Callable[[int, int, list[object]], None]
"""Called with (log index, entry epoch, one result per operation) after an entry is applied."""


def _driver_memory(store: PersistentStore) -> DriverMemory:
    """The realm's bounds of what a member's database holds in memory."""
    return DriverMemory(write_buffer_bytes=store.write_buffer_mb * 2**20, read_cache_bytes=store.read_cache_mb * 2**20)


class Replica:
    """The log, the replicated state machine and the promises of this member."""

    def __init__(self, settings: Callable[[], Cluster], member: str, data_dir: Path,
                 record_stored: Callable[[], Awaitable[None]], report_file: str = "",
                 event_log: tuple[Path, float] | None = None) -> None:
        self.member = member
        self.data_dir = data_dir
        for cut_off in data_dir.glob(f"{INCOMING_SNAPSHOT}*"):  # transfers cut off by a stop
            cut_off.unlink(missing_ok=True)
        self._incoming = itertools.count(1)
        self.tallies = Tallies()
        """What this member counted since its process started (its metrics)."""
        # The cluster's realm settings in force (the compaction threshold follows realm
        # versions); storage mode, indexes on disk and the memory budget are fixed at start.
        self._settings = settings
        cluster = settings()
        self.storage_mode = StorageMode(cluster.storage)
        # Indexes on disk: the replicated state lives in families of this storage.
        self.indexes_on_disk = cluster.indexes_on_disk
        # The storage driver (rocksdb, sqlite), fixed at start like the storage mode.
        self.driver = cluster.persistent_store.driver.value
        self.storage: Storage = open_storage(self.storage_mode.value, data_dir,
                                             STATE_COLUMN_FAMILIES if self.indexes_on_disk else (), self.driver,
                                             _driver_memory(cluster.persistent_store))
        if cluster.persistent_store.report and isinstance(self.storage, DiskStorage):
            # The PSTORE report of the records the storage creates and deletes from now on.
            path = report_path(report_file, "", cluster.name, member, data_dir)
            self.storage.report = ReportWriter(path, software_version(), cluster.name, member, append=True)
            log.info("PSTORE report of the records created and deleted: %s", path)
            if event_log is not None:
                # The same lines as rows of the store event log (files of their own there).
                from strongroom.events.report_rows import ReportRows

                self.storage.report.rows = ReportRows(event_log[0], cluster.name, member, event_log[1])
        self.health = StorageHealth(self.storage, member)
        """Whether this member can write its storage now (docs/store-operations.md)."""
        self.scrub = Scrub(self.storage, data_dir, member,
                           lambda: self._settings().persistent_store.scrub_interval_seconds,
                           lambda: self.health.usable)
        """Reads the store back from its files every interval (scrub.py): damage found stops the member."""
        loaded = self.storage.load()
        self.started_empty = loaded.empty
        self.promised_epoch = loaded.promised_epoch
        self.promised_to = loaded.promised_to
        """The member `promised_epoch` was promised to ("": not known yet, e.g. a floor promised
        at start): a second member claiming the same epoch is refused (`Follower._accept_epoch`)."""
        self.synced = loaded.synced
        """This member holds everything a leader committed (counts toward recovery majorities)."""
        self.stored = loaded.stored
        """This member has (durably) recorded in etcd that it acknowledges entries."""
        self._record_stored = record_stored
        self.log = ReplicatedLog(self.storage, loaded, self.tallies)
        # Message swapping (memory budget): payloads of the memory-storage replicated state and
        # of the non-replicated stores move to data_dir/swap past the budget.
        self.swap = SwapSpace(data_dir / "swap", cluster.memory_budget_mb * 1024 * 1024, self.driver)
        self.state = self.new_state(replicated=True, snapshot=loaded.snapshot)
        # With indexes on disk the state resumes at its own applied index (at least the commit
        # index's hint, which is written lazily).
        self.commit_index = max(self.log.snapshot_index, min(loaded.commit_index, self.log.last_index),
                                self.state.applied_index)
        self.apply_stopped: str | None = None
        """Why this member stopped applying the log (`_stop_applying`); None while it applies."""
        self.changing = asyncio.Lock()
        """Held while the log or the state is changed from outside the leader's own path, across
        the awaits of a change: a leader's appends and snapshot at a follower (`Follower`), a
        recovering leader's install of the state it adopts (`Recovery.adopt_log`)."""
        self.on_applied: AppliedListener | None = None
        self.compaction_floor: Callable[[], int | None] | None = None
        """While leading: the lowest match index of the reachable followers (None: none)."""
        self.on_apply_stopped: Callable[[str], None] | None = None
        self.events: EventJournal | None = None
        """The store events derived at apply and not yet published (event log on)."""
        self._applied_waiter: asyncio.Future[None] | None = None
        self._compaction: BackgroundCompaction | None = None
        """The compaction running in the background (`compaction.py`), if one is."""
        self._compact_in_line = False
        """A background compaction failed: snapshots are built in line from then on."""
        self._compaction_retry_at = 0.0
        (data_dir / compaction.COMPACTION_FILE).unlink(missing_ok=True)  # a compaction cut off by a stop

    def applied_changed(self) -> asyncio.Future[None]:
        """A future done the next time the applied state moves (entries applied or a snapshot
        installed): readers of the committed log wait on it instead of polling."""
        if self._applied_waiter is None or self._applied_waiter.done():
            self._applied_waiter = asyncio.get_running_loop().create_future()
        return self._applied_waiter

    def _applied_moved(self) -> None:
        waiter = self._applied_waiter
        if waiter is not None:
            self._applied_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def enable_events(self, cluster: str) -> EventJournal:
        """Turn the store event log on: from the next applied entry on, every entry's events are
        derived and kept until the leader has published them."""
        if self.events is None:
            self.events = EventJournal(cluster, self.state.applied_index + 1)
            self.state.events = []
        return self.events

    def disable_events(self) -> None:
        """Turn the store event log off (a site that stops being the primary publishes none)."""
        self.events = None
        self.state.events = None

    def new_state(self, replicated: bool, snapshot: Sequence[bytes] | IncomingSnapshot | None = None) -> StateMachine:
        """A state machine for the replicated stores or for the non-replicated ones, with its
        payloads in the swap space when they are swappable (in-memory data and a budget)."""
        if replicated and self.indexes_on_disk:
            assert isinstance(self.storage, DiskStorage)
            state = DiskStateMachine.open(self.storage)
            state.tallies = self.tallies
            if snapshot and state.applied_index < self.log.snapshot_index:
                # A snapshot kept from before indexes on disk were turned on.
                install_parts(state, snapshot)
            return state
        swappable = self.swap.enabled and (not replicated or self.storage_mode == StorageMode.MEMORY)
        payloads = self.swap.store() if swappable else None
        state = restore_parts(snapshot, payloads) if snapshot else StateMachine(payloads)
        state.tallies = self.tallies
        return state

    # --- promises and marks -------------------------------------------------------------------

    def promise(self, epoch: int, leader: str = "") -> None:
        """Promise `epoch` to `leader` (durably; "": a floor, to no one yet): appends of older
        epochs are refused from now on. The same epoch again names its leader if it had none."""
        if epoch > self.promised_epoch or (epoch == self.promised_epoch and leader and not self.promised_to):
            self.storage.set_promised(epoch, leader)
            self.promised_epoch = epoch
            self.promised_to = leader

    async def mark_stored(self) -> None:
        """Before the first acknowledgment of entries: record in etcd that this member holds
        acknowledged state (see `strongroom.keys.stored_key`). Raises if etcd cannot be reached."""
        if self.stored:
            return
        await self._record_stored()
        self.stored = True
        self.storage.set_meta(stored=True)

    def set_synced(self, synced: bool) -> None:
        """Whether this member holds everything a leader committed (stored durably)."""
        if synced and not self.synced:
            self.tallies.catchups += 1
        self.synced = synced
        self.storage.set_meta(synced=synced)

    # --- apply and compaction -----------------------------------------------------------------

    @traced("apply")
    def apply_committed(self) -> None:
        """Apply every committed entry not applied yet, in order."""
        state = self.state
        lg = self.log
        if self.apply_stopped:
            lg.release(self.commit_index)
            return
        listener = self.on_applied
        journal = self.events
        if state.applied_index < self.commit_index:
            self._applied_moved()  # the readers run once this call has returned
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
            if journal is not None:
                noted = state.events
                if noted:
                    state.events = []
                journal.applied(entry, results, noted or [])
            if listener is not None:
                listener(index, entry.epoch, results)
        lg.release(state.applied_index)
        self._maybe_compact()

    def _stop_applying(self, err: UnknownOperation) -> None:
        """A committed entry holds an operation this version does not know (a newer version
        wrote it; see "Log format" in the README). Skipping it would leave this member's state
        different from the others', so applying stops before it: the state stays whole at
        the entry before. The member goes on storing and acknowledging entries (its log still
        counts toward majorities) and answers status with the reason, but it never leads
        again until it runs a version that knows the operation (a restart re-applies)."""
        self.stop_applying(f"stopped applying the log after index {self.state.applied_index}: {err.message}; "
                           f"run a version that knows the operation")

    def stop_applying(self, why: str) -> None:
        """Apply nothing more (the state cannot follow the log) and never lead: `why` says so in
        status until the member is restarted (or its data wiped)."""
        self.apply_stopped = why
        log.critical("%s", self.apply_stopped)
        if self.on_apply_stopped is not None:
            self.on_apply_stopped(self.apply_stopped)

    def _maybe_compact(self) -> None:
        if self._compaction is not None or time.monotonic() < self._compaction_retry_at:
            return  # one at a time; the next is considered once it is done
        applied = self.state.applied_index
        every = self._settings().compact_after_entries
        if applied - self.log.snapshot_index < every:
            return
        if self.compaction_floor is not None:
            # Leading: keep what reachable followers still need unless the log has grown far
            # too long.
            lagging = self.compaction_floor()
            floor = lagging if lagging is not None else applied
            if floor - self.log.snapshot_index < every and applied - self.log.snapshot_index < 4 * every:
                return
        # A snapshot is the state at its index, and only the applied state is at hand. With
        # indexes on disk the state itself is on disk at that index: storage keeps a checkpoint
        # of it instead of a serialised snapshot.
        if self.events is not None:
            # The rows of unpublished entries are built before the log drops the entries.
            self.events.build(applied, self.log.entry)
        if not self._compact_in_line and compaction.usable(self.storage, self.state, self.indexes_on_disk):
            assert isinstance(self.storage, DiskStorage)
            self._compaction = BackgroundCompaction(self.storage, self.state, applied, self.state.applied_epoch,
                                                    self.data_dir, self._compacted, self._compaction_failed)
            return
        snapshot = [] if self.indexes_on_disk else snapshot_parts(self.state)
        self.log.compact(applied, self.state.applied_epoch, snapshot)

    def _compacted(self, index: int, epoch: int) -> None:
        """A background compaction stored the snapshot at `index`."""
        self._compaction = None
        if index > self.log.snapshot_index:
            self.log.compacted(index, epoch)

    def _compaction_failed(self, child: bool) -> None:
        """A background compaction failed: its child (build in line from now on), or storing
        its parts (try again in a while)."""
        self._compaction = None
        if child:
            self._compact_in_line = True
        else:
            self._compaction_retry_at = time.monotonic() + compaction.RETRY_SECONDS

    def cancel_compaction(self) -> None:
        """Stop a compaction running in the background (the log or the state is replaced)."""
        running, self._compaction = self._compaction, None
        if running is not None:
            running.cancel()

    # --- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> tuple[int, int, list[bytes]]:
        """The state machine at the applied index: (index, epoch, the snapshot's parts)."""
        return self.state.applied_index, self.state.applied_epoch, snapshot_parts(self.state)

    def incoming_snapshot(self) -> IncomingSnapshot:
        """A file of its own, in the data directory, for a snapshot about to arrive: a second
        transfer meanwhile (a stale leader's, a refused caller's) never writes into the one
        being read or installed."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return IncomingSnapshot(self.data_dir / f"{INCOMING_SNAPSHOT}.{next(self._incoming)}")

    def install(self, index: int, epoch: int, data: Sequence[bytes] | IncomingSnapshot) -> None:
        """Replace the state by a leader's snapshot at `index` (its parts)."""
        self._installing(index)
        if isinstance(self.state, DiskStateMachine):
            # The state first: it carries its own applied index, the log then drops its entries.
            install_parts(self.state, data)
            self.log.install_snapshot(index, epoch, [])
            self.commit_index = index
            if self.events is not None:
                self.events.reset(index)
            self._applied_moved()
            return
        self.log.install_snapshot(index, epoch, data)
        self._take_state(index, self.new_state(replicated=True, snapshot=data))

    async def install_stepwise(self, index: int, epoch: int, data: IncomingSnapshot) -> None:
        """`install`, with the event loop free between its steps where the state is in memory
        on disk storage: the new state is built from the parts in a worker thread (the live one
        serves until it is done), then the parts are stored a batch at a time and made the only
        restore point in one synced write. The caller holds `changing` (a leader's appends wait
        meanwhile). Elsewhere as `install`."""
        storage = self.storage
        if self.indexes_on_disk or not isinstance(storage, DiskStorage):
            self.install(index, epoch, data)
            return
        self.cancel_compaction()
        building = asyncio.ensure_future(asyncio.to_thread(restore_parts, data))
        try:
            state = await asyncio.shield(building)
        except asyncio.CancelledError:
            # A thread cannot be stopped: the caller (who holds `changing`) waits for it, so no
            # second state is built beside it, nor its file taken away under it.
            await asyncio.wait([building])
            if not building.cancelled():
                building.exception()  # retrieved: the cancellation is what the caller gets
            raise
        storage.drop_strays(index)
        writer = PartWriter(storage, index, compaction.STEP_BYTES)
        try:
            for part in data:
                if writer.add(part):
                    await asyncio.sleep(0)
        except BaseException:
            writer.discard()
            raise
        head, parts = writer.finish()
        self._installing(index)
        storage.record_replacement(index, epoch, head, parts)
        self.log.replaced(index, epoch)
        state.tallies = self.tallies
        self._take_state(index, state)

    def _installing(self, index: int) -> None:
        self.cancel_compaction()
        if self.apply_stopped:
            # The leader's state past the entry this member could not apply: whole, so it
            # applies again from there (and stops again at the next unknown operation). It
            # still sits out elections until restarted.
            log.warning("snapshot at index %d installed; applying again", index)
            self.apply_stopped = None

    def _take_state(self, index: int, state: StateMachine) -> None:
        """The state machine of a snapshot at `index` replaces the live one."""
        self.state.close()
        self.state = state
        self.commit_index = index
        if self.events is not None:
            self.events.reset(index)
            self.state.events = []
        self._applied_moved()

    def roll_back_to(self, index: int) -> bool:
        """Cut the log back to `index` and make the state the state at `index` again (a demoted
        site's members, docs/dr.md: their entries after the last one both sites share are the
        lost tail): the newest restore point at or below `index` (a snapshot, or a checkpoint
        of the indexes on disk; storage keeps the last RESTORE_POINTS), then the log up to
        `index`. Storage rolls back in one step: a member killed meanwhile restarts with the
        old log and state or with these. False when no restore point reaches `index` (the log
        was compacted more than once past it, or is kept in memory only and was compacted):
        the member's data must go (`discard`), and the DR service ships the new primary's
        state (a full copy)."""
        lg = self.log
        if index >= lg.last_index:
            return True
        self.cancel_compaction()
        snapshot: Sequence[bytes] | None = None
        if not self.storage.durable:
            if lg.snapshot_index:
                return False  # mode memory: the log in memory starts at the snapshot
            lg.truncate_after(index)
        else:
            point = self.storage.restore_point(index)
            if point is None:
                return False
            try:
                self.storage.roll_back(index, point)
            except DataCorruption as err:
                log.error("cannot roll the state back to index %d: %s", index, err.message)
                return False
            loaded = self.storage.load()
            lg.reset(loaded)
            snapshot = loaded.snapshot
        self.state.close()
        self.state = self.new_state(replicated=True, snapshot=snapshot)
        self.commit_index = index
        self.apply_committed()
        self._applied_moved()
        return True

    def discard(self) -> None:
        """Drop the log, the restore points and the state on disk (the promised epoch stays):
        restarted, this member starts empty and takes the leader's state."""
        self.cancel_compaction()
        self.storage.discard()
        self.log.reset(self.storage.load())
        self.commit_index = 0

    def close(self) -> None:
        """Close storage and swap space."""
        self.cancel_compaction()
        self.storage.close()
        self.swap.close()
