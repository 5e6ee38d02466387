"""The store model from real clients against a real 3-member cluster: content matching through
endpoints and durable templates, keyed last-value, store limits with both policies, time-to-live,
dead-lettering after the redelivery limit, replay from a sequence and from a time, default ack
modes and the stores grid in status. Failover variants are marked slow."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from harness import Cluster, drain, realm_yaml, running_cluster
from strongroom.api.v1 import admin_pb2, common_pb2
from strongroom.client import ABSENT, PRESENT, Client, DurableKind, Received, Subscription
from strongroom.errors import DurableMismatch, InvalidArgument, InvalidMatcher, StoreLimitExceeded

STORES = """\
  - name: capped
    cluster: default
    max_messages: 5
  - name: rolling
    cluster: default
    max_messages: 5
    limit_policy: discard_oldest
  - name: bytecap
    cluster: default
    max_message_bytes: 1024
    max_bytes: 4096
  - name: content
    cluster: default
  - name: lvstore
    cluster: default
  - name: sparse
    cluster: default
  - name: tiny
    cluster: default
    max_messages: 1
"""
DESTINATIONS = """\
  - name: "capped.*"
    store: capped
  - name: "rolling.*"
    store: rolling
  - name: "bytecap.*"
    store: bytecap
  - name: "ttl.*"
    store: default
    ttl_seconds: 1.5
  - name: "retry.*"
    store: default
    redelivery_limit: 2
    dead_letter: dead.queue
  - name: "drop.*"
    store: default
    redelivery_limit: 1
  - name: "replay.*"
    store: default
    retain_seconds: 300
  - name: "syncack.*"
    store: default
    ack_mode: sync
  - name: "stuck.*"
    store: default
    redelivery_limit: 1
    dead_letter: full.x
  - name: "full.*"
    store: tiny
  - name: "strict.*"
    store: default
    require_interest: true
"""
SECTIONS = """\
durable_templates:
  - name: std
    kind: standard
  - name: latest
    kind: last-value
    key_field: sym
    ack_mode: sync
endpoints:
  - name: trades
    store: content
    template: std
  - name: quotes
    store: lvstore
    template: latest
  - name: sparse
    store: sparse
    template: std
