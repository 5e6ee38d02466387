"""`EventPublisher`: the leader's side of the store event log, for one leadership term.

Only the leader writes files. When its term starts serving it reads the event-log directory for
the last log index the newest published file of its cluster holds (`last_published_index`),
drops what its journal holds up to there and continues right after it: the events of entries
the previous leader applied but did not publish come from this member's journal (every member
derives them at apply and keeps them until it hears they are published). Every `tick` seconds
it builds the rows of the entries applied since the last tick, adds the deliveries made
meanwhile and hands both to its `EventWriter`, which publishes a file at least every
`interval` seconds while events flow (and on size). Building runs on the event loop in bulk;
writing, compressing and fsyncing run in a worker thread (pyarrow releases the GIL there).

The writer's fence asks the election before each rename, so a leader whose lease may have
expired (another may have been elected and resumed from the directory) publishes nothing more.

Deliveries are not in the log: only the leader sees them. Their rows carry the leader's epoch,
the log index applied when the delivery was made and positions from NON_LOG_POSITION up; those
the leader made but had not published when it died are lost: deliveries are *at most once*
across a failover (each delivery it did publish appears once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.events.journal import EventJournal
from strongroom.events.rows import Delivery, RowBuilder
from strongroom.events.writer import (
    EventWriter,
    NotPublishing,
    PublishedFile,
    last_published_index,
    remove_stale_hidden,
)

__all__ = ["TICK_SECONDS", "EventPublisher"]

log = logging.getLogger("strongroom.events")

TICK_SECONDS = 0.2
"""How often the leader builds rows and checks whether a file is due. Building runs on the event
loop: a second's rows at once (about 28 ms at 40,000 messages a second) stalled every publish in
flight for that long and cost the pipelined benchmark about 10 %; a fifth of it, nothing
measurable (README, Store event log)."""
STALE_HIDDEN_SECONDS = 600.0
"""Hidden files older than this in the cluster's directory were left by a writer that died."""


class EventPublisher:
    """Builds and publishes the store events of one leadership term."""

    def __init__(self, journal: EventJournal, root: Path, cluster: str, epoch: int, interval: float,
                 applied_index: Callable[[], int], entry_of: Callable[[int], Any],
                 fence: Callable[[], bool], tick: float = TICK_SECONDS) -> None:
        self.journal = journal
        self.root = root
        self.cluster = cluster
        self.epoch = epoch
        self.tick = min(tick, interval / 2)
        self._applied_index = applied_index
        self._entry_of = entry_of
        self.writer = EventWriter(root, cluster, epoch=epoch, max_seconds=interval, fence=fence)
        self._deliveries: list[Delivery] = []
        self._counters: dict[int, int] = {}
        self._delivery_rows = RowBuilder(cluster)
        self._handed = 0
        self._ready = False
        self.missing: tuple[int, int] | None = None
        """Log indexes whose events this member could not derive (it started or installed a
        snapshot after them): (first, last), or None."""
        journal.keep_entries = True

    @property
    def published(self) -> int:
        """The last log index whose events are published (what followers are told; Status's
        `events_published_index`): its rows are in published files, and so are those of every
        entry before it; entries that made no rows count as published once every row handed
        before them is."""
        return self.journal.published

    def delivered(self, durable: Any, stored: Any, count: int) -> None:
        """The dispatcher sent a message of the replicated state to a subscriber."""
        self._deliveries.append((self._applied_index(), durable, stored.seq, stored.store, stored.destination,
                                 stored.size, stored.published_at, count, time.time()))

    async def run(self) -> None:
        """Resume after the newest published file, then build and publish every tick (runs
        for the term; cancelled when it ends)."""
        journal = self.journal
        # What the files say, or what the previous leader told this member, if more: entries
        # after the newest file that made no rows were published as nothing.
        published = max(await asyncio.to_thread(self._resume_point), journal.published)
        if journal.first_index > published + 1:
            self.missing = (published + 1, journal.first_index - 1)
            log.error("store events of log entries %d..%d are missing from the event log: the newest published "
                      "file ends at %d and this member derives events from %d on (it started or installed a "
                      "snapshot since; or the directory %s is not the one the previous leader wrote to)",
                      published + 1, journal.first_index - 1, published, journal.first_index, self.root)
        journal.trim(published)
        self._handed = max(published, journal.first_index - 1)
        self._ready = True
        log.info("event log: publishing to %s after log index %d", self.root, self._handed)
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.flush()
            except NotPublishing as exc:
                log.info("event log: %s", exc)
                return
            except OSError as exc:
                # Disk full, directory gone ...: the rows stay in the journal (on every member)
                # and are handed over again to a fresh writer at the next tick.
                log.error("event log: cannot publish to %s: %s; retrying", self.root, exc)
                self._restart_writer()

    def _restart_writer(self) -> None:
        writer = self.writer
        self.journal.trim(writer.published_through)
        self._handed = max(self.journal.published, self.journal.first_index - 1)
        self.writer = EventWriter(self.root, self.cluster, epoch=self.epoch, max_seconds=writer.max_seconds,
                                  fence=writer.fence)

    def _resume_point(self) -> int:
        removed = remove_stale_hidden(self.root, self.cluster, STALE_HIDDEN_SECONDS)
        if removed:
            log.info("event log: removed %d unfinished file(s) of an earlier writer", removed)
        return last_published_index(self.root, self.cluster)

    async def flush(self, force: bool = False) -> list[PublishedFile]:
        """Build the rows of what was applied since the last call and hand them to the writer,
        which publishes when a file is due (`force`: now)."""
        if not self._ready:
            return []
        journal = self.journal
        upto = self._applied_index()
        journal.build(upto, self._entry_of)
        rows = journal.rows_after(self._handed)
        self._handed = max(self._handed, upto)
        deliveries, self._deliveries = self._deliveries, []
        if deliveries:
            self._delivery_rows.add_deliveries(self.epoch, deliveries, self._counters)
            # Counters of indexes no delivery can get any more.
            for index in [i for i in self._counters if i < deliveries[-1][0]]:
                del self._counters[index]
        delivered = self._delivery_rows.table()
        handed = self._handed
        files = await asyncio.to_thread(self._write, [t for t in (rows, delivered) if t is not None], force)
        if files:
            journal.trim(self.writer.published_through)
        if not self.writer.buffered_rows:
            # Every row handed is in a published file: the entries up to `handed` that made no
            # rows (a pseudo-clock tick, a leader's no-op) are published too, as nothing. Without
            # this a quiet cluster's published index would stop at its last entry with events
            # and a reader could never tell the log complete up to the applied index.
            journal.trim(handed)
        return files

    def _write(self, tables: list[Any], force: bool) -> list[PublishedFile]:
        out: list[PublishedFile] = []
        for table in tables:
            out += self.writer.write(table)
        out += self.writer.flush() if force else self.writer.flush_due()
        return out

    def close(self) -> None:
        """The term ended: the rows not published stay in the journal (built), the entries kept
        for building are dropped."""
        self._ready = False
        # The writer is left alone: a write may still be running in its thread (its fence
        # stops it from publishing once the term is over).
        self.journal.forget_entries()
