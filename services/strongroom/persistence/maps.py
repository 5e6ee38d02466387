"""Replicated key-value maps inside a store: the domain side of `MapService`.

A map lives in one store and is named by (store, map); its entries are (key, value, version).
Writes of a replicated store go through the replicated log as `MapOp`s and return once
committed on a majority; the version of an entry is the log index of the write that produced it.
A non-replicated store keeps its maps in the leader's memory, like its messages, with versions
from a leader-local counter; they are lost when the leader goes.

While the cluster's persistent store is unavailable, a replicated store's maps are neither read
nor written (PSTORE_UNAVAILABLE); while it takes no new units of work only deletes are served
(NO_NEW_UOW for the other writes). Non-replicated stores' maps are served throughout.

Reads are served by the leader from its applied (= committed) state, and only while its lease
is certainly valid: a leader that may already have been replaced refuses to answer rather than
answer from a stale state. A leader serves clients only after its own no-op committed, so its
applied state holds every write any earlier leader confirmed.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    InvalidArgument,
    MapsNotAllowed,
    MessageTooLarge,
    NoLeaderError,
    StrongroomError,
    UnknownStore,
)
from strongroom.persistence.state import MapResult, StateMachine
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Realm, Store

__all__ = ["DEFAULT_LIST_LIMIT", "MAX_KEY", "MAX_LIST_LIMIT", "MAX_MAP_NAME", "MapEntry", "MapFront", "MapWrite"]

MAX_MAP_NAME = 255
"""Longest map name, in characters."""
MAX_KEY = 1024
"""Longest key, in characters."""
DEFAULT_LIST_LIMIT = 1000
"""Page size of a list that asks for 0."""
MAX_LIST_LIMIT = 10000
"""Largest page a list returns; a bigger limit is cut to it (`more` says what follows)."""


@dataclass(frozen=True)
class MapEntry:
    """One entry of a map."""

    key: str
    value: bytes
    version: int
    """Log index of the write that produced the value (a leader-local counter in a
    non-replicated store); it increases with every write of the key."""


@dataclass(frozen=True)
class MapWrite:
    """Outcome of a put, delete or compare-and-set."""

    swapped: bool
    """False only for a compare-and-set whose expected version did not match, or a delete of
    an absent key."""
    entry: MapEntry | None
    """The key's entry after the call (None once deleted, or when it does not exist)."""
    log_index: int
    """Log index of the write (0 in a non-replicated store)."""


_Key = tuple[str, str, str]