"""


def model_realm(**kw: object) -> str:
    return realm_yaml(extra_stores=STORES, extra_destinations=DESTINATIONS, extra_sections=SECTIONS, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("model"), model_realm()) as cluster:
        yield cluster


@pytest.fixture
async def client(model_cluster: Cluster) -> AsyncIterator[Client]:
    await model_cluster.leader()
    c = Client(model_cluster.addresses(), timeout=20)
    try:
        yield c
    finally:
        await c.close()


async def quiet(sub: Subscription, seconds: float = 1.0) -> Received | None:
    """The next message within `seconds`, expected to be None (`next` timed out); a closed
    subscription raises."""
    try:
        return await sub.next(timeout=seconds)
    except TimeoutError:
        return None


# --- content matching -------------------------------------------------------------------------------


async def test_matcher_semantics_on_an_endpoint(client: Client) -> None:
    matchers: dict[str, dict[str, object]] = {
        "eq": {"sym": "A"},
        "typed": {"qty": 5},
        "present": {"price": PRESENT},
        "absent": {"price": ABSENT},
        "combo": {"sym": "A", "price": PRESENT},
        "all": {},
    }
    subs = {name: await client.subscribe("trades", f"m-{name}", matcher=m) for name, m in matchers.items()}
    messages = [
        {"sym": "A", "qty": 5, "price": 1.0},   # 0
        {"sym": "B", "qty": "5"},               # 1: qty of the wrong type (string)
        {"sym": "A", "qty": 5.0},               # 2: qty of the wrong type (float)
        {},                                     # 3
        {"sym": "A"},                           # 4
        {"sym": "Z", "price": 2.5},             # 5
        {"sym": b"A"},                          # 6: bytes, not a string
    ]
    for i, fields in enumerate(messages):
        res = await client.publish("trades", f"t{i}".encode(), fields=fields)
        assert res.message_seq > 0
    expected = {
        "eq": [0, 2, 4],
        "typed": [0],
        "present": [0, 5],
        "absent": [1, 2, 3, 4, 6],
        "combo": [0],
        "all": [0, 1, 2, 3, 4, 5, 6],
    }
    for name, want in expected.items():
        got = await drain(subs[name], len(want))
        assert [m.body for m in got] == [f"t{i}".encode() for i in want], name
        assert await quiet(subs[name], 0.3) is None, name
    # Typed fields come back with their types.
    for sub in subs.values():
        await sub.close()


async def test_content_message_nobody_wants_is_not_stored(client: Client) -> None:
    sub = await client.subscribe("sparse", "only-x", matcher={"sym": "X-only"})
    res = await client.publish("sparse", b"unwanted", fields={"sym": "Y"})
    assert res.message_seq == 0
    res = await client.publish("sparse", b"wanted", fields={"sym": "X-only"})
    assert res.message_seq > 0
    got = await drain(sub, 1)
    assert [m.body for m in got] == [b"wanted"] and got[0].fields == {"sym": "X-only"}
    await sub.close()


async def test_bad_matchers_and_mismatched_durables_are_refused(client: Client) -> None:
    bad = common_pb2.ContentMatcher()
    bad.fields["sym"].CopyFrom(common_pb2.FieldMatch())  # no condition
    with pytest.raises(InvalidMatcher, match="no condition"):
        await client.subscribe("trades", "bad", matcher=bad)
    sub = await client.subscribe("trades", "fixed", matcher={"sym": "A"})
    await sub.close()
    with pytest.raises(DurableMismatch, match="matcher"):
        await client.subscribe("trades", "fixed", matcher={"sym": "B"})
    with pytest.raises(DurableMismatch, match="standard"):
        await client.subscribe("trades", "fixed2", kind="shared")
    with pytest.raises(InvalidMatcher, match="queue"):
        await client.subscribe("jobs.queue", matcher={"sym": "A"})
    # Nothing was created by the refused calls.
    st = await client.status()
    names = {d.name for s in st for store in s.stores for d in store.durables if store.name == "content"}
    assert "bad" not in names and "fixed2" not in names and "fixed" in names


async def test_matcher_on_a_topic_durable(client: Client) -> None:
    sub = await client.subscribe("prices.eu", "eu-a", matcher={"sym": "A"})
    await client.publish("prices.eu", b"a1", fields={"sym": "A"})
    await client.publish("prices.eu", b"b1", fields={"sym": "B"})
    await client.publish("prices.eu", b"a2", fields={"sym": "A", "x": True})
    got = await drain(sub, 2)
    assert [m.body for m in got] == [b"a1", b"a2"]
    assert got[1].fields == {"sym": "A", "x": True}
    assert await quiet(sub, 0.3) is None
    await sub.close()


# --- keyed last-value -----------------------------------------------------------------------------


async def test_keyed_last_value_gives_the_latest_for_the_key_then_updates(client: Client) -> None:
    await client.subscribe("quotes", "board", matcher={"sym": "INIT"})  # creates the durable
    for sym, px in (("A", 1), ("B", 1), ("A", 2), ("C", 7), ("B", 2)):
        await client.publish("quotes", f"{sym}{px}".encode(), fields={"sym": sym, "px": px})
    a = await client.subscribe("quotes", "board", matcher={"sym": "A"})
    assert a.kind is DurableKind.LAST_VALUE and a.key_field == "sym" and a.sync_ack
    first = await a.next(timeout=5)
    assert first is not None and first.body == b"A2"
    b = await client.subscribe("quotes", "board", matcher={"sym": "B"})
    got_b = await b.next(timeout=5)
    assert got_b is not None and got_b.body == b"B2"
    await client.publish("quotes", b"A3", fields={"sym": "A", "px": 3})
    await client.publish("quotes", b"C8", fields={"sym": "C", "px": 8})
    upd = await a.next(timeout=5)
    assert upd is not None and upd.body == b"A3"
    assert await quiet(a, 0.3) is None and await quiet(b, 0.3) is None
    # A key with no message yet: nothing until one arrives.
    d = await client.subscribe("quotes", "board", matcher={"sym": "D"})
    assert await quiet(d, 0.3) is None
    await client.publish("quotes", b"D1", fields={"sym": "D", "px": 1})
    got_d = await d.next(timeout=5)
    assert got_d is not None and got_d.body == b"D1"
    # The key must be named with a value, and of the right type to find the slot.
    with pytest.raises(InvalidMatcher, match="sym=<value>"):
        await client.subscribe("quotes", "board", matcher={"px": 1})
    wrong_type = await client.subscribe("quotes", "board", matcher={"sym": b"A"})
    assert await quiet(wrong_type, 0.3) is None
    for s in (a, b, d, wrong_type):
        await s.close()


# --- limits --------------------------------------------------------------------------------------------


async def test_store_limit_reject_policy(client: Client) -> None:
    sub = await client.subscribe("capped.t", "c1")
    for i in range(5):
        assert (await client.publish("capped.t", f"c{i}".encode())).message_seq > 0
    with pytest.raises(StoreLimitExceeded, match="limit of 5 messages"):
        await client.publish("capped.t", b"c5")
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    capped = next(s for s in leader.stores if s.name == "capped")
    assert capped.messages == 5 and capped.max_messages == 5
    assert capped.limit_policy == common_pb2.LIMIT_POLICY_REJECT
    # Consuming makes room; the rejected message was never stored.
    got = await drain(sub, 5)
    assert [m.body for m in got] == [f"c{i}".encode() for i in range(5)]
    assert (await client.publish("capped.t", b"c6")).message_seq > 0
    got = await drain(sub, 1)
    assert [m.body for m in got] == [b"c6"]
    await sub.close()


async def test_store_limit_on_bytes(client: Client) -> None:
    sub = await client.subscribe("bytecap.t", "b1")
    body = b"x" * 900
    stored = 0
    with pytest.raises(StoreLimitExceeded, match="4096 bytes"):
        for _ in range(10):
            await client.publish("bytecap.t", body)
            stored += 1
    assert stored == 4
    got = await drain(sub, 4)
    assert len(got) == 4
    await sub.close()


async def test_store_limit_discard_oldest_policy(client: Client) -> None:
    await (await client.subscribe("rolling.t", "r1")).close()
    for i in range(8):
        assert (await client.publish("rolling.t", f"r{i}".encode())).message_seq > 0
    sub = await client.subscribe("rolling.t", "r1")
    got = await drain(sub, 5)
    assert [m.body for m in got] == [f"r{i}".encode() for i in range(3, 8)]
    assert await quiet(sub, 0.3) is None
    await sub.close()


# --- time-to-live, dead-lettering, replay ----------------------------------------------------------------


async def test_time_to_live_expires_unconsumed_messages(client: Client) -> None:
    sub = await client.subscribe("ttl.t", "t1")
    await sub.close()
    await client.publish("ttl.t", b"old")
    await asyncio.sleep(2.5)
    fresh = await client.publish("ttl.t", b"fresh")
    sub = await client.subscribe("ttl.t", "t1")
    got = await drain(sub, 1)
    assert [m.body for m in got] == [b"fresh"] and got[0].seq == fresh.message_seq
    assert got[0].published_at > time.time() - 60
    assert await quiet(sub, 0.3) is None
    await sub.close()
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    t1 = next(d for s in leader.stores for d in s.durables if d.name == "t1")
    assert t1.pending_messages == 0


async def test_dead_letter_after_the_redelivery_limit(client: Client) -> None:
    dlq = await client.subscribe("dead.queue")
    sub = await client.subscribe("retry.t", "worker")
    res = await client.publish("retry.t", b"poison", fields={"k": 1})
    counts = []
    for _ in range(2):
        msg = await sub.next(timeout=5)
        assert msg is not None and msg.body == b"poison"
        counts.append(msg.delivery_count)
        await sub.close()  # not acknowledged: redelivered
        sub = await client.subscribe("retry.t", "worker")
    assert counts == [1, 2]
    assert await quiet(sub, 1.0) is None
    dead = await dlq.next(timeout=5)
    assert dead is not None and dead.body == b"poison"
    assert dead.fields["k"] == 1
    assert dead.fields["sr.dead_letter.from"] == "retry.t"
    assert dead.fields["sr.dead_letter.durable"] == "worker"
    assert dead.fields["sr.dead_letter.deliveries"] == 2
    assert dead.fields["sr.dead_letter.seq"] == res.message_seq
    await dlq.ack(dead)
    await sub.close()
    await dlq.close()


async def test_dead_letter_waits_while_its_store_is_full(client: Client) -> None:
    await (await client.subscribe("full.x", "dl")).close()
    await client.publish("full.x", b"filler")  # the dead-letter store is now at its limit
    worker = await client.subscribe("stuck.t", "w")
    await client.publish("stuck.t", b"p")
    first = await worker.next(timeout=5)
    assert first is not None and first.body == b"p"
    await worker.close()
    worker = await client.subscribe("stuck.t", "w")
    assert await quiet(worker, 1.0) is None  # past the limit: not delivered again
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    w = next(d for s in leader.stores for d in s.durables if d.destination == "stuck.t")
    assert w.pending_messages == 1  # refused by the full dead-letter store: still held
    dl = await client.subscribe("full.x", "dl")
    got = await drain(dl, 1)
    assert [m.body for m in got] == [b"filler"]
    moved = await dl.next(timeout=15)  # retried once there is room
    assert moved is not None and moved.body == b"p" and moved.fields["sr.dead_letter.from"] == "stuck.t"
    await dl.ack(moved)
    assert await quiet(worker, 0.5) is None
    for x in (worker, dl):
        await x.close()


async def test_redelivery_limit_without_dead_letter_discards(client: Client) -> None:
    sub = await client.subscribe("drop.t", "w")
    await client.publish("drop.t", b"once")
    await client.publish("drop.t", b"ok")
    first = await sub.next(timeout=5)
    assert first is not None and first.body == b"once"
    second = await sub.next(timeout=5)
    assert second is not None and second.body == b"ok"
    await sub.ack(second)
    await sub.close()
    sub = await client.subscribe("drop.t", "w")
    assert await quiet(sub, 1.0) is None
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    w = next(d for s in leader.stores for d in s.durables if d.destination == "drop.t")
    assert w.pending_messages == 0
    await sub.close()


async def test_replay_from_sequence_and_from_time(client: Client) -> None:
    seqs = []
    mid = 0.0
    for i in range(10):
        if i == 6:
            await asyncio.sleep(0.05)
            mid = time.time()
            await asyncio.sleep(0.05)
        seqs.append((await client.publish("replay.t", f"p{i}".encode())).message_seq)
    assert all(seqs)  # kept by the replay retention although no durable exists
    plain = await client.subscribe("replay.t", "plain")
    assert await quiet(plain, 0.3) is None
    from_seq = await client.subscribe("replay.t", "from-seq", replay_from_seq=seqs[3])
    got = await drain(from_seq, 7)
    assert [m.body for m in got] == [f"p{i}".encode() for i in range(3, 10)]
    from_time = await client.subscribe("replay.t", "from-time", replay_from_time=mid)
    got = await drain(from_time, 4)
    assert [m.body for m in got] == [f"p{i}".encode() for i in range(6, 10)]
    # An existing durable that consumed everything goes back to the start.
    await from_seq.close()
    again = await client.subscribe("replay.t", "from-seq", replay_from_seq=seqs[0])
    got = await drain(again, 10)
    assert [m.body for m in got] == [f"p{i}".encode() for i in range(10)]
    assert await quiet(again, 0.3) is None
    for s in (plain, from_time, again):
        await s.close()
    with pytest.raises(InvalidArgument, match="replay does not apply"):
        await client.subscribe("quotes", "board", matcher={"sym": "A"}, replay_from_seq=1)


async def test_default_ack_mode_per_destination(client: Client) -> None:
    sync = await client.subscribe("syncack.t", "s")
    plain = await client.subscribe("other.t", "s")
    chosen = await client.subscribe("syncack.t", "s2", sync_ack=False)
    assert sync.sync_ack and not plain.sync_ack and not chosen.sync_ack
    await client.publish("syncack.t", b"x")
    got = await drain(sync, 1)
    assert [m.body for m in got] == [b"x"]
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    s = next(d for st_ in leader.stores for d in st_.durables if d.destination == "syncack.t" and d.name == "s")
    assert s.pending_messages == 0  # a sync ack returned after its commit
    assert s.ack_sync_mode == common_pb2.ACK_SYNC_MODE_SYNC
    for x in (sync, plain, chosen):
        await x.close()


async def test_status_shows_the_stores_grid(client: Client) -> None:
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    grid = {s.name: s for s in leader.stores}
    assert grid["rolling"].limit_policy == common_pb2.LIMIT_POLICY_DISCARD_OLDEST
    assert grid["bytecap"].max_bytes == 4096 and grid["bytecap"].max_message_bytes == 1024
    assert grid["default"].storage == "disk-sync" and grid["default"].publisher_mode == "store_confirm_send"
    assert grid["default"].replicated and grid["default"].maps and not grid["default"].routed
    assert not leader.indexes_on_disk


# --- across a failover (slow) --------------------------------------------------------------------------


@pytest.mark.slow
async def test_last_value_limits_and_replay_hold_across_failover(tmp_path: Path) -> None:
    with running_cluster(tmp_path, model_realm()) as cluster:
        old = await cluster.leader()
        async with Client(cluster.addresses(), timeout=30) as c:
            await (await c.subscribe("quotes", "board", matcher={"sym": "A"})).close()
            for px in range(3):
                await c.publish("quotes", f"A{px}".encode(), fields={"sym": "A"})
            await c.publish("quotes", b"B0", fields={"sym": "B"})
            capped = await c.subscribe("capped.t", "c")
            await capped.close()
            rolling = await c.subscribe("rolling.t", "r")
            await rolling.close()
            for i in range(5):
                await c.publish("capped.t", f"c{i}".encode())
            for i in range(7):
                await c.publish("rolling.t", f"r{i}".encode())
            cluster.kill(old, signal.SIGKILL)
            new = await cluster.leader(exclude=old)
            assert new != old
            with pytest.raises(StoreLimitExceeded):
                await c.publish("capped.t", b"c5")
            await c.publish("rolling.t", b"r7")
            a = await c.subscribe("quotes", "board", matcher={"sym": "A"})
            got = await a.next(timeout=10)
            assert got is not None and got.body == b"A2"
            rolling = await c.subscribe("rolling.t", "r")
            got_r = await drain(rolling, 5, timeout=10)
            assert [m.body for m in got_r] == [f"r{i}".encode() for i in range(3, 8)]
            capped = await c.subscribe("capped.t", "c")
            got_c = await drain(capped, 5, timeout=10)
            assert [m.body for m in got_c] == [f"c{i}".encode() for i in range(5)]
            for s in (a, rolling, capped):
                await s.close()


# --- nak and term ------------------------------------------------------------------------------------


async def _durable_on_leader(client: Client, destination: str) -> admin_pb2.DurableStatus:
    """The leader's status of the one durable of `destination`."""
    st = await client.status()
    leader = next(s for s in st if s.role == "leader")
    return next(d for s in leader.stores for d in s.durables if d.destination == destination)


