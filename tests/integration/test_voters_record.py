"""The voters record in a real etcd when there is none: the members with state, written down by
the first leader before it sends an entry (`configuration.freeze_holders`), stay what the next
recovery counts, whoever acknowledges entries after that.

Real etcd (the session's), a cluster name of each test's own; the members are keys here, the
leader a lease bound to the leader key as `Election` binds it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from strongroom.etcd import EtcdClient
from strongroom.keys import leader_key, stored_key, voters_key
from strongroom.local.etcdproc import EtcdProcess
from strongroom.persistence.configuration import (
    VoterRecord,
    freeze_holders,
    load_voters,
    write_voters,
)

REALM = ("m1", "m2", "m3", "m4", "m5")


async def _holders(client: EtcdClient, cluster: str, names: tuple[str, ...]) -> None:
    for name in names:
        await client.put(stored_key(cluster, name), b"1")


@contextlib.asynccontextmanager
async def _cluster_with(etcd: EtcdProcess, holders: tuple[str, ...]) -> AsyncIterator[tuple[EtcdClient, str]]:
    """A client of the session's etcd and a cluster name of the test's own whose `holders`
    acknowledged entries; no voters record."""
    cluster = f"c{uuid.uuid4().hex[:8]}"
    client = EtcdClient(etcd.endpoint)
    try:
        await _holders(client, cluster, holders)
        yield client, cluster
    finally:
        await client.close()


async def _leader(client: EtcdClient, cluster: str) -> int:
    lease = await client.grant(30)
    await client.put(leader_key(cluster), b"m1", lease=lease)
    return lease


async def test_the_members_with_state_written_down_stay_what_a_recovery_counts(etcd: EtcdProcess) -> None:
    async with _cluster_with(etcd, ("m1", "m2", "m3")) as (client, cluster):
        found = await load_voters(client, cluster, REALM)
        assert (found.voters, found.also, found.revision, found.settled) == (REALM, ("m1", "m2", "m3"), 0, False)
        lease = await _leader(client, cluster)
        frozen = await freeze_holders(client, cluster, found, 7, lease)
        assert frozen is not None and frozen.revision > 0 and not frozen.settled
        assert (frozen.voters, frozen.also, frozen.epoch) == (REALM, ("m1", "m2", "m3"), 7)
        # The new members the leader catches up acknowledge entries: they now hold state too,
        # yet a recovery still counts the three that did before (a majority of the five stored
        # members could be new ones holding part of the log only).
        await _holders(client, cluster, ("m4", "m5"))
        again = await load_voters(client, cluster, REALM)
        assert (again.voters, again.also, again.revision) == (REALM, ("m1", "m2", "m3"), frozen.revision)
        assert await freeze_holders(client, cluster, again, 8, lease) == again  # nothing to write again
        # The leader writes the realm's list once a majority of it holds what was committed.
        settled = await write_voters(client, cluster, REALM, 7, again.revision, lease)
        assert settled is not None and settled.settled and settled.also == ()
        assert await load_voters(client, cluster, REALM) == VoterRecord(REALM, settled.revision, 7)


async def test_only_the_holder_of_the_leader_key_writes_them_down(etcd: EtcdProcess) -> None:
    async with _cluster_with(etcd, ("m1", "m2", "m3")) as (client, cluster):
        found = await load_voters(client, cluster, REALM)
        await _leader(client, cluster)
        deposed = await client.grant(30)  # a lease that is not the leader key's
        assert await freeze_holders(client, cluster, found, 7, deposed) is None
        assert await client.get(voters_key(cluster)) is None


async def test_a_damaged_record_is_replaced_by_the_members_with_state(etcd: EtcdProcess) -> None:
    async with _cluster_with(etcd, ("m1", "m2")) as (client, cluster):
        await client.put(voters_key(cluster), b"{not json")
        found = await load_voters(client, cluster, REALM)
        assert found.damaged and found.also == ("m1", "m2") and not found.settled
        lease = await _leader(client, cluster)
        frozen = await freeze_holders(client, cluster, found, 3, lease)
        assert frozen is not None and not frozen.damaged and frozen.also == ("m1", "m2")
        assert await load_voters(client, cluster, REALM) == frozen
