"""A cluster's disaster-recovery standby set in the realm (docs/dr.md): declared, and bad
declarations refused at file:line."""

from __future__ import annotations

import pytest
from test_realm_zones import line_of, problems

from strongroom.errors import UnknownMember
from strongroom.persistence.config import MemberConfig
from strongroom.persistence.node import PersistenceNode
from strongroom.realm.model import parse_realm

REALM = """\
clusters:
  - name: main
    members:
      - name: m1
      - name: m2
      - name: m3
    standby:
      members:
        - name: s1
        - name: s2
        - name: s3
      primary: [10.0.0.1:7500, 10.0.0.2:7500]
stores:
  - name: default
    cluster: main
destinations:
  - name: "*"
    store: default
"""


def test_a_cluster_declares_its_standby_set_apart_from_its_primary_set() -> None:
    c = parse_realm(REALM).cluster("main")
    assert c is not None and c.standby is not None
    assert [m.name for m in c.standby.members] == ["s1", "s2", "s3"]
    assert c.standby.primary == ["10.0.0.1:7500", "10.0.0.2:7500"]
    assert c.is_standby_member("s2") and not c.is_standby_member("m2")
    # The primary set is what it was: a standby member is not one of its members.
    assert [m.name for m in c.members] == ["m1", "m2", "m3"] and c.member("s1") is None
    without = REALM.split("    standby:\n")[0] + "stores:" + REALM.split("stores:")[1]
    assert parse_realm(without).cluster("main").standby is None  # type: ignore[union-attr]


def test_a_standby_member_that_is_also_a_primary_member_is_refused_at_its_line() -> None:
    text = REALM.replace("        - name: s2\n", "        - name: m2\n")
    p = problems(text)
    assert len(p) == 1 and p[0].startswith(f"realm.yaml:{line_of(text, 'name: m2', 2)}:"), p
    assert "standby member 'm2' is also a member of the primary set" in p[0]


@pytest.mark.parametrize(("change", "needle", "says"), [
    (("        - name: s3\n", ""), "members:", "has 2 members; use an odd count"),
    (("primary: [10.0.0.1:7500, 10.0.0.2:7500]", "primary: [10.0.0.1:7500, site-b]"), "primary:",
     "primary address 'site-b' must be host:port"),
    (("primary: [10.0.0.1:7500, 10.0.0.2:7500]", "primary: []"), "primary:", "at least one address"),
    (("        - name: s3\n", "        - name: s1\n"), "members:", "member name 's1' appears twice"),
])
def test_bad_standby_sets_are_refused_at_file_and_line(change: tuple[str, str], needle: str, says: str) -> None:
    text = REALM.replace(*change)
    p = problems(text)
    assert any(says in x for x in p), p
    assert all(x.startswith("realm.yaml:") and int(x.split(":")[1]) >= line_of(text, "standby:") for x in p), p


async def test_a_standby_member_runs_in_its_own_set(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A standby member elects, replicates and counts majorities among the standby set; a name
    in neither set is refused, naming the set it looked in."""
    realm = parse_realm(REALM)
    node = PersistenceNode(MemberConfig(cluster="main", member="s1", data_dir=tmp_path / "s1",
                                        etcd_endpoints="127.0.0.1:1"), realm, 1)
    try:
        assert node.standby and [m.name for m in node.cluster.members] == ["s1", "s2", "s3"]
        assert node.membership.peers() == ["s2", "s3"]
    finally:
        node.replica.close()
    primary = PersistenceNode(MemberConfig(cluster="main", member="m1", data_dir=tmp_path / "m1",
                                           etcd_endpoints="127.0.0.1:1"), realm, 1)
    try:
        assert not primary.standby and primary.membership.peers() == ["m2", "m3"]
    finally:
        primary.replica.close()
    with pytest.raises(UnknownMember):
        PersistenceNode(MemberConfig(cluster="main", member="x9", data_dir=tmp_path / "x9",
                                     etcd_endpoints="127.0.0.1:1"), realm, 1)
