"""Who is at the other end of a connection, as its certificate says (pure).

Every certificate Strongroom issues names its holder in a URI subject alternative name:
`strongroom://member/<cluster>/<member>`, `strongroom://router/<cluster>/<replica>`,
`strongroom://dr/<cluster>/<site>`, `strongroom://realm/<site>/realm`, `strongroom://etcd/<site>/etcd`
and `strongroom://user/<name>` (a person or an application). A member admits the calls between
members only from a member of its own cluster whose name is the one the call claims, shipments
of the standby log only from its cluster's DR service (`admits`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum

__all__ = ["SCHEME", "Identity", "Kind", "Refusal", "admits"]

SCHEME = "strongroom://"


class Kind(str, Enum):
    """What a certificate's holder is."""

    MEMBER = "member"
    ROUTER = "router"
    DR = "dr"
    REALM = "realm"
    ETCD = "etcd"
    USER = "user"


@dataclass(frozen=True)
class Identity:
    """The holder of a certificate: its kind, its cluster (or site) and its name."""

    kind: Kind
    name: str
    cluster: str = ""

    def uri(self) -> str:
        """The URI subject alternative name of this identity."""
        if self.kind is Kind.USER:
            return f"{SCHEME}user/{self.name}"
        return f"{SCHEME}{self.kind.value}/{self.cluster}/{self.name}"

    def __str__(self) -> str:
        return self.uri()[len(SCHEME):]

    @classmethod
    def parse(cls, uri: str) -> Identity | None:
        """The identity a URI names, None when it is not one of Strongroom's."""
        if not uri.startswith(SCHEME):
            return None
        parts = uri[len(SCHEME):].split("/")
        try:
            kind = Kind(parts[0])
        except ValueError:
            return None
        if kind is Kind.USER:
            return cls(kind, parts[1]) if len(parts) == 2 and parts[1] else None
        if len(parts) != 3 or not parts[1] or not parts[2]:
            return None
        return cls(kind, parts[2], parts[1])

    @classmethod
    def from_uris(cls, uris: Iterable[str]) -> Identity | None:
        """The first Strongroom identity among a certificate's URIs."""
        for uri in uris:
            found = cls.parse(uri)
            if found is not None:
                return found
        return None


@dataclass(frozen=True)
class Refusal:
    """Why a call was refused: the reason (a metric label, an ErrorInfo reason) and a sentence."""

    reason: str
    message: str


def admits(peer: Identity | None, cluster: str | Collection[str], kinds: Iterable[Kind],
           claimed: str = "") -> Refusal | None:
    """None when `peer` may make a call that only `kinds` of `cluster` (or of one of several
    clusters: a router's neighbours) may make (a user or the realm service belongs to no cluster:
    admitted by kind); `claimed`: the member the call says it comes
    from (a leader's appends), which must be the peer's own name."""
    allowed = tuple(kinds)
    clusters = {cluster} if isinstance(cluster, str) else set(cluster)
    wanted = " or ".join(k.value for k in allowed)
    where = (f"cluster {next(iter(clusters))!r}" if len(clusters) == 1
             else f"clusters {', '.join(sorted(clusters)) or '(none)'}")
    if peer is None:
        return Refusal("no_identity", f"only a {wanted} of {where} may call this; "
                                      "the caller's certificate names no Strongroom identity")
    # A user and the realm service (named by its site, not a cluster) belong to no cluster.
    if peer.kind not in allowed or (peer.kind not in (Kind.USER, Kind.REALM) and peer.cluster not in clusters):
        return Refusal("wrong_identity", f"only a {wanted} of {where} may call this, not {peer}")
    if claimed and peer.kind is Kind.MEMBER and claimed != peer.name:
        return Refusal("impersonation", f"{peer} called as member {claimed!r}")
    return None
