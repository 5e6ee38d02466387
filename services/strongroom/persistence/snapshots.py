"""Snapshots in parts: the replicated state as a sequence of bounded StateSnapshot messages.

A snapshot of any size travels and rests as **parts** (`SnapshotChunk` in
protos/strongroom/v1/replication.proto says the order): each part is a serialised
`StateSnapshot` of at most about `PART_BYTES`, so no step parses or sends one message holding
the whole state (protobuf's 2 GiB limit, gRPC's message limit). The first part holds the
scalars, the stores' limits, the origin marks and the units of work; then come the messages,
the durables (a long pending list continues in later parts: `DurableState.continued`), the
producers' windows and the maps (a large map's entries span parts). A snapshot of a version
before parts is one part holding everything; every reader here takes both.

`state_parts` writes a state's parts, `Restorer` (`restore_parts`) builds a state machine from
them one part at a time (`diskinstall.py` does the same into the indexes on disk). Concatenated,
the parts are still one valid `StateSnapshot` (repeated fields append, the scalars are in the
first part only): `snapshot_bytes` is their join, for the readers that take one message (the
committed-entry stream, below its size limit), and `restore_bytes` reads one.
"""

from __future__ import annotations

import os
import struct
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import DataCorruption
from strongroom.persistence.dedup import ProducerWindow
from strongroom.persistence.durables import Durable
from strongroom.persistence.state import OriginMark, StateMachine, StoredMessage
from strongroom.uow.table import UowTable

if TYPE_CHECKING:
    from strongroom.persistence.swap import PayloadStore

