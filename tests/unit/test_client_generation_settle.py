"""A subscription that goes on at the primary of a newer DR generation does not settle there the
messages an older primary delivered (client/subscription.py): after an activation the lost tail
is numbered again, so such an ack would acknowledge another message (a chaos run of the `dr`
fault lost twelve confirmed messages on an ordered durable this way)."""

from __future__ import annotations

import pytest

from strongroom.client.connection import Connection
from strongroom.client.messages import Received
from strongroom.client.retry import RetryPolicy
from strongroom.client.subscription import AckMode, Subscription
from strongroom.errors import Fenced


def _subscription(sync_ack: bool) -> Subscription:
    sub = Subscription(Connection(["127.0.0.1:1"], RetryPolicy()), "orders", "billing", None, AckMode.EXPLICIT, 10, sync_ack)
    sub.sync_ack = sync_ack
    return sub


def _delivered(sub: Subscription, seq: int, generation: int) -> Received:
    return Received(seq=seq, body=b"", fields={}, delivery_count=1, destination="orders", producer_id="p",
                    sequence=seq, generation=generation, _sub=sub)


async def test_an_async_ack_of_an_older_generations_delivery_is_not_sent() -> None:
    sub = _subscription(sync_ack=False)
    sub._generation = 1  # the stream now reads from the activated site
    await sub.ack(_delivered(sub, 985, generation=0))
    await sub.nak(_delivered(sub, 986, generation=0))
    await sub.term(_delivered(sub, 987, generation=0))
    assert sub.stale_settlements == 3
    assert sub._ack_buffer == [] and sub._unsent_acks == [] and sub._unsent_terms == []
    await sub.ack(_delivered(sub, 990, generation=1))  # this generation's: acknowledged as ever
    assert sub._ack_buffer == [990]
    await sub.connection.close()


async def test_a_sync_ack_of_an_older_generations_delivery_is_refused() -> None:
    sub = _subscription(sync_ack=True)
    sub._generation = 2
    with pytest.raises(Fenced, match="delivered by the primary of DR generation 1"):
        await sub.ack(_delivered(sub, 985, generation=1))
    assert sub.stale_settlements == 1
    await sub.connection.close()


class _Stream:
    """What the subscription writes on its stream, kept (the leader's side is not here)."""

    def __init__(self) -> None:
        self.written: list[object] = []

    async def write(self, request: object) -> None:
        self.written.append(request)


async def test_acks_carried_to_a_reopened_stream_go_only_within_one_generation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from strongroom.api.v1 import messaging_pb2 as mpb

    for generation_now, sent in ((0, [985, 987]), (1, [])):
        sub = _subscription(sync_ack=False)
        stream = _Stream()

        async def call_leader(_call: object, generation: int = generation_now) -> tuple[object, object, str]:
            sub.connection.generation = generation  # what the opening stream's headers said
            return stream, mpb.SubscriptionOpened(subscription_id="s-2"), "127.0.0.1:1"

        monkeypatch.setattr(sub.connection, "call_leader", call_leader)
        sub._unsent_acks = [985, 987]  # acked on the stream that broke (the old site's)
        await sub.open()
        acked = [list(r.ack.message_seqs) for r in stream.written if r.WhichOneof("request") == "ack"]  # type: ignore[attr-defined]
        assert sum(acked, []) == sent, generation_now
        assert sub.stale_settlements == (2 if generation_now else 0)
        await sub.connection.close()
