"""Users and permissions in the chart (realm.auth): the generated realm enables auth by default, with
the values' roles and users and the realm-apply Job's own user, whose certificate names it and who
may always apply the next realm version; without TLS no caller can be authenticated, so the
generated realm leaves auth off. Every realm is parsed by the realm service's own validator."""

from __future__ import annotations

from typing import Any

import pytest
from chartkit import Rendered, fullname, helm, render

from strongroom.realm.model import Realm, parse_realm
from strongroom.security.access import Action, rules_of

APPLIER = "strongroom-realm-apply"


def realm_of(r: Rendered) -> Realm:
    return parse_realm(r.get("ConfigMap", f"{fullname(r.values)}-realm")["data"]["realm.yaml"], "realm ConfigMap")


def _uri(r: Rendered, secret: str) -> str:
    cert = next(d for d in r.all("Certificate") if d["spec"]["secretName"] == secret)
    uris: list[str] = cert["spec"]["uris"]
    return uris[0]


def test_auth_is_on_by_default_with_an_operator_and_the_realm_apply_jobs_own_user() -> None:
    r = render({})
    realm = realm_of(r)
    rules = rules_of(realm)
    assert rules.enabled
    assert {u.name for u in realm.users} == {APPLIER, "admin"}
    # The Job applies the realm as the user its certificate names, which may administer everything.
    assert _uri(r, f"{fullname(r.values)}-realm-apply-tls") == f"strongroom://user/{APPLIER}"
    assert rules.allows(APPLIER, Action.ADMINISTER) and not rules.allows(APPLIER, Action.PUBLISH, "default", "x")
    assert rules.allows("admin", Action.ADMINISTER) and rules.allows("admin", Action.PUBLISH, "default", "orders")
    assert not rules.allows("someone", Action.BROWSE)


def test_the_values_roles_and_users_are_the_realms() -> None:
    values: dict[str, Any] = {"realm": {"auth": {
        "roles": [{"name": "orders-app", "permissions": [
            {"actions": ["publish", "subscribe"], "store": "default", "destinations": ["orders.*"]}]}],
        "users": [{"name": "orders", "roles": ["orders-app"]}]}}}
    rules = rules_of(realm_of(render(values)))
    assert rules.enabled
    assert rules.allows("orders", Action.PUBLISH, "default", "orders.new")
    assert not rules.allows("orders", Action.PUBLISH, "default", "billing.new")
    assert not rules.allows("orders", Action.BROWSE)
    # The Job's user stays: values without an administrator still make a realm that can be changed.
    assert rules.allows(APPLIER, Action.ADMINISTER)


@pytest.mark.parametrize(("values", "enabled"), [
    ({"realm": {"auth": {"enabled": False}}}, False),
    ({"tls": {"enabled": False}}, False),
    ({"realm": {"auth": {"enabled": True}}}, True),
])
def test_auth_is_on_only_with_tls_and_where_the_values_ask(values: dict[str, Any], enabled: bool) -> None:
    assert realm_of(render(values)).auth.enabled is enabled


@pytest.mark.parametrize(("auth", "said"), [
    ({"users": [{"name": "x", "roles": ["nope"]}]},
     "realm.auth.users: user x has role nope, which realm.auth.roles does not define."),
    ({"roles": [{"name": "operator"}, {"name": "operator"}]},
     "realm.auth.roles names role operator twice (or the chart's own chart-realm-apply): give each role one entry."),
    ({"users": [{"name": APPLIER, "roles": ["operator"]}]},
     f"realm.auth.users names user {APPLIER}, the chart's own realm-apply Job user: choose another name."),
])
def test_users_and_roles_that_cannot_make_a_realm_are_refused_with_a_sentence(auth: dict[str, Any], said: str) -> None:
    with pytest.raises(helm.HelmError) as exc:
        render({"realm": {"auth": auth}})
    assert "STRONGROOM VALUES:" in str(exc.value) and said in str(exc.value)
