"""The realm document: validation with exact file:line:column locations, and destination lookup."""

from __future__ import annotations

import json

import pytest

from strongroom.errors import RealmInvalid, UnknownDestination
from strongroom.realm.model import (
    DEFAULT_REALM_YAML,
    DestinationKind,
    PublisherMode,
    Realm,
    StorageMode,
    parse_realm,
)

MINIMAL = """\
clusters:
  - name: c1
    members:
      - name: m1
stores:
  - name: s1
    cluster: c1
destinations:
  - name: orders
    store: s1
"""


def problems_of(text: str, source: str = "realm.yaml") -> list[str]:
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text, source)
    assert info.value.problems, "RealmInvalid must list at least one problem"
    return info.value.problems


def test_default_realm_is_valid_and_normalised() -> None:
    realm = parse_realm(DEFAULT_REALM_YAML, "default.yaml")
    assert [c.name for c in realm.clusters] == ["default"]
    assert [m.name for m in realm.clusters[0].members] == ["m1", "m2", "m3"]
    assert realm.clusters[0].storage is StorageMode.DISK_SYNC
    assert realm.store("default") is not None
    assert realm.store("default").publisher_mode is PublisherMode.STORE_CONFIRM_SEND  # type: ignore[union-attr]
    normalized = json.loads(realm.to_json())
    # Defaults the document leaves out are filled in.
    assert normalized["clusters"][0]["lease_ttl_seconds"] == 3
    assert normalized["stores"][0]["max_message_bytes"] == 1024 * 1024
    assert Realm.model_validate(normalized) == realm


def test_minimal_realm_fills_defaults() -> None:
    realm = parse_realm(MINIMAL)
    assert realm.destinations[0].kind is DestinationKind.TOPIC
    assert realm.stores[0].replicated is True


def test_unknown_key_points_at_the_key() -> None:
    text = MINIMAL.replace("    cluster: c1\n", "    cluster: c1\n    replicas: 3\n")
    assert problems_of(text) == ["realm.yaml:8:5: stores[0].replicas: unknown key 'replicas'"]


def test_bad_enum_names_allowed_values() -> None:
    text = MINIMAL.replace("  - name: c1\n", "  - name: c1\n    storage: tape\n")
    [problem] = problems_of(text, "prod.yaml")
    assert problem.startswith("prod.yaml:3:5: clusters[0].storage: 'tape' is not one of")
    assert "'disk-sync'" in problem


def test_even_member_count_is_rejected() -> None:
    text = MINIMAL.replace("      - name: m1\n", "      - name: m1\n      - name: m2\n")
    [problem] = problems_of(text)
    assert problem.startswith("realm.yaml:3:5: clusters[0].members: has 2 members")


def test_dangling_store_and_cluster_references_are_located() -> None:
    text = MINIMAL.replace("cluster: c1", "cluster: nope").replace("store: s1", "store: missing")
    found = problems_of(text)
    assert "realm.yaml:7:5: stores[0].cluster: store 's1' names cluster 'nope', " \
           "which the realm does not define" in found
    assert "realm.yaml:10:5: destinations[0].store: destination 'orders' names store 'missing', " \
           "which the realm does not define" in found
    assert len(found) == 2


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("clusters:\n  - name: c1\n    members:\n      - name: m1\n"
         + "  - name: c1\n    members:\n      - name: m1\n",
         "realm.yaml:5:5: clusters[1].name: cluster name 'c1' appears twice"),
        (MINIMAL + "  - name: orders\n    store: s1\n",
         "realm.yaml:11:5: destinations[1].name: destination 'orders' appears twice"),
        ("clusters:\n  - name: c1\n    members:\n      - name: m1\n      - name: m1\n      - name: m2\n",
         "realm.yaml:3:5: clusters[0].members: member name 'm1' appears twice"),
    ],
    ids=["cluster", "destination", "member"],
)
def test_duplicate_names(extra: str, expected: str) -> None:
    assert problems_of(extra) == [expected]


def test_duplicate_store_name() -> None:
    text = MINIMAL.replace("destinations:", "  - name: s1\n    cluster: c1\ndestinations:")
    assert problems_of(text) == ["realm.yaml:8:5: stores[1].name: store name 's1' appears twice"]


