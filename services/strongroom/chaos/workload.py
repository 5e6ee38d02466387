"""The chaos workload: confirmed publishers and acknowledging consumers, every step recorded.

- pipelined publishers (`Client.publisher`, one PublishStream each) and unary publishers
  (one `Publish` at a time, retried with the same message id through `Client.retrying`), half
  to a topic and half to a queue;
- consumers with explicit acks: the topic has a standard durable with one consumer that acks
  synchronously (`ordered`), and a shared durable with two consumers (one acks synchronously,
  one on the stream); the queue has one consumer acking on the stream (`ordered`);
- direct probes: publishes sent straight to one member, without redirects, while a fault
  fences it (the checker verifies it confirmed none);
- units of work on a queue of their own (`strongroom.chaos.uowload`): senders, receivers that
  commit and now and then back out, and their audit.

Every durable exists before the first publish. Bodies carry the publisher, producer id and
sequence, so a delivered message can be traced to its invocation.
"""

from __future__ import annotations

import asyncio
import functools
import io
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.chaos.history import AUDIT, INFO, INVOKE, OK, History, message_id
from strongroom.chaos.operations import outcome_of, pace
from strongroom.chaos.uowload import UowConfig, UowWorkload
from strongroom.client import AckMode, Client, DurableKind, PublishResult, Received, Subscription
from strongroom.errors import SubscriptionClosed
from strongroom.channels import open_channel

__all__ = ["ConsumerSpec", "Workload", "WorkloadConfig"]

log = logging.getLogger("strongroom.chaos.workload")


class _StreamCancelled(Exception):
    """A subscription's `next()` ended in CancelledError although nobody cancelled it."""


class _RecordedSubscription(Subscription):
    """A subscription that reports each (re)open with the new subscription id."""

    on_open: Callable[[str], object] | None = None

    async def open(self) -> None:
        await super().open()
        if self.on_open is not None:
            self.on_open(self.subscription_id)


@dataclass(frozen=True)
class ConsumerSpec:
    """One consumer of one durable."""

    name: str
    dest: str
    durable: str
    kind: str | None
    sync_ack: bool
    ordered: bool


@dataclass
class WorkloadConfig:
    """Shape and pace of the workload."""

    topic: str = "chaos.topic"
    queue: str = "chaos.q"
    pipelined: int = 2
    unary: int = 2
    rate: float = 60.0
    """Messages per second per publisher, at most."""
    window: int = 16
    body_bytes: int = 100
    client_timeout: float = 15.0
    credit: int = 64
    uows: UowConfig = field(default_factory=UowConfig)
    """The units-of-work senders and receivers."""

    def consumers(self) -> list[ConsumerSpec]:
        """The consumers (and so the durables) of the run."""
        return [
            ConsumerSpec("c-std", self.topic, "std", "standard", sync_ack=True, ordered=True),
            ConsumerSpec("c-shr-1", self.topic, "shr", "shared", sync_ack=False, ordered=False),
            ConsumerSpec("c-shr-2", self.topic, "shr", "shared", sync_ack=True, ordered=False),
            ConsumerSpec("c-queue", self.queue, "", None, sync_ack=False, ordered=True),
        ]


