"""The gRPC options of every channel and server of Strongroom (members, peers, clients), written once.

Messages between members carry whole log entries and snapshot chunks, so the size limits are
well above the gRPC default of 4 MiB. A channel whose peer went away reconnects within a second
(gRPC's default backoff grows to two minutes), so a restarted member is found as fast as one
that stayed up.

Every channel is opened and every port bound here (`open_channel`, `open_sync_channel`, `add_port`),
with the process's TLS settings (`strongroom.security.tls`): mutual TLS when it has them.

A gRPC channel keeps the credentials it was opened with for every reconnection, so a process
that keeps its channels (a member's to its peers and to etcd, a router's to its neighbours, a
client's to the members) would go on presenting its old certificate after a renewal, until it
expires and every reconnection is refused. Each such cache asks `outdated` before it uses a
channel and opens a new one once the process's certificate was renewed; the old one is
`retire`d: closed once the calls open on it have ended by themselves. None of them is cut (a
cancelled stream reads as a cancellation of its reader, which the readers do not retry), and
none needs the old channel to reconnect: a broken stream is opened again, on the new channel.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence

import grpc

from strongroom.limits import MAX_MESSAGE_BYTES
from strongroom.security import revocation
from strongroom.security.calls import RevocationInterceptor
from strongroom.security.tls import Tls, current, current_token

__all__ = ["CHANNEL_OPTIONS", "ETCD_CHANNEL_OPTIONS", "MAX_MESSAGE_BYTES", "PROCESS", "SERVER_OPTIONS",
           "active_calls", "add_port", "close_later", "connecting_within", "kept_channel", "new_server", "open_channel",
           "open_sync_channel", "outdated", "retire"]

PROCESS = object()
"""The default of every `tls` argument here: the process's own settings."""

# Largest gRPC message a member sends or accepts (and the replication link's largest frame).

SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
"""Options of a member's gRPC server."""

CHANNEL_OPTIONS: list[tuple[str, int]] = [
    *SERVER_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
"""Options of a channel to a member: from a peer, a client or a tool."""

ETCD_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
"""Options of a channel to etcd: reconnect within a second once etcd is back (gRPC's own backoff
grows to two minutes: a leader was elected 4-5 s after etcd restarted). Not
`min_reconnect_backoff_ms`: gRPC also takes it as the connect timeout, and a busy etcd can take
more than 100 ms to answer a new connection."""


def connecting_within(seconds: float) -> list[tuple[str, int]]:
    """CHANNEL_OPTIONS with a connect attempt allowed `seconds`: gRPC takes
    `min_reconnect_backoff_ms` as the connect timeout too (100 ms in CHANNEL_OPTIONS), so a peer
    that is busy, not silent, still answers a probe whose whole time is `seconds`."""
    return [*(o for o in CHANNEL_OPTIONS if o[0] != "grpc.min_reconnect_backoff_ms"),
            ("grpc.min_reconnect_backoff_ms", int(seconds * 1000))]


def _credentials(settings: Tls, token: str | None) -> grpc.ChannelCredentials:
    """The channel's credentials: the process's certificate, and a bearer token on every call
    when there is one (`token`, else the process's: `strongroom.security.tls.use_token`)."""
    bearer = current_token() if token is None else token
    credentials = settings.channel_credentials()
    if not bearer:
        return credentials
    return grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(bearer))


def open_channel(address: str, options: list[tuple[str, int]] | None = None,
                 tls: Tls | None | object = PROCESS, token: str | None = None) -> grpc.aio.Channel:
    """An asyncio channel to `address`: mutual TLS with the process's settings
    (`strongroom.security.tls.current()`, or `tls` when given), plaintext without any; every
    call carries `token` (else the process's bearer token, if it has one) over TLS."""
    settings = current() if tls is PROCESS else tls
    opts = CHANNEL_OPTIONS if options is None else options
    if settings is None:
        return grpc.aio.insecure_channel(address, options=opts)
    assert isinstance(settings, Tls)
    channel = grpc.aio.secure_channel(address, _credentials(settings, token), options=opts)
    if tls is PROCESS:
        _opened_with[channel] = settings
    return channel


