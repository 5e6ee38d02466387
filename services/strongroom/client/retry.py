"""The client's one retry policy: which failures are worth another attempt, and how long to
wait between attempts.

Every call the client makes (unary calls, publish streams, subscription reopens) goes through
`Connection.call_leader`, which asks this module two things: what a failed call means
(`error_from_rpc`: always a `StrongroomError`, never a bare `grpc.RpcError`) and, when it is
retriable, how long to wait before the next attempt (`Outage.next_delay`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from strongroom.errors import ConnectionFailed, RpcFailed, StrongroomError
from strongroom.grpcerrors import from_rpc_error

__all__ = ["TRANSIENT_CODES", "Outage", "RetryPolicy", "error_from_rpc", "unreachable"]

TRANSIENT_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
})
"""gRPC statuses without a Strongroom reason that a call to another member, or later, can
cure: the member went down, the connection broke, or the call ran out of time."""


def error_from_rpc(exc: grpc.RpcError, address: str = "") -> StrongroomError:
    """The Strongroom error a failed gRPC call stands for.

    A status carrying a Strongroom `ErrorInfo` becomes that error (`NotLeaderError`,
    `StoreLimitExceeded`, ...); any other status becomes `ConnectionFailed` (retriable) when it is
    one of `TRANSIENT_CODES`, else `RpcFailed`. `address` is the member the call went to; it is
    named in the message of the latter two."""
    err = from_rpc_error(exc)
    if err is not None:
        return err
    code_of = getattr(exc, "code", None)
    code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    details_of = getattr(exc, "details", None)
    details = (details_of() if callable(details_of) else "") or str(exc)
    where = f" from {address}" if address else ""
    meta = {"grpc_code": code.name, "address": address}
    cls = ConnectionFailed if code in TRANSIENT_CODES else RpcFailed
    return cls(f"{code.name}{where}: {details}", meta)


_UNREACHABLE = (("connection refused", "connection refused"),
                ("errors resolving", "name not resolved"),
                ("dns resolution failed", "name not resolved"))


def unreachable(err: StrongroomError) -> str | None:
    """Why a failed call never reached its member, in a few words ("connection refused", "name
    not resolved"), or None when the member answered or the connection broke after it was made
    (a member that is up but does not lead, or one going down under the call)."""
    if not isinstance(err, ConnectionFailed) or err.metadata.get("grpc_code") != grpc.StatusCode.UNAVAILABLE.name:
        return None
    text = err.message.lower()
    return next((why for needle, why in _UNREACHABLE if needle in text), None)


@dataclass(frozen=True)
class RetryPolicy:
    """How long the client rides out an outage and how often it tries again meanwhile.

    A retriable failure is tried again after a delay that starts at `initial_delay` and grows by
    `multiplier` up to `max_delay`; once an outage has lasted `timeout` seconds, the last error
    is raised. A redirect to a named leader is followed at once."""

    timeout: float = 30.0
    """Seconds an outage may last before the operation fails."""
    unreachable_timeout: float = 5.0
    """Seconds an outage may last while no member can be reached at all (each one tried refused
    the connection, or its name did not resolve: a cluster that is down, or addresses that are
    wrong) before the operation fails with `ConnectionFailed` naming them. A member that answers,
    even to say that none leads, makes it an ordinary outage again (a failover), waited for up to
    `timeout`."""
    initial_delay: float = 0.02
    """Seconds before the first retry of an outage."""
    max_delay: float = 0.5
    """The longest wait between two attempts."""
    multiplier: float = 2.0
    """How much each wait grows over the one before."""

    def outage(self, started: bool = True, clock: Callable[[], float] = time.monotonic) -> Outage:
        """A new run of attempts; its clock starts now, or with `started=False` at its first
        failure (for a stream that may run for hours before one)."""
        return Outage(self, clock() if started else None, clock)


class Outage:
    """One run of failed attempts under a `RetryPolicy`: the next delay and the deadline."""

    def __init__(self, policy: RetryPolicy, started_at: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._deadline = None if started_at is None else started_at + policy.timeout
        self._delay = policy.initial_delay
        # Since when no member has answered, and what each address said last if it was unreachable.
        self._silent_since = started_at
        self._unreachable: dict[str, str] = {}

    def failed(self, address: str, err: StrongroomError) -> None:
        """An attempt at `address` failed with `err`: note whether the member could be reached."""
        why = unreachable(err)
        if why is None:
            self._unreachable.pop(address, None)
            self._silent_since = self._clock()
        else:
            self._unreachable[address] = why
            if self._silent_since is None:
                self._silent_since = self._clock()

    def unreachable_error(self, addresses: Sequence[str], final: bool = False) -> ConnectionFailed | None:
        """The error to give up with when none of `addresses` could be reached the last time each
        was tried and no member has answered for the policy's `unreachable_timeout` (or at all
        in this outage, when `final`: the operation is giving up anyway); else None."""
        if self._silent_since is None or not addresses:
            return None
        if any(a not in self._unreachable for a in addresses):
            return None
        silent = self._clock() - self._silent_since
        if silent < self.policy.unreachable_timeout and not final:
            return None
        tried = ", ".join(f"{a} ({self._unreachable[a]})" for a in dict.fromkeys(addresses))
        return ConnectionFailed(f"no member could be reached for {silent:.1f} s: {tried}",
                                {"addresses": ",".join(dict.fromkeys(addresses)), "unreachable": "true"})

    def redirected(self) -> None:
        """A member named the leader: the next attempt goes there at once, and the waits start
        small again."""
        self._delay = self.policy.initial_delay

    def progress(self) -> None:
        """The operation got through (a stream confirmed something): the outage is over, and
        the next failure starts a new one with its own clock."""
        self._deadline = None
        self._delay = self.policy.initial_delay
        self._silent_since = None
        self._unreachable.clear()

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when waiting them would pass the
        outage's deadline (then the operation fails)."""
        now = self._clock()
        if self._deadline is None:
            self._deadline = now + self.policy.timeout
        delay = self._delay
        if now + delay > self._deadline:
            return None
        self._delay = min(delay * self.policy.multiplier, self.policy.max_delay)
        return delay
