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

With TLS (`strongroom.security.tls`) the connection is mutual TLS 1.3: the follower accepts only
a certificate of its cluster's authority naming a member of its own cluster
(`strongroom.security.identity.admits`), and the leader checks the follower's certificate
against the address it dialled; a refused handshake or identity is counted and logged
(`strongroom.security.refusals`) and the connection closed before any frame is read. A
certificate on the authority's revocation list (`strongroom.security.revocation`) is refused at
both ends: the follower's check of the leader (at the connection and at every append, so a
revocation ends a connection already open), the leader's of the follower (at each connection).

Fencing, ordering and consistency checks are the follower's (`Follower.handle_append`), whichever way an
append arrives.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError

from strongroom.aio import Deadline, with_timeout
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.channels import MAX_MESSAGE_BYTES, PROCESS
from strongroom.security import refusals, revocation
from strongroom.security.identity import Kind, admits
from strongroom.security.tls import Tls, current, peer_of_ssl
from strongroom.tracing import traced

__all__ = ["LinkClosed", "LinkConnection", "LinkServer", "MAX_FRAME", "PREAMBLE", "bind", "entries_of", "frame"]

log = logging.getLogger("strongroom.link")

PREAMBLE = b"SRL1"
MAX_FRAME = MAX_MESSAGE_BYTES  # as the gRPC peer channel's message limit
_LENGTH = 4
_MAX_NAME = 1024  # "<cluster>/<member>"
_STAGE = 64 * 1024  # frames up to about this size are read many at a time
HANDSHAKE_TIMEOUT = 10.0

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


class _Frames(asyncio.BufferedProtocol):
    """One end of a link connection: cuts what arrives into frames and hands them to
    `next_frame`, in order.

    Small frames (answers, and appends of a few messages) are read many at a time into one
    staging buffer and copied out; a frame that does not fit there is read straight into a
    buffer of its size. asyncio's StreamReader instead copies a large frame several times and
    pauses and resumes the socket at every 128 KiB on the way: a 270 KiB append (256 messages
    of 1 KiB) took about 0.7 ms from the leader's write to the follower's read that way, against
    about 0.15 ms read like this. At most two frames wait unread: beyond that the socket is
    paused, so a peer that sends without waiting for answers fills its own buffers, not this
    member's memory. The first frame may be at most `first_limit` bytes, every later one
    MAX_FRAME; a larger one closes the connection. `preamble` (server side): the bytes the peer
    must send before its first frame, else the connection is closed.
    """

    def __init__(self, first_limit: int = MAX_FRAME, preamble: bytes = b"") -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        self.refusal = ""
        self._expect_preamble = preamble
        self._limit = first_limit
        self._stage = bytearray(_STAGE)
        self._fill = 0
        # The frame being read straight into its own buffer, and how much of it arrived.
        self._body: bytearray | None = None
        self._got = 0
        self._frames: deque[bytearray] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        _keepalive(transport.get_extra_info("socket"))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._got:]
        return memoryview(self._stage)[self._fill:]

    @traced("rx")
    def buffer_updated(self, nbytes: int) -> None:
        body = self._body
        if body is not None:
            self._got += nbytes
            if self._got == len(body):
                self._body = None
                self._deliver(body)
            return
        self._fill += nbytes
        self._cut()

    def _cut(self) -> None:
        """Take every whole frame out of the staging buffer; start reading a frame that is
        not whole into its own buffer."""
        stage, fill, at = self._stage, self._fill, 0
        while True:
            if self._expect_preamble:
                n = len(self._expect_preamble)
                if fill - at < n:
                    break
                if stage[at:at + n] != self._expect_preamble:
                    self._refuse("not a Strongroom replication client")
                    return
                self._expect_preamble = b""
                at += n
                continue
            if fill - at < _LENGTH:
                break
            size = int.from_bytes(stage[at:at + _LENGTH], "big")
            if size > self._limit:
                self._refuse(f"frame of {size} bytes is over the limit of {self._limit}")
                return
            self._limit = MAX_FRAME
            at += _LENGTH
            have = fill - at
            if have >= size:
                self._deliver(stage[at:at + size])
                at += size
                continue
            body = bytearray(size)
            body[:have] = stage[at:fill]
            self._body, self._got, at = body, have, fill
            break
        rest = fill - at
        if rest and at:
            stage[:rest] = stage[at:fill]
        self._fill = rest

    def _deliver(self, payload: bytearray) -> None:
        self._frames.append(payload)
        if len(self._frames) >= 2 and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _refuse(self, why: str) -> None:
        self.refusal = why
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self._ended = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._wake()

    async def next_frame(self) -> bytearray:
        """The next whole frame; LinkClosed once the connection ended without one."""
        while not self._frames:
            if self._ended:
                raise LinkClosed(self.refusal or "the connection ended")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        payload = self._frames.popleft()
        if self._paused and len(self._frames) < 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return payload