_opened_with: weakref.WeakKeyDictionary[grpc.aio.Channel, Tls] = weakref.WeakKeyDictionary()
"""The process's settings each channel opened with them was opened with."""

RETIRE_POLL = 5.0
"""Seconds between two looks at whether a retired channel's calls have all ended."""


def outdated(channel: grpc.aio.Channel) -> bool:
    """`channel` presents the process's certificate as it was when the channel was opened, and
    another one is in force now (a renewal: files with other contents): its owner opens a new one
    and retires this one (module docstring). False for a channel opened with settings of its own
    or plaintext."""
    opened = _opened_with.get(channel)
    if opened is None:
        return False
    now = current()
    return opened is not now and opened != now  # the same object on every call but after a renewal


def kept_channel(cache: dict[str, grpc.aio.Channel], address: str,
                 open_: Callable[[], grpc.aio.Channel]) -> grpc.aio.Channel:
    """The channel `cache` keeps for `address`: opened by `open_` on first use, and again once
    the process's certificate was renewed (the old one retired)."""
    channel = cache.get(address)
    if channel is not None and outdated(channel):
        retire(cache.pop(address))
        channel = None
    if channel is None:
        channel = cache[address] = open_()
    return channel


_closing: set[asyncio.Task[None]] = set()
"""Channels being closed: kept referenced until their close finished."""


def _keep(task: asyncio.Task[None]) -> None:
    _closing.add(task)
    task.add_done_callback(_closing.discard)


def close_later(channel: grpc.aio.Channel) -> None:
    """Close a channel no one uses any more now (its calls are cancelled), without waiting."""
    _keep(asyncio.ensure_future(channel.close()))


def active_calls(channel: grpc.aio.Channel) -> list[object]:
    """The calls open on `channel` that have not ended (grpc.aio tracks them, weakly, to cancel
    them at its close: `Channel._active_calls`; tests/unit/test_security_units.py holds it to
    that)."""
    return [call for call in list(getattr(channel, "_active_calls", ())) if not call.done()]  # type: ignore[attr-defined]


def retire(channel: grpc.aio.Channel) -> None:
    """Close `channel`, replaced by a new one, once every call open on it has ended by itself
    (its streams run on over their connection until they end or break)."""
    async def once_idle() -> None:
        while active_calls(channel):
            await asyncio.sleep(RETIRE_POLL)
        await channel.close()

    _keep(asyncio.ensure_future(once_idle()))


def open_sync_channel(address: str, options: list[tuple[str, int]] | None = None,
                      tls: Tls | None | object = PROCESS, token: str | None = None) -> grpc.Channel:
    """`open_channel` for synchronous code (the CLI's one-shot calls)."""
    settings = current() if tls is PROCESS else tls
    opts = CHANNEL_OPTIONS if options is None else options
    if settings is None:
        return grpc.insecure_channel(address, options=opts)
    assert isinstance(settings, Tls)
    return grpc.secure_channel(address, _credentials(settings, token), options=opts)


def new_server(options: list[tuple[str, int]] | None = None,
               interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> grpc.aio.Server:
    """A gRPC server of this process (every one is made here): `options` (SERVER_OPTIONS unless
    given) and `interceptors`, and in front of them, when the process has a certificate
    revocation list (security/revocation.py), the check that refuses revoked callers."""
    checks: list[grpc.aio.ServerInterceptor] = [RevocationInterceptor()] if revocation.current() is not None else []
    return grpc.aio.server(options=SERVER_OPTIONS if options is None else options,
                           interceptors=[*checks, *interceptors] or None)


def add_port(server: grpc.aio.Server, listen: str, tls: Tls | None | object = PROCESS) -> int:
    """Bind `server` to `listen` (mutual TLS with the process's settings, plaintext without);
    the port bound, 0 when it could not bind."""
    settings = current() if tls is PROCESS else tls
    if settings is None:
        return server.add_insecure_port(listen)
    assert isinstance(settings, Tls)
    return server.add_secure_port(listen, settings.server_credentials())
