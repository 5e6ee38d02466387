"""The etcd key layout of a Strongroom realm: every key and prefix, named once.

Everything Strongroom keeps in etcd lives under `/strongroom/`:

| key | written by | what it holds |
|---|---|---|
| `/strongroom/realm/current` | realm service (`RealmStore`) | the realm version in force (JSON) |
| `/strongroom/realm/versions/<12 digits>` | realm service, in the same transaction | every version ever applied |
| `/strongroom/services/realm` | realm service, under its lease | the realm service's gRPC address |
| `/strongroom/clusters/<c>/leader` | the leader, under its lease | who leads; its create_revision is the epoch |
| `/strongroom/clusters/<c>/members/<m>` | each member, under its lease | its registration record (`MemberRecord`) |
| `/strongroom/clusters/<c>/stored/<m>` | each member, once, never removed | it has acknowledged log entries |
| `/strongroom/clusters/<c>/dr` | activation, fencing, demotion (`dr/record.py`) | the site's DR role and generation (`DrRecord`) |
| `/strongroom/clusters/<c>/router` | the active router replica, under its lease | which replica routes for the cluster |

Code that reads or writes one of these keys takes its name from here; nobody else spells them.
"""

from __future__ import annotations

__all__ = [
    "REALM_CURRENT",
    "REALM_SERVICE",
    "REALM_VERSIONS",
    "dr_key",
    "leader_key",
    "member_key",
    "members_prefix",
    "realm_version_key",
    "router_key",
    "stored_key",
]

ROOT = "/strongroom"

REALM_CURRENT = f"{ROOT}/realm/current"
"""The realm version in force."""
REALM_VERSIONS = f"{ROOT}/realm/versions/"
"""Prefix of every applied realm version; the keys sort by version number."""
REALM_SERVICE = f"{ROOT}/services/realm"
"""The realm service's address, bound to its lease."""


def realm_version_key(version: int) -> str:
    """The key of one stored realm version (12 digits, so keys sort by number)."""
    return f"{REALM_VERSIONS}{version:012d}"


def _cluster(cluster: str) -> str:
    return f"{ROOT}/clusters/{cluster}"


def leader_key(cluster: str) -> str:
    """The key the cluster's leader holds, bound to its lease; its create_revision is the epoch."""
    return f"{_cluster(cluster)}/leader"


def members_prefix(cluster: str) -> str:
    """Prefix of the cluster's member registrations (a member's name follows it)."""
    return f"{_cluster(cluster)}/members/"


def member_key(cluster: str, member: str) -> str:
    """The key where a member registers its addresses and log format, bound to its lease."""
    return f"{members_prefix(cluster)}{member}"


def stored_key(cluster: str, member: str) -> str:
    """The key written (and never removed) before a member first acknowledges log entries.

    A member that starts with no state and finds this key lost state it had acknowledged: it
    may have been part of a commit majority, so it must catch up before it counts toward a
    recovery majority. A member without the key never acknowledged anything and counts at
    once (every recovery majority still meets every commit majority in a member that holds
    the commit)."""
    return f"{_cluster(cluster)}/stored/{member}"


def dr_key(cluster: str) -> str:
    """The key of the site's DR record for the cluster (`DrRecord`: role and generation). Each
    site has its own, in its own etcd; absent, the realm decides (docs/dr.md)."""
    return f"{_cluster(cluster)}/dr"


def router_key(cluster: str) -> str:
    """The key the cluster's active router replica holds, bound to its lease (its value: the
    replica's name and address)."""
    return f"{_cluster(cluster)}/router"
