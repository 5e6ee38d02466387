"""The etcd key layout of a Strongroom realm: every key and prefix, named once.

Everything Strongroom keeps in etcd lives under `/strongroom/`:

| key | written by | what it holds |
|---|---|---|
| `/strongroom/realm/current` | realm service (`RealmStore`) | the realm version in force (JSON) |
| `/strongroom/realm/versions/<12 digits>` | realm service, in the same transaction | every version ever applied |
| `/strongroom/services/realm` | realm service, under its lease | the realm service's gRPC address |
| `/strongroom/auth/tokens/<id>` | realm service (`IssueToken`, `RevokeToken`: `security/tokens.py`) | one bearer token: its user, the SHA-256 of its secret, when it was issued, ends, was revoked |
| `/strongroom/clusters/<c>/leader` | the leader, under its lease | who leads; its create_revision (plus the epoch base its value names) is the epoch |
| `/strongroom/clusters/<c>/members/<m>` | each member, under its lease | its registration record (`MemberRecord`) |
| `/strongroom/clusters/<c>/epoch-base` | a member elected with an epoch it had promised already (`persistence/election.py`) | what is added to leader keys' create revisions after etcd went back (lost its data) |
| `/strongroom/clusters/<c>/voters` | the leader, at each step of a membership change (`persistence/configuration.py`) | the members whose promises and acknowledgments count (`VoterRecord`); absent: the realm's member list |
| `/strongroom/clusters/<c>/stored/<m>` | each member, once, never removed | it has acknowledged log entries |
| `/strongroom/clusters/<c>/dr` | activation, fencing, demotion (`dr/record.py`) | the site's DR role and generation (`DrRecord`) |
| `/strongroom/clusters/<c>/pstore` | store operations, capacity (`persistence/storestate.py`) | the persistent store's state: available, unavailable, no new units of work (`StoreRecord`) |
| `/strongroom/clusters/<c>/router` | the active router replica, under its lease | which replica routes for the cluster |

Code that reads or writes one of these keys takes its name from here; nobody else spells them.
"""

from __future__ import annotations

__all__ = [
    "REALM_CURRENT",
    "REALM_SERVICE",
    "REALM_VERSIONS",
    "TOKENS",
    "dr_key",
    "epoch_base_key",
    "leader_key",
    "member_key",
    "members_prefix",
    "pstore_key",
    "realm_version_key",
    "router_key",
    "stored_key",
    "stored_prefix",
    "token_key",
    "voters_key",
]

ROOT = "/strongroom"

REALM_CURRENT = f"{ROOT}/realm/current"
"""The realm version in force."""
REALM_VERSIONS = f"{ROOT}/realm/versions/"
"""Prefix of every applied realm version; the keys sort by version number."""
REALM_SERVICE = f"{ROOT}/services/realm"
"""The realm service's address, bound to its lease."""
TOKENS = f"{ROOT}/auth/tokens/"
"""Prefix of the bearer tokens' records (never their secrets: a digest of each)."""


def token_key(token_id: str) -> str:
    """The record of one bearer token."""
    return f"{TOKENS}{token_id}"


def realm_version_key(version: int) -> str:
    """The key of one stored realm version (12 digits, so keys sort by number)."""
    return f"{REALM_VERSIONS}{version:012d}"


def _cluster(cluster: str) -> str:
    return f"{ROOT}/clusters/{cluster}"


def leader_key(cluster: str) -> str:
    """The key the cluster's leader holds, bound to its lease; its create_revision, plus the epoch
    base its value names (`epoch_base_key`), is the epoch."""
    return f"{_cluster(cluster)}/leader"


def members_prefix(cluster: str) -> str:
    """Prefix of the cluster's member registrations (a member's name follows it)."""
    return f"{_cluster(cluster)}/members/"


def member_key(cluster: str, member: str) -> str:
    """The key where a member registers its addresses and log format, bound to its lease."""
    return f"{members_prefix(cluster)}{member}"


def epoch_base_key(cluster: str) -> str:
    """The key of the cluster's epoch base: a number added to leader keys' create revisions in
    their epochs. Absent (0) until etcd goes back in revisions (restarted without its data): a
    member elected with an epoch it had promised already raises it above its promise, so epochs
    go on increasing (`persistence/election.py`)."""
    return f"{_cluster(cluster)}/epoch-base"


def stored_key(cluster: str, member: str) -> str:
    """The key written (and never removed) before a member first acknowledges log entries.

    A member that starts with no state and finds this key lost state it had acknowledged: it
    may have been part of a commit majority, so it must catch up before it counts toward a
    recovery majority. A member without the key never acknowledged anything and counts at
    once (every recovery majority still meets every commit majority in a member that holds
    the commit)."""
    return f"{_cluster(cluster)}/stored/{member}"


def stored_prefix(cluster: str) -> str:
    """The prefix of every member's `stored_key`: the members that ever acknowledged entries."""
    return f"{_cluster(cluster)}/stored/"


def voters_key(cluster: str) -> str:
    """The key of the cluster's voters: the members whose promises and acknowledgments count
    toward a majority (`persistence/configuration.py`). Written only by a leader, while it holds
    the leader key, one member added or removed at a time; absent until the first membership
    change (the realm's member list counts then)."""
    return f"{_cluster(cluster)}/voters"


def dr_key(cluster: str) -> str:
    """The key of the site's DR record for the cluster (`DrRecord`: role and generation). Each
    site has its own, in its own etcd; absent, the realm decides (docs/dr.md)."""
    return f"{_cluster(cluster)}/dr"


def router_key(cluster: str) -> str:
    """The key the cluster's active router replica holds, bound to its lease (its value: the
    replica's name and address)."""
    return f"{_cluster(cluster)}/router"


def pstore_key(cluster: str) -> str:
    """The key of the cluster's persistent-store state (`StoreRecord`: available, unavailable or
    no new units of work, since when and why). Absent: available. Kept in etcd, not in the log,
    so that it can be read and changed while the store cannot be used (docs/store-operations.md)."""
    return f"{_cluster(cluster)}/pstore"


def trace_key(cluster: str) -> str:
    """The key of the cluster's message-trace filters (`observability.msgtrace.TraceSettings`:
    destinations and producer ids traced, each until when). Absent: nothing is traced."""
    return f"{_cluster(cluster)}/trace"
