"""Who may do what, as the realm says (pure): the permissions of the realm's users, and the
caller of one call checked against them.

`Rules.of(realm)` reads the realm's `auth`, `roles` and `users` (`strongroom.realm.access` says
what they mean). A servicer asks `strongroom.security.guard` for the call's `Access` (None while
the realm does not enable auth: nothing is checked) and `Access.check(action, store,
destination)` raises `PermissionDenied` naming the missing permission, or `Unauthenticated`
when the call's token was revoked or ran out since the call began (a long stream).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from strongroom.errors import PermissionDenied, StrongroomError
from strongroom.realm.access import Action, Grant
from strongroom.realm.model import Realm
from strongroom.security import refusals

__all__ = ["Access", "Action", "Rules", "rules_of"]


@dataclass(frozen=True)
class Rules:
    """The permissions of one realm version: each user's grants."""

    enabled: bool
    grants: dict[str, tuple[Grant, ...]]

    @classmethod
    def of(cls, realm: Realm) -> Rules:
        roles = {r.name: r for r in realm.roles}
        grants = {u.name: tuple(g for name in u.roles if name in roles for g in roles[name].permissions)
                  for u in realm.users}
        return cls(realm.auth.enabled, grants)

    def allows(self, user: str, action: Action, store: str | None = None, destination: str | None = None) -> bool:
        """Whether `user` may do `action`: on `destination` of `store` (publish, subscribe), on
        `store` (browse, administer of one store), or on the whole realm (`store` None)."""
        for grant in self.grants.get(user, ()):
            if action not in grant.actions and not (action is Action.BROWSE and Action.ADMINISTER in grant.actions):
                continue
            if store is None:
                if not grant.covers_all_stores():
                    continue
            elif not fnmatchcase(store, grant.store):
                continue
            if destination is not None and action in (Action.PUBLISH, Action.SUBSCRIBE) and not any(
                    fnmatchcase(destination, p) for p in grant.destinations):
                continue
            return True
        return False

    def missing(self, user: str, action: Action, store: str | None = None,
                destination: str | None = None) -> str | None:
        """None when allowed, else the sentence that says what `user` lacks."""
        if self.allows(user, action, store, destination):
            return None
        on = (f"destination {destination!r} of store {store!r}" if destination is not None and store is not None
              else f"destination {destination!r}" if destination is not None
              else f"store {store!r}" if store is not None else "the whole realm (store '*')")
        if user not in self.grants:
            return f"user {user!r} is not a user of the realm, so it has no permission {action.value!r} on {on}"
        return f"user {user!r} has no permission {action.value!r} on {on}"


_RULES: list[tuple[weakref.ref[Realm], Rules]] = []
"""The rules of the last few realm objects asked about (a process holds one realm in force)."""


def rules_of(realm: Realm) -> Rules:
    """The rules of `realm`, made once per realm object."""
    for ref, rules in _RULES:
        if ref() is realm:
            return rules
    rules = Rules.of(realm)
    _RULES.insert(0, (weakref.ref(realm), rules))
    del _RULES[4:]
    return rules


@dataclass
class Access:
    """The caller of one call (or stream) as a user of the realm: checked at each thing it asks.

    `rules` gives the realm version in force (a stream that outlives a realm change is checked
    against the new one); `still_valid` the call's token's standing (None for a certificate)."""

    user: str
    via: str
    """How the caller proved it: "certificate" or "token <id>"."""
    rules: Callable[[], Rules]
    still_valid: Callable[[], StrongroomError | None] | None = None
    _allowed: set[tuple[Action, str | None, str | None]] = field(default_factory=set, repr=False)
    _rules_seen: Rules | None = field(default=None, repr=False)

    def check(self, action: Action, store: str | None = None, destination: str | None = None) -> None:
        """Return when the caller may do this; raise `PermissionDenied` (metadata `permission`:
        the action, `refusal`: "not_granted") or the token's refusal otherwise."""
        if self.still_valid is not None:
            refused = self.still_valid()
            if refused is not None:
                refusals.count("grpc", refused.metadata.get("refusal", "unauthenticated"), refused.message)
                raise refused
        rules = self.rules()
        if not rules.enabled:  # a realm version that turned auth off: nothing to check any more
            return
        if rules is not self._rules_seen:
            self._allowed.clear()
            self._rules_seen = rules
        key = (action, store, destination)
        if key in self._allowed:
            return
        if len(self._allowed) > 10_000:  # a stream over ever new destinations: memory stays bounded
            self._allowed.clear()
        why = rules.missing(self.user, action, store, destination)
        if why is not None:
            refusals.count("grpc", "not_granted", f"{action.value}: {why} ({self.via})")
            raise PermissionDenied(f"permission {action.value!r} denied: {why} (authenticated by {self.via})",
                                   action.value, "not_granted")
        self._allowed.add(key)
