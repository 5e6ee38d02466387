"""Leader side of replication: one task per follower sending what it is missing.

Each round of the leader's group commit becomes one append per follower carrying every entry
the follower lacks (normally just the new one), written on one long-lived connection per
follower: the follower's replication link (`link.py`, plain TCP) when it registered one, else
its gRPC `AppendStream` (a stream round trip costs about half a unary call). A follower whose
log has fallen behind the leader's compacted prefix gets the state machine snapshot first (over
gRPC), then the log suffix.

A new commit index alone does not make a round of its own at once: the next append carries it,
and if none comes within COMMIT_NOTICE_SECONDS an empty append does. One append per follower per
confirmed publish instead of two; a follower applies committed entries a few milliseconds later,
which nothing waits for (clients talk to the leader, and a new leader recovers the log anyway).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from strongroom.aio import Deadline, cancel_and_wait
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.persistence.link import LinkClosed, LinkConnection
from strongroom.wire import APPEND_ENTRIES, repeated_after

if TYPE_CHECKING:
    from strongroom.persistence.node import PersistenceNode

PEER_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 512 * 1024 * 1024),
]

__all__ = ["PeerReplicator", "SNAPSHOT_CHUNK", "encode_append"]

log = logging.getLogger("strongroom.replicator")

SNAPSHOT_CHUNK = 1024 * 1024
MAX_ENTRIES_PER_APPEND = 256
HEARTBEAT_SECONDS = 0.25
RPC_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0
COMMIT_NOTICE_SECONDS = 0.005
APPEND_STREAM = "/strongroom.v1.ReplicationService/AppendStream"


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _AppendTimeout(Exception):
    """A follower did not answer an append in time (its stream is cancelled and reopened)."""


def encode_append(head: rpb.AppendRequest, raw_entries: list[bytes], framed: bool = False) -> bytes:
    """The wire form of `head` with `raw_entries` (serialised LogEntry) as its entries (`framed`:
    as one frame of the replication link)."""
    return repeated_after(head.SerializeToString(), APPEND_ENTRIES, raw_entries, length_prefix=framed)


# The last append encoded: followers in step get the same request, encoded once.
_memo: list[tuple[tuple[object, ...], bytes]] = []


def _encoded(epoch: int, leader: str, prev_index: int, prev_epoch: int, commit_index: int,
             raws: list[bytes], framed: bool) -> bytes:
    key = (epoch, leader, prev_index, prev_epoch, commit_index, len(raws), raws[-1] if raws else None, framed)
    if _memo and _memo[0][0] == key:
        return _memo[0][1]
    head = rpb.AppendRequest(epoch=epoch, leader=leader, prev_index=prev_index, prev_epoch=prev_epoch,
                             commit_index=commit_index)
    wire = encode_append(head, raws, framed)
    _memo[:] = [(key, wire)]
    return wire


class PeerReplicator:
    """Keeps one follower's log up to date with the leader's for one epoch."""

    def __init__(self, node: PersistenceNode, peer: str, epoch: int,
                 resolve_address: Callable[[str], str | None],
                 resolve_link: Callable[[str], str | None] = lambda peer: None) -> None:
        self.node = node
        self.peer = peer
        self.epoch = epoch
        self.resolve_address = resolve_address
        self.resolve_link = resolve_link
        self.next_index = node.log.last_index + 1
        self.match_index = 0
        self.reachable = False
        # Monotonic time of the last answer from the peer (the leader's quorum watchdog).
        self.last_ack = 0.0
        self._kicked = False
        self._waiter: asyncio.Future[None] | None = None
        self._commit_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._address: str | None = None
        self._warned_address = False
        self._stub: rgrpc.ReplicationServiceStub | None = None
        self._open_stream: grpc.aio.StreamStreamMultiCallable | None = None
        self._stream: grpc.aio.StreamStreamCall | None = None
        self._link: LinkConnection | None = None
        self._link_address: str | None = None

    def start(self) -> None:
        """Start the replication task."""
        self._task = asyncio.create_task(self._run(), name=f"replicate-{self.peer}")

    def kick(self) -> None:
        """New entries: send now."""
        self._kicked = True
        if self._waiter is not None:
            _wake(self._waiter)

    def commit_advanced(self) -> None:
        """A new commit index: the next append carries it; send one for it alone if no append
        goes within COMMIT_NOTICE_SECONDS."""
        if self._commit_timer is None:
            self._commit_timer = asyncio.get_running_loop().call_later(COMMIT_NOTICE_SECONDS, self._commit_notice)

    def _commit_notice(self) -> None:
        self._commit_timer = None
        self.kick()

    async def _idle(self, timeout: float) -> None:
        """Wait for a kick, at most `timeout` seconds (a heartbeat is due then)."""
        if not self._kicked:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._kicked = False

    async def stop(self) -> None:
        """Stop the task and close the channel."""
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        if self._task is not None:
            await cancel_and_wait(self._task)
        self._close_connections()
        if self._channel is not None:
            await self._channel.close()

    def _close_connections(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None
        if self._link is not None:
            self._link.close()
            self._link = None

    def _connect(self) -> rgrpc.ReplicationServiceStub | None:
        address = self.resolve_address(self.peer)
        if address is None:
            return None
        if address != self._address or self._stub is None:
            if self._channel is not None:
                asyncio.create_task(self._channel.close())
            self._channel = grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS)
            self._stub = rgrpc.ReplicationServiceStub(self._channel)
            # Appends go already serialised: entries are serialised once, when the leader
            # stores them, and spliced into every follower's request.
            self._close_connections()
            self._open_stream = self._channel.stream_stream(
                APPEND_STREAM, request_serializer=None, response_deserializer=rpb.AppendResponse.FromString)
            self._address = address
        return self._stub

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            stub = self._connect()
            if stub is None:
                if not self._warned_address:
                    log.info("no address known yet for peer %s", self.peer)
                    self._warned_address = True
                self.reachable = False
                await asyncio.sleep(0.2)
                continue
            try:
                progressed = await self._send_once(stub)
                if not self.reachable:
                    log.info("peer %s reachable at %s (next index %d)", self.peer, self._address, self.next_index)
                self.reachable = True
                backoff = 0.05
            except Exception as exc:  # noqa: BLE001 - every failure: reconnect and retry
                self._close_connections()
                if not isinstance(exc, (grpc.aio.AioRpcError, _AppendTimeout)):
                    # Never let this follower's replication end silently.
                    log.exception("replicating to %s failed; starting over", self.peer)
                elif self.reachable:
                    reason = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
                    log.info("peer %s unreachable: %s", self.peer, reason)
                self.reachable = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                # Re-resolve: the peer may have restarted on another address.
                self._address = None
                continue
            if progressed and self.match_index < self.node.log.last_index:
                continue
            await self._idle(HEARTBEAT_SECONDS)

    async def _send_once(self, stub: rgrpc.ReplicationServiceStub) -> bool:
        node = self.node
        if node.epoch != self.epoch or not node.is_leader_role():
            await asyncio.sleep(0.1)
            return False
        lg = node.log
        if self.next_index <= lg.snapshot_index:
            await self._send_snapshot(stub)
            return True
        prev_index = self.next_index - 1
        prev_epoch = lg.epoch_at(prev_index)
        if prev_epoch is None:
            self.next_index = lg.last_index + 1
            return False
        raws = lg.raw_slice(self.next_index, MAX_ENTRIES_PER_APPEND)
        if self._commit_timer is not None:
            # This append carries the commit index.
            self._commit_timer.cancel()
            self._commit_timer = None
        link = self.resolve_link(self.peer)
        request = _encoded(self.epoch, node.member, prev_index, prev_epoch, node.commit_index, raws,
                           framed=link is not None)
        resp = await (self._exchange_on_link(link, request) if link is not None
                      else self._exchange_on_stream(request))
        self.last_ack = time.monotonic()
        if resp.promised_epoch > self.epoch:
            await node.observe_higher_epoch(resp.promised_epoch, f"peer {self.peer} promised a newer epoch")
            return False
        if resp.ok:
            sent_last = prev_index + len(raws)
            if sent_last > self.match_index:
                self.match_index = sent_last
                node.on_match(self.peer)
            self.next_index = sent_last + 1
            return bool(raws)
        if resp.needs_snapshot:
            self.next_index = lg.snapshot_index
            return True
        # Consistency check failed: back up to just after what the follower can match.
        self.next_index = max(1, min(resp.conflict_index + 1, self.next_index - 1))
        return True

    async def _exchange_on_link(self, address: str, frame: bytes) -> rpb.AppendResponse:
        """One append (`frame`: framed for the link) on the follower's replication link at
        `address` (opened on first use): write it, read its answer."""
        try:
            if self._link is None or address != self._link_address:
                self._close_connections()
                self._link = await LinkConnection.open(address, CONNECT_TIMEOUT, self.node.cluster_name, self.peer)
                self._link_address = address
            return await self._link.exchange(frame, RPC_TIMEOUT)
        except LinkClosed as exc:
            self._link = None
            raise _AppendTimeout(str(exc)) from None

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
                raise _AppendTimeout("the append stream had ended") from None
            except asyncio.CancelledError:
                if deadline.expired:
                    raise _AppendTimeout(f"no answer to an append within {RPC_TIMEOUT:.0f}s") from None
                task = asyncio.current_task()
                if call.cancelled() and task is not None and not task.cancelling():
                    raise _AppendTimeout("the append stream was cancelled") from None
                raise
        if resp is grpc.aio.EOF:
            raise _AppendTimeout("the follower ended the append stream")
        return resp  # type: ignore[return-value]

    async def _send_snapshot(self, stub: rgrpc.ReplicationServiceStub) -> None:
        node = self.node
        index, epoch, data = node.snapshot_for_peer()
        log.info("sending snapshot at index %d (%d bytes) to %s", index, len(data), self.peer)

        async def chunks() -> object:
            first = True
            for off in range(0, max(len(data), 1), SNAPSHOT_CHUNK):
                piece = data[off:off + SNAPSHOT_CHUNK]
                chunk = rpb.SnapshotChunk(data=piece, done=off + SNAPSHOT_CHUNK >= len(data))
                if first:
                    chunk.epoch = self.epoch
                    chunk.leader = node.member
                    chunk.last_index = index
                    chunk.last_epoch = epoch
                    first = False
                yield chunk

        resp = await stub.InstallSnapshot(chunks(), timeout=max(RPC_TIMEOUT, len(data) / 20e6 + 5))
        self.last_ack = time.monotonic()
        if resp.promised_epoch > self.epoch:
            await node.observe_higher_epoch(resp.promised_epoch, f"peer {self.peer} promised a newer epoch")
            return
        if resp.ok:
            self.next_index = index + 1
            if index > self.match_index:
                self.match_index = index
                node.on_match(self.peer)