class _KeyLocks:
    """One lock per (store, map, key), dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[_Key, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: _Key) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class Leading(Protocol):
    """What the map front needs of its member (`PersistenceNode`)."""

    cluster_name: str
    member: str
    realm: Realm
    realm_version: int

    def require_leader(self) -> LeaderTerm: ...

    def name_leader(self, err: StrongroomError) -> StrongroomError: ...


class MapFront:
    """Put, get, delete, list and compare-and-set on the maps of this member's cluster."""

    def __init__(self, node: Leading) -> None:
        self.node = node
        # Writes of one key leave the leader one at a time: each waits until the previous one
        # committed. Group commit would otherwise put two writes of a key into one log entry,
        # where both get the entry's index as version, and a client holding the first one's
        # version could compare-and-set over the second one's value.
        self._writing = _KeyLocks()

    def named(self, err: StrongroomError) -> StrongroomError:
        """`err` as the client is told it: a NOT_LEADER names the leader, if this member knows it."""
        return self.node.name_leader(err)

    # --- writes --------------------------------------------------------------------------------

    async def put(self, store: str, name: str, key: str, value: bytes) -> MapWrite:
        """Write a key unconditionally; returns once committed."""
        return await self._write(store, name, key, value=value)

    async def delete(self, store: str, name: str, key: str) -> MapWrite:
        """Delete a key; `swapped` is False if it did not exist."""
        return await self._write(store, name, key, delete=True)

    async def compare_and_set(self, store: str, name: str, key: str, expected_version: int,
                              value: bytes = b"", delete: bool = False) -> MapWrite:
        """Write (or delete) only if the key's version is `expected_version` (0: the key must be
        absent). A lost race is not an error: `swapped` is False and `entry` the current one."""
        return await self._write(store, name, key, value=value, delete=delete, expected=expected_version)

    async def _write(self, store_name: str, name: str, key: str, value: bytes = b"", delete: bool = False,
                     expected: int | None = None) -> MapWrite:
        _check_map(name)
        _check_key(key)
        term = self.node.require_leader()
        store = self._store(store_name)
        if not delete and len(value) > store.max_message_bytes:
            raise MessageTooLarge(f"value of {len(value)} bytes exceeds store {store.name!r} limit of "
                                  f"{store.max_message_bytes} bytes")
        op = rpb.MapOp(store=store.name, map=name, key=key)
        if delete:
            op.delete = True
        else:
            op.put = value
        if expected is not None:
            op.compare = True
            op.expected_version = expected
        operation = rpb.Operation(map=op)
        if not store.replicated:
            self._check_lease(term)
            return _write_outcome(key, term.local_state.apply_op(operation), 0)
        _check_store(term, delete)
        async with self._writing.hold((store.name, name, key)):
            # Leadership may have changed while this write waited for the previous one; a
            # non-leader never commits what is submitted to it, so check right before.
            term = self.node.require_leader()
            _check_store(term, delete)
            result, index = await term.commit(operation)
        return _write_outcome(key, result, index)

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, store: str, name: str, key: str) -> MapEntry | None:
        """The key's entry, or None."""
        _check_map(name)
        _check_key(key)
        state = self._read_state(store)
        found = state.map_get(store, name, key)
        return MapEntry(key, found[0], found[1]) if found is not None else None

    async def list(self, store: str, name: str, prefix: str = "", start_after: str = "",
                   limit: int = 0) -> tuple[builtins.list[MapEntry], bool]:
        """Entries whose key starts with `prefix` and sorts after `start_after`, in key order, at
        most `limit` (0: 1000; at most 10000); and whether more follow."""
        _check_map(name)
        if limit < 0:
            raise InvalidArgument(f"limit must not be negative, got {limit}")
        limit = min(limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
        state = self._read_state(store)
        entries, more = state.map_list(store, name, prefix, start_after, limit)
        return [MapEntry(k, v, ver) for k, v, ver in entries], more

    # --- helpers -------------------------------------------------------------------------------

    def _store(self, name: str) -> Store:
        """The realm's store of this cluster that allows maps."""
        if not name:
            raise InvalidArgument("store is required")
        node = self.node
        store = node.realm.store(name)
        if store is None:
            raise UnknownStore(f"store {name!r} is not defined in the realm (version {node.realm_version})")
        if not store.served_by(node.cluster_name):
            raise UnknownStore(f"store {name!r} belongs to {store.where}, not {node.cluster_name!r}")
        if not store.maps:
            why = "it is a routed store" if store.routed else "the realm sets maps: false for it"
            raise MapsNotAllowed(f"store {name!r} does not allow maps: {why}")
        return store

    def _read_state(self, store_name: str) -> StateMachine:
        """The committed state to read from, on a leader whose lease is certainly valid."""
        term = self.node.require_leader()
        store = self._store(store_name)
        if store.replicated:
            term.require_store()
        self._check_lease(term)
        return term.state_for(store.replicated)

    def _check_lease(self, term: LeaderTerm) -> None:
        """Answer from this member's state only while no other member can have been elected."""
        if not term.lease_valid():
            # Another member may have been elected already and confirmed writes we have not
            # seen: answering now could return a stale value.
            raise NoLeaderError(f"member {self.node.member} cannot confirm its leader lease; "
                                f"not answering for cluster {self.node.cluster_name}")


def _check_store(term: LeaderTerm, delete: bool) -> None:
    """A replicated store's write while the persistent store cannot take it: a delete needs it
    available or taking no new units of work (it consumes), any other write available
    (docs/store-operations.md)."""
    if delete:
        term.require_store()
    else:
        term.require_new()


def _check_map(name: str) -> None:
    if not name:
        raise InvalidArgument("map name is required")
    if len(name) > MAX_MAP_NAME:
        raise InvalidArgument(f"map name of {len(name)} characters exceeds the limit of {MAX_MAP_NAME}")


def _check_key(key: str) -> None:
    if not key:
        raise InvalidArgument("key is required")
    if len(key) > MAX_KEY:
        raise InvalidArgument(f"key of {len(key)} characters exceeds the limit of {MAX_KEY}")


def _write_outcome(key: str, result: object, index: int) -> MapWrite:
    assert isinstance(result, MapResult)
    entry = MapEntry(key, result.value, result.version) if result.found else None
    return MapWrite(result.swapped, entry, index)