async def test_nak_delivers_again_at_once_and_after_a_delay(client: Client) -> None:
    sub = await client.subscribe("settle.nak", "w")
    await client.publish("settle.nak", b"first")
    first = await sub.next(timeout=5)
    assert (first.body, first.delivery_count) == (b"first", 1)
    await first.nak()
    again = await sub.next(timeout=5)
    assert (again.body, again.seq, again.delivery_count) == (b"first", first.seq, 2)
    await sub.ack(again)
    await client.publish("settle.nak", b"second")
    second = await sub.next(timeout=5)
    assert (second.body, second.delivery_count) == (b"second", 1)
    await second.nak(delay=1.5)
    assert await quiet(sub, 0.8) is None  # held back for its delay
    later = await sub.next(timeout=5)
    assert (later.body, later.seq, later.delivery_count) == (b"second", second.seq, 2)
    await sub.ack(later)
    await sub.acks_written()
    assert await quiet(sub, 0.5) is None
    await sub.close()


async def test_a_nak_counts_toward_the_redelivery_limit(client: Client) -> None:
    sub = await client.subscribe("drop.nak", "w")  # redelivery_limit 1, no dead-letter destination
    await client.publish("drop.nak", b"once")
    msg = await sub.next(timeout=5)
    await msg.nak()
    assert await quiet(sub, 1.0) is None  # a second delivery would pass the limit: dropped
    assert (await _durable_on_leader(client, "drop.nak")).pending_messages == 0
    await sub.close()


