"""`EventJournal`: the store events a member derived and keeps until the leader published them.

Every member keeps one (when its cluster's event log is on), whatever its role, so that a
follower that becomes leader can publish the events of the entries the old leader applied but
did not publish. Per applied entry it keeps an `Applied` (the entry's index, epoch and time, the
apply's results and notes; the entry itself only while this member leads, else it is read back
from the log) until rows are built, and the built rows (Arrow tables) until published.

Rows are built in bulk: by the leader five times a second, and by every member before its log drops
entries whose rows are not published (compaction), so what compaction removes is never needed.
A member learns how far the leader published from the leader's appends (`events_published`)
and forgets what lies before.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strongroom.events.records import Applied, Record
from strongroom.events.rows import RowBuilder

__all__ = ["EventJournal"]

log = logging.getLogger("strongroom.events")


class EventJournal:
    """Events of applied entries after the last published index, lazy or built."""

    def __init__(self, cluster: str, first_index: int) -> None:
        self.cluster = cluster
        self.first_index = first_index
        """The first log index this member derived events for (after a start or a snapshot
        install it cannot derive those of the entries before)."""
        self.published = 0
        """The last log index whose events are published, as far as this member knows."""
        self.keep_entries = False
        """Keep each applied entry (leading: its rows are built within a second)."""
        self._lazy: deque[Applied] = deque()
        # (first log index, last log index, rows) built, in order.
        self._built: deque[tuple[int, int, pa.Table]] = deque()
        self._builder = RowBuilder(cluster)

    def applied(self, entry: Any, results: list[object], records: list[Record]) -> None:
        """An entry was applied (called for every entry, in order)."""
        if entry.index <= self.published:
            return  # a lagging member: the leader published its events already
        self._lazy.append(Applied(entry.index, entry.epoch, entry.time, entry if self.keep_entries else None,
                                  results, records))

    @property
    def last_index(self) -> int:
        """The last log index the journal holds events for (or knows published)."""
        if self._lazy:
            return self._lazy[-1].index
        if self._built:
            return self._built[-1][1]
        return max(self.published, self.first_index - 1)

    def build(self, upto: int, entry_of: Callable[[int], Any]) -> None:
        """Build the rows of the entries up to `upto` (entry_of(index): an entry from the log)."""
        taken: list[Applied] = []
        lazy = self._lazy
        while lazy and lazy[0].index <= upto:
            taken.append(lazy.popleft())
        if not taken:
            return
        self._builder.add_entries(taken, entry_of)
        table = self._builder.table()
        if table is not None:
            self._built.append((taken[0].index, taken[-1].index, table))

    def rows_after(self, index: int) -> pa.Table | None:
        """The built rows of entries after `index`, in order (None: none)."""
        tables = []
        for first, last, table in self._built:
            if last <= index:
                continue
            if first <= index:
                table = table.filter(pc.greater(table.column("log_index"), index))
            tables.append(table)
        if not tables:
            return None
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def trim(self, published: int) -> None:
        """The leader published the events of every entry up to `published`: forget them."""
        if published <= self.published:
            return
        self.published = published
        self.first_index = max(self.first_index, published + 1)
        lazy = self._lazy
        while lazy and lazy[0].index <= published:
            lazy.popleft()
        built = self._built
        while built and built[0][1] <= published:
            built.popleft()
        if built and built[0][0] <= published:
            _, last, table = built.popleft()
            built.appendleft((published + 1, last,
                              table.filter(pc.greater(table.column("log_index"), published))))

    def forget_entries(self) -> None:
        """No longer leading: drop the entries kept (their rows are built from the log if needed)."""
        self.keep_entries = False
        self._lazy = deque(a._replace(entry=None) if a.entry is not None else a for a in self._lazy)

    def reset(self, index: int) -> None:
        """The state was replaced by a snapshot at `index`: events of the entries up to it that
        are not already held cannot be derived here."""
        if index > self.last_index:
            self._lazy.clear()
            self._built.clear()
            self.first_index = index + 1

    def __len__(self) -> int:
        return len(self._lazy) + sum(t.num_rows for _, _, t in self._built)