PART_BYTES = int(os.environ.get("STRONGROOM_SNAPSHOT_PART_BYTES", "4194304"))
"""A part is closed once it holds about this much (a single message larger than it is a part
of its own). The environment variable is for tests that want many parts of a small state."""
PENDING_PER_PART = max(1024, PART_BYTES // 8)
"""Pending sequences of one durable per part (a varint of a sequence takes up to 8 bytes)."""
MAP_ENTRY_OVERHEAD = 16
MESSAGE_OVERHEAD = 48


class _Parts:
    """Parts being filled: `add` appends to the open part and closes it when it is full."""

    def __init__(self, part_bytes: int) -> None:
        self.part_bytes = part_bytes
        self.part = rpb.StateSnapshot()
        self.size = 0

    def full(self, more: int) -> bool:
        self.size += more
        return self.size >= self.part_bytes

    def take(self) -> bytes:
        data = self.part.SerializeToString()
        self.part = rpb.StateSnapshot()
        self.size = 0
        return data


def state_parts(sm: StateMachine, part_bytes: int = 0, pending_per_part: int = 0) -> Iterator[bytes]:
    """The parts of `sm` as it is: the caller takes them all before the state changes (bounds:
    PART_BYTES and PENDING_PER_PART unless given)."""
    part_bytes = part_bytes or PART_BYTES
    per_part = pending_per_part or PENDING_PER_PART
    head = rpb.StateSnapshot(applied_index=sm.applied_index, applied_epoch=sm.applied_epoch,
                             next_seq=sm.next_seq, acked_messages=sm.acked_messages)
    head.stores.extend(sm.store_configs.values())
    for (cluster, destination), mark in sm.origin_marks.items():
        head.origin_marks.append(rpb.OriginMarkState(cluster=cluster, destination=destination, store=mark.store,
                                                     sequence=mark.sequence, stored_at=mark.stored_at))
    sm.uows.snapshot_into(head)
    yield head.SerializeToString()
    out = _Parts(part_bytes)
    for stored in sm.messages.values():
        message = stored.message
        out.part.messages.append(rpb.StoredMessage(
            seq=stored.seq, store=stored.store, destination=stored.destination, message=message,
            content=stored.content, published_at=stored.published_at, expires_at=stored.expires_at,
            retain_until=stored.retain_until if stored.retained else 0.0, queue=stored.queue,
            expires_clock=stored.expires_clock, refs=stored.refs))
        if out.full(stored.size + MESSAGE_OVERHEAD):
            yield out.take()
    for d in sm.durables.values():
        pending = list(d.pending)
        first = pending[:per_part]
        out.part.durables.append(rpb.DurableState(
            key=d.key, store=d.store, destination=d.destination, name=d.name, kind=d.kind,
            pending=first, last_value_seq=d.last_value_seq, queue=d.queue, matcher=d.matcher,
            key_field=d.key_field, content=d.content, ack_sync_mode=d.ack_sync_mode,
            last_values=d.last_values, suspended=d.suspended, last_used=d.last_used, attached=d.attached,
            delivery_counts=d.delivery_counts, pending_bytes=d.pending_bytes))
        size = 256 + 8 * len(first) + 24 * (len(d.last_values) + len(d.delivery_counts))
        for at in range(per_part, len(pending), per_part):
            if out.full(size):
                yield out.take()
            more = pending[at:at + per_part]
            out.part.durables.append(rpb.DurableState(key=d.key, pending=more, continued=True))
            size = 8 * len(more)
        if out.full(size):
            yield out.take()
    for pid, window in sm.producers.items():
        seqs, mseqs = window.columns()
        out.part.producers.append(rpb.ProducerState(producer_id=pid, sequences=seqs, message_seqs=mseqs,
                                                    last_index=window.last_index, last_used=window.last_used))
        if out.full(64 + 16 * len(seqs)):
            yield out.take()
    for (store, name), entries in sm.maps.items():
        state: rpb.MapState | None = out.part.maps.add(store=store, map=name)  # an empty map too
        for key, (value, version) in entries.items():
            if state is None:  # the map goes on in a new part
                state = out.part.maps.add(store=store, map=name)
            state.entries.append(rpb.MapEntryState(key=key, value=value, version=version))
            if out.full(len(key) + len(value) + MAP_ENTRY_OVERHEAD):
                yield out.take()
                state = None
    if out.part.ByteSize():
        yield out.take()


class Restorer:
    """A state machine built from a snapshot's parts, one `add` at a time, then `finish`.
    Holders are counted from the durables once every part is in (a durable's part may come
    before the messages it holds: a snapshot of one part holds everything)."""

    def __init__(self, payloads: PayloadStore | None = None) -> None:
        self.sm = StateMachine(payloads)
        self._first = True
        self._clock = 0.0

    def add(self, data: bytes) -> None:
        """Take the next part."""
        snap = rpb.StateSnapshot.FromString(data)
        sm = self.sm
        if self._first:
            self._first = False
            sm.applied_index = snap.applied_index
            sm.applied_epoch = snap.applied_epoch
            sm.next_seq = snap.next_seq
            sm.acked_messages = snap.acked_messages
            self._clock = snap.clock
            sm.uows = UowTable.from_snapshot(snap)
        elif snap.uows or snap.uows_gone or snap.uow_subscriptions:
            raise ValueError("a snapshot part after the first holds units of work")
        for m in snap.messages:
            # A copy of its own: a message of the parsed part keeps the whole part's memory (one
            # protobuf arena) alive, so one long-lived message (a last value) would hold every
            # message the part had for good.
            message = cpb.Message()
            message.CopyFrom(m.message)
            stored = StoredMessage(seq=m.seq, store=m.store, destination=m.destination, message=message,
                                   size=message.ByteSize(), queue=m.queue, content=m.content,
                                   published_at=m.published_at, expires_at=m.expires_at,
                                   expires_clock=m.expires_clock, retain_until=m.retain_until)
            sm._index_message(stored)
            if m.retain_until:
                stored.retained = True
                stored.refs += 1
        for ds in snap.durables:
            if ds.continued:
                durable = sm.durables[ds.key]
                for seq in ds.pending:
                    durable.pending[seq] = None
                continue
            matcher = type(ds.matcher)()
            matcher.CopyFrom(ds.matcher)  # a copy, as the messages' above
            d = Durable(key=ds.key, store=ds.store, destination=ds.destination, name=ds.name,
                        kind=ds.kind, queue=ds.queue, last_value_seq=ds.last_value_seq, matcher=matcher,
                        key_field=ds.key_field, content=ds.content, ack_sync_mode=ds.ack_sync_mode,
                        last_values=dict(ds.last_values), suspended=ds.suspended, last_used=ds.last_used,
                        attached=ds.attached, delivery_counts=dict(ds.delivery_counts))
            for seq in ds.pending:
                d.pending[seq] = None
            sm.durables[d.key] = d
            if d.content:
                sm.content_durables.setdefault(d.store, []).append(d)
            else:
                sm.by_destination.setdefault(d.destination, []).append(d)
        for p in snap.producers:
            # A window of a snapshot older than log format 7 counts as used at the snapshot's
            # clock: the idle time it had before is not known, and forgetting early would let a
            # re-send be stored twice.
            window = ProducerWindow(last_index=p.last_index,
                                    last_used=p.last_used if p.HasField("last_used") else self._clock)
            for s, mseq in zip(p.sequences, p.message_seqs):
                window.record(s, mseq)
            sm.producers[p.producer_id] = window
        for cfg in snap.stores:
            sm.store_configs[cfg.store] = own = rpb.ConfigureStoreOp()
            own.CopyFrom(cfg)  # a copy: a part of the parsed snapshot would keep all of it alive
        for ms in snap.maps:
            entries = sm.maps.setdefault((ms.store, ms.map), {})
            entries.update((e.key, (e.value, e.version)) for e in ms.entries)
        for om in snap.origin_marks:
            sm.origin_marks[(om.cluster, om.destination)] = OriginMark(om.store, om.sequence, om.stored_at)

    def finish(self) -> StateMachine:
        """The state, its holders counted."""
        sm = self.sm
        if self._first:
            raise ValueError("a snapshot without parts")
        messages = sm.messages
        for d in sm.durables.values():
            for seq in d.pending:
                stored = messages.get(seq)
                if stored is not None:
                    stored.refs += 1
                    d.pending_bytes += stored.size
            for seq in [d.last_value_seq, *d.last_values.values()]:
                if seq and seq in messages:
                    messages[seq].refs += 1
        return sm


def snapshot_parts(sm: StateMachine) -> list[bytes]:
    """The parts of `sm` as it is now."""
    return list(state_parts(sm))


def snapshot_bytes(sm: StateMachine) -> bytes:
    """`sm` as one serialised StateSnapshot (its parts joined), for the readers that take one
    message."""
    return b"".join(state_parts(sm))


def restore_parts(parts: Iterable[bytes], payloads: PayloadStore | None = None) -> StateMachine:
    """The state machine of a snapshot's parts, built a part at a time."""
    restorer = Restorer(payloads)
    for data in parts:
        restorer.add(data)
    return restorer.finish()


def restore_bytes(data: bytes, payloads: PayloadStore | None = None) -> StateMachine:
    """The state machine of one serialised StateSnapshot (`snapshot_bytes`)."""
    return restore_parts([data], payloads)


CHUNK_BYTES = 1024 * 1024
"""A SnapshotChunk carries at most this much of a part."""


async def snapshot_chunks(parts: AsyncIterator[bytes] | Iterable[bytes], epoch: int, member: str, index: int,
                          index_epoch: int) -> AsyncIterator[rpb.SnapshotChunk]:
    """The chunks of a snapshot's parts for InstallSnapshot and FetchSnapshot, as the parts
    come: the first names the caller's epoch, the member, the index and its epoch; a part's
    last piece says `part_end`, the last chunk `done`."""
    first: rpb.SnapshotChunk | None = rpb.SnapshotChunk(epoch=epoch, leader=member, last_index=index,
                                                        last_epoch=index_epoch)
    pending: rpb.SnapshotChunk | None = None
    async for part in _each(parts):
        for off in range(0, max(len(part), 1), CHUNK_BYTES):
            if pending is not None:
                yield pending
            pending = rpb.SnapshotChunk(data=part[off:off + CHUNK_BYTES], part_end=off + CHUNK_BYTES >= len(part))
            if first is not None:
                pending.MergeFrom(first)
                first = None
    if pending is None:  # no parts at all: one empty chunk that says who and where
        pending = first or rpb.SnapshotChunk()
    pending.done = True
    yield pending


async def _each(parts: AsyncIterator[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(parts, AsyncIterator):
        async for part in parts:
            yield part
    else:
        for part in parts:
            yield part


class IncomingSnapshot:
    """A snapshot's parts as their chunks arrive, kept in a file until the last one, so an
    interrupted transfer leaves the member's state as it was; then read back a part at a time
    (iterating reads the file again). The file holds records of a flag byte (1: the piece ends
    a part), a length and the piece. Chunks of a sender before parts never end a part: what
    they carry is one part."""

    _RECORD = struct.Struct(">BI")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 - closed by `complete`
        self._count = 0
        self._open_part = False
        self.size = 0

    def add(self, chunk: rpb.SnapshotChunk) -> None:
        assert self._file is not None, "the snapshot is complete"
        self._file.write(self._RECORD.pack(1 if chunk.part_end else 0, len(chunk.data)))
        self._file.write(chunk.data)
        self.size += len(chunk.data)
        if chunk.part_end:
            self._count += 1
            self._open_part = False
        else:
            self._open_part = True

    def complete(self) -> None:
        """Every chunk is in."""
        if self._file is not None:
            self._file.close()
            self._file = None
            if self._open_part:
                self._count += 1

    def discard(self) -> None:
        """Forget it (the transfer failed, or the snapshot was installed)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[bytes]:
        assert self._file is None, "the snapshot is still arriving"
        with open(self.path, "rb") as f:
            part = bytearray()
            while True:
                head = f.read(self._RECORD.size)
                if not head:
                    break
                if len(head) < self._RECORD.size:
                    raise DataCorruption(f"{self.path} ends in the middle of a record")
                ends, length = self._RECORD.unpack(head)
                piece = f.read(length)
                if len(piece) < length:
                    raise DataCorruption(f"{self.path} ends in the middle of a record")
                part += piece
                if ends:
                    yield bytes(part)
                    part = bytearray()
            if self._open_part or part:
                yield bytes(part)
