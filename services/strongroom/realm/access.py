"""Users, roles and permissions of the realm: its `auth`, `roles` and `users` sections, and the
checks they must pass.

    auth:
      enabled: true                 # default false: every holder of a certificate may do anything
    roles:
      - name: billing-app
        permissions:
          - actions: [publish, subscribe]
            store: default          # a store name or a glob; default "*"
            destinations: ["orders.*", "billing.queue"]   # globs over destination, endpoint and map names
          - actions: [browse]
    users:
      - name: billing               # a client certificate's strongroom://user/billing, or a token's user
        roles: [billing-app]

Four actions: `publish` (publish, send units of work, write maps), `subscribe` (subscribe, ack,
receive and settle units of work, durable subscriptions, read maps), `browse` (status, durable
lists, the realm, traces) and `administer` (realm apply, step-down, durable delete, store
operations, DR activation, tokens, tracing). `administer` includes `browse`. A grant's `store`
and `destinations` are glob patterns; `destinations` matter for publish and subscribe only.
A browse or administer call that concerns one store needs a grant of that store; one that
concerns the whole cluster or realm needs a grant whose store is `*`.

The rules the realm's users are checked against at each call are `strongroom.security.access`'s.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["Action", "Auth", "Grant", "Role", "User", "check_access"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")
_GLOB_CHARS = set("*?[")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Action(str, Enum):
    """What a permission allows."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    BROWSE = "browse"
    ADMINISTER = "administer"


def _check_name(v: str, what: str) -> str:
    if not _NAME_RE.match(v):
        raise ValueError(f"{what} name must be 1-63 letters, digits, '.', '_', '@' or '-', starting with a letter "
                         f"or digit")
    return v


class Grant(_Model):
    """One permission of a role: actions on the destinations of some stores."""

    actions: list[Action]
    """What it allows (at least one)."""
    store: str = "*"
    """The store (a name, or a glob over store names) it applies to."""
    destinations: list[str] = ["*"]
    """Destination, endpoint and map names (globs) publish and subscribe are allowed on."""

    @field_validator("actions")
    @classmethod
    def _actions(cls, v: list[Action]) -> list[Action]:
        if not v:
            raise ValueError("a permission names at least one action (publish, subscribe, browse, administer)")
        return v

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        if not v:
            raise ValueError("store must be a store name or a glob such as '*'")
        return v

    @field_validator("destinations")
    @classmethod
    def _destinations(cls, v: list[str]) -> list[str]:
        if not v or any(not p for p in v):
            raise ValueError("destinations must list at least one name or glob, none of them empty")
        return v

    def covers_all_stores(self) -> bool:
        """Whether the grant applies to every store (its store pattern is `*`)."""
        return self.store == "*"


class Role(_Model):
    """A named set of permissions."""

    name: str
    permissions: list[Grant] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "role")


class User(_Model):
    """A person or an application: a client certificate names it (`strongroom://user/<name>`), or a
    bearer token issued for it (`strongroom auth issue`)."""

    name: str
    roles: list[str] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "user")


class Auth(_Model):
    """Whether calls are checked against the users' permissions."""

    enabled: bool = False
    """false (default): every holder of a certificate of the deployment's authority may make every
    client and admin call (TLS still decides who may connect); true: a call is made as a user
    (its certificate's or its token's) and needs a permission of one of the user's roles."""


def _is_glob(pattern: str) -> bool:
    return bool(_GLOB_CHARS & set(pattern))


def check_access(auth: Auth, roles: list[Role], users: list[User],
                 stores: set[str]) -> list[tuple[tuple[Any, ...], str]]:
    """The problems of the realm's access sections, as (path, sentence): duplicate names, a user
    naming an undefined role, a grant naming a store the realm does not define (by name, not a
    glob), and auth enabled with no user who may administer the whole realm (nobody could
    apply the next version)."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    by_name: dict[str, Role] = {}
    for i, role in enumerate(roles):
        if role.name in by_name:
            problems.append((("roles", i, "name"), f"role {role.name!r} appears twice"))
        by_name[role.name] = role
        for j, grant in enumerate(role.permissions):
            if not _is_glob(grant.store) and grant.store not in stores:
                problems.append((("roles", i, "permissions", j, "store"),
                                 f"role {role.name!r} grants on store {grant.store!r}, which the realm does not "
                                 f"define (a glob such as 'orders-*' may name stores yet to come)"))
    seen: set[str] = set()
    administrators = []
    for i, user in enumerate(users):
        if user.name in seen:
            problems.append((("users", i, "name"), f"user {user.name!r} appears twice"))
        seen.add(user.name)
        for j, name in enumerate(user.roles):
            if name not in by_name:
                problems.append((("users", i, "roles", j),
                                 f"user {user.name!r} has role {name!r}, which the realm does not define"))
        if any(g.covers_all_stores() and Action.ADMINISTER in g.actions
               for name in user.roles if name in by_name for g in by_name[name].permissions):
            administrators.append(user.name)
    if auth.enabled and not administrators:
        problems.append((("auth", "enabled"),
                         "auth is enabled but no user may administer the whole realm (a role granting "
                         "[administer] on store '*'): nobody could apply the next realm version"))
    return problems