async def test_term_dead_letters_a_message_and_it_is_never_delivered_again(client: Client) -> None:
    dlq = await client.subscribe("dead.queue")
    sub = await client.subscribe("retry.term", "worker")  # dead-letter destination: dead.queue
    res = await client.publish("retry.term", b"bad", fields={"k": 7})
    await client.publish("retry.term", b"good")
    bad = await sub.next(timeout=5)
    assert bad.body == b"bad"
    await bad.term()
    good = await sub.next(timeout=5)
    assert good.body == b"good"
    await sub.ack(good)
    dead = await dlq.next(timeout=5)
    assert (dead.body, dead.fields["k"]) == (b"bad", 7)
    assert dead.fields["sr.dead_letter.from"] == "retry.term"
    assert dead.fields["sr.dead_letter.durable"] == "worker"
    assert dead.fields["sr.dead_letter.deliveries"] == 1
    assert dead.fields["sr.dead_letter.seq"] == res.message_seq
    await dlq.ack(dead)
    await sub.acks_written()
    await sub.close()
    # Not redelivered to a new subscriber either: it left the durable.
    sub = await client.subscribe("retry.term", "worker")
    assert await quiet(sub, 1.0) is None
    await sub.close()
    await dlq.close()


async def test_term_without_a_dead_letter_destination_drops_the_message(client: Client) -> None:
    sub = await client.subscribe("settle.term", "w")
    await client.publish("settle.term", b"gone")
    msg = await sub.next(timeout=5)
    await msg.term()
    await sub.close()
    sub = await client.subscribe("settle.term", "w")
    assert await quiet(sub, 1.0) is None
    assert (await _durable_on_leader(client, "settle.term")).pending_messages == 0
    await sub.close()


