"""Protobuf wire-format splicing for the write path.

A publish travels as bytes: the Python client serialises each request once and sends a batch
as the concatenation of its requests (kept for re-sending after a failover; a batch of units of
work goes the same way); the leader writes each `Operation` once, by joining an encoded
`PublishOp` head (shared by every message of one destination in a round) with the serialised
message (log format 2: the head once, followed by every message of the destination's run in the
round, as one `PublishBatchOp`), and a log entry is its encoded head followed by its encoded
operations. Protobuf parsers read concatenated fields as one message, so followers (and the
leader's own apply) parse the result as an ordinary `LogEntry`.
"""

from __future__ import annotations

__all__ = [
    "APPEND_ENTRIES",
    "BATCH_REQUESTS",
    "ENTRY_OPS",
    "OPERATION_PUBLISH",
    "OPERATION_PUBLISH_BATCH",
    "OPERATION_UOW",
    "PUBLISH_BATCH_HEAD",
    "PUBLISH_BATCH_MESSAGES",
    "PUBLISH_MESSAGE",
    "UOW_BATCH_REQUESTS",
    "length_delimited",
    "repeated_after",
    "varint",
]


def _tag(field: int) -> bytes:
    return bytes([(field << 3) | 2])  # wire type 2: length-delimited


# Field tags (numbers from replication.proto, messaging.proto and uow.proto).
ENTRY_OPS = _tag(3)          # LogEntry.ops
OPERATION_PUBLISH = _tag(2)  # Operation.publish
PUBLISH_MESSAGE = _tag(3)    # PublishOp.message
OPERATION_PUBLISH_BATCH = _tag(10)  # Operation.publish_batch
OPERATION_UOW = _tag(13)     # Operation.uow
PUBLISH_BATCH_HEAD = _tag(1)        # PublishBatchOp.publish
PUBLISH_BATCH_MESSAGES = _tag(2)    # PublishBatchOp.messages
APPEND_ENTRIES = _tag(5)     # AppendRequest.entries
BATCH_REQUESTS = _tag(1)     # PublishBatch.requests
UOW_BATCH_REQUESTS = _tag(1)  # UowSendBatch.requests


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """One length-delimited field: tag, length, payload."""
    return tag + varint(len(payload)) + payload


def repeated_after(head: bytes, tag: bytes, items: list[bytes], length_prefix: bool = False) -> bytes:
    """`head` (an encoded message) followed by `items` as the repeated field `tag`;
    `length_prefix`: preceded by the message's length as 4 bytes big-endian (a frame of the
    replication link), made in the same join."""
    parts = [b"", head] if length_prefix else [head]
    for item in items:
        parts += (tag, varint(len(item)), item)
    if length_prefix:
        parts[0] = sum(map(len, parts)).to_bytes(4, "big")
    return b"".join(parts)
