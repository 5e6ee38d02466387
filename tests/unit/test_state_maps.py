"""Map semantics of the state machine, in-process: versions, compare-and-set, prefix paging,
snapshots, and the same results on every member."""

from __future__ import annotations

import random

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import MapResult, StateMachine


def put(key: str, value: bytes, name: str = "m", store: str = "s", expected: int | None = None) -> rpb.Operation:
    op = rpb.MapOp(store=store, map=name, key=key, put=value)
    if expected is not None:
        op.compare = True
        op.expected_version = expected
    return rpb.Operation(map=op)


def delete(key: str, name: str = "m", store: str = "s", expected: int | None = None) -> rpb.Operation:
    op = rpb.MapOp(store=store, map=name, key=key, delete=True)
    if expected is not None:
        op.compare = True
        op.expected_version = expected
    return rpb.Operation(map=op)


class Log:
    """Feeds a state machine one entry per call, as the replicated log does."""

    def __init__(self, sm: StateMachine | None = None) -> None:
        self.sm = sm or StateMachine()
        self.index = self.sm.applied_index

    def apply(self, *ops: rpb.Operation) -> list[MapResult]:
        self.index += 1
        results = self.sm.apply_entry(rpb.LogEntry(index=self.index, epoch=1, ops=list(ops)))
        assert all(isinstance(r, MapResult) for r in results)
        return results  # type: ignore[return-value]


def test_put_get_version_is_the_log_index() -> None:
    log = Log()
    (r,) = log.apply(put("a", b"1"))
    assert r == MapResult(True, True, b"1", 1)
    assert log.sm.map_get("s", "m", "a") == (b"1", 1)
    log.apply(put("other", b"x"))
    (r,) = log.apply(put("a", b"2"))
    assert r.version == 3 and log.sm.map_get("s", "m", "a") == (b"2", 3)
    assert log.sm.map_get("s", "m", "missing") is None
    assert log.sm.map_get("s", "nomap", "a") is None


def test_maps_and_stores_are_separate_namespaces() -> None:
    log = Log()
    log.apply(put("k", b"m1"), put("k", b"m2", name="m2"), put("k", b"s2", store="s2"))
    assert log.sm.map_get("s", "m", "k") == (b"m1", 1)
    assert log.sm.map_get("s", "m2", "k") == (b"m2", 1)
    assert log.sm.map_get("s2", "m", "k") == (b"s2", 1)
    assert log.sm.maps_of_store("s") == 2 and log.sm.maps_of_store("s2") == 1


def test_empty_value_is_a_value() -> None:
    log = Log()
    (r,) = log.apply(put("k", b""))
    assert r.swapped and r.found and log.sm.map_get("s", "m", "k") == (b"", 1)


def test_delete_present_and_absent() -> None:
    log = Log()
    log.apply(put("a", b"1"), put("b", b"2"))
    (r,) = log.apply(delete("a"))
    assert r == MapResult(True, False)
    assert log.sm.map_get("s", "m", "a") is None
    (r,) = log.apply(delete("a"))
    assert r == MapResult(False, False)  # nothing to delete: not swapped
    (r,) = log.apply(delete("b"))
    assert r.swapped
    # The last key gone: the map is gone.
    assert log.sm.maps_of_store("s") == 0 and not log.sm.maps


def test_refused_writes_leave_no_empty_map_behind() -> None:
    log = Log()
    log.apply(delete("a"), put("a", b"x", expected=7), delete("a", expected=3))
    assert not log.sm.maps and log.sm.maps_of_store("s") == 0


def test_compare_and_set_expected_zero_means_absent() -> None:
    log = Log()
    (created,) = log.apply(put("k", b"first", expected=0))
    assert created == MapResult(True, True, b"first", 1)
    (lost,) = log.apply(put("k", b"second", expected=0))
    assert lost == MapResult(False, True, b"first", 1)  # current entry returned
    assert log.sm.map_get("s", "m", "k") == (b"first", 1)


def test_compare_and_set_against_the_current_version_only() -> None:
    log = Log()
    log.apply(put("k", b"v1"))
    (ok,) = log.apply(put("k", b"v2", expected=1))
    assert ok == MapResult(True, True, b"v2", 2)
    (stale,) = log.apply(put("k", b"v3", expected=1))
    assert stale == MapResult(False, True, b"v2", 2)
    (absent,) = log.apply(put("nope", b"v", expected=2))
    assert absent == MapResult(False, False)
    assert log.sm.map_get("s", "m", "nope") is None


