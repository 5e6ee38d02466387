"""The leader's pseudo-clock ticks: the clock written into the log while a term serves."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import StrongroomError
from strongroom.persistence.log import UOW_LOG_FORMAT

if TYPE_CHECKING:
    from strongroom.persistence.term import LeaderTerm

__all__ = ["CLOCK_IDLE_TICK_SECONDS", "CLOCK_TICK_SECONDS", "tick_clock"]

log = logging.getLogger("strongroom.term")

CLOCK_TICK_SECONDS = 1.0
"""How often the leader writes the pseudo-clock into the log while something is measured on it."""
CLOCK_IDLE_TICK_SECONDS = 10.0
"""... and while nothing is (no tick until every member reads `ClockOp`: UOW_LOG_FORMAT)."""


async def tick_clock(term: LeaderTerm) -> None:
    """Write `term`'s pseudo-clock into the log: every second while something is measured on it,
    every ten seconds otherwise. A restart resumes from the last value written, so the clock
    never runs ahead of the uptime (and loses at most one tick of it)."""
    last = 0.0
    while not term.closed:
        wanted = term.state.timed() or term.local_state.timed()
        now = time.monotonic()
        # Stopped while the persistent store is unavailable: no tick (nor could one be written).
        if now - last >= (CLOCK_TICK_SECONDS if wanted else CLOCK_IDLE_TICK_SECONDS) and \
                term.membership.all_read(UOW_LOG_FORMAT) and not term.store_unavailable:
            last = now
            clock = term.clock()
            term.local_state.advance_clock(clock)
            try:
                await term.commit(rpb.Operation(clock=rpb.ClockOp(clock=clock)))
            except StrongroomError as err:
                log.info("pseudo-clock tick: %s", err)
        await asyncio.sleep(CLOCK_TICK_SECONDS / 4)
