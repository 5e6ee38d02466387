"""The realm document: clusters and members, stores, destinations.

`parse_realm(text, source)` validates a YAML realm and raises `RealmInvalid` whose problems are
`file:line:column: path: what is wrong`. Defaults are documented on each field.
"""

from __future__ import annotations

import fnmatch
import json
import re
from enum import Enum
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from strongroom.errors import RealmInvalid, UnknownDestination

__all__ = [
    "StorageMode",
    "PublisherMode",
    "DestinationKind",
    "Member",
    "Cluster",
    "Store",
    "Destination",
    "Realm",
    "parse_realm",
    "DEFAULT_REALM_YAML",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DEST_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]-][A-Za-z0-9_.*?\[\]/-]{0,254}$")


class StorageMode(str, Enum):
    """Where a cluster's members keep the log and state."""

    MEMORY = "memory"
    DISK_SYNC = "disk-sync"  # fsync before a member acknowledges
    DISK_ASYNC = "disk-async"  # written, not fsynced, before a member acknowledges


class PublisherMode(str, Enum):
    """When a publish call returns."""

    STORE_CONFIRM_SEND = "store_confirm_send"  # after the message is committed
    STORE_SEND_NOCONFIRM = "store_send_noconfirm"  # once the leader has it queued


class DestinationKind(str, Enum):
    """Topic (kept only while a durable wants it) or queue (kept until consumed)."""

    TOPIC = "topic"
    QUEUE = "queue"