async def test_the_client_refuses_a_nak_delay_that_is_not_seconds(client: Client) -> None:
    sub = await client.subscribe("settle.delay", "w")
    await client.publish("settle.delay", b"m")
    msg = await sub.next(timeout=5)
    with pytest.raises(InvalidArgument, match="nak delay"):
        await msg.nak(delay=-1)
    await sub.ack(msg)
    await sub.close()


# --- publishes nothing wants ----------------------------------------------------------------------------


async def test_a_publish_nothing_wants_says_it_was_not_stored(client: Client) -> None:
    res = await client.publish("nobody.t", b"lost")
    assert res.confirmed and res.no_interest and not res.stored and res.message_seq == 0
    sub = await client.subscribe("nobody.t", "late")
    assert await quiet(sub, 0.5) is None  # it was not stored: a durable made after it never sees it
    kept = await client.publish("nobody.t", b"kept")
    assert kept.stored and not kept.no_interest and kept.message_seq > 0
    got = await sub.next(timeout=5)
    assert got.body == b"kept"
    await sub.ack(got)
    await sub.close()
    queued = await client.publish("nobody.queue", b"q")  # a queue stores without subscribers
    assert queued.stored and queued.message_seq > 0
    sub = await client.subscribe("nobody.queue")
    await sub.ack(await sub.next(timeout=5))
    await sub.close()