class Workload:
    """Publishers, consumers and probes against one cluster, recording into a `History`."""

    def __init__(self, endpoints: list[str], history: History, config: WorkloadConfig,
                 member_of: Callable[[str], str]) -> None:
        self.endpoints = endpoints
        self.history = history
        self.config = config
        self.member_of = member_of
        self._stop_publishing = asyncio.Event()
        self._stop_consuming = asyncio.Event()
        self._publishers: list[asyncio.Task[None]] = []
        self._consumers: list[asyncio.Task[None]] = []
        self._probes: list[asyncio.Task[None]] = []
        self._clients: list[Client] = []
        self.confirmed: dict[str, set[str]] = {}  # destination -> confirmed message ids
        self.delivered: dict[str, set[str]] = {}  # durable key -> delivered message ids
        self.last_delivery = time.monotonic()
        self._ready: dict[str, asyncio.Event] = {}
        self._probe_ids = itertools.count(1)
        self.errors: list[str] = []
        self.uows = UowWorkload(history, config.uows, self._client)

    def repoint(self, endpoints: list[str]) -> None:
        """Point every client, those to come and those running, at other members of the same
        size of set: the activated standby site after a DR activation (the clients' producer ids,
        sequences and subscriptions go on; a call under way at an old address fails over to
        the new ones as in any failover)."""
        if any(len(client.connection.endpoints) != len(endpoints) for client in self._clients):
            raise ValueError(f"{len(endpoints)} endpoints for clients of {len(self.endpoints)}")
        self.endpoints = list(endpoints)
        for client in self._clients:
            # In place: the connection rotates over positions in this list.
            client.connection.endpoints[:] = endpoints

    def excuse(self, messages: set[str], uows: set[str]) -> None:
        """Stop waiting for confirmed messages (ids) and UOWs that are known to be gone for good
        (a DR activation's lost tail: the checker judges them); one confirmed again later (a
        re-send the new primary stored) is waited for again."""
        for ids in self.confirmed.values():
            ids.difference_update(messages)
        self.uows.confirmed.difference_update(uows)

    def _client(self, name: str) -> Client:
        client = Client(self.endpoints, client_name=name, timeout=self.config.client_timeout)
        self._clients.append(client)
        return client

    def _body(self, publisher: str, producer: str, seq: int) -> str:
        head = f"{publisher}|{producer}|{seq}|"
        return head + "x" * max(0, self.config.body_bytes - len(head))

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, ready_timeout: float = 60.0) -> None:
        """Start the consumers, wait until every durable exists, then start the publishers."""
        for spec in self.config.consumers():
            self._ready[spec.name] = asyncio.Event()
            self._consumers.append(asyncio.create_task(self._consume(spec), name=spec.name))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._ready.values())), ready_timeout)
        dests = [self.config.topic, self.config.queue]
        for i in range(self.config.pipelined):
            name = f"p-stream-{i + 1}"
            self._publishers.append(asyncio.create_task(self._pipelined(name, dests[i % 2]), name=name))
        for i in range(self.config.unary):
            name = f"p-unary-{i + 1}"
            self._publishers.append(asyncio.create_task(self._unary(name, dests[i % 2]), name=name))
        self.uows.start()

    async def stop_publishing(self, timeout: float = 60.0) -> None:
        """Stop publishing and sending UOWs; wait (bounded) until every publish and UOW has an
        outcome."""
        self._stop_publishing.set()
        self.uows.stop_sending()
        for task in self._probes:
            task.cancel()
        tasks = self._publishers + self._probes + self.uows.senders
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                self.errors.append(f"publisher {task.get_name()} did not finish in {timeout:.0f}s")
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def missing(self) -> int:
        """Confirmed (message, durable) pairs not delivered yet, and confirmed UOWs no
        receiver's commit was confirmed for."""
        count = self.uows.missing()
        for spec in {(s.dest, s.durable) for s in self.config.consumers()}:
            key = f"{spec[0]}/{spec[1]}"
            count += len(self.confirmed.get(spec[0], set()) - self.delivered.get(key, set()))
        return count

    async def drain(self, timeout: float = 60.0, quiet: float = 2.0) -> int:
        """Keep consuming until every confirmed message reached every durable, every confirmed
        UOW was committed by a receiver and nothing arrived for `quiet` seconds (or `timeout`);
        returns how many were still missing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = max(self.last_delivery, self.uows.last_receive)
            if self.missing() == 0 and time.monotonic() - last >= quiet:
                break
            await asyncio.sleep(0.2)
        return self.missing()

    async def audit(self, idle: float = 2.0, timeout: float = 30.0) -> None:
        """After the consumers stopped: read every durable once more on a fresh subscription,
        without acknowledging, so a message still stored but never delivered is told apart from
        one that is gone; and take every UOW still offered. Deliveries are recorded (process
        `audit`)."""
        client = self._client(AUDIT)
        durables = sorted({(c.dest, c.durable, c.kind) for c in self.config.consumers()}, key=lambda x: x[:2])
        await asyncio.gather(self.uows.audit(idle), *(self._audit_one(client, dest, durable, kind, idle, timeout)
                                                      for dest, durable, kind in durables))

    async def _audit_one(self, client: Client, dest: str, durable: str, kind: str | None, idle: float,
                         timeout: float) -> None:
        spec = ConsumerSpec(AUDIT, dest, durable, kind, sync_ack=False, ordered=False)
        key = f"{dest}/{durable}"
        try:
            sub = await asyncio.wait_for(self._subscribe(client, spec), timeout)
        except Exception as exc:  # noqa: BLE001 - recorded
            self.history.record(AUDIT, INFO, "subscribe", dest=dest, durable=durable, error=outcome_of(exc)[1])
            return
        deadline = time.monotonic() + timeout
        pending: asyncio.Task[Received] | None = None
        try:
            while time.monotonic() < deadline:
                pending = pending or asyncio.create_task(sub.next())
                done, _ = await asyncio.wait({pending}, timeout=idle)
                if not done:
                    break
                task, pending = pending, None
                if task.cancelled():
                    break
                try:
                    msg = task.result()
                except SubscriptionClosed:
                    break
                self.history.record(AUDIT, OK, "deliver", dest=dest, durable=durable,
                                    producer=msg.producer_id, seq=msg.sequence,
                                    body=msg.body.decode(errors="replace"), mseq=msg.seq,
                                    count=msg.delivery_count, sub=sub.subscription_id)
                self.delivered.setdefault(key, set()).add(message_id(msg.producer_id, msg.sequence))
        except Exception as exc:  # noqa: BLE001 - recorded
            self.history.record(AUDIT, INFO, "subscribe", dest=dest, durable=durable, error=outcome_of(exc)[1])
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
            try:
                await asyncio.wait_for(sub.close(), 3)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001
                log.debug("closing the audit subscription of %s failed", key)

    async def stop_consumers(self) -> None:
        """Stop the consumers and the UOW receivers (their unacknowledged messages stay
        pending)."""
        self._stop_consuming.set()
        await self.uows.stop_receivers()
        if self._consumers:
            _, pending = await asyncio.wait(self._consumers, timeout=10)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._consumers, return_exceptions=True)

    def consumer_stacks(self) -> str:
        """Where the consumers and their pending `Subscription.next()` calls wait (for a report
        when draining stalls)."""
        out = []
        for task in asyncio.all_tasks():
            coro = task.get_coro()
            name = getattr(coro, "__qualname__", "")
            if task in self._consumers or name.startswith(("Subscription.", "_RecordedSubscription.")):
                buf = io.StringIO()
                task.print_stack(limit=12, file=buf)
                out.append(f"--- {task.get_name()} ({name}) ---\n{buf.getvalue()}")
        return "\n".join(out)

    async def close(self) -> None:
        """Stop the consumers and close every client."""
        self._stop_publishing.set()
        self._stop_consuming.set()
        await self.uows.close()
        tasks = self._consumers + self._publishers + self._probes
        _, pending = await asyncio.wait(tasks, timeout=10) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in self._clients:
            try:
                await asyncio.wait_for(client.close(), 5)
            except Exception:  # noqa: BLE001 - closing anyway
                log.debug("closing client %s failed", client.client_name)

    # --- publishers ------------------------------------------------------------------------------

    def _published(self, proc: str, dest: str, producer: str, seq: int, via: str,
                   fut: asyncio.Future[PublishResult]) -> None:
        if fut.cancelled():
            self.history.record(proc, INFO, "publish", producer=producer, seq=seq, dest=dest, via=via,
                                error="cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            kind, text = outcome_of(exc)
            self.history.record(proc, kind, "publish", producer=producer, seq=seq, dest=dest, via=via, error=text)
            return
        res = fut.result()
        self.history.record(proc, OK, "publish", producer=producer, seq=seq, dest=dest, via=via,
                            mseq=res.message_seq, detail="duplicate" if res.duplicate else None)
        self.confirmed.setdefault(dest, set()).add(message_id(producer, seq))

    async def _pipelined(self, name: str, dest: str) -> None:
        client = self._client(name)
        pub = client.publisher(dest, window=self.config.window)
        producer = pub.producer_id
        seq = 0
        started = time.monotonic()
        try:
            while not self._stop_publishing.is_set():
                body = self._body(name, producer, seq + 1)
                try:
                    fut = await asyncio.wait_for(pub.send(body.encode()), 1.0)
                except TimeoutError:
                    continue  # window full: nothing was queued; look at the stop flag again
                seq += 1
                # Recorded before the next await: nothing of it can have reached a server yet.
                self.history.record(name, INVOKE, "publish", producer=producer, seq=seq, dest=dest,
                                    body=body, via="stream")
                fut.add_done_callback(functools.partial(self._published, name, dest, producer, seq, "stream"))
                await pace(started, seq, self.config.rate)
        finally:
            await pub.flush()
            await pub.close()

    async def _unary(self, name: str, dest: str) -> None:
        client = self._client(name)
        producer = f"{name}-{uuid.uuid4().hex[:12]}"
        seq = 0
        started = time.monotonic()
        while not self._stop_publishing.is_set():
            seq += 1
            body = self._body(name, producer, seq)
            req = mpb.PublishRequest(destination=dest, message=client.make_message(
                body.encode(), producer_id=producer, sequence=seq),
                mode=mpb.PUBLISH_MODE_STORE_CONFIRM_SEND)
            used: list[str] = []

            async def call(address: str, req: mpb.PublishRequest = req, used: list[str] = used) -> mpb.PublishResponse:
                used.append(address)
                resp: mpb.PublishResponse = await client.stub(address).Publish(req, timeout=5.0)
                return resp

            self.history.record(name, INVOKE, "publish", producer=producer, seq=seq, dest=dest, body=body,
                                via="unary")
            try:
                resp = await client.retrying(call)
            except Exception as exc:  # noqa: BLE001 - every outcome is recorded
                kind, text = outcome_of(exc)
                self.history.record(name, kind, "publish", producer=producer, seq=seq, dest=dest, via="unary",
                                    error=text)
            else:
                self.history.record(name, OK, "publish", producer=producer, seq=seq, dest=dest, via="unary",
                                    mseq=resp.message_seq, member=self.member_of(used[-1]),
                                    detail="duplicate" if resp.duplicate else None)
                self.confirmed.setdefault(dest, set()).add(message_id(producer, seq))
            await pace(started, seq, self.config.rate)

    # --- probes ------------------------------------------------------------------------------------

    def probe(self, member: str, address: str, until: float, interval: float = 0.1,
              wait: float = 10.0) -> asyncio.Task[None]:
        """Publish straight to one member (no redirects, no retries) every `interval` until
        `until`; each call waits up to `wait` seconds beyond `until` for its answer."""
        task = asyncio.create_task(self._probe(member, address, until, interval, wait), name=f"probe-{member}")
        self._probes.append(task)
        return task

    async def _probe(self, member: str, address: str, until: float, interval: float, wait: float) -> None:
        proc = f"probe-{member}-{next(self._probe_ids)}"
        producer = f"{proc}-{uuid.uuid4().hex[:8]}"
        dest = self.config.queue
        calls: list[asyncio.Task[None]] = []
        async with open_channel(address, []) as channel:
            stub = mgrpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]

            async def one(seq: int) -> None:
                body = self._body(proc, producer, seq)
                req = mpb.PublishRequest(destination=dest, mode=mpb.PUBLISH_MODE_STORE_CONFIRM_SEND,
                                         message=cpb.Message(body=body.encode(), producer_id=producer,
                                                             sequence=seq))
                self.history.record(proc, INVOKE, "publish", producer=producer, seq=seq, dest=dest, body=body,
                                    via=f"direct:{member}")
                try:
                    resp = await stub.Publish(req, timeout=max(0.5, until - time.monotonic()) + wait)
                except Exception as exc:  # noqa: BLE001 - recorded
                    kind, text = outcome_of(exc)
                    self.history.record(proc, kind, "publish", producer=producer, seq=seq, dest=dest,
                                        via=f"direct:{member}", error=text)
                    return
                self.history.record(proc, OK, "publish", producer=producer, seq=seq, dest=dest,
                                    via=f"direct:{member}", mseq=resp.message_seq, member=member)
                self.confirmed.setdefault(dest, set()).add(message_id(producer, seq))

            seq = 0
            try:
                while time.monotonic() < until and not self._stop_publishing.is_set():
                    seq += 1
                    calls.append(asyncio.create_task(one(seq)))
                    await asyncio.sleep(interval)
                await asyncio.gather(*calls, return_exceptions=True)
            except asyncio.CancelledError:
                for c in calls:
                    c.cancel()
                await asyncio.gather(*calls, return_exceptions=True)
                raise

    # --- consumers ---------------------------------------------------------------------------------

    async def _subscribe(self, client: Client, spec: ConsumerSpec) -> Subscription:
        """Open a subscription that records every (re)open: the time its id became valid."""
        sub = _RecordedSubscription(client.connection, spec.dest, spec.durable,
                                    DurableKind.parse(spec.kind) if spec.kind else None,
                                    AckMode.EXPLICIT, self.config.credit, spec.sync_ack,
                                    client_name=client.client_name)
        sub.on_open = lambda sub_id: self.history.record(spec.name, OK, "subscribed", dest=spec.dest,
                                                         durable=spec.durable, sub=sub_id)
        await sub.open()
        return sub

    async def _consume(self, spec: ConsumerSpec) -> None:
        client = self._client(spec.name)
        key = f"{spec.dest}/{spec.durable}"
        ready = self._ready[spec.name]
        while not self._stop_consuming.is_set():
            try:
                sub = await self._subscribe(client, spec)
            except Exception as exc:  # noqa: BLE001 - recorded; try again
                self.history.record(spec.name, INFO, "subscribe", dest=spec.dest, durable=spec.durable,
                                    error=outcome_of(exc)[1])
                await asyncio.sleep(0.5)
                continue
            if not ready.is_set():
                self.history.record(spec.name, OK, "durable", dest=spec.dest, durable=spec.durable,
                                    kind=spec.kind or "queue", ordered=spec.ordered, sub=sub.subscription_id)
                ready.set()
            try:
                await self._consume_on(spec, key, sub)
            except Exception as exc:  # noqa: BLE001 - recorded; subscribe again
                self.history.record(spec.name, INFO, "subscribe", dest=spec.dest, durable=spec.durable,
                                    sub=sub.subscription_id, error=outcome_of(exc)[1])
                await asyncio.sleep(0.2)
            finally:
                try:
                    await asyncio.wait_for(sub.close(), 3)
                except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the stream is gone anyway
                    log.debug("closing a subscription of %s failed", spec.name)

    async def _consume_on(self, spec: ConsumerSpec, key: str, sub: Subscription) -> None:
        # `Subscription.next(timeout=...)` must not be used: a timeout cancels the pending read,
        # which cancels the whole gRPC stream (see tests/integration/test_regressions.py). One
        # `next()` stays pending across polls of the stop flag instead.
        pending: asyncio.Task[Received] | None = None
        try:
            while not self._stop_consuming.is_set():
                if pending is None:
                    pending = asyncio.create_task(sub.next())
                done, _ = await asyncio.wait({pending}, timeout=0.5)
                if not done:
                    continue
                task, pending = pending, None
                if task.cancelled():
                    raise _StreamCancelled("the subscription's stream was cancelled under it")
                try:
                    msg = task.result()
                except SubscriptionClosed:
                    self.history.record(spec.name, INFO, "subscribe", dest=spec.dest, durable=spec.durable,
                                        sub=sub.subscription_id, error=sub.closed_reason or "closed")
                    return
                self.last_delivery = time.monotonic()
                self.history.record(spec.name, OK, "deliver", dest=spec.dest, durable=spec.durable,
                                    producer=msg.producer_id, seq=msg.sequence,
                                    body=msg.body.decode(errors="replace"), mseq=msg.seq,
                                    count=msg.delivery_count, sub=sub.subscription_id)
                self.delivered.setdefault(key, set()).add(message_id(msg.producer_id, msg.sequence))
                await self._ack(spec, sub, msg)
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    async def _ack(self, spec: ConsumerSpec, sub: Subscription, msg: Received) -> None:
        values: dict[str, Any] = {"dest": spec.dest, "durable": spec.durable, "producer": msg.producer_id,
                                     "seq": msg.sequence, "mseq": msg.seq, "sync": spec.sync_ack}
        if not spec.sync_ack:
            await sub.ack(msg)
            self.history.record(spec.name, INFO, "ack", sub=sub.subscription_id, **values)
            return
        self.history.record(spec.name, INVOKE, "ack", sub=sub.subscription_id, **values)
        try:
            await sub.ack(msg)
        except Exception as exc:  # noqa: BLE001 - recorded
            kind, text = outcome_of(exc)
            self.history.record(spec.name, kind, "ack", sub=sub.subscription_id, error=text, **values)
            return
        self.history.record(spec.name, OK, "ack", sub=sub.subscription_id, **values)
