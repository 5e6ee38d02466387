"""Message swapping: payloads of in-memory data move to a swap database past a memory budget.

A member has one `SwapSpace` (data_dir/swap, a database of the cluster's storage driver opened
volatile: unsynced writes, no journal; wiped at every start). Swap is not durable storage: what it holds is also in the log or in the peers, so
a crash only loses a cache. Each swappable state machine (the replicated state of a `memory`
cluster, and the leader's non-replicated stores) reads and writes its payloads through its own
`PayloadStore`, a view of the shared space under a key prefix of its own.

The budget is shared by the member's swappable states: when their resident payload bytes
exceed it, the oldest resident payloads (in admission order, across states) are written to swap
in one batch and dropped from memory until the resident bytes are back under 90 % of the budget
(the slack makes swap-outs come in batches instead of one write per new message). A swapped
payload is read back on access (`StoredMessage.message`) and not kept in memory again: delivery
is usually the last read of a message.

Replicated stores of a disk cluster without indexes on disk are not swapped: their payload's
durable copy sits inside a log entry until compaction and then inside the one serialised
snapshot, neither addressable per message, so freeing it would need a second copy (an extra
write the design avoids) or a per-message index, which is what `indexes_on_disk` provides.

Note that the memory a swapped payload held is released once nothing else refers to it: the
in-memory log keeps committed entries (and so their messages) until the next compaction
(`compact_after_entries`).
"""

from __future__ import annotations

import itertools
import shutil
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.persistence.drivers import DEFAULT_DRIVER, Driver, driver_class

if TYPE_CHECKING:
    from strongroom.persistence.state import StoredMessage

__all__ = ["SwapSpace", "PayloadStore", "PayloadSource"]

_KEY = struct.Struct(">IQ")
# Swap out down to this share of the budget once it is exceeded.
_LOW_WATER = 0.9


class PayloadSource:
    """Where a payload that is not in memory is read from (swap, or the indexes on disk)."""

    def read(self, stored: StoredMessage) -> cpb.Message:
        """The payload of a message whose payload is not held in memory."""
        raise NotImplementedError


class SwapSpace:
    """A member's swap database and memory budget, shared by its swappable state machines."""

    def __init__(self, path: Path, budget_bytes: int, driver: str = DEFAULT_DRIVER) -> None:
        self.path = path
        self.budget_bytes = budget_bytes
        self._driver = driver_class(driver)
        self._db: Driver | None = None
        # Resident payloads of every store, oldest first: (prefix, seq) -> message.
        self._resident: dict[tuple[int, int], StoredMessage] = {}
        self.resident_bytes = 0
        self._prefixes = itertools.count(1)
        self._stores: dict[int, PayloadStore] = {}

    @property
    def enabled(self) -> bool:
        """Whether a budget is set (0: nothing is swapped)."""
        return self.budget_bytes > 0

    def _open(self) -> Driver:
        if self._db is None:
            # Wiped at start: a swap file from an earlier process describes nothing held now.
            shutil.rmtree(self.path, ignore_errors=True)
            self.path.mkdir(parents=True, exist_ok=True)
            self._db = self._driver(self.path, ("default",), volatile=True)
        return self._db

    def store(self) -> PayloadStore:
        """A payload store for one state machine."""
        store = PayloadStore(self, next(self._prefixes))
        self._stores[store.prefix] = store
        return store

    def admit(self, store: PayloadStore, stored: StoredMessage) -> None:
        """A new message with its payload in memory; swap out the oldest if over budget."""
        self._resident[(store.prefix, stored.seq)] = stored
        self.resident_bytes += stored.size
        if self.resident_bytes > self.budget_bytes:
            self._swap_out()

    def forget(self, store: PayloadStore, stored: StoredMessage) -> None:
        """A message is gone: drop it from memory accounting or from swap."""
        if self._resident.pop((store.prefix, stored.seq), None) is not None:
            self.resident_bytes -= stored.size
        elif stored.swapped:
            store.swapped_count[stored.store] = store.swapped_count.get(stored.store, 1) - 1
            db = self._db
            if db is not None:
                wb = db.batch()
                wb.delete(_KEY.pack(store.prefix, stored.seq), db.handle("default"))
                db.write(wb, sync=False)

    def _swap_out(self) -> None:
        db = self._open()
        target = int(self.budget_bytes * _LOW_WATER)
        wb = db.batch()
        handle = db.handle("default")
        moved: list[tuple[PayloadStore, StoredMessage]] = []
        resident = self._resident
        while self.resident_bytes > target and resident:
            (prefix, seq), stored = next(iter(resident.items()))
            del resident[(prefix, seq)]
            self.resident_bytes -= stored.size
            wb.put(_KEY.pack(prefix, seq), stored.message.SerializeToString(), handle)
            moved.append((self._stores[prefix], stored))
        db.write(wb, sync=False)
        for store, stored in moved:
            stored.swap_out(store)
            store.swapped_count[stored.store] = store.swapped_count.get(stored.store, 0) + 1

    def read(self, store: PayloadStore, stored: StoredMessage) -> cpb.Message:
        """Read a swapped payload back."""
        raw = self._open().family("default").get(_KEY.pack(store.prefix, stored.seq))
        if raw is None:
            raise KeyError(f"payload of message {stored.seq} is missing from swap")
        return cpb.Message.FromString(raw)

    def drop(self, store: PayloadStore) -> None:
        """A state machine is discarded (leadership lost, snapshot installed): free its part."""
        if self._stores.pop(store.prefix, None) is None:
            return
        for key in [k for k in self._resident if k[0] == store.prefix]:
            self.resident_bytes -= self._resident.pop(key).size
        db = self._db
        if db is not None:
            wb = db.batch()
            wb.delete_range(_KEY.pack(store.prefix, 0), _KEY.pack(store.prefix + 1, 0), db.handle("default"))
            db.write(wb, sync=False)
        store.swapped_count.clear()

    def close(self) -> None:
        """Close and remove the swap database."""
        if self._db is not None:
            self._db.close()
            self._db = None
            shutil.rmtree(self.path, ignore_errors=True)


class PayloadStore(PayloadSource):
    """One state machine's view of the swap space."""

    def __init__(self, space: SwapSpace, prefix: int) -> None:
        self.space = space
        self.prefix = prefix
        # Swapped messages per store (status).
        self.swapped_count: dict[str, int] = {}

    def admit(self, stored: StoredMessage) -> None:
        """A new message whose payload is in memory."""
        self.space.admit(self, stored)

    def forget(self, stored: StoredMessage) -> None:
        """A message left the state machine."""
        self.space.forget(self, stored)

    def read(self, stored: StoredMessage) -> cpb.Message:
        return self.space.read(self, stored)

    def close(self) -> None:
        """The state machine is discarded."""
        self.space.drop(self)
