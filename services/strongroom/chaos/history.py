"""The history of a chaos run: every operation a client invoked and how it ended, in JSONL.

One `Event` per line. Publishes, synchronous acks, units of work sent and settled are pairs
(`invoke`, then `ok`, `fail` or `info` for an unknown outcome); deliveries, units of work
received and asynchronous acks are single events. Faults,
fences, loss windows and phases are recorded alongside so the checker needs nothing else.
Times are `time.monotonic()` seconds of the process that ran the workload.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

__all__ = ["AUDIT", "FAIL", "INFO", "INVOKE", "OK", "Event", "History", "load_history", "message_id"]

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
"""The operation certainly did not take effect (rejected before anything was stored)."""
INFO = "info"
"""The outcome is unknown (timeout, leader gone): it may or may not have taken effect."""
AUDIT = "audit"
"""The client that reads what is left once the others stopped (its deliveries and UOWs received
tell stored-but-never-delivered apart from lost)."""


def message_id(producer: str, sequence: int) -> str:
    """The identity of a published message: producer id and sequence."""
    return f"{producer}:{sequence}"


@dataclass
class Event:
    """One line of the history; only the fields that apply are set."""

    t: float
    """Monotonic time of the event."""
    proc: str
    """The client (publisher, consumer, fault injector) that recorded it."""
    type: str
    """invoke | ok | fail | info"""
    f: str
    """publish | deliver | ack | durable | uow-send | uow-receive | uow-settle | fault | fence |
    loss-window | phase | status"""
    producer: str | None = None
    seq: int | None = None
    """The producer's sequence of the message."""
    body: str | None = None
    dest: str | None = None
    durable: str | None = None
    mseq: int | None = None
    """The message sequence the store assigned."""
    count: int | None = None
    """Delivery count of a delivery."""
    sub: str | None = None
    """Subscription id (names the leader member and epoch that delivered)."""
    via: str | None = None
    """How a publish went: stream | unary | direct:<member>."""
    member: str | None = None
    sync: bool | None = None
    ordered: bool | None = None
    kind: str | None = None
    start: float | None = None
    end: float | None = None
    error: str | None = None
    detail: str | None = None
    uow: str | None = None
    """The unit of work's id (uow-send, uow-receive, uow-settle)."""
    messages: list[str] | None = None
    """A unit of work's message bodies, in order: as its sender put them in (uow-send invoke)
    or as a receiver got them (uow-receive)."""

    @property
    def msg(self) -> str:
        """The message id (producer:sequence) this event is about."""
        return message_id(self.producer or "", self.seq or 0)

    @property
    def durable_key(self) -> str:
        """destination/durable (a queue's own durable has the empty name)."""
        return f"{self.dest}/{self.durable or ''}"

    def to_json(self) -> str:
        """One JSON line, without the fields that are not set."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> Event:
        """The event of a parsed JSON line (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})  # type: ignore[arg-type]


class History:
    """Records events in memory and appends them to a JSONL file as they happen."""

    def __init__(self, path: Path | None = None) -> None:
        self.events: list[Event] = []
        self.path = path
        self._file: IO[str] | None = open(path, "a", buffering=1 << 16) if path else None  # noqa: SIM115

    def record(self, proc: str, type: str, f: str, t: float | None = None, **values: Any) -> Event:
        """Append one event (time now unless given)."""
        event = Event(t=time.monotonic() if t is None else t, proc=proc, type=type, f=f, **values)
        self.events.append(event)
        if self._file is not None:
            self._file.write(event.to_json() + "\n")
        return event

    def extend(self, events: Iterable[Event]) -> None:
        """Append events recorded elsewhere."""
        for event in events:
            self.events.append(event)
            if self._file is not None:
                self._file.write(event.to_json() + "\n")

    def flush(self) -> None:
        """Write buffered lines to the file."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


def load_history(path: Path) -> list[Event]:
    """The events of a JSONL history file."""
    out = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line:
                out.append(Event.from_dict(json.loads(line)))
    return out
