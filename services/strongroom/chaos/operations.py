"""What every client of the chaos workload shares: how a failed operation is recorded (certainly
not done, or unknown) and the pace of an operation loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

import grpc

from strongroom.chaos.history import FAIL, INFO
from strongroom.errors import StrongroomError
from strongroom.grpcerrors import from_rpc_error

__all__ = ["DEFINITE_FAILURES", "outcome_of", "pace"]

# Rejections that happen before anything is stored: the operation certainly did not take effect.
# Everything else (NOT_LEADER after a step-down, NO_QUORUM, timeouts) may have been stored.
# UOW_ABORTED: the sender's open unit of work was backed out before it committed (nothing of it
# can become visible).
DEFINITE_FAILURES = frozenset({"INVALID_ARGUMENT", "MESSAGE_TOO_LARGE", "UNKNOWN_DESTINATION",
                               "SEQUENCE_OUTSIDE_DEDUP_WINDOW", "PERMISSION_DENIED", "UNKNOWN_DURABLE_KIND",
                               "UNKNOWN_MESSAGE", "FOREIGN_MESSAGE", "UOW_ABORTED"})


def outcome_of(exc: BaseException, definite: Collection[str] = DEFINITE_FAILURES) -> tuple[str, str]:
    """(fail | info, error text) for an exception a client operation raised: fail when its
    reason is one of `definite` (the operation certainly did not take effect)."""
    if isinstance(exc, StrongroomError):
        return (FAIL if exc.reason in definite else INFO), f"{exc.reason}: {exc.message}"
    if isinstance(exc, grpc.aio.AioRpcError):
        err = from_rpc_error(exc)
        if err is not None:
            return outcome_of(err, definite)
        return INFO, f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, asyncio.TimeoutError):
        return INFO, "timeout"
    return INFO, f"{type(exc).__name__}: {exc}"


async def pace(started: float, done: int, rate: float) -> None:
    """Sleep until `done` operations since `started` (monotonic) keep to `rate` per second."""
    wait = started + done / rate - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)