def test_compare_and_delete() -> None:
    log = Log()
    log.apply(put("k", b"v"))
    (stale,) = log.apply(delete("k", expected=5))
    assert stale == MapResult(False, True, b"v", 1)
    (ok,) = log.apply(delete("k", expected=1))
    assert ok == MapResult(True, False)
    # Deleted and recreated: a new version, above the old one.
    (again,) = log.apply(put("k", b"w", expected=0))
    assert again.swapped and again.version == 4


def test_only_one_of_racing_compare_and_sets_wins_in_one_entry() -> None:
    log = Log()
    log.apply(put("counter", b"0"))
    results = log.apply(*(put("counter", f"from-{i}".encode(), expected=1) for i in range(5)))
    assert [r.swapped for r in results] == [True, False, False, False, False]
    assert all(r.value == b"from-0" and r.version == 2 for r in results[1:])


def test_list_prefix_in_key_order_with_paging() -> None:
    log = Log()
    keys = [f"user/{i:03d}" for i in range(25)] + ["useless", "other/1", "user"]
    random.Random(7).shuffle(keys)
    log.apply(*(put(k, k.encode()) for k in keys))
    page, more = log.sm.map_list("s", "m", "user/", "", 10)
    assert [k for k, _, _ in page] == [f"user/{i:03d}" for i in range(10)] and more
    assert all(v == k.encode() and ver == 1 for k, v, ver in page)
    seen: list[str] = []
    start = ""
    while True:
        page, more = log.sm.map_list("s", "m", "user/", start, 7)
        seen.extend(k for k, _, _ in page)
        if not more:
            break
        start = page[-1][0]
    assert seen == [f"user/{i:03d}" for i in range(25)]
    page, more = log.sm.map_list("s", "m", "user/", "user/024", 7)
    assert page == [] and not more
    page, more = log.sm.map_list("s", "m", "", "", 1000)
    assert [k for k, _, _ in page] == sorted(keys) and not more
    assert log.sm.map_list("s", "missing", "", "", 10) == ([], False)


def test_list_exact_page_reports_no_more() -> None:
    log = Log()
    log.apply(put("a", b""), put("b", b""))
    assert log.sm.map_list("s", "m", "", "", 2)[1] is False
    assert log.sm.map_list("s", "m", "", "", 1)[1] is True


def test_snapshot_round_trip_keeps_entries_and_versions() -> None:
    log = Log()
    log.apply(put("a", b"1"), put("b", b"\x00\xff binary"), put("k", b"x", name="other", store="s2"))
    log.apply(put("a", b"2"), delete("b"))
    restored = restore_bytes(snapshot_bytes(log.sm))
    assert restored.maps == log.sm.maps
    assert restored.map_get("s", "m", "a") == (b"2", 2)
    assert restored.map_get("s", "m", "b") is None
    assert restored.map_get("s2", "other", "k") == (b"x", 1)
    # Writes after the restore continue with the log's indexes; old versions still compare.
    follower = Log(restored)
    (r,) = follower.apply(put("a", b"3", expected=2))
    assert r == MapResult(True, True, b"3", 3)


def test_every_member_computes_the_same_maps() -> None:
    rng = random.Random(11)
    entries = []
    for index in range(1, 200):
        ops = []
        for _ in range(rng.randint(1, 4)):
            key = f"k{rng.randint(0, 9)}"
            roll = rng.random()
            if roll < 0.4:
                ops.append(put(key, str(index).encode()))
            elif roll < 0.6:
                ops.append(delete(key))
            else:
                ops.append(put(key, b"cas", expected=rng.choice([0, index - 1, index - 2])))
        entries.append(rpb.LogEntry(index=index, epoch=1, ops=ops))
    a, b = StateMachine(), StateMachine()
    results_a = [a.apply_entry(e) for e in entries]
    # The second member restarts half-way from a snapshot.
    for e in entries[:100]:
        b.apply_entry(e)
    b = restore_bytes(snapshot_bytes(b))
    results_b = [b.apply_entry(e) for e in entries[100:]]
    assert a.maps == b.maps
    assert results_a[100:] == results_b


def test_state_fed_directly_counts_its_own_versions() -> None:
    sm = StateMachine()  # a leader's non-replicated stores
    assert sm.apply_op(put("k", b"a")) == MapResult(True, True, b"a", 1)
    assert sm.apply_op(put("k", b"b", expected=1)) == MapResult(True, True, b"b", 2)
    assert sm.apply_op(put("k", b"c", expected=1)) == MapResult(False, True, b"b", 2)
    # A new leadership seeds its versions above anything handed out before.
    fresh = StateMachine()
    fresh.start_local_versions(5 << 32)
    assert fresh.apply_op(put("k", b"a")) == MapResult(True, True, b"a", (5 << 32) + 1)
    fresh.start_local_versions(3)  # never goes back
    assert fresh.apply_op(put("k", b"b")) == MapResult(True, True, b"b", (5 << 32) + 2)
