"""The benchmark's storage-driver configurations (issue 23): disk-sync and disk-async on the
SQLite driver, in every round after RocksDB's, on the realm that selects the driver, and reported
beside RocksDB's. Pure logic, in-process: nothing is started."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import readme, runner
from bench.common import Params, Progress
from bench.ours import CLUSTER, DRIVER_CONFIGS, StrongroomTarget
from strongroom.realm.model import StorageMode, StoreDriver, parse_realm
from test_bench_standby import _results

SQLITE = ("disk-sync-sqlite", "disk-async-sqlite")


def test_the_sqlite_configurations_run_after_rocksdbs_on_a_realm_that_selects_sqlite(tmp_path: Path) -> None:
    configs = [c for _, c in runner.ORDER]
    assert configs.index("disk-sync") < configs.index("disk-sync-sqlite")
    assert configs.index("disk-async") < configs.index("disk-async-sqlite")
    assert runner.select("disk-sync,disk-sync-sqlite,disk-async,disk-async-sqlite") == [
        ("strongroom", "disk-sync"), ("strongroom", "disk-sync-sqlite"),
        ("strongroom", "disk-async"), ("strongroom", "disk-async-sqlite")]
    for config, mode in zip(SQLITE, (StorageMode.DISK_SYNC, StorageMode.DISK_ASYNC), strict=True):
        assert DRIVER_CONFIGS[config] == "sqlite"
        cluster = parse_realm(StrongroomTarget(config, tmp_path, Progress(out=lambda _s: None)).realm_text()).cluster(CLUSTER)
        assert cluster is not None and cluster.storage == mode and cluster.persistent_store.driver == StoreDriver.SQLITE
    plain = parse_realm(StrongroomTarget("disk-sync", tmp_path, Progress(out=lambda _s: None)).realm_text()).cluster(CLUSTER)
    assert plain is not None and plain.persistent_store.driver == StoreDriver.ROCKSDB


def _doc(order: list[tuple[str, str]]) -> dict[str, Any]:
    """A results document of two rounds of `order` (the tests using it take `bench_test_machine`)."""
    p50 = {"disk-sync": 1.0, "disk-sync-sqlite": 1.5}
    raw: list[dict[str, Any]] = [
        {"round": rnd, "system": system, "config": config, "loadavg_at_start": 0.1, "seconds": 10.0, "notes": [],
         "results": _results(p50[config], False, False)} for rnd in (1, 2) for system, config in order]
    return runner._document(raw, 2, Params(), dt.datetime(2026, 11, 24, tzinfo=dt.UTC), 60.0, ROOT, order)


def test_sqlite_is_compared_with_rocksdb_in_the_same_mode_and_only_pairs_measured_are_shown(
        bench_test_machine: None) -> None:
    pairs = {(o, p) for o, p, _, _ in runner.RATIOS if o in SQLITE}
    assert pairs == {("disk-sync-sqlite", "disk-sync"), ("disk-async-sqlite", "disk-async")}
    doc = _doc([("strongroom", "disk-sync"), ("strongroom", "disk-sync-sqlite")])
    ratios = {r["figure"]: r for r in doc["ratios"] if r["ours"] == "disk-sync-sqlite"}
    assert ratios["confirm.p50_ms"]["ratio"] == pytest.approx(1.5) and ratios["confirm.p50_ms"]["met"] is None
    text = readme.markdown(doc, "bench/results/X.json")
    assert "| figure | disk-sync | disk-sync-sqlite |" in text
    assert "disk-sync-sqlite / disk-sync" in text
    # Pairs of configurations this run did not measure get no empty column.
    assert "disk-async-sqlite / disk-async" not in text and "disk-sync / nats-fsync" not in text


def test_the_auth_configuration_runs_disk_sync_with_the_realms_auth_on_and_a_grant_for_its_client(
        tmp_path: Path) -> None:
    from bench.ours import AUTH_SUFFIX, CONFIGS
    from strongroom.security.access import Action, rules_of

    assert CONFIGS["disk-sync-auth"] == CONFIGS["disk-sync"] and "disk-sync-auth".endswith(AUTH_SUFFIX)
    configs = [c for _, c in runner.ORDER]
    assert "disk-sync-auth" in configs
    realm = parse_realm(StrongroomTarget("disk-sync-auth", tmp_path, Progress(out=lambda _s: None)).realm_text())
    rules = rules_of(realm)
    assert rules.enabled
    # What the workloads do as user bench: publish and subscribe on the main store, status.
    assert rules.allows("bench", Action.PUBLISH, "main", "bench.confirm.queue")
    assert rules.allows("bench", Action.SUBSCRIBE, "main", "bench.fanout")
    assert rules.allows("bench", Action.BROWSE)
    assert not rules.allows("bench", Action.ADMINISTER)
    plain = parse_realm(StrongroomTarget("disk-sync", tmp_path, Progress(out=lambda _s: None)).realm_text())
    assert not rules_of(plain).enabled
    assert ("disk-sync-auth", "disk-sync", "pipelined.msgs_per_s", 0.95) in runner.RATIOS


def test_the_indexed_configurations_keep_the_state_on_disk_and_are_compared_with_the_state_in_memory(
        tmp_path: Path) -> None:
    """Issue 25: the figures that decide whether indexes on disk become the default."""
    from bench.ours import CONFIGS

    for config, mode in (("disk-sync-indexed", StorageMode.DISK_SYNC), ("disk-async-indexed", StorageMode.DISK_ASYNC)):
        assert CONFIGS[config][0] == mode.value
        cluster = parse_realm(StrongroomTarget(config, tmp_path, Progress(out=lambda _s: None)).realm_text()).cluster(CLUSTER)
        assert cluster is not None and cluster.storage == mode and cluster.indexes_on_disk
        assert (config, mode.value, "pipelined.msgs_per_s", None) in runner.RATIOS
    for plain in ("disk-sync", "disk-async"):
        cluster = parse_realm(StrongroomTarget(plain, tmp_path, Progress(out=lambda _s: None)).realm_text()).cluster(CLUSTER)
        assert cluster is not None and not cluster.indexes_on_disk
    # Run only when named (a default round stays as long as it was).
    assert "disk-sync-indexed" not in [c for _, c in runner.ORDER]
    assert runner.select("disk-sync,disk-sync-indexed") == [("strongroom", "disk-sync"), ("strongroom", "disk-sync-indexed")]
    # A default round reports no ratio against a configuration it did not run; a named one does.
    default = [c for _, c in runner.ORDER]
    assert not any(r[0].endswith("-indexed") for r in runner.ran_ratios(default))
    assert ("disk-sync-indexed", "disk-sync", "pipelined.msgs_per_s", None) in runner.ran_ratios(
        ["disk-sync", "disk-sync-indexed"])
    assert all(r[0] in default and r[1] in default for r in runner.ran_ratios(default))