def test_duplicate_yaml_key_is_an_error_not_last_wins() -> None:
    text = MINIMAL.replace("    cluster: c1\n", "    cluster: c1\n    cluster: c2\n")
    assert problems_of(text) == ["realm.yaml:8:5: duplicate key 'cluster'"]


def test_yaml_syntax_error_has_line_and_column() -> None:
    text = "clusters:\n  - name: c1\n   members: [\n"
    [problem] = problems_of(text)
    assert problem.startswith("realm.yaml:3:4: ")


def test_unclosed_flow_sequence_is_located() -> None:
    [problem] = problems_of("clusters: [\n")
    assert problem.startswith("realm.yaml:2:1: ")


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"], ids=["empty", "blank", "comment"])
def test_empty_document(text: str) -> None:
    assert problems_of(text) == ["realm.yaml:1:1: the realm document is empty"]


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"], ids=["list", "string", "number"])
def test_document_must_be_a_mapping(text: str) -> None:
    [problem] = problems_of(text)
    assert problem.startswith("realm.yaml:1:1: the realm must be a mapping")


def test_missing_clusters_is_reported() -> None:
    assert problems_of("stores: []\n") == ["realm.yaml:1:1: clusters: required key 'clusters' is missing"]


def test_every_problem_is_reported_at_once() -> None:
    text = MINIMAL.replace("  - name: c1\n", "  - name: c1\n    storage: tape\n    colour: red\n")
    found = problems_of(text)
    assert any(p.startswith("realm.yaml:3:5: clusters[0].storage:") for p in found)
    assert "realm.yaml:4:5: clusters[0].colour: unknown key 'colour'" in found


def test_an_indentation_error_is_a_located_sentence_not_parser_text() -> None:
    text = MINIMAL.replace("    members:\n", "   members:\n")  # line 3: one space short
    assert problems_of(text, "r.yaml") == [(
        "r.yaml:3:4: the indentation is wrong: this line lines up with no level above it (the keys of one "
        "mapping, and the items of one list, start in one column; indent with spaces)")]
    deeper = MINIMAL.replace("    cluster: c1\n", "      cluster: c1\n")  # line 7: under name's value
    assert problems_of(deeper) == [(
        "realm.yaml:7:7: a key is not allowed here: this line is indented deeper than the key above it, or a "
        "value holds ': ' and needs quotes")]
    [tab] = problems_of(MINIMAL.replace("    cluster: c1\n", "\tcluster: c1\n"))
    assert tab == "realm.yaml:7:1: a tab character: YAML indents with spaces only"
    [colon] = problems_of(MINIMAL.replace("    cluster: c1\n", "    cluster c1\n"))
    assert colon == "realm.yaml:7:5: this key has no ':' (write 'key: value')"
    [unclosed] = problems_of("clusters: [\n")
    assert unclosed == "realm.yaml:2:1: the document ends inside a '[' list or '{' mapping that is not closed"
    [unclosed_list] = problems_of("clusters: [a, b\nstores: []\n")
    assert unclosed_list == "realm.yaml:2:7: the list opened at line 1, column 11 is not closed with ']'"
    for problem in (tab, colon, unclosed, unclosed_list):
        assert "<block" not in problem and "token" not in problem and "expected" not in problem


def test_a_misspelled_key_gets_the_closest_known_one() -> None:
    text = MINIMAL.replace("    cluster: c1\n", "    cluster: c1\n    max_mesage_bytes: 10\n    flavour: x\n")
    assert problems_of(text) == [
        ("realm.yaml:8:5: stores[0].max_mesage_bytes: unknown key 'max_mesage_bytes'; did you mean "
         "'max_message_bytes'?"),
        "realm.yaml:9:5: stores[0].flavour: unknown key 'flavour'",  # nothing close: no guess
    ]
    [top] = problems_of(MINIMAL + "destination:\n  - name: x\n    store: s1\n")
    assert top == "realm.yaml:11:1: destination: unknown key 'destination'; did you mean 'destinations'?"
    [nested] = problems_of(MINIMAL.replace("      - name: m1\n", "      - name: m1\n        adress: h:1\n"))
    assert nested == "realm.yaml:5:9: clusters[0].members[0].adress: unknown key 'adress'; did you mean 'address'?"


