"""The Python client of Strongroom: leader discovery, transparent failover, publish, subscribe.

    client = Client("127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
    await client.publish("orders", b"...")                  # returns once committed
    pub = client.publisher("orders", window=256)             # pipelined, every one confirmed
    fut = await pub.send(b"...")
    sub = await client.subscribe("orders", "billing", kind="shared")
    async for msg in sub:
        ...
        await sub.ack(msg)
    counters = client.map("default", "counters")             # replicated key-value map
    version = await counters.put("orders", b"0")

Every message carries the client's producer id and a sequence; a publish that fails with a
retriable error (leader gone, no quorum) or a broken connection is sent again with the same
id, and the leader stores it once.
"""

from __future__ import annotations

from strongroom.client.client import (
    ABSENT,
    PRESENT,
    Client,
    PublishResult,
    Publisher,
    Received,
    Subscription,
    build_matcher,
)
from strongroom.client.maps import Map

__all__ = ["ABSENT", "PRESENT", "Client", "Map", "PublishResult", "Publisher", "Received", "Subscription",
           "build_matcher"]
