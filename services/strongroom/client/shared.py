"""Pipelined senders that calls sending one thing at a time share (`Client.publish`, a whole
`UnitOfWork.commit`): a round trip on an open stream costs about half a unary call, so such
calls go on a stream the client keeps open per key (destination and options), and concurrent
calls share it and its group-commit rounds. At most `most` stay open; the least recently used
is closed once what it carries is answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["SharedSenders"]


class _Sender(Protocol):
    @property
    def closed(self) -> bool: ...

    async def close(self) -> None: ...

    def abandon(self) -> None: ...


K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=_Sender)


class SharedSenders(Generic[K, S]):
    """One sender per key, made on first use by `make(key)`, most recently used last."""

    def __init__(self, make: Callable[[K], S], most: int) -> None:
        self._make = make
        self._most = most
        self._senders: dict[K, S] = {}
        self._closing: set[asyncio.Future[None]] = set()

    def get(self, key: K) -> S:
        """The open sender for `key` (a new one if it has none, or it was closed)."""
        sender = self._senders.pop(key, None)
        if sender is None or sender.closed:
            sender = self._make(key)
            if len(self._senders) >= self._most:
                # Least recently used first: its stream closes once what it carries is answered.
                oldest = next(iter(self._senders))
                task = asyncio.ensure_future(self._senders.pop(oldest).close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self._senders[key] = sender
        return sender

    def abandon(self) -> None:
        """Stop every sender at once (what is unanswered fails: its outcome is unknown)."""
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            sender.abandon()
        for task in list(self._closing):
            task.cancel()
