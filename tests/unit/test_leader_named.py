"""Every NOT_LEADER a member gives names the leader it knows of when the answer is written: the
node's `name_leader` and the subscribe stream's messages built from it (in-process)."""

from __future__ import annotations

from pathlib import Path

from strongroom.errors import NotLeaderError, UnknownMessage
from strongroom.persistence.config import MemberConfig
from strongroom.persistence.dispatcher import Closed, Refusal
from strongroom.persistence.election import LeaderInfo
from strongroom.persistence.node import PersistenceNode
from strongroom.persistence.servicer import subscribe_response
from strongroom.realm.model import parse_realm

REALM = """\
clusters:
  - name: c
    storage: memory
    members:
      - name: m1
      - name: m2
      - name: m3
stores:
  - name: s
    cluster: c
"""


def _node(tmp_path: Path) -> PersistenceNode:
    config = MemberConfig(cluster="c", member="m1", address="127.0.0.1:1", data_dir=tmp_path,
                          etcd_endpoints="127.0.0.1:9")  # never reached: nothing here talks to etcd
    return PersistenceNode(config, parse_realm(REALM, "test realm"), 1)


async def test_a_not_leader_names_the_leader_the_member_knows_of_and_never_itself(tmp_path: Path) -> None:
    node = _node(tmp_path)
    stepped_down = NotLeaderError("member m1 stepped down: asked to")
    node.leader = None
    assert node.name_leader(stepped_down).metadata == {"leader": "", "leader_address": ""}
    node.leader = LeaderInfo("m1", "127.0.0.1:1", 4)  # its own key, not yet gone
    assert node.name_leader(stepped_down).metadata == {"leader": "", "leader_address": ""}
    node.leader = LeaderInfo("m2", "127.0.0.1:2", 5)
    named = node.name_leader(stepped_down)
    assert isinstance(named, NotLeaderError) and named.leader_address == "127.0.0.1:2"
    assert named.message == stepped_down.message
    # One already naming a leader, and other errors, stay as they are.
    other = NotLeaderError("x", "m3", "127.0.0.1:3")
    assert node.name_leader(other) is other
    unknown = UnknownMessage("message 9 is not pending")
    assert node.name_leader(unknown) is unknown
    node.replica.close()


async def test_subscribe_stream_messages_carry_the_leader(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.leader = LeaderInfo("m2", "127.0.0.1:2", 5)
    closed = subscribe_response(Closed("NOT_LEADER", "member m1 is no longer the leader"), node.name_leader).closed
    assert closed.reason == "NOT_LEADER"
    assert dict(closed.metadata) == {"leader": "m2", "leader_address": "127.0.0.1:2"}
    refused = subscribe_response([Refusal(7, "ack", NotLeaderError("member m1 is no longer the leader"))],
                                 node.name_leader).refusals.refusals[0]
    assert refused.reason == "NOT_LEADER" and refused.metadata["leader_address"] == "127.0.0.1:2"
    # Other reasons carry their own metadata (none for REPLACED).
    replaced = subscribe_response(Closed("REPLACED", "another subscriber"), node.name_leader).closed
    assert replaced.reason == "REPLACED" and not replaced.metadata
    node.replica.close()
