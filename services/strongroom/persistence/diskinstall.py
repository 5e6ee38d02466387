"""Installing a snapshot into the indexes on disk, one part at a time.

`DiskInstaller` takes a leader's snapshot as its parts (`persistence/snapshots.py`) and writes
each into the state's families as it comes, in batches of `INSTALL_BATCH` records, so no more
than one part and one batch is held in memory whatever the state's size. The families are
emptied and marked as being installed (`K_INSTALLING`) first: a member stopped in the middle
finds the mark when it starts and moves the store aside to catch up again (docs/store-
operations.md, "A damaged store"). A snapshot of a version before parts does not say how many
holders each message has or how many bytes a durable holds: that one is built in memory first,
as it always was.
"""

from __future__ import annotations

from collections.abc import Iterable

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.diskstate import (
    K_INSTALLING,
    P_MAP,
    STATE_COLUMN_FAMILIES,
    DiskStateMachine,
    _DiskWindow,
)
from strongroom.persistence.snapshots import restore_parts, state_parts
from strongroom.persistence.state import Durable, OriginMark, StoredMessage
from strongroom.uow.table import UowTable

INSTALL_BATCH = 20000
"""Records (messages, pending sequences) per write batch while installing."""


class DiskInstaller:
    """The parts of a snapshot written into a fresh state in `target`'s storage; `finish`
    makes `target` that state (callers hold `target`)."""

    def __init__(self, target: DiskStateMachine) -> None:
        self.target = target
        storage = target.storage
        wb = storage.batch()
        for name in STATE_COLUMN_FAMILIES:
            wb.delete_range(b"", b"\xff" * 64, target._handle(name))
        wb.put(K_INSTALLING, b"1", target._handle("sm"))
        storage.write_state(wb)
        self.fresh = DiskStateMachine(storage)
        self.fresh._in_entry = True
        self._first = True
        self._legacy: list[bytes] | None = None
        self._clock = 0.0
        self._done = 0

    def _counted(self, records: int = 1) -> None:
        before = self._done // INSTALL_BATCH
        self._done += records
        if self._done // INSTALL_BATCH != before:
            self.fresh._commit()

    def add(self, data: bytes) -> None:
        """Write the next part."""
        if self._legacy is not None:
            self._legacy.append(data)
            return
        snap = rpb.StateSnapshot.FromString(data)
        fresh = self.fresh
        if self._first:
            self._first = False
            if snap.messages and not snap.messages[0].HasField("refs"):
                self._legacy = [data]  # one part of an earlier version: everything is in it
                return
            fresh.next_seq = snap.next_seq
            fresh.acked_messages = snap.acked_messages
            fresh.applied_index = snap.applied_index
            fresh.applied_epoch = snap.applied_epoch
            self._clock = snap.clock
            fresh.uows = UowTable.from_snapshot(snap)
            # The batches written before the last part (every INSTALL_BATCH records) take the
            # table's changes too; `_complete` then marks every unit of work changed.
            fresh.uows.track_changes()
        for cfg in snap.stores:
            fresh.apply_op(rpb.Operation(configure_store=cfg))
        for m in snap.messages:
            message = cpb.Message()
            message.CopyFrom(m.message)
            stored = StoredMessage(seq=m.seq, store=m.store, destination=m.destination, message=message,
                                   size=message.ByteSize(), queue=m.queue, content=m.content,
                                   published_at=m.published_at, expires_at=m.expires_at,
                                   expires_clock=m.expires_clock, retain_until=m.retain_until,
                                   retained=bool(m.retain_until))
            fresh._index_message(stored)
            stored.refs = m.refs
            self._counted()
        for ds in snap.durables:
            if ds.continued:
                durable = fresh.durables[ds.key]
                for seq in ds.pending:
                    durable.pending[seq] = None
                self._counted(len(ds.pending))
                continue
            matcher = type(ds.matcher)()
            matcher.CopyFrom(ds.matcher)
            d = Durable(key=ds.key, store=ds.store, destination=ds.destination, name=ds.name, kind=ds.kind,
                        queue=ds.queue, matcher=matcher, key_field=ds.key_field, content=ds.content,
                        ack_sync_mode=ds.ack_sync_mode, last_value_seq=ds.last_value_seq,
                        suspended=ds.suspended, last_used=ds.last_used, attached=ds.attached,
                        delivery_counts=dict(ds.delivery_counts))
            fresh._adopt(d, None, 0, {})
            fresh._register(d)
            for slot, seq in ds.last_values.items():
                d.last_values[slot] = seq
            for seq in ds.pending:
                d.pending[seq] = None
            d.pending_bytes = ds.pending_bytes
            self._counted(1 + len(ds.pending))
        self._windows(snap)
        meta_h = fresh._handle("sm")
        for ms in snap.maps:
            entries = fresh.maps.setdefault((ms.store, ms.map), {})
            for e in ms.entries:
                entries[e.key] = (e.value, e.version)
                fresh._wb.put(P_MAP + f"{ms.store}\x00{ms.map}\x00{e.key}".encode(),
                              e.version.to_bytes(8, "big") + e.value, meta_h)
            self._counted(len(ms.entries))
        for om in snap.origin_marks:
            fresh._set_mark((om.cluster, om.destination), OriginMark(om.store, om.sequence, om.stored_at))

    def _windows(self, snap: rpb.StateSnapshot) -> None:
        fresh = self.fresh
        for p in snap.producers:
            window = fresh.producers[p.producer_id] = _DiskWindow(fresh, p.producer_id)
            window.last_index = p.last_index
            window.last_used = p.last_used if p.HasField("last_used") else self._clock
            for seq, mseq in zip(p.sequences, p.message_seqs):
                window.record(seq, mseq)
            self._counted(len(p.sequences))

    def finish(self) -> None:
        """Write the rest and make the target the installed state."""
        if self._first:
            raise ValueError("a snapshot without parts")
        if self._legacy is not None:
            # Restored in memory, where the holders are counted, then written as today's parts.
            legacy, self._legacy, self._first = self._legacy, None, True
            for part in state_parts(restore_parts(legacy)):
                self.add(part)
        self._complete()

    def _complete(self) -> None:
        fresh, target = self.fresh, self.target
        fresh.uows.track_changes(set(fresh.uows.uows) | set(fresh.uows.gone), set(fresh.uows.subscriptions))
        fresh._dirty_stores = fresh._ids_dirty = True
        fresh._wb.delete(K_INSTALLING, fresh._handle("sm"))
        fresh._commit()
        fresh._in_entry = False
        # Take over the fresh state's contents (callers hold the target object).
        hooks = (target.on_pending, target.on_acked, target.on_reset, target.on_removed, target.events)
        fresh.uows.on_accepted = target.uows.on_accepted
        target.__dict__.clear()
        target.__dict__.update(fresh.__dict__)
        for durable in target.durables.values():
            durable.__dict__["_sm"] = target
            durable.pending.sm = target  # type: ignore[attr-defined]
            durable.last_values.sm = target  # type: ignore[attr-defined]
        for window in target.producers.values():
            window.sm = target  # type: ignore[attr-defined]
        target.messages.sm = target  # type: ignore[attr-defined]
        target.store_seqs.sm = target  # type: ignore[attr-defined]
        for seqs in target.store_seqs.values():
            seqs.sm = target  # type: ignore[attr-defined]
        target.on_pending, target.on_acked, target.on_reset, target.on_removed, target.events = hooks


def install_parts(target: DiskStateMachine, parts: Iterable[bytes]) -> None:
    """Replace `target`'s whole state by the snapshot of `parts`."""
    installer = DiskInstaller(target)
    for data in parts:
        installer.add(data)
    installer.finish()