def test_problems_come_in_the_order_of_the_document() -> None:
    # Sections in another order than the model's fields: the problems follow the file.
    text = ("destinations:\n  - name: orders\n    store: s1\n    colour: red\n"
            "stores:\n  - name: s1\n    cluster: c1\n    replicatd: true\n"
            "clusters:\n  - name: c1\n    storage: tape\n    members:\n      - name: m1\n")
    found = problems_of(text)
    assert [p.split(": ", 1)[0] for p in found] == ["realm.yaml:4:5", "realm.yaml:8:5", "realm.yaml:11:5"]
    crossed = ("destinations:\n  - name: orders\n    store: missing\n"
               "stores:\n  - name: s1\n    cluster: nowhere\n"
               "clusters:\n  - name: c1\n    members:\n      - name: m1\n")
    assert [p.split(": ", 1)[0] for p in problems_of(crossed)] == ["realm.yaml:3:5", "realm.yaml:6:5"]


# --- resolve ------------------------------------------------------------------------------------

ROUTING = """\
clusters:
  - name: c1
    members: [{name: m1}]
stores:
  - name: fast
    cluster: c1
    replicated: false
  - name: safe
    cluster: c1
destinations:
  - name: "orders.*"
    store: safe
  - name: "orders.eu"
    kind: queue
    store: fast
  - name: "*.queue"
    kind: queue
    store: fast
  - name: "*"
    store: safe
"""


def test_exact_name_beats_an_earlier_glob() -> None:
    realm = parse_realm(ROUTING)
    dest, store = realm.resolve("orders.eu")
    assert (dest.name, dest.kind, store.name) == ("orders.eu", DestinationKind.QUEUE, "fast")


def test_first_matching_glob_in_document_order_wins() -> None:
    realm = parse_realm(ROUTING)
    dest, store = realm.resolve("orders.queue")  # matches "orders.*" and "*.queue"
    assert (dest.name, store.name) == ("orders.*", "safe")
    dest, store = realm.resolve("jobs.queue")
    assert (dest.name, dest.kind, store.name) == ("*.queue", DestinationKind.QUEUE, "fast")
    dest, _ = realm.resolve("anything")
    assert dest.name == "*"


def test_unknown_destination_raises() -> None:
    realm = parse_realm(MINIMAL)
    with pytest.raises(UnknownDestination, match="payments"):
        realm.resolve("payments")


@pytest.mark.parametrize("name", ["", "orders.*", "has space"])
def test_invalid_destination_names_raise(name: str) -> None:
    realm = parse_realm(ROUTING)
    with pytest.raises(UnknownDestination):
        realm.resolve(name)


def test_producer_idle_expiry_defaults_to_a_day_and_a_negative_one_is_refused_at_its_line() -> None:
    assert parse_realm(MINIMAL).clusters[0].producer_idle_expiry_seconds == 86400.0
    text = MINIMAL.replace("  - name: c1\n", "  - name: c1\n    producer_idle_expiry_seconds: -5\n")
    (problem,) = problems_of(text)
    assert problem.startswith("realm.yaml:3:") and "producer_idle_expiry_seconds" in problem, problem
    assert parse_realm(text.replace("-5", "0")).clusters[0].producer_idle_expiry_seconds == 0


def test_database_memory_defaults_to_32_mib_and_a_zero_budget_is_refused_at_its_line() -> None:
    store = parse_realm(MINIMAL).clusters[0].persistent_store
    assert (store.write_buffer_mb, store.read_cache_mb) == (32, 32)
    text = MINIMAL.replace("  - name: c1\n", "  - name: c1\n    persistent_store:\n      write_buffer_mb: 0\n")
    (problem,) = problems_of(text)
    assert problem.startswith("realm.yaml:4:") and "write_buffer_mb" in problem, problem
    assert parse_realm(text.replace("write_buffer_mb: 0", "read_cache_mb: 8")).clusters[0].persistent_store.read_cache_mb == 8
