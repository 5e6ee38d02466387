"""The realm's users, roles and permissions (pure): what the realm file accepts, and who may do what."""

from __future__ import annotations

import time

import pytest

from strongroom.errors import PermissionDenied, RealmInvalid, Unauthenticated
from strongroom.realm.model import DEFAULT_REALM_YAML, parse_realm
from strongroom.security.access import Access, Action, Rules, rules_of
from strongroom.security.tokens import TokenRecord, new_token, verify

AUTH = DEFAULT_REALM_YAML + """\
auth:
  enabled: true
roles:
  - name: operator
    permissions:
      - actions: [administer, publish, subscribe]
  - name: orders-app
    permissions:
      - actions: [publish, subscribe]
        store: default
        destinations: ["orders.*", "audit"]
  - name: viewer
    permissions:
      - actions: [browse]
        store: "def*"
users:
  - name: admin
    roles: [operator]
  - name: app
    roles: [orders-app]
  - name: watcher
    roles: [viewer]
  - name: nobody
"""


def _rules() -> Rules:
    return rules_of(parse_realm(AUTH))


def test_a_grant_allows_its_actions_on_its_destinations_of_its_stores_only() -> None:
    rules = _rules()
    assert rules.enabled
    assert rules.allows("app", Action.PUBLISH, "default", "orders.new")
    assert rules.allows("app", Action.SUBSCRIBE, "default", "audit")
    assert not rules.allows("app", Action.PUBLISH, "default", "billing.new")
    assert not rules.allows("app", Action.PUBLISH, "other", "orders.new")
    assert not rules.allows("app", Action.BROWSE)
    assert not rules.allows("app", Action.ADMINISTER, "default")


def test_store_scoped_browse_does_not_reach_the_whole_realm_and_administer_includes_browse() -> None:
    rules = _rules()
    assert rules.allows("watcher", Action.BROWSE, "default")
    assert not rules.allows("watcher", Action.BROWSE)  # the whole realm needs store "*"
    assert not rules.allows("watcher", Action.PUBLISH, "default", "orders.new")
    assert rules.allows("admin", Action.BROWSE)
    assert rules.allows("admin", Action.ADMINISTER)
    assert not rules.allows("nobody", Action.SUBSCRIBE, "default", "x")
    assert not rules.allows("ghost", Action.BROWSE)


def test_a_refusal_names_the_permission_and_what_it_was_asked_on() -> None:
    access = Access("app", "certificate", _rules)
    access.check(Action.PUBLISH, "default", "orders.1")
    with pytest.raises(PermissionDenied) as info:
        access.check(Action.PUBLISH, "default", "billing.1")
    err = info.value
    assert err.code == "PERMISSION_DENIED"
    assert err.metadata == {"permission": "publish", "refusal": "not_granted"}
    assert "user 'app' has no permission 'publish' on destination 'billing.1' of store 'default'" in err.message
    with pytest.raises(PermissionDenied, match="'ghost' is not a user of the realm"):
        Access("ghost", "token abc", _rules).check(Action.BROWSE)


def test_a_realm_change_takes_effect_on_an_access_already_made() -> None:
    current = [_rules()]
    access = Access("app", "certificate", lambda: current[0])
    access.check(Action.PUBLISH, "default", "orders.1")
    current[0] = rules_of(parse_realm(AUTH.replace('destinations: ["orders.*", "audit"]', 'destinations: ["audit"]')))
    with pytest.raises(PermissionDenied):
        access.check(Action.PUBLISH, "default", "orders.1")
    current[0] = rules_of(parse_realm(DEFAULT_REALM_YAML))  # auth off again: nothing is checked
    access.check(Action.PUBLISH, "default", "orders.1")
    access.check(Action.ADMINISTER)


def test_auth_off_by_default_and_the_realm_file_refuses_what_cannot_work() -> None:
    assert not rules_of(parse_realm(DEFAULT_REALM_YAML)).enabled
    cases = {
        "roles: [orders-app]": ("roles: [orders-ap]", "user 'app' has role 'orders-ap', which the realm does not define"),
        "        store: default\n": ("        store: defualt\n", "grants on store 'defualt', which the realm does not define"),
        "  - name: nobody\n": ("  - name: app\n", "user 'app' appears twice"),
        "actions: [browse]": ("actions: []", "a permission names at least one action"),
        "actions: [administer, publish, subscribe]": ("actions: [administer, publish, subscribe]\n        store: default",
                                                      "no user may administer the whole realm"),
    }
    for old, (new, said) in cases.items():
        with pytest.raises(RealmInvalid) as info:
            parse_realm(AUTH.replace(old, new, 1), "auth.yaml")
        assert any(said in p and p.startswith("auth.yaml:") for p in info.value.problems), info.value.problems
    with pytest.raises(RealmInvalid, match="'publsh' is not one of"):
        parse_realm(AUTH.replace("[browse]", "[publsh]"))


def test_a_token_is_checked_against_the_digest_of_its_secret() -> None:
    now = time.time()
    token, record = new_token("app", 0, "ci", now)
    assert token.startswith(f"srt_{record.id}_") and record.sha256 not in token
    assert TokenRecord.from_bytes(record.to_bytes()) == record
    book = {record.id: record}
    assert verify(book, token, now).user == "app"

    def refusal(text: str, records: dict[str, TokenRecord] = book, at: float = now) -> str:
        with pytest.raises(Unauthenticated) as info:
            verify(records, text, at)
        return info.value.metadata["refusal"]

    assert refusal("hello") == "token_malformed"
    assert refusal(token[:-1] + ("0" if token[-1] != "0" else "1")) == "token_forged"
    other, _ = new_token("app", 0, "", now)
    assert refusal(other) == "token_unknown"
    revoked = TokenRecord(**{**record.__dict__, "revoked_at": now})
    assert refusal(token, {record.id: revoked}) == "token_revoked"
    short, brief = new_token("app", 5, "", now)
    assert verify({brief.id: brief}, short, now + 4).user == "app"
    assert refusal(short, {brief.id: brief}, now + 5) == "token_expired"


def test_a_stream_that_began_with_a_token_ends_when_it_is_revoked() -> None:
    standing: list[Unauthenticated | None] = [None]
    access = Access("app", "token x", _rules, lambda: standing[0])
    access.check(Action.PUBLISH, "default", "orders.1")
    standing[0] = Unauthenticated("revoked", "token_revoked")
    with pytest.raises(Unauthenticated):
        access.check(Action.PUBLISH, "default", "orders.1")
