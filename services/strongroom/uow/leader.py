"""What one leadership term holds of units of work, on the leader alone: the messages added
to open UOWs (they reach the log with the sender's commit), the messages of committed UOWs that
are not persistent, the UOWs being delivered and the receivers waiting."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.persistence.term import LeaderTerm

__all__ = ["OpenUow", "UowLeader"]


@dataclass
class OpenUow:
    """An open UOW's messages, on the leader until the sender commits."""

    replicated: bool
    messages: list[cpb.Message] = field(default_factory=list)
    size: int = 0
    last_active: float = 0.0
    conversation_timeout: float = 300.0


class UowLeader:
    """What one leadership term holds of units of work (see the module's docstring)."""

    def __init__(self, term: LeaderTerm) -> None:
        self.term = term
        state, local = term.state, term.local_state
        self.open: dict[str, OpenUow] = {}
        self.held: dict[str, list[cpb.Message]] = {}
        self.delivering: set[str] = set()
        # Publications being delivered, to which subscriber.
        self.delivering_to: set[tuple[str, str]] = set()
        self._arrivals: dict[str, asyncio.Event] = {}
        self._ids = itertools.count(1)
        state.uows.on_accepted = self.wake
        local.uows.on_accepted = self.wake

    def clock(self) -> float:
        """The pseudo-clock now (the term runs it)."""
        return self.term.clock()

    def new_id(self) -> str:
        """A server-assigned UOW id: unique across terms (epochs only grow)."""
        return f"{self.term.epoch:x}-{next(self._ids):x}"

    def wake(self, destination: str) -> None:
        """A UOW became ACCEPTED on `destination`: waiting receivers look again."""
        event = self._arrivals.pop(destination, None)
        if event is not None:
            event.set()

    def arrival(self, destination: str) -> asyncio.Event:
        """An event set when a UOW next becomes ACCEPTED on `destination`."""
        return self._arrivals.setdefault(destination, asyncio.Event())
