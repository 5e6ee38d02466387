"""The units-of-work half of the chaos workload: senders of UOWs and receivers that settle them,
every step recorded for the checker's UOW rules.

- a pipelined sender (`Client.uow_sender`: each UOW whole on one SendBatchStream, sent again
  under its id after a failover) and a sender in steps (`UnitOfWork.open` with the first message,
  `send` with the middle ones, `commit` with the last; one UOW in `backout_every` it backs out
  instead), which a leader change between steps aborts (UOW_ABORTED);
- receivers (`Client.receive_uow`) that commit what they get, and back out one UOW in
  `backout_every` (offered again, whole). A commit whose outcome is unknown is tried again until
  the cluster answers it: a retry of a commit that was applied is answered as a duplicate, so
  the receiver learns it was processed;
- an audit receiver, once the receivers stopped, that takes what is left without settling it.

Each message body names its UOW and its place in it (`<uow id>|<i>/<n>|`). History events (all
with `uow` set): `uow-send` invoke (`messages`: the bodies, `via`: stream | steps), then ok,
fail (certainly never visible: UOW_ABORTED, backed out by its sender, or its commit never sent)
or info; `uow-receive` ok (`messages` as received, `start`: when the receive was invoked,
`count`: its backouts so far); `uow-settle` invoke, then ok / fail / info (`kind`: commit or
backout).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from strongroom.chaos.history import AUDIT, FAIL, INFO, INVOKE, OK, History
from strongroom.chaos.operations import outcome_of, pace
from strongroom.client import Client
from strongroom.client.uow import ReceivedUnitOfWork, UowResult

__all__ = ["UowConfig", "UowWorkload"]

log = logging.getLogger("strongroom.chaos.uows")

# A settlement refused for the UOW's state (released and offered again, or held by another
# receiver) certainly did not apply: a retry of one that had applied is answered as a duplicate.
SETTLE_REFUSALS = frozenset({"UOW_STATE", "UOW_NOT_HELD"})


@dataclass
class UowConfig:
    """Shape and pace of the units-of-work workload."""

    queue: str = "chaos.uow.q"
    """A queue of the realm's `*.uow.q` rule (`chaos.cluster.realm_text`): its conversation
    timeout is short, so a UOW delivered to a receiver that never heard of it is offered again
    soon."""
    senders: int = 2
    """Half pipelined, half in steps (the first is pipelined)."""
    receivers: int = 2
    rate: float = 8.0
    """UOWs per second per sender, at most."""
    window: int = 8
    """UOWs in flight on the pipelined sender's stream."""
    backout_every: int = 8
    """A sender in steps backs out one UOW in this many; a receiver backs out one in this many."""
    step_pause: float = 0.1
    """Seconds a sender in steps waits between its steps, so a fault often lands while a UOW is
    open (its commit is then refused with UOW_ABORTED)."""
    receive_wait: float = 0.5


def bodies(uow_id: str, count: int) -> list[str]:
    """The message bodies of a UOW: each names the UOW and its place in it."""
    return [f"{uow_id}|{i}/{count}|" for i in range(1, count + 1)]


