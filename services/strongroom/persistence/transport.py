"""The peer transport: every call one member makes to another, and nothing else.

- `PeerClient`: a recovering leader's Promise and Fetch calls, over one cached gRPC channel
  per peer address (a channel a call failed on is dropped, so the next call connects afresh).
- `compare_generation`: the one call between the two sites of a cluster (DR roles and
  generations, docs/dr.md), made by a primary's new leader and by an activated site's DR service.
- `FollowerConnection`: the leader's connection to one follower for one term. Appends go on the
  follower's replication link (`link.py`, plain TCP) when it registered one, else on its gRPC
  `AppendStream`; a snapshot goes over gRPC `InstallSnapshot`. An append is encoded once for
  every follower in step (`encoded_append`).

Every failure of a peer, whatever the path, is raised as `PeerUnreachable`; the domain modules
(replicator, recovery) never see gRPC. The channel options are `strongroom.channels`'.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

import grpc

from strongroom.aio import Deadline, cancelled_under_us
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import (
    CHANNEL_OPTIONS,
    close_later,
    kept_channel,
    open_channel,
    outdated,
    retire,
)
from strongroom.persistence.link import LinkClosed, LinkConnection
from strongroom.wire import APPEND_ENTRIES, repeated_after

if TYPE_CHECKING:
    from strongroom.persistence.snapshots import IncomingSnapshot

__all__ = ["FollowerConnection", "PeerClient", "PeerUnreachable", "compare_generation", "compare_generations",
           "encode_append", "encoded_append"]

log = logging.getLogger("strongroom.transport")

RPC_TIMEOUT = 5.0
"""Seconds an append may go unanswered before its connection is closed and reopened."""
CONNECT_TIMEOUT = 2.0
"""Seconds to connect to a follower's replication link."""
PROMISE_TIMEOUT = 1.0
FETCH_TIMEOUT = 30.0
GENERATION_TIMEOUT = 1.0
"""Seconds the other site has to tell its DR role and generation."""
APPEND_STREAM = "/strongroom.v1.ReplicationService/AppendStream"


class PeerUnreachable(Exception):
    """A peer did not answer: refused, timed out, went away, or cannot be connected to."""


def encode_append(head: rpb.AppendRequest, raw_entries: list[bytes], framed: bool = False) -> bytes:
    """The wire form of `head` with `raw_entries` (serialised LogEntry) as its entries (`framed`:
    as one frame of the replication link)."""
    return repeated_after(head.SerializeToString(), APPEND_ENTRIES, raw_entries, length_prefix=framed)


# The last append encoded: followers in step get the same request, encoded once.
_memo: list[tuple[tuple[object, ...], bytes]] = []


def encoded_append(epoch: int, leader: str, prev_index: int, prev_epoch: int, commit_index: int,
                   raws: list[bytes], framed: bool, events_published: int = 0) -> bytes:
    """An append of `raws` (serialised entries), encoded; the same bytes for every follower it
    is the same append for."""
    key = (epoch, leader, prev_index, prev_epoch, commit_index, len(raws), raws[-1] if raws else None, framed,
           events_published)
    if _memo and _memo[0][0] == key:
        return _memo[0][1]
    head = rpb.AppendRequest(epoch=epoch, leader=leader, prev_index=prev_index, prev_epoch=prev_epoch,
                             commit_index=commit_index, events_published=events_published)
    wire = encode_append(head, raws, framed)
    _memo[:] = [(key, wire)]
    return wire


def _why(exc: grpc.aio.AioRpcError) -> str:
    return exc.code().name


