"""asyncio helpers that keep cancellation intact.

On Python 3.11 `asyncio.wait_for` can swallow a cancellation that arrives in the same turn of
the event loop as the awaited thing completes: the cancelled task then runs on, and whoever
awaits it after `cancel()` waits forever. Tasks that are stopped by cancellation (replicators,
lease keep-alives, leader tasks) use these instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Deadline", "cancelled_under_us", "wait_event", "with_timeout", "cancel_and_wait", "tell_listeners"]

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` up to `timeout` seconds; True if it is set."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


async def with_timeout(aw: Awaitable[T], timeout: float) -> T:
    """Await `aw` for at most `timeout` seconds (asyncio.TimeoutError after that)."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError()
    return task.result()


async def cancel_and_wait(task: asyncio.Task[object] | asyncio.Future[object], patience: float = 1.0) -> None:
    """Cancel a task and wait until it has finished, cancelling again if it swallowed one."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=patience)
    if not task.cancelled():
        task.exception()  # retrieved: a failure here is already logged by its owner


def cancelled_under_us() -> bool:
    """In an `except asyncio.CancelledError:` block: True when the running task was not asked
    to stop, so the cancellation came from what it awaited. grpc.aio raises CancelledError from
    a call whose channel was closed under it (an address dropped, a retired channel, an
    endpoint rotated): a broken connection for its reader to recover from, not an order to
    stop; a reader that re-raises it ends silently and leaves its work unanswered."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


class Deadline:
    """`with Deadline(timeout, on_expire) as deadline:` runs `on_expire` (abort a connection,
    cancel a call) if the block is still running after `timeout` seconds; `deadline.expired`
    then tells the block's error handling that the time ran out, rather than the peer. Unlike
    `with_timeout`, nothing is cancelled but what `on_expire` ends."""

    def __init__(self, timeout: float, on_expire: Callable[[], object]) -> None:
        self.timeout = timeout
        self.expired = False
        self._on_expire = on_expire
        self._timer: asyncio.TimerHandle | None = None

    def _expire(self) -> None:
        self.expired = True
        self._on_expire()

    def __enter__(self) -> Deadline:
        self._timer = asyncio.get_running_loop().call_later(self.timeout, self._expire)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._timer is not None
        self._timer.cancel()


def tell_listeners(listeners: list[Callable[[bool], Awaitable[None]]], value: bool,
                   spawn: Callable[[Awaitable[None]], object], log: logging.Logger) -> None:
    """Call every listener with `value` in the background (`spawn` runs a coroutine there): a
    listener that fails is logged and never breaks its caller (leadership listeners of a member
    and of a router: the pod label)."""
    async def call(listener: Callable[[bool], Awaitable[None]]) -> None:
        try:
            await listener(value)
        except Exception as exc:  # noqa: BLE001 - a listener never breaks its caller
            log.warning("leadership listener failed: %s", exc)

    for listener in listeners:
        spawn(call(listener))