class UowWorkload:
    """Senders, receivers and the audit of units of work, recording into a `History`."""

    def __init__(self, history: History, config: UowConfig, client: Callable[[str], Client]) -> None:
        self.history = history
        self.config = config
        self._client = client
        self._stop_sending = asyncio.Event()
        self._stop_receiving = asyncio.Event()
        self._senders: list[asyncio.Task[None]] = []
        self._receivers: list[asyncio.Task[None]] = []
        self.confirmed: set[str] = set()
        """UOWs their sender saw committed."""
        self.settled: set[str] = set()
        """UOWs a receiver's commit of was confirmed, or the audit found."""
        self.last_receive = time.monotonic()

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the receivers and the senders."""
        for i in range(self.config.receivers):
            name = f"uow-r-{i + 1}"
            self._receivers.append(asyncio.create_task(self._receive(name), name=name))
        for i in range(self.config.senders):
            name = f"uow-{'stream' if i % 2 == 0 else 'steps'}-{i + 1}"
            run = self._pipelined if i % 2 == 0 else self._in_steps
            self._senders.append(asyncio.create_task(run(name), name=name))

    @property
    def senders(self) -> list[asyncio.Task[None]]:
        """The senders' tasks (they end once `stop_sending` is set and every UOW has an outcome)."""
        return self._senders

    def stop_sending(self) -> None:
        """Send no new UOW (those in flight still get their outcome)."""
        self._stop_sending.set()

    def missing(self) -> int:
        """UOWs their senders saw committed that no receiver's commit was confirmed for yet."""
        return len(self.confirmed - self.settled)

    async def stop_receivers(self) -> None:
        """Stop the receivers (what they hold unsettled stays DELIVERED until released)."""
        self._stop_receiving.set()
        await _finish(self._receivers, 10)

    async def audit(self, idle: float) -> None:
        """Take every UOW still offered, without settling it (recorded as the audit's)."""
        client = self._client(AUDIT)
        while True:
            invoked = time.monotonic()
            try:
                got = await client.receive_uow(self.config.queue, AUDIT, wait=idle)
            except Exception as exc:  # noqa: BLE001 - recorded
                self.history.record(AUDIT, INFO, "uow-receive", dest=self.config.queue, error=outcome_of(exc)[1])
                return
            if got is None:
                return
            self._received(AUDIT, got, invoked)
            self.settled.add(got.uow_id)

    async def close(self) -> None:
        """Stop everything (bounded)."""
        self._stop_sending.set()
        self._stop_receiving.set()
        await _finish(self._senders + self._receivers, 10)

    # --- senders ---------------------------------------------------------------------------------

    def _new(self, name: str, n: int) -> tuple[str, list[str]]:
        uow_id = f"{name}-{n}-{uuid.uuid4().hex[:8]}"
        return uow_id, bodies(uow_id, 2 + n % 4)

    def _sent(self, proc: str, uow_id: str, fut: asyncio.Future[UowResult]) -> None:
        dest = self.config.queue
        if fut.cancelled():
            self.history.record(proc, INFO, "uow-send", uow=uow_id, dest=dest, error="cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            kind, text = outcome_of(exc)
            self.history.record(proc, kind, "uow-send", uow=uow_id, dest=dest, error=text)
            return
        result = fut.result()
        self.history.record(proc, OK, "uow-send", uow=uow_id, dest=dest, detail="duplicate" if result.duplicate
                            else None)
        self.confirmed.add(uow_id)

    async def _pipelined(self, name: str) -> None:
        sender = self._client(name).uow_sender(self.config.queue, window=self.config.window)
        n = 0
        started = time.monotonic()
        try:
            while not self._stop_sending.is_set():
                uow_id, messages = self._new(name, n + 1)
                try:
                    fut = await asyncio.wait_for(sender.send([m.encode() for m in messages], uow_id=uow_id), 1.0)
                except TimeoutError:
                    continue  # the window is full: nothing was queued; look at the stop flag again
                n += 1
                # Recorded before the next await: nothing of it can have reached a server yet.
                self.history.record(name, INVOKE, "uow-send", uow=uow_id, dest=self.config.queue, messages=messages,
                                    via="stream")
                fut.add_done_callback(functools.partial(self._sent, name, uow_id))
                await pace(started, n, self.config.rate)
        finally:
            await sender.close()

    async def _in_steps(self, name: str) -> None:
        client = self._client(name)
        dest = self.config.queue
        n = 0
        started = time.monotonic()
        while not self._stop_sending.is_set():
            n += 1
            uow_id, messages = self._new(name, n)
            uow = client.unit_of_work(dest, uow_id=uow_id)
            self.history.record(name, INVOKE, "uow-send", uow=uow_id, dest=dest, messages=messages, via="steps")
            committing = False
            try:
                uow.add(messages[0].encode())
                await uow.open()
                if len(messages) > 2:
                    await asyncio.sleep(self.config.step_pause)
                    for body in messages[1:-1]:
                        uow.add(body.encode())
                    await uow.send()
                await asyncio.sleep(self.config.step_pause)
                if n % self.config.backout_every == 0:
                    await uow.backout()
                    self.history.record(name, FAIL, "uow-send", uow=uow_id, dest=dest, error="backed out by its sender")
                else:
                    uow.add(messages[-1].encode())
                    committing = True
                    result = await uow.commit()
                    self.history.record(name, OK, "uow-send", uow=uow_id, dest=dest,
                                        detail="duplicate" if result.duplicate else None)
                    self.confirmed.add(uow_id)
            except Exception as exc:  # noqa: BLE001 - every outcome is recorded
                kind, text = outcome_of(exc)
                if not committing:
                    # Open, never committed: nothing of it can ever be visible.
                    kind, text = FAIL, f"{text} (before its commit was sent)"
                self.history.record(name, kind, "uow-send", uow=uow_id, dest=dest, error=text)
            await pace(started, n, self.config.rate)

    # --- receivers -------------------------------------------------------------------------------

    def _received(self, proc: str, got: ReceivedUnitOfWork, invoked: float) -> None:
        self.last_receive = time.monotonic()
        self.history.record(proc, OK, "uow-receive", uow=got.uow_id, dest=got.destination,
                            messages=[m.body.decode(errors="replace") for m in got.messages],
                            count=got.backout_count, start=invoked)

    async def _settle(self, proc: str, got: ReceivedUnitOfWork, kind: str) -> bool:
        """Commit or back out; True once the outcome is known (done or certainly not)."""
        values = {"uow": got.uow_id, "dest": got.destination, "kind": kind}
        self.history.record(proc, INVOKE, "uow-settle", **values)
        try:
            status = await got.commit() if kind == "commit" else (await got.backout())[0]
        except Exception as exc:  # noqa: BLE001 - recorded
            outcome, text = outcome_of(exc, SETTLE_REFUSALS)
            self.history.record(proc, outcome, "uow-settle", error=text, **values)
            return outcome == FAIL
        self.history.record(proc, OK, "uow-settle", detail=f"{status} (duplicate)" if got.duplicate else status,
                            **values)
        if kind == "commit":
            self.settled.add(got.uow_id)
        return True

    async def _receive(self, name: str) -> None:
        client = self._client(name)
        unsettled: list[ReceivedUnitOfWork] = []  # commits whose outcome is not known yet
        n = 0
        while not self._stop_receiving.is_set():
            for got in list(unsettled):
                if await self._settle(name, got, "commit"):
                    unsettled.remove(got)
            invoked = time.monotonic()
            try:
                got = await client.receive_uow(self.config.queue, name, wait=self.config.receive_wait)
            except Exception as exc:  # noqa: BLE001 - recorded; a UOW it delivered is released later
                self.history.record(name, INFO, "uow-receive", dest=self.config.queue, error=outcome_of(exc)[1])
                await asyncio.sleep(0.2)
                continue
            if got is None:
                continue
            self._received(name, got, invoked)
            n += 1
            kind = "backout" if n % self.config.backout_every == 0 else "commit"
            if not await self._settle(name, got, kind) and kind == "commit":
                unsettled.append(got)


async def _finish(tasks: list[asyncio.Task[None]], timeout: float) -> None:
    """Wait up to `timeout` for tasks that were told to stop, then cancel the rest."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
