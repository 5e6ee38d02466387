"""A small asyncio etcd v3 client over the stubs of etcd-sdk-python (`pyetcd.etcdrpc`).

The persistence service needs lease keep-alives, campaign transactions and watches on its
event loop; the sync `pyetcd` client would block it, so this talks to etcd's gRPC API with
grpc.aio using the same generated stubs.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
from pyetcd.etcdrpc import rpc_pb2 as rpc
from pyetcd.etcdrpc import rpc_pb2_grpc as rpc_grpc

from strongroom.aio import cancelled_under_us, with_timeout
from strongroom.channels import ETCD_CHANNEL_OPTIONS, PROCESS, open_channel, outdated, retire

__all__ = ["EtcdClient", "KeyValue", "endpoint_tls", "prefix_end", "parse_endpoints", "EtcdUnavailable"]

log = logging.getLogger("strongroom.etcd")


class EtcdUnavailable(Exception):
    """No etcd endpoint answered."""


@dataclass(frozen=True)
class KeyValue:
    """One key as etcd returned it."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def prefix_end(prefix: str) -> bytes:
    """The range end that selects every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    for i in range(len(raw) - 1, -1, -1):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    return b"\0"


def endpoint_tls(endpoints: str | Sequence[str]) -> object:
    """How to reach etcd: plaintext (None) when an endpoint says `http://`, else the process's
    TLS settings (`channels.PROCESS`: mutual TLS when the process has them, so an etcd started
    by `strongroom up` with TLS is reached with it; `https://` says the same)."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    return None if any(item.strip().startswith("http://") for item in items) else PROCESS


