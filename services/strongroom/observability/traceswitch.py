"""Where message tracing is switched on and off: the cluster's trace filters in its etcd
(`keys.trace_key`), followed by every member, changed by an operator's `SetMessageTrace`
(observability/msgtrace.py says what is traced and how)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from strongroom.errors import InvalidArgument
from strongroom.etcd import EtcdClient
from strongroom.keys import trace_key
from strongroom.observability.msgtrace import MessageTracer, TraceSettings, requested_filter

__all__ = ["MessageTracing"]

log = logging.getLogger("strongroom.trace")


class Tallied(Protocol):
    """Where the hooks find the tracer (`observability.tallies.Tallies`)."""

    tracer: MessageTracer | None


class MessageTracing:
    """A member's message tracing: the cluster's filters followed in its etcd, the tracer
    installed on the member's tallies while one is on (and taken off when the last one ends),
    an operator's change written (compare-and-swap on the key's revision, so two operators'
    changes never undo each other)."""

    def __init__(self, etcd: EtcdClient, cluster: str, member: str, tallies: Tallied) -> None:
        self._etcd = etcd
        self.cluster = cluster
        self._tallies = tallies
        self.tracer = MessageTracer(member, TraceSettings())
        """The recorder: its ring outlives the filters, so a trace can be read after it ended."""
        self._end: asyncio.TimerHandle | None = None

    @property
    def settings(self) -> TraceSettings:
        return self.tracer.settings

    def _apply(self, settings: TraceSettings) -> None:
        now = time.time()
        live = settings.live(now)
        if live != self.tracer.settings:
            log.warning("cluster %s: message tracing %s", self.cluster,
                        "; ".join(f.describe() for f in live.filters) or "off")
        self.tracer.settings = live
        self._tallies.tracer = self.tracer if live.filters else None
        if self._end is not None:
            self._end.cancel()
            self._end = None
        if live.filters:  # off by itself when the first filter ends
            ends = min(f.until for f in live.filters)
            self._end = asyncio.get_running_loop().call_later(max(0.0, ends - now) + 0.01, self._apply, live)

    async def follow(self) -> None:
        """Keep the filters current from etcd, until cancelled."""
        try:
            async for kind, kv in self._etcd.follow(trace_key(self.cluster)):
                try:
                    settings = TraceSettings.from_bytes(kv.value) if kind == "PUT" else TraceSettings()
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("cluster %s: the message-trace filters in etcd are not readable (%s); tracing off",
                              self.cluster, exc)
                    settings = TraceSettings()
                self._apply(settings)
        finally:
            if self._end is not None:
                self._end.cancel()
            self._tallies.tracer = None

    async def change(self, destination: str, producer_id: str, seconds: float, off: bool) -> TraceSettings:
        """Turn a filter on (for `seconds`; 0: DEFAULT_SECONDS) or off (`off`; no destination and
        no producer: every filter); InvalidArgument for a request that names neither, or both, or
        too long a time. The filters in force once written."""
        now = time.time()
        wanted = None if off else requested_filter(destination, producer_id, seconds, now)
        if off and destination and producer_id:
            raise InvalidArgument("turn off the trace of a destination or of a producer id, not both")
        while True:
            kv, _ = await self._etcd.get_at(trace_key(self.cluster))
            current = TraceSettings.from_bytes(kv.value).live(now) if kv is not None else TraceSettings()
            new = current.with_filter(wanted) if wanted is not None else current.without(destination, producer_id)
            if await self._etcd.put_if_version(trace_key(self.cluster), new.to_bytes(),
                                               kv.mod_revision if kv is not None else 0):
                self._apply(new)
                return new
