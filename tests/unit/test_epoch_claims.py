"""One epoch, one leader: a follower (a real replica on RocksDB in a temporary directory) that
promised an epoch to one member refuses the same epoch from another, also after a restart; a
promise of no one in particular (the floor a member promises at start) goes to the first member
that claims the epoch. etcd issues an epoch twice only when it went back (restarted without its
data): tests/integration/test_etcd_loss.py runs that with real processes."""

from __future__ import annotations

from pathlib import Path

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.etcd import EtcdClient
from strongroom.persistence.follower import Follower
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.realm.model import parse_realm

REALM = ("clusters:\n  - name: c1\n    members:\n      - name: m1\n      - name: m2\n      - name: m3\n"
         "stores:\n  - name: s\n    cluster: c1\n")
CLUSTER = parse_realm(REALM).cluster("c1")


async def _stored() -> None:
    pass


class _Member:
    term = None
    leader = None

    async def step_down(self, reason: str, err: Exception | None = None) -> None:
        raise AssertionError("no term here")


def _follower(path: Path) -> tuple[Follower, Replica, EtcdClient]:
    assert CLUSTER is not None
    replica = Replica(lambda: CLUSTER, "m1", path, _stored)
    etcd = EtcdClient("127.0.0.1:1")  # never called: promises and appends need no etcd here
    return Follower(replica, Membership(etcd, CLUSTER, "m1", "127.0.0.1:2"), _Member()), replica, etcd


async def _promise(follower: Follower, epoch: int, leader: str) -> bool:
    return (await follower.handle_promise(rpb.PromiseRequest(epoch=epoch, leader=leader))).ok


async def test_an_epoch_promised_to_one_member_is_refused_to_another_also_after_a_restart(tmp_path: Path) -> None:
    follower, replica, etcd = _follower(tmp_path)
    assert await _promise(follower, 7, "m2")
    assert not await _promise(follower, 7, "m3")
    assert await _promise(follower, 7, "m2")  # the same leader asking again (a retried recovery)
    refused = await follower.handle_append(rpb.AppendRequest(epoch=7, leader="m3", prev_index=0, prev_epoch=0))
    assert not refused.ok and refused.promised_epoch == 7
    assert (await follower.handle_append(rpb.AppendRequest(epoch=7, leader="m2", prev_index=0, prev_epoch=0))).ok
    replica.close()
    await etcd.close()

    follower, replica, etcd = _follower(tmp_path)
    assert replica.promised_epoch == 7 and replica.promised_to == "m2"
    assert not await _promise(follower, 7, "m3")
    assert await _promise(follower, 8, "m3")  # a newer epoch: promised to its leader
    assert not await _promise(follower, 8, "m2")
    replica.close()
    await etcd.close()


async def test_a_floor_promised_to_no_one_goes_to_the_first_member_that_claims_it(tmp_path: Path) -> None:
    follower, replica, etcd = _follower(tmp_path)
    replica.promise(9)  # what a member with an empty disk promises at start
    assert replica.promised_to == ""
    assert not await _promise(follower, 8, "m2")
    assert await _promise(follower, 9, "m3")
    assert not await _promise(follower, 9, "m2")
    assert replica.promised_epoch == 9 and replica.promised_to == "m3"
    replica.close()
    await etcd.close()
