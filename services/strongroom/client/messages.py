"""Messages as the client shows them: typed fields, content matchers, a publish's result, a
delivered message (`Received`) and its one JSON shape (`message_json`, which the CLI prints).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.errors import InvalidArgument

__all__ = [
    "ABSENT",
    "PRESENT",
    "PublishResult",
    "Received",
    "build_matcher",
    "fill_message",
    "from_field",
    "message_json",
    "text_of",
    "to_field",
]

def to_field(value: object) -> cpb.FieldValue:
    """A Python value as a typed message field."""
    if isinstance(value, bool):
        return cpb.FieldValue(bool_value=value)
    if isinstance(value, int):
        return cpb.FieldValue(int_value=value)
    if isinstance(value, float):
        return cpb.FieldValue(float_value=value)
    if isinstance(value, bytes):
        return cpb.FieldValue(bytes_value=value)
    if isinstance(value, str):
        return cpb.FieldValue(string_value=value)
    raise InvalidArgument(f"field values are str, int, float, bytes or bool, not {type(value).__name__}")


def from_field(value: cpb.FieldValue) -> object:
    """A typed message field as a Python value."""
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


class _Test:
    def __init__(self, name: str, test: cpb.FieldTest) -> None:
        self.name = name
        self.test = test

    def __repr__(self) -> str:
        return self.name


PRESENT = _Test("PRESENT", cpb.FIELD_TEST_PRESENT)
"""Matcher condition: the field is present (any value)."""
ABSENT = _Test("ABSENT", cpb.FIELD_TEST_ABSENT)
"""Matcher condition: the field is absent."""


def build_matcher(spec: dict[str, object] | cpb.ContentMatcher | None) -> cpb.ContentMatcher:
    """A content matcher from {field: value | PRESENT | ABSENT}; values match by type and value
    (1 matches an integer field 1, not a float 1.0 or a string "1")."""
    if spec is None:
        return cpb.ContentMatcher()
    if isinstance(spec, cpb.ContentMatcher):
        return spec
    matcher = cpb.ContentMatcher()
    for name, value in spec.items():
        if isinstance(value, _Test):
            matcher.fields[name].test = value.test
        else:
            matcher.fields[name].equals.CopyFrom(to_field(value))
    return matcher


def fill_message(msg: cpb.Message, body: bytes, fields: dict[str, object] | None, producer_id: str,
                 sequence: int) -> None:
    """Set a message's body, fields and id (producer id and sequence)."""
    msg.body = body
    msg.producer_id = producer_id
    msg.sequence = sequence
    for key, value in (fields or {}).items():
        msg.fields[key].CopyFrom(to_field(value))


class PublishResult(NamedTuple):
    """What the leader said about a published message."""

    message_seq: int
    duplicate: bool
    confirmed: bool
    no_interest: bool = False
    """Confirmed, but not stored: no durable wants the topic (or endpoint) it went to."""
    resent: bool = False
    """A pipelined publisher sent it again on a new stream (a failover): a duplicate answer may
    be for its own earlier attempt, which the leader before stored."""

    @property
    def stored(self) -> bool:
        """Confirmed and stored (False when not confirmed: the outcome is unknown)."""
        return self.confirmed and not self.no_interest


class _Acknowledger(Protocol):
    async def ack(self, msg: Received | int) -> None: ...

    async def nak(self, msg: Received | int, delay: float = 0.0) -> None: ...

    async def term(self, msg: Received | int) -> None: ...


@dataclass
class Received:
    """A delivered message."""

    seq: int
    """The message's sequence in its store."""
    body: bytes
    fields: dict[str, object]
    delivery_count: int
    """1 on the first delivery, more on redeliveries."""
    destination: str
    producer_id: str
    sequence: int
    """The producer's sequence: with `producer_id`, the message's id."""
    published_at: float = 0.0
    """Unix seconds, as the leader stamped it."""
    origin: cpb.Origin | None = None
    """Where a message forwarded by a router was first published (None: published here)."""
    traceparent: str = ""
    """The W3C trace context its publisher set ("": none), to continue the publisher's trace."""
    generation: int = 0
    """The DR generation of the site that delivered it. Once its subscription goes on at the
    primary of a newer generation (a DR activation), settling it there is not done: its `seq`
    may name another message at the newer primary, which delivers it again if it holds it."""
    _sub: _Acknowledger | None = field(default=None, repr=False)

    async def ack(self) -> None:
        """Acknowledge this message on its subscription."""
        if self._sub is None:
            raise InvalidArgument("message is not attached to a subscription")
        await self._sub.ack(self)

    async def nak(self, delay: float = 0.0) -> None:
        """Give this message back: it is delivered again (to this subscriber or another of the
        durable) at once, or after `delay` seconds; the redelivery counts toward the
        destination's redelivery limit."""
        if self._sub is None:
            raise InvalidArgument("message is not attached to a subscription")
        await self._sub.nak(self, delay)

    async def term(self) -> None:
        """Never deliver this message again: it goes to the destination's dead-letter
        destination (or is dropped when there is none)."""
        if self._sub is None:
            raise InvalidArgument("message is not attached to a subscription")
        await self._sub.term(self)

    def to_json(self) -> dict[str, object]:
        """The message as a JSON object (`message_json`)."""
        return message_json(self)


def text_of(data: bytes) -> tuple[str, str]:
    """Bytes for printing: (text, "utf-8") when they decode, else (base64, "base64")."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


def message_json(m: Received) -> dict[str, object]:
    """A received message as a JSON object: seq, delivery_count, destination, producer_id,
    sequence, published_at, body (UTF-8 text, else base64, as body_encoding says), fields
    (bytes values as base64), for a message a router forwarded, origin (cluster, store,
    sequence, previous), and traceparent when its publisher set one."""
    body, encoding = text_of(bytes(m.body))
    fields = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v) for k, v in m.fields.items()}
    out: dict[str, object] = {
        "seq": m.seq, "delivery_count": m.delivery_count, "destination": m.destination,
        "producer_id": m.producer_id, "sequence": m.sequence, "published_at": m.published_at,
        "body": body, "body_encoding": encoding, "fields": fields}
    if m.traceparent:
        out["traceparent"] = m.traceparent
    if m.origin is not None:
        o = m.origin
        out["origin"] = {"cluster": o.cluster, "store": o.store, "sequence": o.sequence, "previous": o.previous}
    return out
