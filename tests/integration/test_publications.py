"""Durable publications (EntireX's durable publish and subscribe) on a real 3-member cluster: a
publication reaches exactly the durable subscribers that subscribed before its commit, whole;
each subscriber settles it for itself; the publication goes once every eligible subscriber
settled it; an unused subscription expires on the pseudo-clock and releases what it held; bad
input; and (slow) subscriptions and pending publications across a leader SIGKILL and a
whole-cluster restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from harness import Cluster, leader_client, realm_yaml, running_cluster, wait_for

from strongroom.client import Client
from strongroom.client.uow import ReceivedUnitOfWork
from strongroom.errors import InvalidArgument, NotSubscribed, UnknownDestination, UowNotHeld

DESTINATIONS = """\
  - name: "news.*"
    kind: topic
    store: default
    units_of_work:
      durable: true
      conversation_timeout_seconds: 60
  - name: "expiring.*"
    kind: topic
    store: default
    units_of_work:
      durable: true
      subscription_expiration_seconds: 3
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("pubs"), realm_yaml(extra_destinations=DESTINATIONS)) as c:
        yield c


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with leader_client(cluster) as c:
        yield c


async def publish(client: Client, topic: str, *bodies: bytes) -> str:
    pub = client.unit_of_work(topic)
    for body in bodies:
        pub.add(body)
    result = await pub.commit()
    assert result.status in ("ACCEPTED", "PROCESSED"), result
    return result.uow_id


async def receive(client: Client, topic: str, subscriber: str, wait: float = 2.0) -> ReceivedUnitOfWork:
    got = await client.receive_uow(topic, subscriber, wait=wait)
    assert got is not None, f"{subscriber} got nothing from {topic}"
    return got


async def test_a_publication_reaches_the_subscribers_subscribed_before_its_commit(client: Client) -> None:
    sub_a, created = await client.subscribe_publications("news.reach", "reach-a")
    assert created and sub_a.topic == "news.reach" and sub_a.pending == 0
    await client.subscribe_publications("news.reach", "reach-b")
    first = await publish(client, "news.reach", b"first-1", b"first-2")
    await client.subscribe_publications("news.reach", "reach-late")
    second = await publish(client, "news.reach", b"second")

    got = await receive(client, "news.reach", "reach-a")
    assert (got.uow_id, [m.body for m in got.messages]) == (first, [b"first-1", b"first-2"])
    assert await got.commit() == "PROCESSED"
    late = await receive(client, "news.reach", "reach-late")
    assert late.uow_id == second
    assert await late.commit() == "PROCESSED"
    assert await client.receive_uow("news.reach", "reach-late", wait=0.5) is None

    status = await client.uow_status(first)
    assert status.publication and status.status == "ACCEPTED"
    assert {s.subscriber: s.status for s in status.subscribers} == {"reach-a": "PROCESSED", "reach-b": "ACCEPTED"}
    # The last eligible subscriber's commit removes it.
    got = await receive(client, "news.reach", "reach-b")
    assert got.uow_id == first
    await got.commit()
    assert (await client.uow_status(first)).status == "PROCESSED"
    subs, _ = await client.publication_subscriptions("news.reach")
    pending = {s.subscriber: s.pending for s in subs}
    assert pending["reach-a"] == 1 and pending["reach-b"] == 1 and pending["reach-late"] == 0


async def test_no_subscriber_sees_part_of_a_publication_before_its_commit(client: Client) -> None:
    await client.subscribe_publications("news.atomic", "atomic-r")
    pub = client.unit_of_work("news.atomic")
    pub.add(b"part 1")
    await pub.send()
    assert await client.receive_uow("news.atomic", "atomic-r", wait=0.5) is None
    pub.add(b"part 2")
    await pub.commit()
    got = await receive(client, "news.atomic", "atomic-r")
    assert [m.body for m in got.messages] == [b"part 1", b"part 2"]
    await got.commit()


async def test_a_subscriber_backout_offers_it_again_to_that_subscriber_only(client: Client) -> None:
    for name in ("bo-a", "bo-b"):
        await client.subscribe_publications("news.backout", name)
    pub = await publish(client, "news.backout", b"retry me")
    got = await receive(client, "news.backout", "bo-a")
    status, backouts, _ = await got.backout(user_status=b"try later")
    assert (status, backouts) == ("ACCEPTED", 1)
    again = await receive(client, "news.backout", "bo-a")
    assert (again.uow_id, again.backout_count, again.user_status) == (pub, 1, b"try later")
    # Another subscriber cannot settle what bo-a holds.
    again.receiver = "bo-b"
    with pytest.raises(UowNotHeld):
        await again.commit()
    again.receiver = "bo-a"
    assert await again.commit() == "PROCESSED"
    other = await receive(client, "news.backout", "bo-b")
    assert (other.uow_id, other.backout_count) == (pub, 0)
    assert await other.cancel() == "CANCELLED"
    # One subscriber committed, the other cancelled: processed.
    assert (await client.uow_status(pub)).status == "PROCESSED"


