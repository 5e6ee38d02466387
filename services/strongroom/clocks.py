"""The wall clock as a leader's decisions read it: steady against steps of the system clock.

Every wall-clock time a leader puts into the log or decides by (the time a message was
published, a `ttl_clock: wall` deadline, a retention's end, a log entry's time) is read from
`wall()`: the system's real-time clock as it was when the process first asked, run on by the
monotonic clock. A step of the system clock while the process runs (`date -s`, an NTP step, a
virtual machine resumed with an old clock) moves nothing: a step forward by minutes expires no
message early, a step back keeps none for the step's length. CLOCK_MONOTONIC follows NTP's
slewing (rate corrections) as the real-time clock does; it is never stepped. A process started
after a step reads the stepped clock, as any process does: a restart, or a failover to another
member, is how a corrected clock comes into force. A step is logged when seen (`drift`).

Members never read their own clocks to decide: they apply what the leader wrote.
"""

from __future__ import annotations

import logging
import time

__all__ = ["STEP_WARN_SECONDS", "drift", "wall"]

log = logging.getLogger("strongroom.clocks")

STEP_WARN_SECONDS = 1.0
"""A system clock this far from `wall()` is reported as stepped (at most once a minute)."""

_anchor: tuple[float, float] | None = None  # (real-time clock, monotonic clock) at the first call
_warned_at = -60.0


def wall() -> float:
    """Unix seconds: the real-time clock at this process's first call, plus the monotonic
    seconds since."""
    global _anchor
    if _anchor is None:
        _anchor = (time.time(), time.monotonic())
    return _anchor[0] + (time.monotonic() - _anchor[1])


def drift() -> float:
    """How far the system clock is from `wall()` now (seconds; positive: stepped forward). Logs a
    warning when it is more than STEP_WARN_SECONDS (at most once a minute)."""
    global _warned_at
    off = time.time() - wall()
    now = time.monotonic()
    if abs(off) > STEP_WARN_SECONDS and now - _warned_at >= 60.0:
        _warned_at = now
        log.warning("the system clock is %+.1f s from the clock this process decides by (stepped while it ran); "
                    "wall-clock lifetimes keep to the process's clock until it restarts", off)
    return off
