"""Bearer tokens: issued for a user of the realm, kept hashed in etcd, checked at every call.

A token reads `srt_<id>_<secret>`: 16 hex digits that name its record, then 64 hex digits
(256 random bits) that prove it. etcd holds only the record (`keys.token_key(id)`, JSON): the
user, the SHA-256 of the secret, when it was issued and when it ends (0: never), and once revoked
when. The secret is shown once, when issued, and is nowhere else: whoever reads etcd cannot call
as the token's user. (A plain digest suffices: the secret is random, not a password, so there is
nothing to guess that a slow hash would protect.) A revoked or expired token keeps its record for
ENDED_KEPT_SECONDS (30 days), so a call presenting it is told "revoked" or "expired", not
"unknown"; then the realm service deletes it (`TokenBook.prune`, hourly), so records do not pile
up in etcd and in every process's memory for as long as the site lives.

`verify` is the pure check; `TokenBook` keeps every record of its etcd in memory (followed: an
issue or a revocation reaches every process within a watch event) and writes new ones (the realm
service's `IssueToken` and `RevokeToken`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from strongroom.errors import InvalidArgument, Unauthenticated, UnknownToken
from strongroom.etcd import EtcdClient
from strongroom.keys import TOKENS, token_key

__all__ = ["ENDED_KEPT_SECONDS", "TokenBook", "TokenRecord", "new_token", "token_id_of", "verify"]

log = logging.getLogger("strongroom.security")

_TOKEN_RE = re.compile(r"^srt_([0-9a-f]{16})_([0-9a-f]{64})$")
MAX_TTL_SECONDS = 10 * 365 * 86400
"""The longest a token may be issued for (ten years); 0 means it never ends."""
ENDED_KEPT_SECONDS = 30 * 86400
"""How long the record of a token that ended (revoked, or expired) is kept: a call presenting it
is told why it is refused for that long, and "unknown" once the record is pruned."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """What etcd holds of one token."""

    id: str
    user: str
    sha256: str
    issued_at: float
    expires_at: float = 0.0
    """Wall-clock time it ends (0: never)."""
    description: str = ""
    revoked_at: float = 0.0
    """When it was revoked (0: it was not)."""

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> TokenRecord:
        data = json.loads(raw)
        return cls(id=str(data["id"]), user=str(data["user"]), sha256=str(data["sha256"]),
                   issued_at=float(data["issued_at"]), expires_at=float(data.get("expires_at", 0.0)),
                   description=str(data.get("description", "")), revoked_at=float(data.get("revoked_at", 0.0)))

    def ended_at(self) -> float:
        """When the token stopped being usable (revoked, or expired; the earlier), 0 while it has
        not been revoked and has no end. An end still in the future counts: it is when it ends."""
        ends = [t for t in (self.revoked_at, self.expires_at) if t]
        return min(ends) if ends else 0.0

    def standing(self, now: float) -> Unauthenticated | None:
        """None while the token may be used, else why not (revoked, or ended)."""
        if self.revoked_at:
            return Unauthenticated(f"token {self.id} of user {self.user!r} was revoked "
                                   f"{_when(self.revoked_at)}", "token_revoked")
        if self.expires_at and now >= self.expires_at:
            return Unauthenticated(f"token {self.id} of user {self.user!r} expired {_when(self.expires_at)}",
                                   "token_expired")
        return None


def _when(t: float) -> str:
    return time.strftime("at %Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def new_token(user: str, ttl_seconds: float, description: str, now: float) -> tuple[str, TokenRecord]:
    """A fresh token for `user` (its text, shown once) and the record etcd keeps of it."""
    if not math.isfinite(ttl_seconds) or ttl_seconds < 0 or ttl_seconds > MAX_TTL_SECONDS:
        raise InvalidArgument(f"a token lives from 1 s to {MAX_TTL_SECONDS} s, or 0 for ever; not {ttl_seconds}")
    token_id = secrets.token_hex(8)
    secret = secrets.token_hex(32)
    record = TokenRecord(token_id, user, _digest(secret), now, now + ttl_seconds if ttl_seconds else 0.0,
                         description)
    return f"srt_{token_id}_{secret}", record


def token_id_of(text: str) -> str:
    """The id a token's text or an id names (`strongroom auth revoke` takes either)."""
    match = _TOKEN_RE.match(text)
    return match.group(1) if match is not None else text