async def test_an_unused_subscription_expires_on_the_pseudo_clock_and_releases_its_publications(
        client: Client) -> None:
    await client.subscribe_publications("expiring.one", "exp-idle")
    await client.subscribe_publications("expiring.one", "exp-busy")
    pub = await publish(client, "expiring.one", b"for both")
    got = await receive(client, "expiring.one", "exp-busy")
    await got.commit()

    async def idle_gone() -> bool:
        subs, _ = await client.publication_subscriptions("expiring.one")
        return "exp-idle" not in {s.subscriber for s in subs}

    async def busy_polls() -> None:
        # Waiting for publications counts as using the subscription.
        while True:
            await client.receive_uow("expiring.one", "exp-busy", wait=1.0)

    poller = asyncio.create_task(busy_polls())
    try:
        await wait_for(idle_gone, timeout=15)
        subs, clock = await client.publication_subscriptions("expiring.one")
        busy = [s for s in subs if s.subscriber == "exp-busy"]
        assert busy and busy[0].expires_at > clock
    finally:
        poller.cancel()
    # The idle subscriber's share is released: nothing waits for it any more.
    assert (await client.uow_status(pub)).status == "PROCESSED"
    with pytest.raises(NotSubscribed):
        await client.receive_uow("expiring.one", "exp-idle")
    assert await client.unsubscribe_publications("expiring.one", "exp-busy") == 0


async def test_unsubscribing_releases_what_the_subscriber_had_still_to_receive(client: Client) -> None:
    await client.subscribe_publications("news.unsubscribe", "un-only")
    pub = await publish(client, "news.unsubscribe", b"nobody will read this")
    assert await client.unsubscribe_publications("news.unsubscribe", "un-only") == 1
    assert (await client.uow_status(pub)).status == "PROCESSED"
    with pytest.raises(NotSubscribed):
        await client.unsubscribe_publications("news.unsubscribe", "un-only")


async def test_bad_input_gets_precise_errors(client: Client) -> None:
    with pytest.raises(UnknownDestination, match="not durable"):
        await client.subscribe_publications("plain.topic", "x")
    with pytest.raises(UnknownDestination, match="is a queue"):
        await client.subscribe_publications("work.queue", "x")
    with pytest.raises(InvalidArgument, match="subscriber"):
        await client.subscribe_publications("news.bad", "no spaces allowed")
    with pytest.raises(NotSubscribed):
        await client.receive_uow("news.bad", "never-subscribed")
    with pytest.raises(UnknownDestination, match="not durable"):
        await publish(client, "plain.topic", b"x")


@pytest.mark.slow
async def test_subscriptions_and_pending_publications_survive_a_leader_kill_and_a_restart(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(extra_destinations=DESTINATIONS)
    leader = await cluster.leader()
    async with Client(cluster.addresses(), timeout=30) as client:
        await client.subscribe_publications("news.topic", "keep-a")
        await client.subscribe_publications("news.topic", "keep-b")
        before = await publish(client, "news.topic", b"before the kill", b"whole")
        held = await receive(client, "news.topic", "keep-a")
        cluster.kill(leader)
        await cluster.leader(exclude=leader)
        # What keep-a held is still its own; keep-b's share waits for it.
        assert await held.commit() == "PROCESSED"
        got = await receive(client, "news.topic", "keep-b")
        assert (got.uow_id, [m.body for m in got.messages]) == (before, [b"before the kill", b"whole"])
        await got.backout()
        await client.subscribe_publications("news.topic", "keep-c")
        after = await publish(client, "news.topic", b"after the kill")
        cluster.start(leader)
        cluster.stop_all()
        cluster.start_all()
        await cluster.leader()
        subs, _ = await client.publication_subscriptions("news.topic")
        assert {s.subscriber: s.pending for s in subs} == {"keep-a": 1, "keep-b": 2, "keep-c": 1}
        seen: dict[str, list[str]] = {}
        for name in ("keep-a", "keep-b", "keep-c"):
            while (got := await client.receive_uow("news.topic", name, wait=1.0)) is not None:
                seen.setdefault(name, []).append(got.uow_id)
                await got.commit()
        assert seen == {"keep-a": [after], "keep-b": [before, after], "keep-c": [after]}
        assert (await client.uow_status(before)).status == "PROCESSED"
        assert (await client.uow_status(after)).status == "PROCESSED"
