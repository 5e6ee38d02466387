"""Wire splicing: spliced bytes parse as the messages they stand for."""

from __future__ import annotations

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.link import frame
from strongroom.persistence.transport import encode_append
from strongroom.wire import APPEND_ENTRIES, ENTRY_OPS, repeated_after


def _entry(index: int, n: int) -> rpb.LogEntry:
    entry = rpb.LogEntry(index=index, epoch=3)
    for i in range(n):
        op = entry.ops.add().publish
        op.destination = f"orders.{i}"
        op.message.body = bytes([i % 256]) * (100 + 50 * i)  # lengths on both sides of 128
    return entry


def test_an_entry_spliced_from_its_operations_is_the_entry() -> None:
    entry = _entry(9, 5)
    head = rpb.LogEntry(index=9, epoch=3).SerializeToString()
    spliced = repeated_after(head, ENTRY_OPS, [op.SerializeToString() for op in entry.ops])
    assert rpb.LogEntry.FromString(spliced) == entry


def test_a_framed_append_is_the_append_behind_its_length() -> None:
    entries = [_entry(i, 3) for i in (4, 5)]
    head = rpb.AppendRequest(epoch=3, leader="m1", prev_index=3, prev_epoch=3, commit_index=2)
    plain = encode_append(head, [e.SerializeToString() for e in entries])
    framed = encode_append(head, [e.SerializeToString() for e in entries], framed=True)
    assert framed == frame(plain)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    parsed = rpb.AppendRequestRaw.FromString(framed[4:])
    assert (parsed.epoch, parsed.leader, parsed.prev_index, parsed.commit_index) == (3, "m1", 3, 2)
    assert [rpb.LogEntry.FromString(raw) for raw in parsed.entries] == entries
    assert repeated_after(b"", APPEND_ENTRIES, [], length_prefix=True) == b"\0\0\0\0"


def test_a_spliced_publish_batch_parses_as_the_real_operation() -> None:
    from strongroom.persistence.publishing import publish_batch_op as _publish_batch_op

    head = rpb.PublishOp(store="s", destination="d.queue", queue=True, published_at=1.5, retain_until=9.0)
    messages = [cpb.Message(body=b"x" * n, producer_id="p", sequence=n) for n in (1, 200, 70000)]
    raw = _publish_batch_op(head.SerializeToString(), [m.SerializeToString() for m in messages])
    assert rpb.Operation.FromString(raw) == rpb.Operation(publish_batch=rpb.PublishBatchOp(publish=head, messages=messages))


def test_a_uow_op_wrapped_as_bytes_parses_as_the_operation() -> None:
    from strongroom.wire import OPERATION_UOW, length_delimited

    op = rpb.UowOp(clock=2.5, kind=2, uow_ids=["u1"], message_count=2, message_bytes=300,
                   definition=rpb.UowDefinition(store="s", destination="d.queue", persistent=True, lifetime=60))
    op.messages.extend(cpb.Message(body=b"y" * n) for n in (100, 200))
    assert rpb.Operation.FromString(length_delimited(OPERATION_UOW, op.SerializeToString())) == rpb.Operation(uow=op)


def test_a_forward_batch_spliced_from_encoded_messages_is_the_batch() -> None:
    """Routers join each message (encoded once, without origin) with its origin; sequences on
    both sides of the varint lengths (1, 2, 3 and 4 bytes)."""
    from strongroom.api.v1 import router_pb2 as fpb
    from strongroom.wire import forwarded_message, origin_head

    expected = fpb.ForwardBatch(batch_id=7, from_cluster="london", destination="wide.a")
    parts = [fpb.ForwardBatch(batch_id=7, from_cluster="london", destination="wide.a").SerializeToString()]
    previous = 0
    for i, seq in enumerate((1, 127, 128, 16_383, 16_384, 2_097_152, 268_435_456)):
        m = cpb.Message(body=bytes([i]) * (90 + 20 * i), fields={"n": cpb.FieldValue(int_value=i)})
        parts += forwarded_message(m.SerializeToString(), origin_head("london", "wide"), seq, previous)
        m.origin.CopyFrom(cpb.Origin(cluster="london", store="wide", sequence=seq, previous=previous))
        expected.messages.append(m)
        previous = seq
    assert fpb.ForwardBatch.FromString(b"".join(parts)) == expected


def test_a_forwarded_message_passed_on_carries_the_publishers_id_not_its_own() -> None:
    """The receiving router's request: the forwarded bytes with its publisher's id appended,
    which a parser takes over an id the bytes carried."""
    from strongroom.api.v1 import messaging_pb2 as mpb
    from strongroom.wire import producer_id_field, publish_request

    origin = cpb.Origin(cluster="london", store="wide", sequence=70_000, previous=69_999)
    forwarded = cpb.Message(body=b"x" * 1024, producer_id="publisher-at-london", sequence=5, origin=origin)
    head = mpb.PublishRequest(destination="wide.a", mode=mpb.PUBLISH_MODE_STORE_CONFIRM_SEND).SerializeToString()
    for seq in (1, 300, 3_000_000):
        raw = publish_request(head, forwarded.SerializeToString(), producer_id_field("router-at-rio"), seq)
        (request,) = mpb.PublishBatch.FromString(raw).requests
        assert request == mpb.PublishRequest(
            destination="wide.a", mode=mpb.PUBLISH_MODE_STORE_CONFIRM_SEND, correlation_id=seq,
            message=cpb.Message(body=b"x" * 1024, producer_id="router-at-rio", sequence=seq, origin=origin))


def test_encoded_deliveries_are_the_subscribe_response_the_servicer_built() -> None:
    """Deliveries leave the leader as bytes joined from each stored message's encoding; they are
    the bytes of the SubscribeResponse built field by field (numbers at their default left
    out, an empty message still set), and parse as it."""
    from strongroom.api.v1 import messaging_pb2 as mpb
    from strongroom.persistence.dispatcher import Delivered
    from strongroom.persistence.servicer import subscribe_answer, subscribe_response

    origin = cpb.Origin(cluster="london", store="wide", sequence=2**40, previous=7)
    items = [
        Delivered(1, cpb.Message(body=b"x" * 1024, producer_id="p", sequence=3), 1, "wide.bench", 1.7e9),
        Delivered(2**33, cpb.Message(body=b"", origin=origin), 0, "", 0.0),
        Delivered(300, cpb.Message(), 2**20, "prix.été", -1.5),
        Delivered(0, cpb.Message(body=bytes(range(256)) * 3), 3, "wide.bench", 1e-9),
    ]
    encoded = subscribe_answer(items)
    assert isinstance(encoded, bytes)
    built = subscribe_response(items)
    assert encoded == built.SerializeToString()
    assert mpb.SubscribeResponse.FromString(encoded) == built
    # Anything else of the outbox is the message it was.
    assert subscribe_answer([]) == subscribe_response([])
