"""The persistent store's state a member enforces is the newest it saw in etcd: a read that
found no record, answered after the watch reported the first write, must not put "available"
back (persistence/pstore.py orders reads and watch events by etcd revision)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strongroom.etcd import EtcdClient
from strongroom.persistence.pstore import PStore
from strongroom.persistence.storestate import (
    AVAILABLE_RECORD,
    StoreAction,
    StoreState,
    after,
    read_record_at,
    write_record,
)


async def test_a_read_older_than_the_first_write_does_not_undo_it(etcd: Any) -> None:
    client = EtcdClient(etcd.endpoint)
    try:
        cluster = "order-race"
        member = SimpleNamespace(cluster_name=cluster, member="m1", term=None, leader=None,
                                 replica=SimpleNamespace(health=SimpleNamespace(on_change=None)),
                                 is_leader_role=lambda: False)
        store = PStore(client, member)  # type: ignore[arg-type]
        # A leader's read (lead() or `store status`) finds no record...
        stale = await read_record_at(client, cluster)
        assert stale[0] == AVAILABLE_RECORD and stale[1] > 0
        # ... an operator's first disconnect is written, and the watch reports it first ...
        written = await write_record(client, cluster, after(AVAILABLE_RECORD, StoreAction.DISCONNECT, cluster, "m2",
                                                            "maintenance"))
        assert written is not None and written.state is StoreState.UNAVAILABLE
        store._set(written, written.revision)
        # ... then the read's answer arrives: older than what is in force, it changes nothing.
        store._set(*stale)
        assert store.record.state is StoreState.UNAVAILABLE
        # A read made after the write agrees with it.
        store._set(*await read_record_at(client, cluster))
        assert store.record.state is StoreState.UNAVAILABLE
    finally:
        await client.close()