async def test_require_interest_refuses_a_publish_nothing_wants_and_changes_nothing(client: Client) -> None:
    from strongroom.api.v1 import messaging_pb2 as mpb
    from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
    from strongroom.errors import NoInterest

    with pytest.raises(NoInterest, match="no durable wants topic 'strict.orders'") as info:
        await client.publish("strict.orders", b"typo?")
    assert not info.value.retriable
    # Through the generated stub with a fixed message id: refused with FAILED_PRECONDITION and
    # the NO_INTEREST reason, and the id is not used up: once a durable exists the same id is
    # stored as a new message, not answered as a duplicate.
    request = mpb.PublishRequest(destination="strict.orders", mode=mpb.PUBLISH_MODE_STORE_CONFIRM_SEND,
                                 message=common_pb2.Message(body=b"x", producer_id="strict-producer", sequence=1))

    async def publish(address: str) -> mpb.PublishResponse:
        return await mgrpc.MessagingServiceStub(client.channel(address)).Publish(request, timeout=5)

    with pytest.raises(NoInterest):
        await client.retrying(publish)
    sub = await client.subscribe("strict.orders", "billing")
    stored = await client.retrying(publish)
    assert stored.confirmed and not stored.duplicate and not stored.no_interest and stored.message_seq > 0
    got = await sub.next(timeout=5)
    assert got.body == b"x" and got.seq == stored.message_seq
    await sub.ack(got)
    await sub.close()


