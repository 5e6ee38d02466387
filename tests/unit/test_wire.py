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
