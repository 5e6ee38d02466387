"""The gRPC options of every channel and server of Strongroom (members, peers, clients), written once.

Messages between members carry whole log entries and snapshot chunks, so the size limits are
well above the gRPC default of 4 MiB. A channel whose peer went away reconnects within a second
(gRPC's default backoff grows to two minutes), so a restarted member is found as fast as one
that stayed up.
"""

from __future__ import annotations

__all__ = ["CHANNEL_OPTIONS", "MAX_MESSAGE_BYTES", "SERVER_OPTIONS"]

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
