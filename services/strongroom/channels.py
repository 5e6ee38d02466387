"""The gRPC options of every channel and server of Strongroom (members, peers, clients), written once.

Messages between members carry whole log entries and snapshot chunks, so the size limits are
well above the gRPC default of 4 MiB. A channel whose peer went away reconnects within a second
(gRPC's default backoff grows to two minutes), so a restarted member is found as fast as one
that stayed up.
"""

from __future__ import annotations

__all__ = ["CHANNEL_OPTIONS", "ETCD_CHANNEL_OPTIONS", "MAX_MESSAGE_BYTES", "SERVER_OPTIONS", "connecting_within"]

MAX_MESSAGE_BYTES = 512 * 1024 * 1024
"""Largest gRPC message a member sends or accepts (and the replication link's largest frame)."""

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
