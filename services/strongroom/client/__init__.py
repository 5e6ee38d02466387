"""The Python client of Strongroom: leader discovery, transparent failover, publish, subscribe.

    client = Client("127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
    client = Client(endpoints_from_environment())           # $STRONGROOM_ENDPOINTS, else `strongroom up`'s
    await client.publish("orders", b"...")                  # returns once committed
    pub = client.publisher("orders", window=256)             # pipelined, every one confirmed
    fut = await pub.send(b"...")
    sub = await client.subscribe("orders", "billing", kind=DurableKind.SHARED)
    async for msg in sub:
        ...
        await sub.ack(msg)
    counters = client.map("default", "counters")             # replicated key-value map
    version = await counters.put("orders", b"0")

Every message carries the client's producer id and a sequence; a publish that fails with a
retriable error (leader gone, no quorum) or a broken connection is sent again with the same
id, and the leader stores it once. Every error the client raises is a
`strongroom.errors.StrongroomError` (with `retriable`), except `TimeoutError` from
`Subscription.next(timeout)`.

Modules: `connection` (channels, the leader, the retry loop), `endpoints` (where the cluster
is, from the environment or the local cluster's state file), `retry` (the retry policy and
what a failed call means), `messages` (fields, matchers, `Received`), `publisher`,
`subscription`, `maps`, and `client` (the facade).
"""

from __future__ import annotations

from strongroom.client.client import Client
from strongroom.client.connection import Connection
from strongroom.client.endpoints import endpoints_from_environment, tls_from_environment
from strongroom.client.maps import Map, MapEntry
from strongroom.client.messages import (
    ABSENT,
    PRESENT,
    PublishResult,
    Received,
    build_matcher,
    message_json,
)
from strongroom.client.publisher import Publisher
from strongroom.client.retry import RetryPolicy
from strongroom.client.subscription import AckMode, DurableKind, Refusal, Subscription

__all__ = [
    "ABSENT",
    "PRESENT",
    "AckMode",
    "Client",
    "Connection",
    "DurableKind",
    "Map",
    "MapEntry",
    "PublishResult",
    "Publisher",
    "Received",
    "Refusal",
    "RetryPolicy",
    "Subscription",
    "build_matcher",
    "endpoints_from_environment",
    "tls_from_environment",
    "message_json",
]
