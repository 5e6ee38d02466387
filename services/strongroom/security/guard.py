"""The gRPC side of authentication and permissions: who a call is made by, and whether the realm
lets that user do what it asks.

A servicer asks `Guard.caller(context)` for the call's `Access` (None: nothing to check) and
`Guard.require(context, action, store, destination)` for one permission; each ends the call
with the refusal (counted and logged as in `strongroom.security.refusals`) when it fails.

Who the caller is:
- nothing is checked while the realm does not enable auth, nor in a process without TLS (no
  certificate can prove anyone; such a process says so at start), nor for a process of the
  deployment (a member, router, DR or realm service certificate: their calls between themselves
  are `strongroom.security.calls`' to check; etcd's certificate is not one of them);
- a bearer token (`authorization: Bearer srt_...` metadata) names its user; it must be valid
  here (issued by this site's realm service, not revoked, not ended);
- else a user's certificate (`strongroom://user/<name>`) names it;
- else the call is refused UNAUTHENTICATED (`no_identity`).
A token counts over a user's certificate: an application may share its host's client
certificate and still call as its own user.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from strongroom.errors import PersistenceUnavailable, StrongroomError, Unauthenticated
from strongroom.grpcerrors import abort_with
from strongroom.realm.model import Realm
from strongroom.security import refusals
from strongroom.security.access import Access, Action, Rules, rules_of
from strongroom.security.identity import Kind
from strongroom.security.tls import current, peer_identity
from strongroom.security.tokens import TokenBook

__all__ = ["AUTHORIZATION", "DEPLOYMENT", "Guard"]

log = logging.getLogger("strongroom.security")

DEPLOYMENT = frozenset({Kind.MEMBER, Kind.ROUTER, Kind.DR, Kind.REALM})
"""The certificate kinds of the deployment's own processes: not users, not checked here."""

AUTHORIZATION = "authorization"
"""The metadata key of a bearer token (`Bearer <token>`), as every gRPC stack sends it."""

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]


def _bearer(context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else value.strip()
    return ""


class Guard:
    """Authentication and permission checks of one process's servicers."""

    def __init__(self, realm: Callable[[], Realm | None], tokens: TokenBook | None,
                 ready: Callable[[], bool] | None = None) -> None:
        self._realm = realm
        self.tokens = tokens
        self._ready = ready
        """False while the process has not read the realm yet: every call is refused, retriably
        (a realm not read would check nothing)."""
        self._warned = False

    async def access(self, context: Context) -> Access | None:
        """The call's caller as a user of the realm, None when nothing is checked;
        `Unauthenticated` when the call proves no user."""
        if self._ready is not None and not self._ready():
            raise PersistenceUnavailable("this process has not read the realm yet (etcd unreachable?): try again")
        realm = self._realm()
        if realm is None or not realm.auth.enabled:
            return None
        if current() is None:
            if not self._warned:
                self._warned = True
                log.warning("the realm enables auth, but this process runs without TLS: no caller can be "
                            "authenticated, so no permission is checked")
            return None
        peer = peer_identity(context)
        if peer is not None and peer.kind in DEPLOYMENT:
            return None
        if peer is not None and peer.kind is not Kind.USER:
            raise Unauthenticated(f"{peer} is not a user of the realm, nor a process that calls clients' calls",
                                  "wrong_identity")

        def rules() -> Rules:
            now = self._realm()
            return rules_of(now if now is not None else realm)

        token = _bearer(context)
        if token:
            if self.tokens is None:
                raise Unauthenticated("this process takes no bearer tokens", "token_unknown")
            record = await self.tokens.verify_fresh(token)
            book = self.tokens
            return Access(record.user, f"token {record.id}", rules, lambda: book.standing(record.id))
        if peer is not None:
            return Access(peer.name, "certificate", rules)
        raise Unauthenticated("the realm requires a user: present a user's client certificate or a bearer token "
                              "(authorization: Bearer srt_...)", "no_identity")

    async def caller(self, context: Context) -> Access | None:
        """`access`, ending the call with its refusal (counted and logged)."""
        try:
            return await self.access(context)
        except StrongroomError as err:
            refusals.count("grpc", err.metadata.get("refusal", "unauthenticated"), err.message, context.peer())
            await abort_with(context, err)

    async def require(self, context: Context, action: Action, store: str | None = None,
                      destination: str | None = None,
                      store_of: Callable[[str], str] | None = None) -> Access | None:
        """End the call unless its caller may do `action` (on `destination` of `store`, on `store`,
        or on the whole realm when neither is given). `store_of` names the store of `destination`
        when `store` is not given, asked only when something is checked (UnknownDestination ends
        the call too)."""
        access = await self.caller(context)
        if access is not None:
            try:
                if store is None and destination and store_of is not None:
                    store = store_of(destination)
                access.check(action, store, destination)  # counts its own refusals
            except StrongroomError as err:
                await abort_with(context, err)
        return access
