"""Every gRPC call of disaster recovery outside a member: the primary members' committed-entry
stream and `ShipEntries` to the standby set's leader (found and followed through the client's
`Connection`, under the given retry policy) for the DR service; a site's settled leader and its
whole committed log for the manifest; `DrService.Status` / `Activate` and `AdminService.Demote`
for the CLI, the drills and the chaos scenario. Failures come out as `StrongroomError`s, read by
the client's one table (`error_from_rpc`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import admin_pb2_grpc as agrpc
from strongroom.api.v1 import dr_pb2, dr_pb2_grpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel
from strongroom.client.connection import Connection
from strongroom.client.retry import Outage, RetryPolicy, error_from_rpc
from strongroom.errors import ConnectionFailed, DataCorruption, PersistenceUnavailable, StrongroomError
from strongroom.local.leader import NoLeader, wait_for_leader

__all__ = ["SETTLE_SECONDS", "SHIP_TIMEOUT", "CommittedStream", "StandbyCalls", "activate_at", "demote_at",
           "dr_status", "dr_status_at", "read_committed", "settled_leader"]

T = TypeVar("T")

SETTLE_SECONDS = 30.0
"""How long a reader of a site's whole log waits for its leader to have committed all of it."""

SHIP_TIMEOUT = 30.0
"""Seconds one ShipEntries call may take (the standby leader's write, fsync included)."""


class CommittedStream:
    """One `StreamCommitted` call to one member."""

    def __init__(self, address: str, request: rpb.StreamCommittedRequest) -> None:
        self.address = address
        self._channel = open_channel(address, CHANNEL_OPTIONS)
        self._call = rgrpc.ReplicationServiceStub(self._channel).StreamCommitted(request)  # type: ignore[no-untyped-call]

    async def read(self, timeout: float) -> rpb.CommittedEntries | None:
        """The next message; None when the member ended the stream. TimeoutError after
        `timeout` seconds without one; a failed call as its `StrongroomError`."""
        try:
            msg = await asyncio.wait_for(self._call.read(), timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, self.address) from None
        return None if msg is grpc.aio.EOF else msg

    async def close(self) -> None:
        self._call.cancel()
        await self._channel.close()


class StandbyCalls:
    """`ShipEntries` to whichever standby member leads."""

    def __init__(self, addresses: list[str], policy: RetryPolicy) -> None:
        self._connection = Connection(addresses, policy)

    async def ship(self, request: rpb.ShipEntriesRequest, outage: Outage | None = None) -> rpb.ShipEntriesResponse:
        """The leader's answer (followed through NOT_LEADER, retried while retriable: under the
        policy given at construction, or `outage`'s)."""
        async def attempt(address: str) -> rpb.ShipEntriesResponse:
            stub = rgrpc.ReplicationServiceStub(self._connection.channel(address))  # type: ignore[no-untyped-call]
            answer: rpb.ShipEntriesResponse = await stub.ShipEntries(request, timeout=SHIP_TIMEOUT)
            return answer
        return await self._connection.call_leader(attempt, outage)

    async def close(self) -> None:
        await self._connection.close()


async def settled_leader(addresses: list[str], cluster: str,
                         patience: float = SETTLE_SECONDS) -> tuple[str, apb.ClusterStatus]:
    """The leader of `cluster` among `addresses` once it has committed its whole log, and its
    status: the member to read a site's whole log from (a fenced site's leader commits what it
    holds). A site just restarted has no leader yet and followers whose commit indexes are stale
    (written lazily): a tail read there would miss entries that were committed, and confirmed.
    PersistenceUnavailable after `patience` seconds."""
    try:
        found = await wait_for_leader(addresses, patience, interval=0.5, accept=lambda st: (
            st.cluster == cluster and st.commit_index == st.last_index))
    except NoLeader:
        raise PersistenceUnavailable(f"no leader of cluster {cluster!r} at {', '.join(addresses)} has committed its "
                                     f"whole log within {patience:.0f} s (a site just restarted elects one first); "
                                     f"try again") from None
    return found.address, found.status


async def _unary(address: str, call: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
    """One call on a channel of its own; a failure as its `StrongroomError` (the client's table)."""
    async with open_channel(address, CHANNEL_OPTIONS) as channel:
        try:
            return await call(channel)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, address) from None


async def dr_status(address: str, timeout: float = 3.0) -> dr_pb2.DrStatus:
    """`DrService.Status` of the DR service at `address`; a failure as its `StrongroomError`."""
    return await _unary(address, lambda ch: dr_pb2_grpc.DrServiceStub(ch).Status(  # type: ignore[no-untyped-call]
        dr_pb2.DrStatusRequest(), timeout=timeout))


async def dr_status_at(address: str, timeout: float = 3.0) -> dr_pb2.DrStatus | None:
    """`dr_status`, or None when the DR service does not answer."""
    try:
        return await dr_status(address, timeout)
    except StrongroomError:
        return None


async def activate_at(address: str, cluster: str, force: bool = False, timeout: float = 120.0) -> dr_pb2.ActivateResponse:
    """`DrService.Activate` at the DR service `address` (`strongroom dr activate`, the drill, the
    chaos scenario): its answer; a refusal (PrimaryHealthy, WrongDrRole, ...) or a failed call as
    its `StrongroomError`."""
    return await _unary(address, lambda ch: dr_pb2_grpc.DrServiceStub(ch).Activate(  # type: ignore[no-untyped-call]
        dr_pb2.ActivateRequest(cluster=cluster, force=force), timeout=timeout))


async def demote_at(address: str, cluster: str, timeout: float = 30.0) -> apb.DemoteResponse:
    """`AdminService.Demote` at the member `address` (`strongroom dr demote`, the drill): its
    answer; a refusal or a failed call as its `StrongroomError`."""
    return await _unary(address, lambda ch: agrpc.AdminServiceStub(ch).Demote(  # type: ignore[no-untyped-call]
        apb.DemoteRequest(cluster=cluster), timeout=timeout))


async def read_committed(address: str, from_index: int, upto: int, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """The committed entries of the member at `address` from `from_index` through `upto`, as
    (index, serialised LogEntry). DataCorruption when the member compacted past `from_index`
    (its stream starts with a snapshot: the entries are gone from it); a failed call as its
    `StrongroomError`."""
    out: list[tuple[int, bytes]] = []
    if upto < from_index:
        return out
    stream = CommittedStream(address, rpb.StreamCommittedRequest(from_index=from_index))
    try:
        while not out or out[-1][0] < upto:
            msg = await stream.read(timeout)
            if msg is None:
                raise ConnectionFailed(f"{address} ended the committed-entry stream at index {from_index + len(out)}",
                                       {"address": address})
            if msg.snapshot_index:
                raise DataCorruption(f"{address} compacted its log past index {from_index} (its state snapshot "
                                     f"covers up to {msg.snapshot_index}): those entries are gone from it")
            out.extend((i, raw) for i, raw in enumerate(msg.entries, msg.first_index) if i <= upto)
    finally:
        await stream.close()
    return out
