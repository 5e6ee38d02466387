"""Replicated key-value maps inside a store, from the client side.

    counters = client.map("default", "counters")
    version = await counters.create("orders", b"0")          # KeyExists if it is there already
    entry = await counters.get("orders")                     # KeyNotFound if it is not
    version = await counters.update("orders", b"1", expected_version=entry.version)
    async for entry in counters.items(prefix="ord"):
        ...

Every call goes to the leader and follows it through a failover (`Connection.call_leader`).
Writes return once committed on a majority; reads are answered by the leader from its committed
state while its lease is valid. A version is the log index of the write that produced the
value: it grows with every write of the key, and 0 stands for "absent" in a compare-and-set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple, TypeVar

from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.client.connection import Connection
from strongroom.errors import InvalidArgument, KeyExists, KeyNotFound, VersionMismatch

__all__ = ["Map", "MapEntry"]

R = TypeVar("R")


class MapEntry(NamedTuple):
    """One key of a map as read: its value and the version that wrote it."""

    key: str
    value: bytes
    version: int
    """The log index of the write that produced the value."""


class Map:
    """One map of a store (`client.map(store, name)`)."""

    def __init__(self, connection: Connection, store: str, name: str) -> None:
        if not store or not name:
            raise InvalidArgument("a map needs a store and a name")
        self.connection = connection
        self.store = store
        self.name = name

    async def _call(self, method: Callable[[mgrpc.MapServiceStub], Callable[..., Awaitable[R]]],
                    request: object) -> R:
        timeout = self.connection.policy.timeout

        async def call(address: str) -> R:
            conn = self.connection
            return await conn.unary(method(conn.maps(address))(request, timeout=timeout, metadata=conn.metadata))

        return await self.connection.call_leader(call)

    async def put(self, key: str, value: bytes) -> int:
        """Write `value` under `key`; returns the new version once committed.

        A put retried after a failover writes the same value again (the key ends with that
        value either way) and returns the retry's version."""
        req = mpb.MapPutRequest(store=self.store, map=self.name, key=key, value=_bytes(value))
        resp: mpb.MapWriteResponse = await self._call(lambda stub: stub.Put, req)
        return int(resp.entry.version)

    async def get(self, key: str) -> MapEntry:
        """The key's entry; `KeyNotFound` if the map does not hold it."""
        req = mpb.MapGetRequest(store=self.store, map=self.name, key=key)
        resp: mpb.MapGetResponse = await self._call(lambda stub: stub.Get, req)
        if not resp.found:
            raise self._not_found(key)
        return MapEntry(key, bytes(resp.entry.value), int(resp.entry.version))

    async def delete(self, key: str) -> bool:
        """Delete the key; True if it existed.

        A delete retried after a failover can return False although its first attempt did
        delete the key (committed just before the leader went)."""
        req = mpb.MapDeleteRequest(store=self.store, map=self.name, key=key)
        resp: mpb.MapWriteResponse = await self._call(lambda stub: stub.Delete, req)
        return bool(resp.swapped)

    async def compare_and_set(self, key: str, expected_version: int, value: bytes | None = None,
                              delete: bool = False) -> tuple[bool, MapEntry | None]:
        """Write `value` (or, with `delete=True`, delete the key) only if the key's version is
        `expected_version`; 0 means the key must not exist. Returns (swapped, current) where
        current is the key's entry after the call, None if it does not exist. A lost race is
        not an error: swapped is False and current is what won.

        The check and the write are one step of the replicated log: of concurrent
        compare-and-sets with the same expected version, exactly one succeeds.

        A retried call is not deduplicated: if the leader fails over after the first attempt
        committed but before its answer arrived, the retry finds the version already moved on
        and reports swapped=False, with current holding this very write unless another write
        followed it. Callers that must tell the two apart compare `current` with what they
        wrote (a value unique to the writer, e.g. carrying its id, makes that exact).
        """
        if delete == (value is not None):
            raise InvalidArgument("compare_and_set needs either a value or delete=True, not both")
        if expected_version < 0:
            raise InvalidArgument(f"expected_version must not be negative, got {expected_version}")
        req = mpb.MapCompareAndSetRequest(store=self.store, map=self.name, key=key,
                                          expected_version=expected_version,
                                          value=_bytes(value) if value is not None else b"", delete=delete)
        resp: mpb.MapWriteResponse = await self._call(lambda stub: stub.CompareAndSet, req)
        current = MapEntry(key, bytes(resp.entry.value), int(resp.entry.version)) if resp.found else None
        return bool(resp.swapped), current

    async def create(self, key: str, value: bytes) -> int:
        """Write `value` under `key` only if the key does not exist; returns the new version.
        `KeyExists` if it does (a compare-and-set expecting version 0; see its note on
        retries after a failover)."""
        swapped, current = await self.compare_and_set(key, 0, value)
        if not swapped:
            version = current.version if current is not None else 0
            raise KeyExists(f"key {key!r} exists in map {self.name!r} of store {self.store!r} "
                            f"(version {version})", {"current_version": str(version)})
        return _version(current)

    async def update(self, key: str, value: bytes, expected_version: int) -> int:
        """Write `value` under `key` only if the key is at `expected_version` (from `get` or a
        write); returns the new version. `KeyNotFound` if the key does not exist,
        `VersionMismatch` if another write came first (its `current_version` metadata says
        which)."""
        if expected_version < 1:
            raise InvalidArgument(f"update needs the version the key is at (1 or more), got "
                                  f"{expected_version}; create() writes a key that does not exist")
        swapped, current = await self.compare_and_set(key, expected_version, value)
        if swapped:
            return _version(current)
        if current is None:
            raise self._not_found(key)
        raise VersionMismatch(f"key {key!r} is at version {current.version}, not {expected_version}",
                              {"current_version": str(current.version)})

    async def items(self, prefix: str = "", page_size: int = 0) -> AsyncIterator[MapEntry]:
        """The entry of every key starting with `prefix`, in key order, fetched a page at a
        time (`page_size` 0: the server's default of 1000).

        Each page is read from the committed state when it is fetched, not from one snapshot of
        the whole map: a key written between pages shows up if it sorts after the page already
        returned. Every key is yielded at most once."""
        if page_size < 0:
            raise InvalidArgument(f"page_size must not be negative, got {page_size}")
        start_after = ""
        while True:
            req = mpb.MapListRequest(store=self.store, map=self.name, prefix=prefix,
                                     start_after=start_after, limit=page_size)
            resp: mpb.MapListResponse = await self._call(lambda stub: stub.List, req)
            for entry in resp.entries:
                yield MapEntry(entry.key, bytes(entry.value), int(entry.version))
            if not resp.more or not resp.entries:
                return
            start_after = resp.entries[-1].key

    def _not_found(self, key: str) -> KeyNotFound:
        return KeyNotFound(f"key {key!r} not found in map {self.name!r} of store {self.store!r}",
                           {"store": self.store, "map": self.name, "key": key})

    def __repr__(self) -> str:
        return f"Map(store={self.store!r}, name={self.name!r})"


def _version(written: MapEntry | None) -> int:
    # A swapped write's reply carries the entry it wrote.
    return written.version if written is not None else 0


def _bytes(value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(f"map values are bytes, not {type(value).__name__}")
    return bytes(value)
