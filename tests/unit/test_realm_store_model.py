"""Realm settings of the store model: defaults, and invalid combinations rejected at file:line."""

from __future__ import annotations

import json

import pytest

from strongroom.errors import RealmInvalid
from strongroom.realm.model import AckSync, LimitPolicyName, TemplateKind, TtlClock, parse_realm

BASE = """\
clusters:
  - name: c1
    storage: {storage}
    indexes_on_disk: {iod}
    members:
      - name: m1
  - name: c2
    members:
      - name: x1
stores:
  - name: s1
    cluster: c1
  - name: volatile
    cluster: c1
    replicated: false
  - name: other
    cluster: c2
{stores}
destinations:
{destinations}
  - name: "*.queue"
    kind: queue
    store: s1
  - name: "*"
    store: s1
{sections}
"""


def realm(stores: str = "", destinations: str = "", sections: str = "", storage: str = "disk-sync",
          iod: str = "false") -> str:
    return BASE.format(stores=stores, destinations=destinations, sections=sections, storage=storage, iod=iod)


def problems_of(text: str) -> list[str]:
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text, "realm.yaml")
    return info.value.problems


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_defaults_are_documented_values() -> None:
    r = parse_realm(realm())
    s1 = r.store("s1")
    assert s1 is not None
    assert (s1.max_messages, s1.max_bytes, s1.limit_policy, s1.routed, s1.maps) == (0, 0, LimitPolicyName.REJECT,
                                                                                     False, True)
    route = r.route("anything")
    assert route.ack_mode == AckSync.ASYNC and not route.queue and not route.endpoint
    rule = route.rule
    assert (rule.ttl_seconds, rule.retain_seconds, rule.redelivery_limit, rule.dead_letter) == (0, 0, 0, None)
    c1 = r.cluster("c1")
    assert c1 is not None and not c1.indexes_on_disk and c1.memory_budget_mb == 0
    normalized = json.loads(r.to_json())
    assert normalized["stores"][0]["limit_policy"] == "reject" and normalized["stores"][0]["maps"] is True


def test_routed_store_defaults_to_no_maps_and_refuses_explicit_maps() -> None:
    ok = parse_realm(realm(stores="  - name: wide\n    cluster: c1\n    routed: true\n"))
    assert ok.store("wide").maps is False  # type: ignore[union-attr]
    text = realm(stores="  - name: wide\n    cluster: c1\n    routed: true\n    maps: true\n")
    (p,) = problems_of(text)
    assert p.startswith(f"realm.yaml:{line_of(text, 'maps: true')}:") and "maps cannot be created in routed" in p


def test_queue_in_a_routed_store_is_rejected() -> None:
    text = realm(stores="  - name: wide\n    cluster: c1\n    routed: true\n",
                 destinations="  - name: jobs\n    kind: queue\n    store: wide\n")
    (p,) = problems_of(text)
    assert f":{line_of(text, 'kind: queue')}:" in p and "queues cannot be created in routed stores" in p


def test_indexes_on_disk_need_disk_storage() -> None:
    text = realm(storage="memory", iod="true")
    (p,) = problems_of(text)
    assert f":{line_of(text, 'indexes_on_disk')}:" in p and "storage is memory" in p
    assert parse_realm(realm(iod="true")).cluster("c1").indexes_on_disk  # type: ignore[union-attr]


def test_max_bytes_below_the_message_size_is_rejected() -> None:
    text = realm(stores="  - name: tiny\n    cluster: c1\n    max_bytes: 100\n")
    (p,) = problems_of(text)
    assert f":{line_of(text, 'max_bytes: 100')}:" in p and "could never be stored" in p


@pytest.mark.parametrize(("options", "expected"), [
    ("    dead_letter: dlq.queue\n", "no redelivery_limit"),
    ("    redelivery_limit: 3\n    dead_letter: 'dl*'\n", "not a pattern"),
    ("    redelivery_limit: 3\n    dead_letter: orders\n", "maps back to the same destination rule"),
    ("    redelivery_limit: 3\n    dead_letter: elsewhere\n", "of cluster 'c2'"),
    ("    redelivery_limit: 3\n    dead_letter: vol.x\n", "same kind only"),
])
def test_dead_letter_must_be_a_usable_destination(options: str, expected: str) -> None:
    destinations = ("  - name: orders\n    store: s1\n" + options
                    + "  - name: elsewhere\n    store: other\n  - name: 'vol.*'\n    store: volatile\n")
    text = realm(destinations=destinations)
    problems = problems_of(text)
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("realm.yaml:") for p in problems)


def test_negative_ttl_is_located() -> None:
    text = realm(destinations="  - name: orders\n    store: s1\n    ttl_seconds: -1\n")
    (p,) = problems_of(text)
    assert f":{line_of(text, 'ttl_seconds')}:" in p and "greater than or equal to 0" in p


def test_a_time_to_live_runs_on_the_pseudo_clock_unless_the_rule_asks_for_the_wall_clock() -> None:
    r = parse_realm(realm(destinations="  - name: prices\n    store: s1\n    ttl_seconds: 10\n    ttl_clock: wall\n"
                                       "  - name: orders\n    store: s1\n    ttl_seconds: 10\n"))
    assert r.route("prices").rule.ttl_clock == TtlClock.WALL
    assert r.route("orders").rule.ttl_clock == TtlClock.PSEUDO
    assert json.loads(r.to_json())["destinations"][1]["ttl_clock"] == "pseudo"


def test_a_wall_ttl_clock_without_a_time_to_live_is_located() -> None:
    text = realm(destinations="  - name: prices\n    store: s1\n    ttl_clock: wall\n")
    (p,) = problems_of(text)
    assert p == (f"realm.yaml:{line_of(text, 'ttl_clock')}:5: destinations[0].ttl_clock: 'prices' sets ttl_clock: "
                 f"wall but no ttl_seconds; ttl_clock says which clock the time-to-live runs on (set ttl_seconds, "
                 f"or remove ttl_clock)")
    text = realm(destinations="  - name: prices\n    store: s1\n    ttl_seconds: 5\n    ttl_clock: sundial\n")
    (p,) = problems_of(text)
    assert p.startswith(f"realm.yaml:{line_of(text, 'sundial')}:5: destinations[0].ttl_clock: 'sundial' is not one of")
    assert "'pseudo'" in p and "'wall'" in p


def test_endpoints_and_templates() -> None:
    sections = """\
durable_templates:
  - name: latest
    kind: last-value
    key_field: sym
    ack_mode: sync
endpoints:
  - name: quotes
    store: s1
    template: latest
"""
    r = parse_realm(realm(sections=sections))
    route = r.route("quotes")
    assert route.endpoint and route.template is not None and route.template.kind == TemplateKind.LAST_VALUE
    assert route.ack_mode == AckSync.SYNC


@pytest.mark.parametrize(("sections", "needle", "expected"), [
    ("durable_templates:\n  - name: lv\n    kind: last-value\n", "name: lv", "needs key_field"),
    ("durable_templates:\n  - name: st\n    key_field: sym\n", "name: st", "applies only to last-value"),
    ("durable_templates:\n  - name: st\nendpoints:\n  - name: e\n    store: s1\n    template: nope\n",
     "template: nope", "does not define"),
    ("durable_templates:\n  - name: st\nendpoints:\n  - name: e\n    store: gone\n    template: st\n",
     "store: gone", "does not define"),
])
def test_bad_templates_and_endpoints_are_located(sections: str, needle: str, expected: str) -> None:
    text = realm(sections=sections)
    problems = problems_of(text)
    assert any(expected in p and f":{line_of(text, needle)}:" in p for p in problems), problems