def parse_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    """Accept "h1:p1,h2:p2" or a list; strip any http:// scheme."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out = []
    for item in items:
        item = item.strip()
        for scheme in ("http://", "https://"):
            if item.startswith(scheme):
                item = item[len(scheme):]
        if item:
            out.append(item)
    if not out:
        raise ValueError("no etcd endpoints given")
    return out


def _kv(raw: object) -> KeyValue:
    return KeyValue(
        key=raw.key.decode(),  # type: ignore[attr-defined]
        value=bytes(raw.value),  # type: ignore[attr-defined]
        create_revision=raw.create_revision,  # type: ignore[attr-defined]
        mod_revision=raw.mod_revision,  # type: ignore[attr-defined]
        lease=raw.lease,  # type: ignore[attr-defined]
    )


class EtcdClient:
    """Async etcd client: KV, transactions, leases and watches against one of several endpoints."""

    def __init__(self, endpoints: str | Sequence[str], timeout: float = 2.0) -> None:
        self._tls = endpoint_tls(endpoints)
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self._index = random.randrange(len(self.endpoints))
        self._channel: grpc.aio.Channel | None = None
        self._connect()

    def _connect(self) -> None:
        target = self.endpoints[self._index % len(self.endpoints)]
        self._channel = open_channel(target, ETCD_CHANNEL_OPTIONS, self._tls)
        self.kv = rpc_grpc.KVStub(self._channel)
        self.lease_stub = rpc_grpc.LeaseStub(self._channel)
        self.watch_stub = rpc_grpc.WatchStub(self._channel)

    async def _rotate(self) -> None:
        if len(self.endpoints) > 1:
            old = self._channel
            self._index += 1
            self._connect()
            if old is not None:
                await old.close()

    def _renew(self) -> None:
        """Before a call: a new channel once the process's certificate was renewed (the old one
        would reconnect with the old certificate, refused once it expired); the old one closes
        once its calls (watches, say) have ended."""
        old = self._channel
        if old is not None and outdated(old):
            self._connect()
            retire(old)

    async def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _call(self, method_name: str, stub_name: str, request: object, timeout: float | None = None) -> object:
        last: Exception | None = None
        self._renew()
        for _ in range(len(self.endpoints)):
            stub = getattr(self, stub_name)
            try:
                return await getattr(stub, method_name)(request, timeout=timeout or self.timeout)
            except grpc.aio.AioRpcError as exc:
                last = exc
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                await self._rotate()
            except asyncio.CancelledError:
                if not cancelled_under_us():
                    raise
                # Another call rotated to the next endpoint and closed the channel this one
                # was on: go again on the channel in force.
                last = EtcdUnavailable(f"{method_name}: its channel was closed by an endpoint rotation")
        raise EtcdUnavailable(str(last))

    # --- KV -----------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        """The key, or None."""
        resp = await self._call("Range", "kv", rpc.RangeRequest(key=key.encode()))
        kvs = resp.kvs  # type: ignore[attr-defined]
        return _kv(kvs[0]) if kvs else None

    async def get_at(self, key: str) -> tuple[KeyValue | None, int]:
        """The key (or None) and the revision it was read at: a reader that also watches the key
        orders what it read against the events it gets (an absent key has no mod_revision)."""
        resp = await self._call("Range", "kv", rpc.RangeRequest(key=key.encode()))
        kvs = resp.kvs  # type: ignore[attr-defined]
        return (_kv(kvs[0]) if kvs else None), int(resp.header.revision)  # type: ignore[attr-defined]

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        """Every key under the prefix, sorted by key."""
        req = rpc.RangeRequest(
            key=prefix.encode(),
            range_end=prefix_end(prefix),
            sort_order=rpc.RangeRequest.ASCEND,
            sort_target=rpc.RangeRequest.KEY,
        )
        resp = await self._call("Range", "kv", req)
        return [_kv(kv) for kv in resp.kvs]  # type: ignore[attr-defined]

    async def get_prefix_at(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under the prefix and the revision it was read at (watch from revision + 1
        to miss nothing)."""
        req = rpc.RangeRequest(
            key=prefix.encode(),
            range_end=prefix_end(prefix),
            sort_order=rpc.RangeRequest.ASCEND,
            sort_target=rpc.RangeRequest.KEY,
        )
        resp = await self._call("Range", "kv", req)
        return [_kv(kv) for kv in resp.kvs], int(resp.header.revision)  # type: ignore[attr-defined]

    async def revision(self) -> int:
        """The store's current revision."""
        resp = await self._call("Range", "kv", rpc.RangeRequest(key=b"\0", limit=1, count_only=True))
        return int(resp.header.revision)  # type: ignore[attr-defined]

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Put; returns the new revision."""
        resp = await self._call("Put", "kv", rpc.PutRequest(key=key.encode(), value=value, lease=lease))
        return int(resp.header.revision)  # type: ignore[attr-defined]

    async def delete(self, key: str) -> int:
        """Delete one key; returns how many were deleted."""
        resp = await self._call("DeleteRange", "kv", rpc.DeleteRangeRequest(key=key.encode()))
        return int(resp.deleted)  # type: ignore[attr-defined]

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under the prefix."""
        req = rpc.DeleteRangeRequest(key=prefix.encode(), range_end=prefix_end(prefix))
        resp = await self._call("DeleteRange", "kv", req)
        return int(resp.deleted)  # type: ignore[attr-defined]

    async def create_if_absent(self, key: str, value: bytes, lease: int = 0) -> tuple[bool, KeyValue | None]:
        """Create the key if it does not exist (the campaign transaction).

        Returns (created, current key): on success the key as created (its create_revision is
        the new epoch); on failure the key that exists.
        """
        req = rpc.TxnRequest(
            compare=[rpc.Compare(key=key.encode(), result=rpc.Compare.EQUAL,
                                 target=rpc.Compare.CREATE, create_revision=0)],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value, lease=lease))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key.encode()))],
        )
        resp = await self._call("Txn", "kv", req)
        if resp.succeeded:  # type: ignore[attr-defined]
            rev = int(resp.header.revision)  # type: ignore[attr-defined]
            return True, KeyValue(key, value, rev, rev, lease)
        kvs = resp.responses[0].response_range.kvs  # type: ignore[attr-defined]
        return False, (_kv(kvs[0]) if kvs else None)

    async def put_if_version(self, key: str, value: bytes, mod_revision: int, extra: Sequence[tuple[str, bytes]] = ()) -> bool:
        """Put the key (and `extra` keys) only if the key's mod_revision is still `mod_revision` (0: absent)."""
        return bool(await self.put_at_revision(key, value, mod_revision, extra))

    async def put_at_revision(self, key: str, value: bytes, mod_revision: int,
                              extra: Sequence[tuple[str, bytes]] = ()) -> int:
        """`put_if_version`, answering the revision the put made (the key's new mod_revision), or
        0 when the key was not at `mod_revision`."""
        compare = rpc.Compare(key=key.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.MOD,
                              mod_revision=mod_revision)
        ops = [rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value))]
        ops += [rpc.RequestOp(request_put=rpc.PutRequest(key=k.encode(), value=v)) for k, v in extra]
        resp = await self._call("Txn", "kv", rpc.TxnRequest(compare=[compare], success=ops))
        return int(resp.header.revision) if resp.succeeded else 0  # type: ignore[attr-defined]

    async def put_while_held(self, key: str, value: bytes, mod_revision: int, held: str, lease: int) -> int:
        """Put the key only if its mod_revision is still `mod_revision` (0: absent) and the key
        `held` is still bound to `lease` (a leader's write that must not land once it lost the
        leader key); the put's revision, or 0 when either did not hold."""
        compare = [rpc.Compare(key=key.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.MOD,
                               mod_revision=mod_revision),
                   rpc.Compare(key=held.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.LEASE, lease=lease)]
        op = rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value))
        resp = await self._call("Txn", "kv", rpc.TxnRequest(compare=compare, success=[op]))
        return int(resp.header.revision) if resp.succeeded else 0  # type: ignore[attr-defined]

    async def delete_if_lease(self, key: str, lease: int) -> bool:
        """Delete the key only if it is still bound to `lease` (a clean resignation)."""
        compare = rpc.Compare(key=key.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.LEASE, lease=lease)
        op = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key.encode()))
        resp = await self._call("Txn", "kv", rpc.TxnRequest(compare=[compare], success=[op]))
        return bool(resp.succeeded)  # type: ignore[attr-defined]

    # --- leases ------------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        """Grant a lease; returns its id."""
        resp = await self._call("LeaseGrant", "lease_stub", rpc.LeaseGrantRequest(TTL=ttl))
        return int(resp.ID)  # type: ignore[attr-defined]

    async def keepalive_once(self, lease: int, timeout: float | None = None) -> int:
        """Refresh the lease once; returns the remaining TTL (<= 0: the lease is gone)."""
        self._renew()

        async def one() -> int:
            call = self.lease_stub.LeaseKeepAlive(timeout=timeout or self.timeout)
            try:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
                resp = await call.read()
                await call.done_writing()
            finally:
                call.cancel()
            if resp is grpc.aio.EOF:
                return 0
            return int(resp.TTL)

        try:
            return await with_timeout(one(), timeout or self.timeout)
        except (grpc.aio.AioRpcError, asyncio.TimeoutError) as exc:
            await self._rotate()
            raise EtcdUnavailable(str(exc)) from exc
        except asyncio.CancelledError:
            if not cancelled_under_us():
                raise
            # Its channel was closed under it (another call rotated endpoints): a missed
            # refresh, which the keeper repeats, not an order to stop keeping the lease.
            raise EtcdUnavailable("the lease keep-alive's channel was closed by an endpoint rotation") from None

    async def revoke(self, lease: int) -> None:
        """Revoke a lease (its keys are deleted)."""
        try:
            await self._call("LeaseRevoke", "lease_stub", rpc.LeaseRevokeRequest(ID=lease))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise

    # --- watches -----------------------------------------------------------------------------

    async def follow(self, key: str, prefix: bool = False,
                     retry_delay: float = 0.5) -> AsyncIterator[tuple[str, KeyValue]]:
        """`key` (every key under it, with `prefix`) as it is, then every change, until the caller
        stops: ("PUT", kv) for each key read, then the watch's events. After a broken watch
        (etcd away, a compacted revision) the keys are read and watched again, `retry_delay`
        seconds later; a single key found absent then is reported as a "DELETE" (with an empty
        value), so a follower of it never keeps a value etcd no longer holds."""
        while True:
            try:
                kvs, revision = await self.get_prefix_at(key)
                found = [kv for kv in kvs if prefix or kv.key == key]
                for kv in found:
                    yield "PUT", kv
                if not prefix and not found:
                    yield "DELETE", KeyValue(key, b"", 0, revision, 0)
                async for events in self.watch(key, prefix=prefix, start_revision=revision + 1):
                    for event in events:
                        yield event
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away: read and watch again
                log.debug("following %s broke: %s", key, exc)
                await asyncio.sleep(retry_delay)

    async def watch(self, key: str, prefix: bool = False, start_revision: int = 0) -> AsyncIterator[list[tuple[str, KeyValue]]]:
        """Yield batches of (event type "PUT"/"DELETE", key value) until the caller stops."""
        create = rpc.WatchCreateRequest(key=key.encode(), start_revision=start_revision)
        if prefix:
            create.range_end = prefix_end(key)
        self._renew()
        call = self.watch_stub.Watch()
        try:
            await call.write(rpc.WatchRequest(create_request=create))
            while True:
                try:
                    resp = await call.read()
                except asyncio.CancelledError:
                    # The call was cancelled under us (its channel closed: `_rotate`), not the
                    # caller's task: a broken watch, which the caller reads and opens again.
                    if call.cancelled() and cancelled_under_us():
                        raise EtcdUnavailable("the watch's channel was closed") from None
                    raise
                if resp is grpc.aio.EOF:
                    return
                if resp.canceled:
                    raise EtcdUnavailable(f"watch canceled: {resp.cancel_reason}")
                if resp.events:
                    yield [("DELETE" if ev.type == 1 else "PUT", _kv(ev.kv)) for ev in resp.events]
        finally:
            call.cancel()
