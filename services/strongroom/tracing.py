"""Trace points: where a round's time goes, step by step, across processes (`bench.trace`).

Off unless the environment variable STRONGROOM_TRACE_DIR names a directory when the process
starts. Then every process writes `<monotonic ns> <pid> <event>` lines to `<pid>.log` there:
`<label>>` and `<label><` at the start and end of every function marked `@traced(label)`, and
`gc<generation>:<µs>us` for a collection longer than 0.2 ms (or any full one).
CLOCK_MONOTONIC is one clock for every process of a machine, so the lines of the client, the
leader and the followers line up.

A trace point is part of the function it marks: moving the function moves its point, so a
refactoring cannot silently break the trace. With tracing off, `traced` returns the function
itself and nothing is paid.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["TRACE_DIR_ENV", "enabled", "mark", "traced", "wrap"]

TRACE_DIR_ENV = "STRONGROOM_TRACE_DIR"

F = TypeVar("F", bound=Callable[..., Any])

_dir = os.environ.get(TRACE_DIR_ENV, "")
_fd: int | None = None
_pid = os.getpid()


def enabled() -> bool:
    """Whether this process traces."""
    return bool(_dir)


def mark(event: str) -> None:
    """Write one trace line (nothing when tracing is off)."""
    global _fd
    if not _dir:
        return
    if _fd is None:
        _fd = os.open(os.path.join(_dir, f"{_pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(_fd, f"{time.monotonic_ns()} {_pid} {event}\n".encode())


def _wrapped(fn: F, label: str) -> F:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            mark(label + ">")
            try:
                return await fn(*args, **kwargs)
            finally:
                mark(label + "<")

        return traced_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def traced_sync(*args: Any, **kwargs: Any) -> Any:
        mark(label + ">")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(label + "<")

    return traced_sync  # type: ignore[return-value]


def traced(label: str) -> Callable[[F], F]:
    """Mark a function (sync or async) as a trace point: `label>` on entry, `label<` on exit."""
    def decorate(fn: F) -> F:
        return _wrapped(fn, label) if _dir else fn

    return decorate


def wrap(owner: Any, name: str, label: str) -> None:
    """Make `owner.name` a trace point after the fact (for code Strongroom does not own, such
    as a gRPC call's read and write in a traced client)."""
    if _dir:
        setattr(owner, name, _wrapped(getattr(owner, name), label))


_gc_started = [0]


def _gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[0] = time.monotonic_ns()
        return
    took = (time.monotonic_ns() - _gc_started[0]) // 1000
    if took > 200 or info["generation"] == 2:
        mark(f"gc{info['generation']}:{took}us")


if _dir:
    gc.callbacks.append(_gc)
