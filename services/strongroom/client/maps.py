"""Replicated key-value maps inside a store, from the client side.

    counters = client.map("default", "counters")
    version = await counters.put("orders", b"0")
    value, version = await counters.get("orders") or (b"", 0)
    swapped, current = await counters.compare_and_set("orders", version, b"1")
    async for key, value, version in counters.items(prefix="ord"):
        ...

Every call goes to the leader and follows it through a failover (`Client.retrying`). Writes
return once committed on a majority; reads are answered by the leader from its committed state
while its lease is valid. A version is the log index of the write that produced the value: it
grows with every write of the key, and 0 stands for "absent" in a compare-and-set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.errors import InvalidArgument

if TYPE_CHECKING:
    from strongroom.client.client import Client

__all__ = ["Map"]


class Map:
    """One map of a store (`client.map(store, name)`)."""

    def __init__(self, client: Client, store: str, name: str) -> None:
        if not store or not name:
            raise InvalidArgument("a map needs a store and a name")
        self.client = client
        self.store = store
        self.name = name

    def _stub(self, address: str) -> mgrpc.MapServiceStub:
        return mgrpc.MapServiceStub(self.client._channel(address))

    async def put(self, key: str, value: bytes) -> int:
        """Write `value` under `key`; returns the new version once committed.

        A put retried after a failover writes the same value again (the key ends with that
        value either way) and returns the retry's version."""
        req = mpb.MapPutRequest(store=self.store, map=self.name, key=key, value=_bytes(value))

        async def call(address: str) -> mpb.MapWriteResponse:
            return await self._stub(address).Put(req, timeout=self.client.timeout)

        resp = await self.client.retrying(call)
        return int(resp.entry.version)

    async def get(self, key: str) -> tuple[bytes, int] | None:
        """(value, version) of the key, or None if it does not exist."""
        req = mpb.MapGetRequest(store=self.store, map=self.name, key=key)

        async def call(address: str) -> mpb.MapGetResponse:
            return await self._stub(address).Get(req, timeout=self.client.timeout)

        resp = await self.client.retrying(call)
        return (bytes(resp.entry.value), int(resp.entry.version)) if resp.found else None

    async def delete(self, key: str) -> bool:
        """Delete the key; True if it existed.

        A delete retried after a failover can return False although its first attempt did
        delete the key (committed just before the leader went)."""
        req = mpb.MapDeleteRequest(store=self.store, map=self.name, key=key)

        async def call(address: str) -> mpb.MapWriteResponse:
            return await self._stub(address).Delete(req, timeout=self.client.timeout)

        resp = await self.client.retrying(call)
        return bool(resp.swapped)

    async def compare_and_set(self, key: str, expected_version: int, value: bytes | None = None,
                              delete: bool = False) -> tuple[bool, tuple[bytes, int] | None]:
        """Write `value` (or, with `delete=True`, delete the key) only if the key's version is
        `expected_version`; 0 means the key must not exist. Returns (swapped, current) where
        current is the key's (value, version) after the call, None if it does not exist. A lost
        race is not an error: swapped is False and current is what won.

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

        async def call(address: str) -> mpb.MapWriteResponse:
            return await self._stub(address).CompareAndSet(req, timeout=self.client.timeout)

        resp = await self.client.retrying(call)
        current = (bytes(resp.entry.value), int(resp.entry.version)) if resp.found else None
        return bool(resp.swapped), current

    async def items(self, prefix: str = "", page_size: int = 0) -> AsyncIterator[tuple[str, bytes, int]]:
        """(key, value, version) of every key starting with `prefix`, in key order, fetched a
        page at a time (`page_size` 0: the server's default of 1000).

        Each page is read from the committed state when it is fetched, not from one snapshot of
        the whole map: a key written between pages shows up if it sorts after the page already
        returned. Every key is yielded at most once."""
        if page_size < 0:
            raise InvalidArgument(f"page_size must not be negative, got {page_size}")
        start_after = ""
        while True:
            req = mpb.MapListRequest(store=self.store, map=self.name, prefix=prefix,
                                     start_after=start_after, limit=page_size)

            async def call(address: str, req: mpb.MapListRequest = req) -> mpb.MapListResponse:
                return await self._stub(address).List(req, timeout=self.client.timeout)

            resp = await self.client.retrying(call)
            for entry in resp.entries:
                yield entry.key, bytes(entry.value), int(entry.version)
            if not resp.more or not resp.entries:
                return
            start_after = resp.entries[-1].key

    def __repr__(self) -> str:
        return f"Map(store={self.store!r}, name={self.name!r})"


def _bytes(value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(f"map values are bytes, not {type(value).__name__}")
    return bytes(value)
