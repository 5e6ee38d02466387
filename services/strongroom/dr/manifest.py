"""The manifest of a lost tail (`strongroom dr manifest`, docs/dr.md).

After an activation, the old primary's log holds entries the new primary never received: from
the last index both share (`dr_since_index`) + 1 to its commit index. Those entries' publishes
were confirmed to their publishers; no count at activation time can say what they were. Once the
old primary's disk is back (its site fenced), its log says it exactly: the manifest lists, entry
by entry, every message published (store, destination, the whole message with its id:
producer id and sequence) and every acknowledgment, and sums them per store (messages, acks,
and per producer the sequence ranges). An application re-publishes the messages from it (the
`message` of a row is the protobuf JSON of the `Message`, ready for `json_format.ParseDict`);
a re-publish keeps the message id, so the new primary stores once what it already had.

Written as JSON lines: one header row, then one row per operation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from google.protobuf import json_format

from strongroom.api.v1 import replication_pb2 as rpb

__all__ = ["Manifest", "StoreTail", "manifest_of"]


@dataclass
class StoreTail:
    """One store's part of a lost tail."""

    messages: int = 0
    acks: int = 0
    producers: dict[str, list[int]] = field(default_factory=dict)
    """Per producer id, the sequences of its lost messages (sorted when summed up)."""

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Per producer id, its lost sequences as inclusive ranges."""
        out: dict[str, list[tuple[int, int]]] = {}
        for producer, seqs in self.producers.items():
            runs: list[tuple[int, int]] = []
            for s in sorted(set(seqs)):
                if runs and s == runs[-1][1] + 1:
                    runs[-1] = (runs[-1][0], s)
                else:
                    runs.append((s, s))
            out[producer] = runs
        return out


@dataclass
class Manifest:
    """The operations of a lost tail, and their sums per store."""

    cluster: str
    from_index: int
    to_index: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    stores: dict[str, StoreTail] = field(default_factory=dict)
    entries: int = 0

    def header(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "from_index": self.from_index, "to_index": self.to_index,
                "entries": self.entries,
                "stores": {name: {"messages": t.messages, "acks": t.acks,
                                  "producers": {p: [list(r) for r in rs] for p, rs in t.ranges().items()}}
                           for name, t in sorted(self.stores.items())}}

    def write(self, out: TextIO) -> None:
        """The header row, then every operation, as JSON lines."""
        out.write(json.dumps(self.header(), sort_keys=True) + "\n")
        for row in self.rows:
            out.write(json.dumps(row, sort_keys=True) + "\n")

    @property
    def messages(self) -> int:
        return sum(t.messages for t in self.stores.values())

    @property
    def acks(self) -> int:
        return sum(t.acks for t in self.stores.values())


def manifest_of(cluster: str, from_index: int, entries: Iterable[tuple[int, bytes]]) -> Manifest:
    """The manifest of the serialised log `entries` (index, LogEntry) from `from_index` on."""
    manifest = Manifest(cluster, from_index, from_index - 1)
    for index, raw in entries:
        if index < from_index:
            continue
        entry = rpb.LogEntry.FromString(raw)
        manifest.entries += 1
        manifest.to_index = max(manifest.to_index, index)
        for op in entry.ops:
            _add(manifest, index, entry.epoch, op)
    return manifest


def _add(manifest: Manifest, index: int, epoch: int, op: rpb.Operation) -> None:
    kind = op.WhichOneof("op")
    if kind == "publish":
        _message(manifest, index, epoch, op.publish, op.publish.message)
    elif kind == "publish_batch":
        for message in op.publish_batch.messages:
            _message(manifest, index, epoch, op.publish_batch.publish, message)
    elif kind == "ack":
        tail = manifest.stores.setdefault(op.ack.store, StoreTail())
        tail.acks += len(op.ack.message_seqs)
        manifest.rows.append({"index": index, "epoch": epoch, "op": "ack", "store": op.ack.store,
                              "durable": op.ack.durable_key, "seqs": list(op.ack.message_seqs)})
    elif kind is not None:
        manifest.rows.append({"index": index, "epoch": epoch, "op": kind})


def _message(manifest: Manifest, index: int, epoch: int, publish: rpb.PublishOp, message: Any) -> None:
    tail = manifest.stores.setdefault(publish.store, StoreTail())
    tail.messages += 1
    if message.producer_id:
        tail.producers.setdefault(message.producer_id, []).append(message.sequence)
    manifest.rows.append({"index": index, "epoch": epoch, "op": "publish", "store": publish.store,
                          "destination": publish.destination,
                          "message": json_format.MessageToDict(message, preserving_proto_field_name=True)})