async def compare_generation(address: str, mine: rpb.GenerationInfo,
                             timeout: float = GENERATION_TIMEOUT) -> rpb.GenerationInfo:
    """Tell the member at `address` (of the cluster's other site) this site's DR role and
    generation; its site's, after it took ours into account (PeerUnreachable if it did not
    answer, or answered with an error)."""
    async with open_channel(address, CHANNEL_OPTIONS) as channel:
        try:
            answer: rpb.GenerationInfo = await rgrpc.ReplicationServiceStub(channel).CompareGeneration(
                mine, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise PeerUnreachable(f"{address}: {_why(exc)}: {exc.details()}") from None
    return answer


async def compare_generations(addresses: Sequence[str], mine: rpb.GenerationInfo) -> list[rpb.GenerationInfo]:
    """`compare_generation` with every address of the other site at once; the answers of those
    that answered (one that did not is logged at debug level: the other site may well be down)."""
    async def one(address: str) -> rpb.GenerationInfo | None:
        try:
            return await compare_generation(address, mine)
        except PeerUnreachable as exc:
            log.debug("the other site at %s did not say its DR role: %s", address, exc)
            return None
    answers = await asyncio.gather(*(one(a) for a in addresses))
    return [a for a in answers if a is not None]


class PeerClient:
    """Promise and Fetch calls to peers, one cached channel per address."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> rgrpc.ReplicationServiceStub:
        return rgrpc.ReplicationServiceStub(kept_channel(self._channels, address,
                                                         lambda: open_channel(address, CHANNEL_OPTIONS)))

    def _drop(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            close_later(channel)

    async def promise(self, address: str, epoch: int, leader: str) -> rpb.PromiseResponse | None:
        """Ask the member at `address` to promise `epoch`; None if it did not answer in time."""
        try:
            return await self._stub(address).Promise(rpb.PromiseRequest(epoch=epoch, leader=leader),
                                                     timeout=PROMISE_TIMEOUT)
        except grpc.aio.AioRpcError:
            self._drop(address)
            return None

    async def fetch(self, address: str, epoch: int, from_index: int, max_entries: int) -> rpb.FetchResponse:
        """Read the log of the member at `address` from `from_index` (PeerUnreachable if it does
        not answer)."""
        try:
            return await self._stub(address).Fetch(
                rpb.FetchRequest(epoch=epoch, from_index=from_index, max_entries=max_entries, raw=True,
                                 streamed_snapshot=True),
                timeout=FETCH_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            self._drop(address)
            raise PeerUnreachable(f"fetch from {address} failed: {_why(exc)}: {exc.details()}") from None

    async def fetch_snapshot(self, address: str, epoch: int, into: IncomingSnapshot) -> rpb.SnapshotChunk:
        """Read the state of the member at `address` into `into`, a chunk at a time; the first
        chunk (index, epoch, member) is the answer. PeerUnreachable if the stream breaks or
        stalls for FETCH_TIMEOUT."""
        first: rpb.SnapshotChunk | None = None
        done = False
        call = self._stub(address).FetchSnapshot(rpb.FetchSnapshotRequest(epoch=epoch))
        try:
            while not done:
                chunk = await asyncio.wait_for(call.read(), FETCH_TIMEOUT)
                if chunk is grpc.aio.EOF:
                    break
                first = first or chunk
                into.add(chunk)
                done = chunk.done
        except TimeoutError:
            call.cancel()
            raise PeerUnreachable(f"the snapshot from {address} stalled for {FETCH_TIMEOUT:.0f}s") from None
        except grpc.aio.AioRpcError as exc:
            self._drop(address)
            raise PeerUnreachable(f"snapshot from {address} failed: {_why(exc)}: {exc.details()}") from None
        into.complete()
        if first is None or not done:
            raise PeerUnreachable(f"the snapshot from {address} ended before its last chunk")
        return first

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()


class FollowerConnection:
    """The leader's connection to one follower: appends and snapshots."""

    def __init__(self, cluster: str, peer: str, resolve_address: Callable[[str], str | None],
                 resolve_link: Callable[[str], str | None] = lambda peer: None) -> None:
        self.cluster = cluster
        self.peer = peer
        self._resolve_address = resolve_address
        self._resolve_link = resolve_link
        self._channel: grpc.aio.Channel | None = None
        self._address: str | None = None
        self._stub: rgrpc.ReplicationServiceStub | None = None
        self._open_stream: grpc.aio.StreamStreamMultiCallable | None = None
        self._stream: grpc.aio.StreamStreamCall | None = None
        self._link: LinkConnection | None = None
        self._link_address: str | None = None

    @property
    def address(self) -> str | None:
        """The follower's gRPC address in use."""
        return self._address

    def connect(self) -> bool:
        """Resolve the follower's address (again after `reset`); False if none is known yet."""
        address = self._resolve_address(self.peer)
        if address is None:
            return False
        if self._channel is not None and self._stream is None and address == self._address and outdated(self._channel):
            # Renewed certificate: a new channel for the next stream and snapshot; the link (if
            # one is open) goes on, it was opened with the certificate of its time.
            retire(self._channel)
            self._open(address)
        if address != self._address or self._stub is None:
            if self._channel is not None:
                close_later(self._channel)
            self._close_connections()
            self._open(address)
            self._address = address
        return True

    def _open(self, address: str) -> None:
        self._channel = open_channel(address, CHANNEL_OPTIONS)
        self._stub = rgrpc.ReplicationServiceStub(self._channel)
        # Appends go already serialised: entries are serialised once, when the leader stores
        # them, and spliced into every follower's request.
        self._open_stream = self._channel.stream_stream(
            APPEND_STREAM, request_serializer=None, response_deserializer=rpb.AppendResponse.FromString)

    def reset(self) -> None:
        """After a failure: drop the open connections; the next `connect` resolves the address
        again and opens a new channel (the follower may have restarted elsewhere)."""
        self._close_connections()
        self._address = None

    def _close_connections(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None
        if self._link is not None:
            self._link.close()
            self._link = None

    async def close(self) -> None:
        """Close the connections and the channel."""
        self._close_connections()
        if self._channel is not None:
            await self._channel.close()

    async def append(self, epoch: int, leader: str, prev_index: int, prev_epoch: int, commit_index: int,
                     raws: list[bytes], events_published: int = 0) -> rpb.AppendResponse:
        """Send one append (after `connect`) and return the follower's answer."""
        link = self._resolve_link(self.peer)
        request = encoded_append(epoch, leader, prev_index, prev_epoch, commit_index, raws, framed=link is not None,
                                 events_published=events_published)
        try:
            if link is not None:
                return await self._exchange_on_link(link, request)
            return await self._exchange_on_stream(request)
        except grpc.aio.AioRpcError as exc:
            raise PeerUnreachable(_why(exc)) from None

    async def _exchange_on_link(self, address: str, frame: bytes) -> rpb.AppendResponse:
        """One append (`frame`: framed for the link) on the follower's replication link at
        `address` (opened on first use): write it, read its answer."""
        try:
            if self._link is None or address != self._link_address:
                self._close_connections()
                self._link = await LinkConnection.open(address, CONNECT_TIMEOUT, self.cluster, self.peer)
                self._link_address = address
            return await self._link.exchange(frame, RPC_TIMEOUT)
        except LinkClosed as exc:
            self._link = None
            raise PeerUnreachable(str(exc)) from None

    async def _exchange_on_stream(self, request: bytes) -> rpb.AppendResponse:
        """One append on the follower's gRPC append stream (opened on first use)."""
        if self._link is not None:  # the follower no longer registers a link
            self._link.close()
            self._link = None
        if self._stream is None:
            assert self._open_stream is not None
            self._stream = self._open_stream()
        call = self._stream
        with Deadline(RPC_TIMEOUT, call.cancel) as deadline:
            try:
                await call.write(request)
                resp = await call.read()
            except asyncio.InvalidStateError:
                # gRPC's answer to a write on a call that already ended (the follower went away
                # while the stream was idle): not an AioRpcError.
                raise PeerUnreachable("the append stream had ended") from None
            except asyncio.CancelledError:
                if deadline.expired:
                    raise PeerUnreachable(f"no answer to an append within {RPC_TIMEOUT:.0f}s") from None
                if call.cancelled() and cancelled_under_us():
                    raise PeerUnreachable("the append stream was cancelled") from None
                raise
            except grpc.aio.AioRpcError as exc:
                raise PeerUnreachable(_why(exc)) from None
        if resp is grpc.aio.EOF:
            raise PeerUnreachable("the follower ended the append stream")
        return resp  # type: ignore[return-value]

    async def install_snapshot(self, chunks: AsyncIterator[rpb.SnapshotChunk],
                               timeout: float) -> rpb.InstallSnapshotResponse:
        """Stream a snapshot to the follower (after `connect`)."""
        assert self._stub is not None
        try:
            return await self._stub.InstallSnapshot(chunks, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise PeerUnreachable(_why(exc)) from None