def _check_name(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError("must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return v


Name = Annotated[str, AfterValidator(_check_name)]
"""A member, cluster or store name."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Member(_Model):
    """One persistence service of a cluster."""

    name: Name
    """Member name, unique in its cluster; the service is started with it."""
    address: str | None = None
    """host:port peers and clients use; when absent the member registers its listen address in etcd."""


class Cluster(_Model):
    """A persistence cluster: an odd number of members electing one leader through etcd."""

    name: Name
    """Cluster name, unique in the realm."""
    members: list[Member]
    """The members; an odd count (1, 3, 5 …) so a majority is well defined."""
    storage: StorageMode = StorageMode.DISK_SYNC
    """memory, disk-sync (default) or disk-async."""
    lease_ttl_seconds: int = Field(default=3, ge=1, le=60)
    """TTL of the leader's etcd lease; a leader that cannot renew it in time stops serving."""
    compact_after_entries: int = Field(default=20000, ge=100)
    """Truncate the log prefix every member has applied once it is this long."""
    max_batch_ops: int = Field(default=4096, ge=1)
    """Upper bound of operations carried by one group-commit round."""

    @field_validator("members")
    @classmethod
    def _members(cls, v: list[Member]) -> list[Member]:
        if not v:
            raise ValueError("a cluster needs at least one member")
        if len(v) % 2 == 0:
            raise ValueError(f"has {len(v)} members; use an odd count so a majority is well defined")
        seen: set[str] = set()
        for m in v:
            if m.name in seen:
                raise ValueError(f"member name {m.name!r} appears twice")
            seen.add(m.name)
        return v

    def member(self, name: str) -> Member | None:
        """The member with this name."""
        return next((m for m in self.members if m.name == name), None)


class Store(_Model):
    """A persistence store owned by one cluster."""

    name: Name
    cluster: str
    """The cluster that owns the store."""
    replicated: bool = True
    """Replicated through the log (true) or kept by the leader alone, lost when it goes (false)."""
    publisher_mode: PublisherMode = PublisherMode.STORE_CONFIRM_SEND
    max_message_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)
    """Largest message body plus fields accepted (default 1 MiB)."""


class Destination(_Model):
    """Maps destination names (exact or glob: `*`, `?`, `[..]`) to a store, as a topic or a queue."""

    name: str
    kind: DestinationKind = DestinationKind.TOPIC
    store: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DEST_RE.match(v):
            raise ValueError("must be 1-255 characters of letters, digits, '.', '_', '-', '/' and glob characters")
        return v

    @property
    def is_pattern(self) -> bool:
        """True when the name is a glob."""
        return any(c in self.name for c in "*?[")


class Realm(_Model):
    """The whole realm."""

    clusters: list[Cluster]
    stores: list[Store] = []
    destinations: list[Destination] = []

    @model_validator(mode="after")
    def _references(self) -> Realm:
        problems: list[tuple[tuple[Any, ...], str]] = []
        cluster_names: set[str] = set()
        for i, c in enumerate(self.clusters):
            if c.name in cluster_names:
                problems.append((("clusters", i, "name"), f"cluster name {c.name!r} appears twice"))
            cluster_names.add(c.name)
        store_names: set[str] = set()
        for i, s in enumerate(self.stores):
            if s.name in store_names:
                problems.append((("stores", i, "name"), f"store name {s.name!r} appears twice"))
            store_names.add(s.name)
            if s.cluster not in cluster_names:
                problems.append((("stores", i, "cluster"),
                                 f"store {s.name!r} names cluster {s.cluster!r}, which the realm does not define"))
        dest_names: set[str] = set()
        for i, d in enumerate(self.destinations):
            if d.name in dest_names:
                problems.append((("destinations", i, "name"), f"destination {d.name!r} appears twice"))
            dest_names.add(d.name)
            if d.store not in store_names:
                problems.append((("destinations", i, "store"),
                                 f"destination {d.name!r} names store {d.store!r}, which the realm does not define"))
        if problems:
            raise _CrossRefError(problems)
        return self

    def cluster(self, name: str) -> Cluster | None:
        """The cluster with this name."""
        return next((c for c in self.clusters if c.name == name), None)

    def store(self, name: str) -> Store | None:
        """The store with this name."""
        return next((s for s in self.stores if s.name == name), None)

    def resolve(self, destination: str) -> tuple[Destination, Store]:
        """The destination rule and store for a name: an exact rule wins, else the first glob in order."""
        if not destination or not DEST_RE.match(destination) or any(c in destination for c in "*?["):
            raise UnknownDestination(f"invalid destination name {destination!r}")
        match = next((d for d in self.destinations if not d.is_pattern and d.name == destination), None)
        if match is None:
            match = next((d for d in self.destinations if d.is_pattern and fnmatch.fnmatchcase(destination, d.name)), None)
        if match is None:
            raise UnknownDestination(f"no destination of the realm matches {destination!r}")
        store = self.store(match.store)
        assert store is not None  # validated
        return match, store

    def to_json(self) -> str:
        """Normalised JSON (defaults filled in)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


class _CrossRefError(ValueError):
    def __init__(self, problems: list[tuple[tuple[Any, ...], str]]) -> None:
        super().__init__("; ".join(m for _, m in problems))
        self.problems = problems


# --- YAML with positions ---------------------------------------------------------------------

Path = tuple[Any, ...]


def _positions(node: yaml.Node, path: Path, out: dict[Path, tuple[int, int]]) -> None:
    out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            # Point a field at its key, where the operator looks for it.
            out[path + (key, "__key__")] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _positions(value_node, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, path + (i,), out)


def _locate(positions: dict[Path, tuple[int, int]], loc: Path) -> tuple[int, int]:
    loc = tuple(loc)
    for n in range(len(loc), -1, -1):
        prefix = loc[:n]
        if n == len(loc) and prefix + ("__key__",) in positions:
            return positions[prefix + ("__key__",)]
        if prefix in positions:
            return positions[prefix]
    return (1, 1)


def _path_text(loc: Path) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _check_unique(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _check_unique)  # type: ignore[arg-type]


def parse_realm(text: str, source: str = "realm.yaml") -> Realm:
    """Parse and validate a realm document; raise RealmInvalid with file:line:column problems."""
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RealmInvalid([f"{source}:{line}:{col}: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise RealmInvalid([f"{source}:1:1: {exc}"]) from None
    if node is None or data is None:
        raise RealmInvalid([f"{source}:1:1: the realm document is empty"])
    if not isinstance(data, dict):
        raise RealmInvalid([f"{source}:1:1: the realm must be a mapping with clusters, stores and destinations"])
    positions: dict[Path, tuple[int, int]] = {}
    _positions(node, (), positions)
    try:
        return Realm.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, _CrossRefError):
                for loc, msg in ctx_err.problems:
                    line, col = _locate(positions, loc)
                    problems.append(f"{source}:{line}:{col}: {_path_text(loc)}: {msg}")
                continue
            loc = tuple(err["loc"])
            line, col = _locate(positions, loc)
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {loc[-1]!r}"
            elif err["type"] == "missing":
                msg = f"required key {loc[-1]!r} is missing"
            elif err["type"] == "enum":
                expected = (err.get("ctx") or {}).get("expected", "")
                msg = f"{err['input']!r} is not one of {expected}"
            problems.append(f"{source}:{line}:{col}: {_path_text(loc)}: {msg}")
        raise RealmInvalid(problems) from None


DEFAULT_REALM_YAML = """\
# The built-in default realm of `strongroom up`.
clusters:
  - name: default
    storage: disk-sync
    members:
      - name: m1
      - name: m2
      - name: m3
stores:
  - name: default
    cluster: default
    replicated: true
    publisher_mode: store_confirm_send
destinations:
  # Queues: any name ending in .queue; stored with or without subscribers, shared.
  - name: "*.queue"
    kind: queue
    store: default
  # Topics of any other name.
  - name: "*"
    kind: topic
    store: default
"""
