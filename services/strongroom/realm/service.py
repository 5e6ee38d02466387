"""The gRPC face of the realm service: a thin `RealmService` servicer over `RealmStore` and the
site's bearer tokens (`TokenBook`).

With the realm's auth enabled, each call is checked against the realm in force
(`strongroom.security.guard`): Apply and the token calls need `administer` on the whole realm,
the reads `browse`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import realm_pb2, realm_pb2_grpc
from strongroom.errors import (DataCorruption, InvalidArgument, NotOperational, PersistenceUnavailable, RealmInvalid,
                               StrongroomError)
from strongroom.etcd import EtcdClient, EtcdUnavailable
from strongroom.grpcerrors import abort_with
from strongroom.realm.model import Realm, parse_realm
from strongroom.realm.store import DEFAULT_SOURCE, RealmStore, RealmVersion
from strongroom.security.access import Action
from strongroom.security.guard import Guard
from strongroom.security.tokens import TokenBook, TokenRecord, token_id_of
from strongroom.reflection import enable_reflection
from strongroom.channels import add_port, new_server

__all__ = [
    "SERVICE_NAME",
    "Problem",
    "RealmServicer",
    "create_server",
    "parse_problem",
]

SERVICE_NAME: str = realm_pb2.DESCRIPTOR.services_by_name["RealmService"].full_name

log = logging.getLogger("strongroom.realm")
T = TypeVar("T")

PRUNE_EVERY_SECONDS = 3600.0
"""How often the realm service deletes the records of tokens that ended (security/tokens.py)."""
PRUNE_RETRY_SECONDS = 60.0
"""How soon it tries again after an attempt failed (etcd not answering yet, at a start)."""

# The whole status travels in trailers (grpc-message plus grpc-status-details-bin, which holds
# the message again and the metadata, base64-encoded); clients reject trailers over 8 KiB by
# default, so a huge broken document must not list every problem on the wire.
_WIRE_PROBLEM_BUDGET = 1500

_PROBLEM_RE = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<column>\d+): (?P<rest>.*)$", re.DOTALL)


@dataclass(frozen=True)
class Problem:
    """One realm problem split into its location and message."""

    file: str
    line: int
    column: int
    path: str
    """Path inside the document such as "stores[1].cluster"; empty for YAML syntax errors."""
    message: str


def parse_problem(text: str, source: str = "") -> Problem:
    """Split "file:line:col: path: message" (the path is absent for YAML-level problems)."""
    rest = text
    file, line, column = source, 0, 0
    if source and text.startswith(source + ":"):
        # The source name is known, so a colon inside it (C:\\realm.yaml) cannot mislead.
        m = re.match(r"^(\d+):(\d+): (.*)$", text[len(source) + 1:], re.DOTALL)
        if m:
            line, column, rest = int(m.group(1)), int(m.group(2)), m.group(3)
    else:
        m = _PROBLEM_RE.match(text)
        if m:
            file, line, column, rest = m["file"], int(m["line"]), int(m["column"]), m["rest"]
    path, sep, message = rest.partition(": ")
    # A path is one token ("clusters[0].storage", "(document)"); YAML messages are sentences.
    if not sep or not path or any(c.isspace() for c in path):
        path, message = "", rest
    return Problem(file=file, line=line, column=column, path=path, message=message)


def _to_pb(version: RealmVersion, with_document: bool = True) -> realm_pb2.RealmVersion:
    return realm_pb2.RealmVersion(
        version=version.version,
        yaml=version.yaml if with_document else "",
        normalized_json=version.normalized_json if with_document else "",
        applied_at=version.applied_at,
        digest=version.digest,
        source_name=version.source_name,
    )


def _for_wire(err: RealmInvalid) -> RealmInvalid:
    """The error as sent: problems bounded in size, and listed in ErrorInfo metadata too."""
    shown: list[str] = []
    size = 0
    for problem in err.problems:
        if shown and size + len(problem) > _WIRE_PROBLEM_BUDGET:
            break
        shown.append(problem[:_WIRE_PROBLEM_BUDGET])
        size += len(shown[-1])
    if len(shown) < len(err.problems):
        shown.append(f"... and {len(err.problems) - len(shown)} more problems (run `strongroom realm validate`)")
    wire = RealmInvalid(shown)
    wire.metadata.update({"problems": "\n".join(shown), "problem_count": str(len(err.problems))})
    return wire


async def _etcd_call(work: Awaitable[T]) -> T:
    """`work` (a token book's etcd reads and writes), with etcd's failures as the domain's: etcd
    away is PSTORE_UNAVAILABLE (retriable), a record that does not decode DATA_CORRUPTION."""
    try:
        return await work
    except (EtcdUnavailable, grpc.aio.AioRpcError) as exc:
        raise PersistenceUnavailable(f"cannot reach etcd for the tokens: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise DataCorruption(f"a token record in etcd does not decode: {exc}") from None


def _token_info(record: TokenRecord) -> realm_pb2.TokenInfo:
    return realm_pb2.TokenInfo(id=record.id, user=record.user, issued_at=record.issued_at,
                               expires_at=record.expires_at, description=record.description,
                               revoked_at=record.revoked_at)


class RealmServicer(realm_pb2_grpc.RealmServiceServicer):
    """RealmService over a RealmStore: delegate, map domain errors, build replies."""

    def __init__(self, store: RealmStore, applies: Counter[str] | None = None,
                 tokens: TokenBook | None = None) -> None:
        self._store = store
        self.applies: Counter[str] = applies if applies is not None else Counter()
        """Applies answered, by outcome: "accepted", or the reason of the refusal (its metrics)."""
        self.realm: Realm | None = None
        """The realm in force, followed (`follow`): what calls are checked against."""
        self.tokens = tokens
        self.loaded = False
        """Whether `realm` was read from etcd (until then every call is refused, retriably)."""
        self.guard = Guard(lambda: self.realm, tokens, ready=lambda: self.loaded)

    async def load(self, retry_delay: float = 0.5) -> None:
        """Read the realm in force and the tokens once, retrying while etcd does not answer."""
        while True:
            try:
                current = await self._store.current()
                if self.tokens is not None:
                    await self.tokens.load()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away: calls are refused until it answers
                log.warning("cannot read the realm and the tokens from etcd yet: %s", exc)
                await asyncio.sleep(retry_delay)
                continue
            if not self.loaded:
                self.realm = current.realm() if current is not None else None
                self.loaded = True
            return

    async def follow(self) -> None:
        """Keep `realm` the version in force and the token book current, until cancelled."""
        async def realms() -> None:
            await self.load()
            async for version in self._store.watch():
                self.realm = version.realm()
                self.loaded = True

        if self.tokens is None:
            await realms()
            return
        await asyncio.gather(realms(), self.tokens.follow(), self._prune_tokens())

    async def _prune_tokens(self) -> None:
        """Delete the records of tokens that ended long ago (`TokenBook.prune`), every
        PRUNE_EVERY_SECONDS, until cancelled."""
        assert self.tokens is not None
        while True:
            try:
                await self.tokens.prune(time.time())
            except Exception as exc:  # noqa: BLE001 - pruning goes on whatever one attempt met
                log.warning("cannot prune the records of ended tokens now (again in %.0f s): %s",
                            PRUNE_RETRY_SECONDS, exc)
                await asyncio.sleep(PRUNE_RETRY_SECONDS)
                continue
            await asyncio.sleep(PRUNE_EVERY_SECONDS)

    async def Apply(self, request: realm_pb2.ApplyRealmRequest,
                    context: grpc.aio.ServicerContext) -> realm_pb2.RealmVersion:  # type: ignore[type-arg]
        """Validate and store a new version."""
        await self.guard.require(context, Action.ADMINISTER)
        try:
            version = await self._store.apply(request.yaml, request.source_name or DEFAULT_SOURCE,
                                              request.expected_version)
        except RealmInvalid as err:
            self.applies[err.reason] += 1
            await abort_with(context, _for_wire(err))
        except StrongroomError as err:
            self.applies[err.reason] += 1
            await abort_with(context, err)
        self.applies["accepted"] += 1
        return _to_pb(version)

    async def Get(self, request: realm_pb2.GetRealmRequest,
                  context: grpc.aio.ServicerContext) -> realm_pb2.RealmVersion:  # type: ignore[type-arg]
        """The current version, or the requested one."""
        await self.guard.require(context, Action.BROWSE)
        try:
            version = await self._store.get(request.version)
        except StrongroomError as err:
            await abort_with(context, err)
        return _to_pb(version)

    async def Validate(self, request: realm_pb2.ValidateRealmRequest,
                       context: grpc.aio.ServicerContext) -> realm_pb2.ValidateRealmResponse:  # type: ignore[type-arg]
        """Validate without storing; problems come back as data, not as an error status."""
        await self.guard.require(context, Action.BROWSE)
        source = request.source_name or DEFAULT_SOURCE
        try:
            realm = parse_realm(request.yaml, source)
        except RealmInvalid as err:
            problems = [parse_problem(p, source) for p in err.problems]
            return realm_pb2.ValidateRealmResponse(valid=False, problems=[
                realm_pb2.RealmProblem(file=p.file, line=p.line, column=p.column, path=p.path,
                                       message=p.message) for p in problems])
        return realm_pb2.ValidateRealmResponse(valid=True, normalized_json=realm.to_json())

    async def Watch(self, request: realm_pb2.WatchRealmRequest,
                    context: grpc.aio.ServicerContext) -> AsyncIterator[realm_pb2.RealmVersion]:  # type: ignore[type-arg]
        """The current version, then each new one, until the client cancels."""
        await self.guard.require(context, Action.BROWSE)
        try:
            async for version in self._store.watch():
                # Each version as the realm in force lets the caller see it (a token revoked or a
                # grant taken away meanwhile ends the stream).
                await self.guard.require(context, Action.BROWSE)
                yield _to_pb(version)
        except StrongroomError as err:
            await abort_with(context, err)

    async def History(self, request: realm_pb2.RealmHistoryRequest,
                      context: grpc.aio.ServicerContext) -> realm_pb2.RealmHistoryResponse:  # type: ignore[type-arg]
        """Every version, oldest first, without the document text."""
        await self.guard.require(context, Action.BROWSE)
        try:
            versions = await self._store.history()
        except StrongroomError as err:
            await abort_with(context, err)
        return realm_pb2.RealmHistoryResponse(versions=[_to_pb(v, with_document=False) for v in versions])


    async def IssueToken(self, request: realm_pb2.IssueTokenRequest,
                         context: grpc.aio.ServicerContext) -> realm_pb2.IssuedToken:  # type: ignore[type-arg]
        """A new bearer token for a user of the realm in force."""
        await self.guard.require(context, Action.ADMINISTER)
        try:
            realm = self.realm or (await self._store.get(0)).realm()
            if not request.user:
                raise InvalidArgument("user is required: the realm user the token authenticates")
            if all(u.name != request.user for u in realm.users):
                known = ", ".join(u.name for u in realm.users) or "(none)"
                raise InvalidArgument(f"the realm has no user {request.user!r} (its users: {known}); add it to "
                                      f"the realm's users first")
            token, record = await _etcd_call(self._tokens().issue(request.user, request.ttl_seconds,
                                                                  request.description))
        except StrongroomError as err:
            await abort_with(context, err)
        return realm_pb2.IssuedToken(token=token, info=_token_info(record))

    async def RevokeToken(self, request: realm_pb2.RevokeTokenRequest,
                          context: grpc.aio.ServicerContext) -> realm_pb2.TokenInfo:  # type: ignore[type-arg]
        """Mark a token revoked."""
        await self.guard.require(context, Action.ADMINISTER)
        token_id = token_id_of(request.id)
        try:
            if not token_id:
                raise InvalidArgument("id is required: the token's id (or its text)")
            record = await _etcd_call(self._tokens().revoke(token_id))
        except StrongroomError as err:
            await abort_with(context, err)
        return _token_info(record)

    async def ListTokens(self, request: realm_pb2.ListTokensRequest,
                         context: grpc.aio.ServicerContext) -> realm_pb2.ListTokensResponse:  # type: ignore[type-arg]
        """Every token issued at this site."""
        await self.guard.require(context, Action.ADMINISTER)
        try:
            listed = await _etcd_call(self._tokens().listing())
        except StrongroomError as err:
            await abort_with(context, err)
        return realm_pb2.ListTokensResponse(tokens=[_token_info(r) for r in listed])

    def _tokens(self) -> TokenBook:
        if self.tokens is None:
            raise NotOperational("this realm service keeps no tokens")
        return self.tokens


_FOLLOWERS: set[asyncio.Task[None]] = set()
"""The servers' followers (a task nobody holds could be collected while it runs)."""


async def create_server(etcd_endpoints: str, listen: str, etcd: EtcdClient | None = None,
                        applies: Counter[str] | None = None) -> tuple[grpc.aio.Server, int]:
    """Build and start the realm gRPC server (realm, health, reflection); return it and its port.

    `etcd` lets the caller share its client (and own its lifetime); otherwise one is created
    for `etcd_endpoints`. `applies` counts the applies answered, by outcome (the metrics).
    """
    client = etcd if etcd is not None else EtcdClient(etcd_endpoints)
    server = new_server()
    servicer = RealmServicer(RealmStore(client), applies, TokenBook(client))
    # What calls are checked against from the first call on (a realm not read yet would check
    # nothing: until `load` has read it, calls are refused with a retriable UNAVAILABLE).
    try:
        await asyncio.wait_for(servicer.load(), 5.0)
    except asyncio.TimeoutError:
        pass  # `follow` goes on reading
    realm_pb2_grpc.add_RealmServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), server)
    port = add_port(server, listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    # Follows the realm in force and the tokens for as long as the server runs.
    follower = asyncio.create_task(servicer.follow(), name="realm-and-tokens")
    _FOLLOWERS.add(follower)
    follower.add_done_callback(_FOLLOWERS.discard)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port