def verify(records: Mapping[str, TokenRecord], token: str, now: float) -> TokenRecord:
    """The record of a valid `token`; `Unauthenticated` naming why not otherwise."""
    match = _TOKEN_RE.match(token)
    if match is None:
        raise Unauthenticated("the bearer token is not a Strongroom token (srt_<16 hex>_<64 hex>)",
                              "token_malformed")
    token_id, secret = match.groups()
    record = records.get(token_id)
    if record is None:
        raise Unauthenticated(f"no token {token_id} was issued here (forged, or issued at another site)",
                              "token_unknown")
    if not hmac.compare_digest(record.sha256, _digest(secret)):
        raise Unauthenticated(f"token {token_id} does not carry the secret it was issued with (forged)",
                              "token_forged")
    refused = record.standing(now)
    if refused is not None:
        raise refused
    return record


class TokenBook:
    """Every token record of one etcd, in memory and followed; issue and revoke write there."""

    def __init__(self, etcd: EtcdClient) -> None:
        self._etcd = etcd
        self.records: dict[str, TokenRecord] = {}
        self._loaded = asyncio.Event()

    async def follow(self) -> None:
        """Keep `records` current from etcd, until cancelled."""
        async for kind, kv in self._etcd.follow(TOKENS, prefix=True):
            token_id = kv.key.removeprefix(TOKENS)
            if kind == "DELETE":
                self.records.pop(token_id, None)
            else:
                try:
                    self.records[token_id] = TokenRecord.from_bytes(kv.value)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("token record %s in etcd is not readable (%s): the token is refused", kv.key, exc)
                    self.records.pop(token_id, None)
            self._loaded.set()

    async def load(self) -> None:
        """Read every record once (a process that does not follow, or before it has)."""
        for kv in await self._etcd.get_prefix(TOKENS):
            try:
                record = TokenRecord.from_bytes(kv.value)
            except (ValueError, KeyError, TypeError):
                continue
            self.records[record.id] = record

    def verify(self, token: str) -> TokenRecord:
        """The record of a valid `token`, or `Unauthenticated`."""
        return verify(self.records, token, time.time())

    async def verify_fresh(self, token: str) -> TokenRecord:
        """`verify`, reading the token's record from etcd once when it is not known here yet (a
        token issued a moment ago, whose watch event has not arrived; a process just started)."""
        try:
            return self.verify(token)
        except Unauthenticated as err:
            if err.metadata.get("refusal") != "token_unknown":
                raise
            match = _TOKEN_RE.match(token)
            assert match is not None  # a malformed token is refused as such above
            try:
                kv = await self._etcd.get(token_key(match.group(1)))
            except Exception:  # noqa: BLE001 - etcd away: the token stays unknown here
                raise err from None
            if kv is None:
                raise
            try:
                self.records[match.group(1)] = TokenRecord.from_bytes(kv.value)
            except (ValueError, KeyError, TypeError):
                raise err from None
            return self.verify(token)

    def standing(self, token_id: str) -> Unauthenticated | None:
        """None while the token may still be used (a stream that began with it goes on)."""
        record = self.records.get(token_id)
        if record is None:
            return Unauthenticated(f"token {token_id} is no longer known here", "token_unknown")
        return record.standing(time.time())

    async def issue(self, user: str, ttl_seconds: float, description: str) -> tuple[str, TokenRecord]:
        """Store a new token for `user`; its text (shown once) and record."""
        token, record = new_token(user, ttl_seconds, description, time.time())
        await self._etcd.put(token_key(record.id), record.to_bytes())
        self.records[record.id] = record
        return token, record

    async def revoke(self, token_id: str) -> TokenRecord:
        """Mark a token revoked (UnknownToken when there is none); its record as stored."""
        kv = await self._etcd.get(token_key(token_id))
        if kv is None:
            raise UnknownToken(f"no token {token_id} was issued here")
        record = TokenRecord.from_bytes(kv.value)
        if not record.revoked_at:
            record = replace(record, revoked_at=time.time())
            await self._etcd.put(token_key(token_id), record.to_bytes())
        self.records[token_id] = record
        return record

    async def prune(self, now: float, keep_seconds: float = ENDED_KEPT_SECONDS) -> list[str]:
        """Delete the records of tokens that ended more than `keep_seconds` before `now` (from
        etcd: every process following the book drops them on the watch event); their ids."""
        await self.load()
        gone = sorted(r.id for r in self.records.values() if r.ended_at() and r.ended_at() + keep_seconds <= now)
        for token_id in gone:
            record = self.records.pop(token_id, None)  # before the await: a watch event may drop it too
            if record is None:
                continue
            await self._etcd.delete(token_key(token_id))
            log.info("token %s of user %r ended %s: its record is deleted", token_id, record.user,
                     _when(record.ended_at()))
        return gone

    async def listing(self) -> list[TokenRecord]:
        """Every token issued here, oldest first."""
        await self.load()
        return sorted(self.records.values(), key=lambda r: r.issued_at)
