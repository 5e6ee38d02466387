"""Message tracing: for a destination (or a destination pattern) or for one producer id, every
step of every message on every member, with the member and the time.

Turned on and off by an operator (`strongroom trace on|off`, AdminService `SetMessageTrace`) for a
while: the filters are kept in the cluster's etcd (`keys.trace_key`) with when each ends, and
every member follows them, so a member that starts or becomes leader meanwhile traces too. While
a filter is on, each member records the steps it sees of a matching message:

- `received`: the leader took the publish (the message has no store sequence yet);
- `committed`: the member applied it at a log index (every member: the entry was committed);
- `delivered`: the leader sent it to a subscription of a durable (with its delivery count);
- `acked`: a durable's acknowledgment released it (every member, as it applies the ack);
- `expired`, `discarded`, `dead_lettered`: it left a durable or the store that way;
- `deleted`: it left the store (every holder done with it).

Each step is logged (logger `strongroom.trace`) and kept in a ring of the member's newest
RING_EVENTS steps, which `strongroom trace show` reads from every member (AdminService
`GetMessageTrace`) to follow one message across them in time order. A message's W3C
`traceparent`, if its publisher set one, is on every step of it, so a step can be found from an
application's own trace.

The hooks cost nothing while no filter is on: `Tallies.tracer` is None, and the state machine,
the dispatcher and the publish front test that before anything else.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass

from strongroom.errors import InvalidArgument

__all__ = ["MAX_SECONDS", "RING_EVENTS", "STEPS", "MessageTracer", "TraceEvent", "TraceFilter", "TraceSettings",
           "check_traceparent", "requested_filter"]

log = logging.getLogger("strongroom.trace")

RING_EVENTS = 10_000
"""Steps a member keeps for `GetMessageTrace` (the newest; the log has them all)."""
TRACKED_MESSAGES = 100_000
"""Stored messages a member follows at once (the oldest is let go past it: its later steps are
not recorded, which the `committed` step's detail says when it happens)."""
DEFAULT_SECONDS = 600.0
"""How long a filter stays on when `strongroom trace on` gives no --for."""
MAX_SECONDS = 86_400.0
"""The longest a filter may stay on (tracing is for debugging, not a standing log)."""

STEPS = ("received", "committed", "delivered", "acked", "expired", "discarded", "dead_lettered", "deleted")
"""The steps of a message, in the order they happen (the order of steps with the same time)."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def check_traceparent(value: str) -> None:
    """Refuse a malformed W3C trace context `traceparent` (InvalidArgument): version-traceid-
    parentid-flags in lowercase hex, 2-32-16-2 digits, version not ff, ids not all zeros (a
    later version may append fields after the flags)."""
    m = _TRACEPARENT.match(value)
    if m is None or len(value) > 512:
        raise InvalidArgument(f"traceparent {value[:80]!r} is not a W3C trace context "
                              "(version-traceid-parentid-flags: 2, 32, 16 and 2 lowercase hex digits)")
    version, trace_id, parent_id, _flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        raise InvalidArgument(f"traceparent {value!r}: version {version} does not allow this form")
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        raise InvalidArgument(f"traceparent {value!r}: the trace id and the parent id must not be all zeros")


@dataclass(frozen=True)
class TraceFilter:
    """What to trace: messages sent to `destination` (a name, or a pattern with `*`), or
    published by `producer_id`; until `until` (Unix seconds)."""

    destination: str = ""
    producer_id: str = ""
    until: float = 0.0

    def matches(self, destination: str, producer_id: str) -> bool:
        if self.producer_id:
            return producer_id == self.producer_id
        if "*" in self.destination:
            return fnmatch.fnmatchcase(destination, self.destination)
        return destination == self.destination

    def describe(self) -> str:
        what = f"producer {self.producer_id!r}" if self.producer_id else f"destination {self.destination!r}"
        return f"{what} until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.until))}"


@dataclass(frozen=True)
class TraceSettings:
    """The cluster's filters, as kept in etcd."""

    filters: tuple[TraceFilter, ...] = ()

    def live(self, now: float) -> TraceSettings:
        """The filters that have not ended by `now`."""
        return TraceSettings(tuple(f for f in self.filters if f.until > now))

    def with_filter(self, new: TraceFilter) -> TraceSettings:
        """These filters with `new` in place of one for the same destination or producer."""
        kept = tuple(f for f in self.filters if (f.destination, f.producer_id) != (new.destination, new.producer_id))
        return TraceSettings((*kept, new))

    def without(self, destination: str, producer_id: str) -> TraceSettings:
        """These filters without the one for `destination` or `producer_id` (both empty: none left)."""
        if not destination and not producer_id:
            return TraceSettings()
        return TraceSettings(tuple(f for f in self.filters
                                   if (f.destination, f.producer_id) != (destination, producer_id)))

    def to_bytes(self) -> bytes:
        return json.dumps({"filters": [asdict(f) for f in self.filters]}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TraceSettings:
        raw = json.loads(data)
        return cls(tuple(TraceFilter(str(f.get("destination", "")), str(f.get("producer_id", "")),
                                     float(f["until"])) for f in raw["filters"]))


def requested_filter(destination: str, producer_id: str, seconds: float, now: float) -> TraceFilter:
    """The filter an operator asks for, or InvalidArgument: one of destination and producer id,
    and a duration (0: DEFAULT_SECONDS) of at most MAX_SECONDS."""
    if bool(destination) == bool(producer_id):
        raise InvalidArgument("trace a destination or a producer id: give exactly one of them")
    if seconds < 0 or seconds > MAX_SECONDS or seconds != seconds:
        raise InvalidArgument(f"a trace lasts up to {MAX_SECONDS:.0f} seconds, not {seconds:g}")
    return TraceFilter(destination, producer_id, now + (seconds or DEFAULT_SECONDS))


@dataclass(frozen=True)
class TraceEvent:
    """One step of one message on one member."""

    time: float
    member: str
    step: str
    destination: str
    producer_id: str = ""
    sequence: int = 0
    store: str = ""
    message_seq: int = 0
    log_index: int = 0
    detail: str = ""
    traceparent: str = ""

    def line(self) -> str:
        where = f"{self.store}/{self.message_seq}" if self.message_seq else "(not stored yet)"
        ident = f" producer {self.producer_id}:{self.sequence}" if self.producer_id else ""
        index = f" at index {self.log_index}" if self.log_index else ""
        extra = f" {self.detail}" if self.detail else ""
        parent = f" traceparent {self.traceparent}" if self.traceparent else ""
        return f"TRACE {self.step} {where}{index} destination {self.destination}{ident}{extra}{parent}"


class _Held:
    """What a member remembers of a traced stored message, for its later steps."""

    __slots__ = ("destination", "producer_id", "sequence", "traceparent")

    def __init__(self, destination: str, producer_id: str, sequence: int, traceparent: str) -> None:
        self.destination = destination
        self.producer_id = producer_id
        self.sequence = sequence
        self.traceparent = traceparent


class MessageTracer:
    """A member's recorder of traced messages' steps (installed as `Tallies.tracer` while a
    filter is on)."""

    def __init__(self, member: str, settings: TraceSettings) -> None:
        self.member = member
        self.settings = settings
        self.ring: deque[TraceEvent] = deque(maxlen=RING_EVENTS)
        # (store, message seq) -> what it was, for the steps after it was stored.
        self._held: OrderedDict[tuple[str, int], _Held] = OrderedDict()

    def wants(self, destination: str, producer_id: str) -> bool:
        now = time.time()
        return any(f.until > now and f.matches(destination, producer_id) for f in self.settings.filters)

    def _note(self, event: TraceEvent) -> None:
        self.ring.append(event)
        log.info("%s", event.line())

    def _event(self, step: str, held: _Held, store: str = "", seq: int = 0, index: int = 0,
               detail: str = "") -> None:
        self._note(TraceEvent(time.time(), self.member, step, held.destination, held.producer_id, held.sequence,
                              store, seq, index, detail, held.traceparent))

    # --- the steps -------------------------------------------------------------------------------

    def received(self, destination: str, producer_id: str, sequence: int, traceparent: str) -> None:
        """The leader took a publish to `destination` (called only when `wants` it)."""
        self._event("received", _Held(destination, producer_id, sequence, traceparent))

    def committed(self, index: int, store: str, seq: int, destination: str, producer_id: str, sequence: int,
                  traceparent: str, durables: int) -> None:
        """A message was applied at `index` as `seq` of `store`, pending for `durables` durables."""
        if not self.wants(destination, producer_id):
            return
        held = _Held(destination, producer_id, sequence, traceparent)
        self._held[(store, seq)] = held
        detail = f"pending for {durables} durable(s)"
        if len(self._held) > TRACKED_MESSAGES:
            self._held.popitem(last=False)
            detail += f"; following more than {TRACKED_MESSAGES} messages, the oldest is no longer followed"
        self._event("committed", held, store, seq, index, detail)

    def step(self, step: str, store: str, seq: int, detail: str = "", index: int = 0) -> None:
        """A later step of a followed message (nothing for others)."""
        held = self._held.get((store, seq))
        if held is not None:
            self._event(step, held, store, seq, index, detail)

    def deleted(self, store: str, seq: int, index: int) -> None:
        """The message left the store: its last step."""
        held = self._held.pop((store, seq), None)
        if held is not None:
            self._event("deleted", held, store, seq, index, "left the store")

    def events(self, destination: str = "", producer_id: str = "", sequence: int = 0, store: str = "",
               message_seq: int = 0, limit: int = 1000) -> list[TraceEvent]:
        """The kept steps that match every criterion given, oldest first, at most `limit` (the newest)."""
        def keep(e: TraceEvent) -> bool:
            return ((not destination or e.destination == destination)
                    and (not producer_id or e.producer_id == producer_id)
                    and (not sequence or e.sequence == sequence)
                    and (not store or e.store == store)
                    and (not message_seq or e.message_seq == message_seq))
        found = [e for e in self.ring if keep(e)]
        return found[-limit:] if limit else found

