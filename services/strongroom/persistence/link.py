"""The replication link: appends from the leader to a follower over a plain TCP connection.

An append and its answer are the same protobuf messages as on the gRPC `AppendStream`
(`AppendRequestRaw` in, `AppendResponse` out), framed by a 4-byte big-endian length on one
long-lived connection per leader and follower, one append in flight at a time. A connection
starts with PREAMBLE (protocol and version) and a frame naming the member it is meant for
("<cluster>/<member>"): a leader that reached another member than it meant to (a stale address
whose port another member now uses) is refused, and its answers cannot count toward a majority
as someone else's. Anything else, an undecodable append, or a frame over MAX_FRAME, closes the
connection at once, and nothing is stored.

Why not gRPC: the leader handles two messages per follower per round, and grpc.aio costs about
0.2 ms of CPU per stream message and side on these machines against about 0.08 ms for an asyncio
TCP connection (`python -m bench.floor`); on a confirmed publish that is the difference between
the leader's CPU per publish at about 1.2 ms and about 1.0 ms, and a round trip shorter by 0.1 ms
(README, Benchmarks). Everything else between members (promises, fetches, snapshots) and every
client call stays on gRPC, and a member that registers no link address is replicated to over
the gRPC `AppendStream` as before (`--replication-listen none`).

Fencing, ordering and consistency checks are the node's (`handle_append`), whichever way an
append arrives.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError

from strongroom.aio import with_timeout
from strongroom.api.v1 import replication_pb2 as rpb

__all__ = ["LinkClosed", "LinkConnection", "LinkServer", "MAX_FRAME", "PREAMBLE", "bind", "entries_of", "frame"]

log = logging.getLogger("strongroom.link")

PREAMBLE = b"SRL1"
MAX_FRAME = 512 * 1024 * 1024  # as the gRPC peer channel's message limit
_LENGTH = 4
_MAX_NAME = 1024  # "<cluster>/<member>"

AppendHandler = Callable[[rpb.AppendRequestRaw, list[rpb.LogEntry], list[bytes]], Awaitable[rpb.AppendResponse]]


class LinkClosed(Exception):
    """The connection ended, failed or timed out before an answer came."""


def entries_of(request: rpb.AppendRequestRaw) -> tuple[list[rpb.LogEntry], list[bytes]]:
    """An append's entries, parsed, and as the leader serialised them (the follower stores
    those bytes): what `handle_append` takes, from the link or from the gRPC append stream."""
    raws = list(request.entries)
    return [rpb.LogEntry.FromString(raw) for raw in raws], raws


def _identity(cluster: str, member: str) -> bytes:
    """Whom a connection is meant for, as its first frame says."""
    return f"{cluster}/{member}".encode()


def frame(payload: bytes) -> bytes:
    """`payload` as one frame of the link."""
    return len(payload).to_bytes(_LENGTH, "big") + payload


def _keepalive(sock: socket.socket | None) -> None:
    """Notice a peer host that went away without closing (about a minute), not after hours."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


async def _read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> bytes:
    size = int.from_bytes(await reader.readexactly(_LENGTH), "big")
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the limit of {limit}")
    return await reader.readexactly(size)


def bind(address: str) -> tuple[socket.socket, int]:
    """A listening socket for `host:port` (port 0: any free one) and the port it got."""
    host, port = address.rsplit(":", 1)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), int(port)))
    sock.listen(16)
    sock.setblocking(False)
    return sock, sock.getsockname()[1]


class LinkServer:
    """The follower side: answers every append on a connection in order, one at a time."""

    def __init__(self, sock: socket.socket, handle: AppendHandler, cluster: str, member: str) -> None:
        self._sock = sock
        self._handle = handle
        self._identity = _identity(cluster, member)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Accept connections."""
        self._server = await asyncio.start_server(self._serve, sock=self._sock)

    async def stop(self) -> None:
        """Stop accepting and close every open connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        _keepalive(writer.get_extra_info("socket"))
        self._connections.add(writer)
        try:
            if await reader.readexactly(len(PREAMBLE)) != PREAMBLE:
                log.warning("replication link from %s: not a Strongroom replication client; closed", peer)
                return
            meant = await _read_frame(reader, _MAX_NAME)
            if meant != self._identity:
                log.warning("replication link from %s: meant for %r, this is %r; closed", peer,
                            meant.decode(errors="replace"), self._identity.decode())
                return
            while True:
                try:
                    raw = await _read_frame(reader)
                    request = rpb.AppendRequestRaw.FromString(raw)
                    entries, raws = entries_of(request)
                except (ValueError, DecodeError) as exc:  # an oversized frame or an undecodable message
                    log.warning("replication link from %s: bad append (%s); closed", peer, exc)
                    return
                answer = await self._handle(request, entries, raws)
                writer.write(frame(answer.SerializeToString()))
        except (asyncio.IncompleteReadError, OSError, ValueError):
            pass  # the leader went away or gave up on this connection (or sent an oversized name)
        except Exception:  # noqa: BLE001 - the append failed here: the leader reconnects and retries
            log.exception("replication link from %s: append failed; closed", peer)
        finally:
            self._connections.discard(writer)
            writer.transport.abort()


class LinkConnection:
    """The leader side: one connection to one follower, one append at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._expired = False

    @classmethod
    async def open(cls, address: str, timeout: float, cluster: str, member: str) -> LinkConnection:
        """Connect to the link of `member` of `cluster` at `address` (LinkClosed if it cannot be
        reached in time; the follower closes a connection meant for another member)."""
        host, port = address.rsplit(":", 1)
        try:
            reader, writer = await with_timeout(asyncio.open_connection(host.strip("[]"), int(port)), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise LinkClosed(f"cannot connect to {address}: {exc or 'timed out'}") from None
        _keepalive(writer.get_extra_info("socket"))
        writer.write(PREAMBLE + frame(_identity(cluster, member)))
        return cls(reader, writer)

    async def exchange(self, request: bytes, timeout: float) -> rpb.AppendResponse:
        """Send one serialised `AppendRequest`, already framed (`frame`, or `encode_append` with
        `framed`), and read its answer within `timeout` seconds."""
        transport = self._writer.transport
        if transport.is_closing():
            raise LinkClosed("the connection is closed")
        self._expired = False

        def expire() -> None:
            self._expired = True
            transport.abort()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            self._writer.write(request)
            answer = await _read_frame(self._reader)
        except (asyncio.IncompleteReadError, OSError, ValueError) as exc:
            transport.abort()
            if self._expired:
                raise LinkClosed(f"no answer to an append within {timeout:.0f}s") from None
            raise LinkClosed(f"the follower ended the connection ({type(exc).__name__})") from None
        finally:
            timer.cancel()
        return rpb.AppendResponse.FromString(answer)

    def close(self) -> None:
        """Drop the connection."""
        self._writer.transport.abort()