class LinkServer:
    """The follower side: answers every append on a connection in order, one at a time."""

    def __init__(self, sock: socket.socket, handle: AppendHandler, cluster: str, member: str,
                 tls: Tls | None | object = PROCESS) -> None:
        self._sock = sock
        self._handle = handle
        self._cluster = cluster
        self._identity = _identity(cluster, member)
        settings = current() if tls is PROCESS else tls
        self._context = settings.server_context() if isinstance(settings, Tls) else None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        """Accept connections."""
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def stop(self) -> None:
        """Stop accepting and close every open connection."""
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        self._sock.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept_loop(self) -> None:
        # Accepted here and wrapped one by one (`connect_accepted_socket`) rather than by
        # `create_server`: a TLS handshake that fails then raises where it can be counted and
        # logged, instead of ending the connection silently before the protocol hears of it.
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(self._sock)
            except OSError as exc:
                log.warning("replication link: accept failed (%s)", exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._connect(sock, peer))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _connect(self, sock: socket.socket, peer: object) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, conn = await loop.connect_accepted_socket(
                lambda: _Frames(first_limit=_MAX_NAME, preamble=PREAMBLE), sock, ssl=self._context,
                **({"ssl_handshake_timeout": HANDSHAKE_TIMEOUT} if self._context else {}))
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            sock.close()
            if self._context is not None:
                refusals.count("link", "tls_handshake", str(exc) or type(exc).__name__, peer)
            return
        serial = None
        if self._context is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            serial = revocation.serial_of_ssl(ssl_object)
            refused = revocation.refused(serial) or admits(peer_of_ssl(ssl_object), self._cluster, [Kind.MEMBER])
            if refused is not None:
                refusals.count("link", refused.reason, refused.message, peer)
                transport.abort()
                return
        await self._serve(conn, serial)

    async def _serve(self, conn: _Frames, serial: int | None = None) -> None:
        try:
            meant = await conn.next_frame()
            if meant != self._identity:
                log.warning("replication link from %s: meant for %r, this is %r; closed", conn.peer,
                            bytes(meant).decode(errors="replace"), self._identity.decode())
                return
            while True:
                raw = await conn.next_frame()
                refused = revocation.refused(serial)  # revoked while connected: no further append
                if refused is not None:
                    refusals.count("link", refused.reason, refused.message, conn.peer)
                    return
                try:
                    request = rpb.AppendRequestRaw.FromString(raw)
                    entries, raws = entries_of(request)
                except DecodeError as exc:
                    log.warning("replication link from %s: bad append (%s); closed", conn.peer, exc)
                    return
                answer = await self._handle(request, entries, raws)
                assert conn.transport is not None
                conn.transport.write(frame(answer.SerializeToString()))
        except LinkClosed:
            if conn.refusal:  # a wrong preamble, or a frame over its limit
                log.warning("replication link from %s: %s; closed", conn.peer, conn.refusal)
        except (asyncio.CancelledError, OSError):
            pass  # stopping, or the leader went away
        except Exception:  # noqa: BLE001 - the append failed here: the leader reconnects and retries
            log.exception("replication link from %s: append failed; closed", conn.peer)
        finally:
            if conn.transport is not None:
                conn.transport.abort()


class LinkConnection:
    """The leader side: one connection to one follower, one append at a time."""

    def __init__(self, conn: _Frames) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, address: str, timeout: float, cluster: str, member: str,
                   tls: Tls | None | object = PROCESS) -> LinkConnection:
        """Connect to the link of `member` of `cluster` at `address` (LinkClosed if it cannot be
        reached in time, or its certificate is not one of the authority's for that host; the
        follower closes a connection meant for another member). `tls`: the process's settings
        unless given."""
        host, port = address.rsplit(":", 1)
        host = host.strip("[]")
        settings = current() if tls is PROCESS else tls
        loop = asyncio.get_running_loop()
        tls_args: dict[str, object] = {}
        if isinstance(settings, Tls):
            tls_args = {"ssl": settings.client_context(), "server_hostname": host,
                        "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}
        try:
            transport, conn = await with_timeout(loop.create_connection(_Frames, host, int(port), **tls_args), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise LinkClosed(f"cannot connect to {address}: {exc or 'timed out'}") from None
        if tls_args:
            refused = revocation.refused(revocation.serial_of_ssl(transport.get_extra_info("ssl_object")))
            if refused is not None:  # the follower's certificate is revoked: no entry goes to it
                transport.abort()
                refusals.count("link", refused.reason, f"the follower {member!r} at {address}: {refused.message}",
                               address)
                raise LinkClosed(f"{address} is refused: {refused.message}")
        assert conn.transport is not None
        conn.transport.write(PREAMBLE + frame(_identity(cluster, member)))
        return cls(conn)

    @traced("xchg")
    async def exchange(self, request: bytes, timeout: float) -> rpb.AppendResponse:
        """Send one serialised `AppendRequest`, already framed (`frame`, or `encode_append` with
        `framed`), and read its answer within `timeout` seconds."""
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            raise LinkClosed("the connection is closed")
        with Deadline(timeout, transport.abort) as deadline:
            try:
                transport.write(request)
                answer = await self._conn.next_frame()
            except (LinkClosed, OSError) as exc:
                transport.abort()
                if deadline.expired:
                    raise LinkClosed(f"no answer to an append within {timeout:.0f}s") from None
                raise LinkClosed(f"the follower ended the connection ({type(exc).__name__})") from None
        return rpb.AppendResponse.FromString(answer)

    def close(self) -> None:
        """Drop the connection."""
        if self._conn.transport is not None:
            self._conn.transport.abort()
