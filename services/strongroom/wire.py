"""Protobuf wire-format splicing for the write path.

A publish travels as bytes: the Python client serialises each request once and sends a batch
as the concatenation of its requests (kept for re-sending after a failover; a batch of units of
work goes the same way); the leader writes each `Operation` once, by joining an encoded
`PublishOp` head (shared by every message of one destination in a round) with the serialised
message (log format 2: the head once, followed by every message of the destination's run in the
round, as one `PublishBatchOp`), and a log entry is its encoded head followed by its encoded
operations. Protobuf parsers read concatenated fields as one message, so followers (and the
leader's own apply) parse the result as an ordinary `LogEntry`.

A subscription's deliveries leave the leader the same way: each delivered message is serialised
once and joined with its delivery's fields into the `SubscribeResponse`'s bytes
(`delivery`, `subscribe_deliveries`), instead of being copied into a `Delivery` message that
gRPC then serialises again.

Forwarding goes the same way. A sending router encodes each message of a route once (without
id or origin) and joins it with its `Origin` field into a `ForwardBatch`; the receiving router
passes each forwarded message's bytes on into its `PublishRequest`, with its own publisher's id
appended (`PublishRequest.message` is the forwarded message followed by `producer_id` and
`sequence`: a parser keeps the last value of a field given twice, so the id is the publisher's
whatever the bytes carried).
"""

from __future__ import annotations

import struct

__all__ = [
    "APPEND_ENTRIES",
    "BATCH_REQUESTS",
    "FORWARD_BATCH_MESSAGES",
    "MESSAGE_ORIGIN",
    "ENTRY_OPS",
    "OPERATION_PUBLISH",
    "OPERATION_PUBLISH_BATCH",
    "OPERATION_UOW",
    "PUBLISH_BATCH_HEAD",
    "PUBLISH_BATCH_MESSAGES",
    "PUBLISH_MESSAGE",
    "UOW_BATCH_REQUESTS",
    "delivery",
    "destination_field",
    "forwarded_message",
    "length_delimited",
    "origin_head",
    "producer_id_field",
    "publish_request",
    "repeated_after",
    "subscribe_deliveries",
    "varint",
]


def _tag(field: int) -> bytes:
    return bytes([(field << 3) | 2])  # wire type 2: length-delimited


def _varint_tag(field: int) -> bytes:
    return bytes([field << 3])  # wire type 0: varint


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
FORWARD_BATCH_MESSAGES = _tag(4)    # ForwardBatch.messages
MESSAGE_ORIGIN = _tag(5)     # Message.origin
_MESSAGE_PRODUCER_ID = _tag(3)      # Message.producer_id
_MESSAGE_SEQUENCE = _varint_tag(4)  # Message.sequence
_REQUEST_MESSAGE = _tag(2)          # PublishRequest.message
_REQUEST_CORRELATION_ID = _varint_tag(4)  # PublishRequest.correlation_id
_ORIGIN_CLUSTER = _tag(1)           # Origin.cluster
_ORIGIN_STORE = _tag(2)             # Origin.store
_ORIGIN_SEQUENCE = _varint_tag(3)   # Origin.sequence
_ORIGIN_PREVIOUS = _varint_tag(4)   # Origin.previous
_RESPONSE_DELIVERIES = _tag(2)      # SubscribeResponse.deliveries
_BATCH_DELIVERIES = _tag(1)         # DeliveryBatch.deliveries
_DELIVERY_SEQ = _varint_tag(1)      # Delivery.message_seq
_DELIVERY_MESSAGE = _tag(2)         # Delivery.message
_DELIVERY_COUNT = _varint_tag(3)    # Delivery.delivery_count
_DELIVERY_DESTINATION = _tag(4)     # Delivery.destination
_DELIVERY_PUBLISHED_AT = bytes([5 << 3 | 1])  # Delivery.published_at (wire type 1: 64-bit)
_DOUBLE = struct.Struct("<d").pack


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    if n < 0x10000000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21))
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


def origin_head(cluster: str, store: str) -> bytes:
    """An encoded `Origin`'s cluster and store (the same for every message of one origin)."""
    return length_delimited(_ORIGIN_CLUSTER, cluster.encode()) + length_delimited(_ORIGIN_STORE, store.encode())


def forwarded_message(message: bytes, head: bytes, sequence: int, previous: int) -> tuple[bytes, bytes, bytes, bytes]:
    """One `ForwardBatch.messages` field, as parts to join: `message` (an encoded `Message`
    without origin) followed by its `Origin` (`head` from `origin_head`, then `sequence` and
    `previous`)."""
    origin = head + _ORIGIN_SEQUENCE + varint(sequence)
    if previous:
        origin += _ORIGIN_PREVIOUS + varint(previous)
    origin = MESSAGE_ORIGIN + varint(len(origin)) + origin
    return FORWARD_BATCH_MESSAGES, varint(len(message) + len(origin)), message, origin


def publish_request(head: bytes, message: bytes, producer_id: bytes, sequence: int) -> bytes:
    """One `PublishBatch.requests` field: an encoded `PublishRequest` of `head` (its destination
    and mode, encoded), `message` (an encoded `Message`) with `producer_id` (encoded,
    `producer_id_field`) and `sequence` appended, and `sequence` as the correlation id."""
    seq = varint(sequence)
    inner = len(message) + len(producer_id) + 1 + len(seq)
    inner_len = varint(inner)
    request = len(head) + 1 + len(inner_len) + inner + 1 + len(seq)
    return b"".join((BATCH_REQUESTS, varint(request), head, _REQUEST_MESSAGE, inner_len, message, producer_id,
                     _MESSAGE_SEQUENCE, seq, _REQUEST_CORRELATION_ID, seq))


def producer_id_field(producer_id: str) -> bytes:
    """`Message.producer_id` encoded, for `publish_request`."""
    return length_delimited(_MESSAGE_PRODUCER_ID, producer_id.encode())


def destination_field(destination: str) -> bytes:
    """`Delivery.destination` encoded, for `delivery` (the same for many deliveries)."""
    return length_delimited(_DELIVERY_DESTINATION, destination.encode()) if destination else b""


def delivery(message_seq: int, message: bytes, delivery_count: int, destination: bytes,
             published_at: float) -> bytes:
    """One `DeliveryBatch.deliveries` field: a `Delivery` of `message` (an encoded `Message`,
    always set), `destination` (from `destination_field`) and the other fields (numbers at
    their default left out, as protobuf writes them)."""
    parts = [_DELIVERY_SEQ, varint(message_seq)] if message_seq else []
    parts += (_DELIVERY_MESSAGE, varint(len(message)), message)  # set, even when empty
    if delivery_count:
        parts += (_DELIVERY_COUNT, varint(delivery_count))
    if destination:
        parts.append(destination)
    if published_at:
        parts += (_DELIVERY_PUBLISHED_AT, _DOUBLE(published_at))
    inner = b"".join(parts)
    return _BATCH_DELIVERIES + varint(len(inner)) + inner


def subscribe_deliveries(deliveries: list[bytes]) -> bytes:
    """An encoded `SubscribeResponse` carrying `deliveries` (each from `delivery`)."""
    batch = b"".join(deliveries)
    return _RESPONSE_DELIVERIES + varint(len(batch)) + batch
