"""What a disaster-recovery activation may lose, exactly: the old primary's log after the last
index both sites share (docs/dr.md, "The manifest of the lost tail").

Pure logic over serialised log entries (index, `LogEntry`), as `dr/transport.py`
`read_committed` returns them from the fenced old primary. The messages and acks come from the
manifest (`dr/manifest.py` `manifest_of`); the units of work its rows only name by kind are read
from the same entries. The chaos `dr` scenario records the result into the history
(`lost_tail_events`); the checker allows a confirmed message lost, an acknowledged message
delivered again, a UOW lost or received again after its commit only when the tail holds the
operation that was undone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.chaos.history import INFO, Event, History, message_id
from strongroom.dr.manifest import Manifest, manifest_of

__all__ = ["LOST_TAIL", "LostTail", "ack_id", "lost_tail", "lost_tail_events"]

LOST_TAIL = "lost-tail"
"""History events (`f`) naming what a lost tail undid; `kind` says what `messages` lists."""

TAIL_PUBLISHED = "published"
"""`messages`: message ids (producer:sequence) the tail published."""
TAIL_ACKED = "acked"
"""`messages`: acks the tail held, as `ack_id` (destination/durable#message sequence)."""
TAIL_UOW_COMMITTED = "uow-committed"
"""`messages`: UOWs their sender committed in the tail."""
TAIL_UOW_PROCESSED = "uow-processed"
"""`messages`: UOWs a receiver committed in the tail."""


def ack_id(durable: str, mseq: int) -> str:
    """An acknowledged message of a durable (`destination/durable`), by its store sequence."""
    return f"{durable}#{mseq}"


@dataclass
class LostTail:
    """The operations of an old primary's log after the shared index."""

    from_index: int
    to_index: int
    entries: int = 0
    published: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    uows_committed: set[str] = field(default_factory=set)
    uows_processed: set[str] = field(default_factory=set)

    def describe(self) -> str:
        return (f"entries {self.from_index}-{self.to_index} ({self.entries}): {len(self.published)} messages, "
                f"{len(self.acked)} acks, {len(self.uows_committed)} UOWs committed by their sender, "
                f"{len(self.uows_processed)} by a receiver")


def _durable(key: str) -> str:
    """The history's `destination/durable` of a log's durable key (`destination\\0name`)."""
    return key.replace("\x00", "/", 1)


def lost_tail(cluster: str, since_index: int, entries: Iterable[tuple[int, bytes]]) -> LostTail:
    """The lost tail of `entries` (the old primary's, from `since_index` + 1 on)."""
    entries = list(entries)
    manifest: Manifest = manifest_of(cluster, since_index + 1, entries)
    tail = LostTail(manifest.from_index, manifest.to_index, manifest.entries)
    for row in manifest.rows:
        if row["op"] == "publish":
            message = row["message"]
            if message.get("producer_id"):
                tail.published.add(message_id(message["producer_id"], int(message.get("sequence", 0))))
        elif row["op"] == "ack":
            tail.acked.update(ack_id(_durable(row["durable"]), int(s)) for s in row["seqs"])
    for index, raw in entries:
        if index <= since_index:
            continue
        for op in rpb.LogEntry.FromString(raw).ops:
            if op.WhichOneof("op") != "uow":
                continue
            if op.uow.kind == rpb.UOW_OP_KIND_COMMIT:
                tail.uows_committed.update(op.uow.uow_ids)
            elif op.uow.kind == rpb.UOW_OP_KIND_RECEIVER_COMMIT:
                tail.uows_processed.update(op.uow.uow_ids)
    return tail


def lost_tail_events(history: History, tail: LostTail) -> list[Event]:
    """Record what `tail` undid, one event per kind (`f` = `lost-tail`)."""
    where = f"entries {tail.from_index}-{tail.to_index} of the old primary's log"
    return [history.record("nemesis", INFO, LOST_TAIL, kind=kind, messages=sorted(items), detail=where)
            for kind, items in ((TAIL_PUBLISHED, tail.published), (TAIL_ACKED, tail.acked),
                                (TAIL_UOW_COMMITTED, tail.uows_committed),
                                (TAIL_UOW_PROCESSED, tail.uows_processed))]
