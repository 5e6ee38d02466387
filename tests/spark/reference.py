"""An independent answer to the jobs' questions: the event log replayed event by event in plain
Python (pyarrow to read, no Spark), to check the Spark jobs against."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from strongroom.events.schema import KEY_COLUMNS

MINUTE = 60_000_000


def read_events(root: Path) -> list[dict[str, Any]]:
    """Every published event under root, once per key, in time order (then log order); times as
    microseconds."""
    files = sorted(p for p in root.rglob("events-*.parquet") if not p.name.startswith("."))
    table = pa.concat_tables(pq.read_table(f) for f in files)
    rows = table.to_pylist()
    seen: set[tuple[Any, ...]] = set()
    out = []
    for r in rows:
        key = tuple(r[k] for k in KEY_COLUMNS)
        if key in seen:
            continue
        seen.add(key)
        r["t"] = _us(r["time"])
        r["pub"] = _us(r["published_at"]) if r["published_at"] is not None else None
        out.append(r)
    out.sort(key=lambda r: (r["t"], r["log_index"], r["position"]))
    return out


def _us(t: Any) -> int:
    return int(t.timestamp() * 1_000_000) if hasattr(t, "timestamp") else int(t)


@dataclass
class Replay:
    """The state after applying events up to some time."""

    pending: dict[tuple[str, str, str, str], dict[int, tuple[int, int]]] = field(default_factory=lambda: defaultdict(dict))
    """durable key -> seq -> (size, publish time)."""
    delivered_epoch: dict[tuple[tuple[str, str, str, str], int], int] = field(default_factory=dict)
    stored: dict[tuple[str, str], dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    """(cluster, store) -> seq -> size, of messages still stored."""
    holders: dict[tuple[str, str, int], set[tuple[str, str, str, str]]] = field(default_factory=lambda: defaultdict(set))
    ever_pending: set[tuple[str, str, int]] = field(default_factory=set)
    durables: set[tuple[str, str, str, str]] = field(default_factory=set)
    newest_epoch: dict[str, int] = field(default_factory=dict)

    def apply(self, r: dict[str, Any]) -> None:
        kind, cluster, store, seq = r["kind"], r["cluster"], r["store"], r["seq"]
        self.newest_epoch[cluster] = max(self.newest_epoch.get(cluster, 0), r["epoch"])
        dk = (cluster, store, r["destination"], r["durable"])
        mk = (cluster, store, seq)
        if kind == "durable_created":
            self.durables.add(dk)
        elif kind == "message_stored":
            self.stored[(cluster, store)][seq] = r["size"]
        elif kind == "message_pending":
            self.durables.add(dk)
            self.pending[dk][seq] = (r["size"], r["pub"])
            self.holders[mk].add(dk)
            self.ever_pending.add(mk)
        elif kind == "message_delivered":
            if seq in self.pending[dk]:
                self.delivered_epoch[(dk, seq)] = r["epoch"]
        elif kind in ("message_acked", "message_dead_lettered", "message_skipped"):
            self._settle(dk, seq)
            if mk in self.ever_pending and not self.holders[mk]:
                self.stored[(cluster, store)].pop(seq, None)
        elif kind in ("durable_deleted", "durable_expired"):
            # It released everything it held.
            self.durables.discard(dk)
            for held in list(self.pending[dk]):
                self._settle(dk, held)
                if not self.holders[(cluster, store, held)]:
                    self.stored[(cluster, store)].pop(held, None)
        elif kind in ("message_expired", "message_discarded"):
            for holder in list(self.holders[mk]):
                self._settle(holder, seq)
            self.stored[(cluster, store)].pop(seq, None)

    def _settle(self, dk: tuple[str, str, str, str], seq: int) -> None:
        self.pending[dk].pop(seq, None)
        self.delivered_epoch.pop((dk, seq), None)
        self.holders[(dk[0], dk[1], seq)].discard(dk)

    def durable_rows(self, at: int) -> dict[tuple[str, str, str, str], dict[str, Any]]:
        out = {}
        for dk in self.durables:
            msgs = self.pending[dk]
            newest = self.newest_epoch.get(dk[0], 0)
            epochs = [self.delivered_epoch.get((dk, s)) for s in msgs]
            oldest = min((p for _, p in msgs.values()), default=None)
            out[dk] = {
                "pending_messages": len(msgs), "pending_bytes": sum(s for s, _ in msgs.values()),
                "unacked": sum(1 for e in epochs if e == newest), "redelivery_waiting": sum(
                    1 for e in epochs if e is not None and e < newest),
                "oldest_published": oldest, "oldest_age_s": None if oldest is None else (at - oldest) / 1e6}
        return out

    def store_rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {k: {"messages": len(v), "bytes": sum(v.values())} for k, v in self.stored.items()}


def replay(events: list[dict[str, Any]], at: int) -> Replay:
    """The state after every event at or before `at`."""
    state = Replay()
    for r in events:
        if r["t"] > at:
            break
        state.apply(r)
    return state


def replay_minutes(events: list[dict[str, Any]], last: int) -> dict[int, Replay]:
    """The durable rows at the end of every minute from the first event's to `last`'s (the
    last minute: at `last`), by minute start in microseconds."""
    out: dict[int, dict[tuple[str, str, str, str], dict[str, Any]]] = {}
    state = Replay()
    minute = events[0]["t"] // MINUTE
    i = 0
    while minute <= last // MINUTE:
        end = min((minute + 1) * MINUTE, last + 1)
        while i < len(events) and events[i]["t"] < end:
            state.apply(events[i])
            i += 1
        out[minute * MINUTE] = state.durable_rows(min(end, last))
        minute += 1
    return out  # type: ignore[return-value]
