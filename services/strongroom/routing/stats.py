"""What a router counts per neighbour: the link's health, what went each way, the marks the
neighbour confirmed. Plain counters the forwarder, the receiver and the exchange update and
`Router.status` reads."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["PeerStats"]


@dataclass
class PeerStats:
    """One neighbour, as this router sees it."""

    cluster: str
    address: str
    connected: bool = False
    """The last interest exchange with it succeeded."""
    last_error: str = ""
    """The last error talking to it (exchange or forwarding); cleared by a success."""
    last_contact: float = 0.0
    """Unix seconds of the last successful exchange."""
    forwarded: int = 0
    """Messages stored there through this router since it started, each once: its batch
    answered, or, sent on a stream whose answer was lost, found at or below its marks on the
    next stream (see `strongroom.routing.forwarder`)."""
    resent: int = 0
    """Messages put on a Forward stream again (their first stream broke before its answer)."""
    duplicates: int = 0
    """Messages it held already when this router came to them (at or below its marks at a
    stream's start) and that this router never sent: an earlier router replica or run sent
    them, and their acknowledgment here was lost."""
    received: int = 0
    """Messages it forwarded here that this router stored, since it started: stored now, or
    answered as a duplicate of this router's own publishing (its publisher sent the message
    again through a failover of the leader here, whose first attempt stored it)."""
    remote_marks: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    """(origin cluster, destination) -> (highest origin sequence it confirmed, unix seconds)."""
    exchanged: bool = False
    """An exchange with it succeeded since this router became active: what lies beyond it is
    known (before that, no route through it is deleted)."""

    def contact(self) -> None:
        """An exchange succeeded."""
        self.connected = True
        self.exchanged = True
        self.last_error = ""
        self.last_contact = time.time()

    def failed(self, error: str) -> None:
        """Talking to it failed (the exchange, or a route's stream)."""
        self.last_error = error

    def lost(self, error: str) -> None:
        """The exchange with it failed."""
        self.connected = False
        self.last_error = error

    def mark(self, origin: str, destination: str, sequence: int, stored_at: float = 0.0) -> None:
        """It holds origin's messages of `destination` up to `sequence`."""
        held = self.remote_marks.get((origin, destination))
        if held is None or sequence >= held[0]:
            self.remote_marks[(origin, destination)] = (sequence, stored_at or time.time())