# --- refused acks --------------------------------------------------------------------------------------


async def test_an_ack_batch_with_one_unknown_sequence_acks_the_others_and_names_the_refused_one(
        client: Client) -> None:
    sub = await client.subscribe("refuse.t", "w")
    for body in (b"a", b"b"):
        await client.publish("refuse.t", body)
    a = await sub.next(timeout=5)
    b = await sub.next(timeout=5)
    unknown = b.seq + 1_000_000
    await sub.ack_many([a.seq, b.seq, unknown])
    # The refusal comes back on the stream; reading it needs a read (next() times out meanwhile).
    deadline = time.monotonic() + 5
    while not sub.refusals and time.monotonic() < deadline:
        assert await quiet(sub, 0.2) is None
    assert [(r.message_seq, r.operation, r.error.reason) for r in sub.refusals] == [(unknown, "ack", "UNKNOWN_MESSAGE")]
    assert f"message {unknown} is not pending" in sub.refusals[0].error.message
    await sub.close()
    # The two valid acks took effect: nothing is redelivered, nothing is pending.
    sub = await client.subscribe("refuse.t", "w")
    assert await quiet(sub, 1.0) is None
    durable = await _durable_on_leader(client, "refuse.t")
    assert durable.pending_messages == 0 and durable.refused >= 1
    await sub.close()


async def test_a_nak_of_an_unknown_message_is_refused_to_the_subscriber(client: Client) -> None:
    sub = await client.subscribe("refuse.nak", "w")
    await client.publish("refuse.nak", b"m")
    msg = await sub.next(timeout=5)
    await sub.nak(msg.seq + 1_000_000)
    await sub.term(msg.seq + 2_000_000)
    deadline = time.monotonic() + 5
    while len(sub.refusals) < 2 and time.monotonic() < deadline:
        assert await quiet(sub, 0.2) is None
    assert [(r.operation, r.error.reason) for r in sub.refusals] == [("nak", "UNKNOWN_MESSAGE"),
                                                                      ("term", "UNKNOWN_MESSAGE")]
    await sub.ack(msg)
    await sub.close()
