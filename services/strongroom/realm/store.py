"""Realm versions kept in etcd: apply (validate, then store atomically), get, history, watch.

Layout in etcd (both values are the JSON of a `RealmVersion`; `strongroom.keys` names the keys):

- `/strongroom/realm/current` — the version in force;
- `/strongroom/realm/versions/<version, 12 digits>` — every version ever applied, so keys sort
  in version order.

A new version is written with one transaction that compares the current key's mod_revision, so
concurrent applies serialise: the loser re-reads and retries on top of the winner (or fails
with `RealmVersionConflict` when the caller pinned `expected_version`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

from strongroom.errors import (
    DataCorruption,
    RealmVersionConflict,
    RealmVersionNotFound,
    StrongroomError,
)
from strongroom.etcd import EtcdClient, KeyValue
from strongroom.keys import REALM_CURRENT, REALM_VERSIONS, realm_version_key
from strongroom.realm.model import Realm, parse_realm

__all__ = [
    "RealmStore",
    "RealmVersion",
    "RealmVersionConflict",
    "RealmVersionNotFound",
    "load_current_realm",
    "store_realm",
    "wait_for_realm",
]

log = logging.getLogger(__name__)


DEFAULT_SOURCE = "realm.yaml"

# A lost race is retried at once; this bound only stops a livelock, it is never reached in
# practice (each retry means another apply succeeded).
_MAX_APPLY_ATTEMPTS = 50




@dataclass(frozen=True)
class RealmVersion:
    """One applied version of the realm, as stored in etcd."""

    version: int
    yaml: str
    """The document exactly as applied."""
    normalized_json: str
    """The validated realm with defaults filled in (`Realm.to_json`)."""
    applied_at: float
    """Unix seconds."""
    digest: str
    """sha256 hex of the document."""
    source_name: str
    """The file name the operator applied; used in error locations."""

    def to_bytes(self) -> bytes:
        """The stored JSON."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, key: str = REALM_CURRENT) -> RealmVersion:
        """Decode a stored value; DataCorruption if it is not a realm version."""
        try:
            data = json.loads(raw)
            return cls(
                version=int(data["version"]),
                yaml=str(data["yaml"]),
                normalized_json=str(data["normalized_json"]),
                applied_at=float(data["applied_at"]),
                digest=str(data["digest"]),
                source_name=str(data["source_name"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise DataCorruption(f"etcd key {key} does not hold a realm version: {exc}") from None

    def realm(self) -> Realm:
        """Parse the stored document (it was valid when applied)."""
        return parse_realm(self.yaml, self.source_name)


def digest_of(yaml_text: str) -> str:
    """sha256 hex of a realm document."""
    return hashlib.sha256(yaml_text.encode()).hexdigest()


class RealmStore:
    """Realm versions in etcd. Raises RealmInvalid, RealmVersionConflict, RealmVersionNotFound."""

    def __init__(self, etcd: EtcdClient) -> None:
        self._etcd = etcd

    async def _current_kv(self) -> tuple[KeyValue | None, RealmVersion | None]:
        kv = await self._etcd.get(REALM_CURRENT)
        if kv is None:
            return None, None
        return kv, RealmVersion.from_bytes(kv.value)

    async def current(self) -> RealmVersion | None:
        """The version in force, or None before the first apply."""
        return (await self._current_kv())[1]

    async def apply(self, yaml_text: str, source: str = DEFAULT_SOURCE,
                    expected_version: int = 0) -> RealmVersion:
        """Validate and store a new version; return the version now current.

        Invalid input raises RealmInvalid and stores nothing. A document identical to the
        current one (same digest) returns the current version and stores nothing, also when
        `expected_version` is stale: the operator's intent is already in force. Otherwise a
        non-zero `expected_version` that is not the current version raises RealmVersionConflict.
        """
        return await self._apply(yaml_text, source or DEFAULT_SOURCE, expected_version, only_if_empty=False)

    async def bootstrap(self, yaml_text: str, source: str = DEFAULT_SOURCE) -> RealmVersion:
        """Apply the document only if no realm exists yet; return the version now current.

        Atomic, so several realm replicas starting with different files cannot overwrite
        each other's first version.
        """
        return await self._apply(yaml_text, source or DEFAULT_SOURCE, 0, only_if_empty=True)

    async def _apply(self, yaml_text: str, source: str, expected_version: int,
                     only_if_empty: bool) -> RealmVersion:
        realm = parse_realm(yaml_text, source)  # RealmInvalid propagates: nothing is stored
        digest = digest_of(yaml_text)
        normalized = realm.to_json()
        for _ in range(_MAX_APPLY_ATTEMPTS):
            kv, current = await self._current_kv()
            if current is not None:
                if current.digest == digest or only_if_empty:
                    return current
                if expected_version and current.version != expected_version:
                    raise RealmVersionConflict(
                        f"expected realm version {expected_version}, but version {current.version} is current")
                number = current.version + 1
            else:
                if expected_version:
                    raise RealmVersionConflict(
                        f"expected realm version {expected_version}, but no realm has been applied yet")
                number = await self._next_version_without_current()
            new = RealmVersion(version=number, yaml=yaml_text, normalized_json=normalized,
                               applied_at=time.time(), digest=digest, source_name=source)
            value = new.to_bytes()
            ok = await self._etcd.put_if_version(REALM_CURRENT, value, kv.mod_revision if kv else 0,
                                                 extra=[(realm_version_key(number), value)])
            if ok:
                log.info("realm version %d applied from %s (sha256 %s)", number, source, digest[:12])
                return new
            # Another apply won the race; re-read and build on top of it.
        raise RealmVersionConflict("the realm kept changing while applying; try again")

    async def _next_version_without_current(self) -> int:
        # Without a current key (first apply, or someone deleted it by hand) continue after the
        # newest stored version rather than overwrite history.
        versions = await self._etcd.get_prefix(REALM_VERSIONS)
        if not versions:
            return 1
        return RealmVersion.from_bytes(versions[-1].value, versions[-1].key).version + 1

    async def get(self, version: int = 0) -> RealmVersion:
        """The current version (0) or a stored one; RealmVersionNotFound if absent."""
        if version == 0:
            current = await self.current()
            if current is None:
                raise RealmVersionNotFound("no realm has been applied yet")
            return current
        kv = await self._etcd.get(realm_version_key(version))
        if kv is None:
            raise RealmVersionNotFound(f"realm version {version} does not exist")
        return RealmVersion.from_bytes(kv.value, kv.key)

    async def history(self) -> list[RealmVersion]:
        """Every stored version, oldest first."""
        return [RealmVersion.from_bytes(kv.value, kv.key)
                for kv in await self._etcd.get_prefix(REALM_VERSIONS)]

    async def watch(self, retry_delay: float = 0.5, restore: bool = False) -> AsyncIterator[RealmVersion]:
        """Yield the current version (if any), then every new current version, until closed.

        Survives etcd restarts and compacted watch revisions by re-reading the current key and
        watching again; a version is never yielded twice in a row.

        `restore` (members): etcd that holds no realm, or an older version than the last one
        yielded, went back (restarted without its data); the last version is written back, so
        the realm in etcd is again the one the cluster runs and the next apply numbers above it
        (an apply numbered at or below a member's version would never reach that member). An
        apply that reached the emptied etcd before a member wrote its version back is numbered
        below it and is overwritten: apply it again once `strongroom realm get` shows the
        members' version (README, "When etcd loses its data").
        """
        last: RealmVersion | None = None
        while True:
            try:
                # The revision is read before the key so no put can fall between the two reads
                # and the watch start.
                revision = await self._etcd.revision()
                kv, current = await self._current_kv()
                if restore and last is not None and (current is None or current.version < last.version):
                    await self._restore(last, kv)
                    continue
                start = revision + 1
                if kv is not None and current is not None:
                    start = kv.mod_revision + 1
                    if last is None or current.digest != last.digest or current.version != last.version:
                        last = current
                        yield current
                stream = self._etcd.watch(REALM_CURRENT, start_revision=start)
                try:
                    async for events in stream:
                        for kind, event_kv in events:
                            if kind != "PUT":
                                continue
                            new = RealmVersion.from_bytes(event_kv.value)
                            if restore and last is not None and new.version < last.version:
                                await self._restore(last, event_kv)
                                continue
                            if last is None or new.version != last.version or new.digest != last.digest:
                                last = new
                                yield new
                finally:
                    # Close the etcd watch stream now, not whenever the generator is collected.
                    await stream.aclose()  # type: ignore[attr-defined]
            except StrongroomError:
                raise  # corrupt data is not cured by retrying
            except Exception as exc:  # noqa: BLE001 - etcd gone or watch canceled: resync
                # The etcd client surfaces both EtcdUnavailable and raw gRPC errors here; the
                # realm in etcd is the truth, so re-reading it is always a correct recovery.
                log.warning("realm watch interrupted (%s); resyncing", exc)
            await asyncio.sleep(retry_delay)


    async def _restore(self, held: RealmVersion, kv: KeyValue | None) -> None:
        """Write `held` back as the current version over `kv` (None: no current key)."""
        value = held.to_bytes()
        found = f"version {RealmVersion.from_bytes(kv.value).version}" if kv is not None else "no realm"
        if await self._etcd.put_if_version(REALM_CURRENT, value, kv.mod_revision if kv is not None else 0,
                                           extra=[(realm_version_key(held.version), value)]):
            log.warning("etcd held %s, older than realm version %d in force here: etcd went back (restarted "
                        "without its data?); version %d written back", found, held.version, held.version)


async def load_current_realm(etcd: EtcdClient) -> tuple[int, Realm] | None:
    """The current realm version number and realm, or None before the first apply."""
    current = await RealmStore(etcd).current()
    if current is None:
        return None
    return current.version, current.realm()


async def wait_for_realm(etcd: EtcdClient, logger: logging.Logger = log) -> tuple[int, Realm]:
    """The current realm version and realm, waiting for the first apply (and for etcd) if
    there is none yet; an unreadable stored realm is logged and waited past."""
    waited = False
    while True:
        try:
            loaded = await load_current_realm(etcd)
        except StrongroomError as exc:
            logger.error("stored realm unreadable: %s", exc)
            loaded = None
        except Exception as exc:  # noqa: BLE001 - etcd not up yet
            logger.warning("etcd not reachable yet: %s", exc)
            loaded = None
        if loaded is not None:
            return loaded
        if not waited:
            logger.warning("no realm in etcd yet; waiting for `strongroom realm apply`")
            waited = True
        await asyncio.sleep(0.5)


async def store_realm(etcd_endpoints: str, yaml_text: str, source: str = DEFAULT_SOURCE,
                      expected_version: int = 0) -> RealmVersion:
    """`RealmStore.apply` on an etcd client of its own, closed after: for tools that start a
    cluster without the realm service (the test harness, the chaos suite, benchmarks)."""
    etcd = EtcdClient(etcd_endpoints)
    try:
        return await RealmStore(etcd).apply(yaml_text, source, expected_version)
    finally:
        await etcd.close()
