"""The metrics' pure parts: histogram buckets and quantiles, a member's families from a status and
tallies (exposed as Prometheus text and parsed back), the statistics line, the catalog against the
README, the settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.observability.catalog import CATALOG
from strongroom.observability.member import member_families
from strongroom.persistence.scrub import ScrubFigures
from strongroom.observability.statslog import sample_of, stats_line
from strongroom.observability.tallies import Histogram, Tallies
from strongroom.persistence.config import MemberConfig, Role
from strongroom.persistence.status import ClusterStatus, DurableStatus, MemberStatus, StoreStatus
from strongroom.persistence.storestate import StoreRecord, StoreState, StoreView, Usage
from strongroom.realm.model import PersistentStore
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX

README = Path(__file__).resolve().parents[2] / "README.md"


def test_histogram_counts_a_value_in_the_first_bucket_whose_bound_is_not_below_it() -> None:
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.002, 0.01, 0.5, 7.0):
        h.observe(v)
    assert h.cumulative() == [("0.001", 2), ("0.01", 4), ("0.1", 4), ("+Inf", 6)]
    assert h.count == 6 and h.sum == pytest.approx(7.5135)


def test_histogram_quantile_of_all_values_and_of_those_since_a_copy() -> None:
    h = Histogram((1, 2, 4, 8))
    for v in (1, 1, 1, 3):
        h.observe(v)
    assert h.quantile(0.5) == 1 and h.quantile(0.99) == 4
    mark = h.copy()
    for v in (7, 7, 8, 6):
        h.observe(v)
    assert h.quantile(0.5, mark) == 8 and h.quantile(0.5) == 4
    assert Histogram((1,)).quantile(0.5) == 0.0
    beyond = Histogram((1, 2))
    beyond.observe(100)
    assert beyond.quantile(0.99) == 2  # above every bound: the highest bound, as "at least" it


def _durable(name: str, pending: int, size: int, unacked: int = 0, subscribers: int = 0) -> DurableStatus:
    return DurableStatus(name=name, destination="orders.news", kind=cpb.DURABLE_KIND_STANDARD,
                         pending_messages=pending, pending_bytes=size, unacked=unacked, subscribers=subscribers,
                         matcher="", key_field="", ack_sync_mode=0, content=False, store="orders")


def _status(role: Role = Role.LEADER, standby: bool = False) -> ClusterStatus:
    store = StoreStatus(name="orders", replicated=True, messages=70, bytes=7000, cluster="c1", storage="disk-sync",
                        publisher_mode="store_confirm_send", max_messages=0, max_bytes=0, limit_policy=0, maps=False,
                        routed=True, max_message_bytes=1 << 20, map_count=0, swapped_messages=4, uows_pending=2,
                        durables=[_durable("audit", 30, 3000, unacked=5, subscribers=2), _durable("", 40, 4000),
                                  _durable(ROUTE_DURABLE_PREFIX + "tokyo", 12, 1200)])
    return ClusterStatus(cluster="c1", member="a", role=role, leader="a", leader_address="127.0.0.1:1", epoch=7,
                         commit_index=120, last_index=125, applied_index=119, snapshot_index=100, storage="disk-sync",
                         realm_version=3, synced=True, indexes_on_disk=False, memory_budget_bytes=0,
                         memory_payload_bytes=9000, apply_stopped="", standby=standby, seconds_behind_primary=1.5,
                         messages_behind_primary=33,
                         members=[MemberStatus("a", "127.0.0.1:1", 125, True, ""),
                                  MemberStatus("b", "127.0.0.1:2", 120, True, "link"),
                                  MemberStatus("c", "127.0.0.1:3", 0, False, "link")],
                         stores=[store])


def _exposed(families: list[object]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The families as a scrape shows them: exposed as text and parsed back."""

    class Fixed:
        def collect(self) -> list[object]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def _view(state: StoreState) -> StoreView:
    return StoreView("c1", StoreRecord(state=state), Usage(70, 7000), PersistentStore(), "", "a", True)


def test_member_families_carry_the_status_and_the_tallies() -> None:
    tallies = Tallies()
    tallies.stored["orders"] += 100
    tallies.acked["orders"] += 30
    tallies.expired["orders"] += 2
    tallies.deliveries[("orders", "orders.news", "audit")] += 40
    tallies.redeliveries[("orders", "orders.news", "audit")] += 6
    tallies.snapshots_sent["c"] += 1
    tallies.backtracks["c"] += 3
    tallies.catchups += 1
    for v in (0.001, 0.003, 0.2):
        tallies.commit_seconds.observe(v)
    tallies.round_operations.observe(50)
    got = _exposed(member_families(_status(), _view(StoreState.NO_NEW_UOW), tallies, 12345, "rocksdb",
                                   {"write_buffers": 3 * 2**20, "read_cache": 4096},
                                   ScrubFigures(clean=4, failed=1, last_clean=1_800_000_000.5, last_seconds=0.25)))
    m = {"cluster": "c1", "member": "a"}
    assert _one(got, "strongroom_member_info", **m, role="leader", storage="disk-sync", driver="rocksdb") == 1
    assert _one(got, "strongroom_leader", **m) == 1
    assert (_one(got, "strongroom_epoch", **m), _one(got, "strongroom_commit_index", **m),
            _one(got, "strongroom_last_index", **m), _one(got, "strongroom_applied_index", **m)) == (7, 120, 125, 119)
    assert _one(got, "strongroom_disk_bytes", **m) == 12345
    assert (_one(got, "strongroom_scrubs_total", **m), _one(got, "strongroom_scrub_failures_total", **m)) == (4, 1)
    assert _one(got, "strongroom_scrub_last_clean_timestamp_seconds", **m) == 1_800_000_000.5
    assert _one(got, "strongroom_scrub_last_seconds", **m) == 0.25
    assert _one(got, "strongroom_database_memory_bytes", **m, kind="write_buffers") == 3 * 2**20
    assert _one(got, "strongroom_database_memory_bytes", **m, kind="read_cache") == 4096
    assert _one(got, "strongroom_follower_lag_entries", **m, peer="b") == 5
    assert _one(got, "strongroom_follower_lag_entries", **m, peer="c") == 125
    assert _one(got, "strongroom_follower_reachable", **m, peer="c") == 0
    assert not [labels for labels, _ in got["strongroom_follower_lag_entries"] if labels["peer"] == "a"]
    assert _one(got, "strongroom_persistent_store_state", **m, state="no-new-uow") == 1
    assert _one(got, "strongroom_persistent_store_state", **m, state="available") == 0
    assert _one(got, "strongroom_store_messages", **m, store="orders") == 70
    assert _one(got, "strongroom_store_swapped_messages", **m, store="orders") == 4
    assert _one(got, "strongroom_store_uows_pending", **m, store="orders") == 2
    audit = {**m, "store": "orders", "destination": "orders.news", "durable": "audit"}
    assert _one(got, "strongroom_durable_pending_messages", **audit) == 30
    assert _one(got, "strongroom_durable_pending_bytes", **audit) == 3000
    assert _one(got, "strongroom_durable_unacked_messages", **audit) == 5
    assert _one(got, "strongroom_durable_subscribers", **audit) == 2
    assert _one(got, "strongroom_durable_pending_messages", **{**audit, "durable": ""}) == 40
    # A route durable is a forwarding backlog, not a durable.
    assert _one(got, "strongroom_forward_pending_messages", **m, store="orders", destination="orders.news",
                remote_cluster="tokyo") == 12
    assert not [x for x, _ in got["strongroom_durable_pending_messages"] if x["durable"].startswith(ROUTE_DURABLE_PREFIX)]
    assert _one(got, "strongroom_messages_stored_total", **m, store="orders") == 100
    assert _one(got, "strongroom_messages_acked_total", **m, store="orders") == 30
    assert _one(got, "strongroom_messages_expired_total", **m, store="orders") == 2
    assert _one(got, "strongroom_messages_dead_lettered_total", **m, store="orders") == 0
    assert _one(got, "strongroom_deliveries_total", **audit) == 40
    assert _one(got, "strongroom_redeliveries_total", **audit) == 6
    assert _one(got, "strongroom_snapshots_sent_total", **m, peer="c") == 1
    assert _one(got, "strongroom_log_backtracks_total", **m, peer="c") == 3
    assert _one(got, "strongroom_catchups_total", **m) == 1
    assert _one(got, "strongroom_commit_seconds_count", **m) == 3
    assert _one(got, "strongroom_commit_seconds_bucket", **m, le="0.005") == 2
    assert _one(got, "strongroom_commit_seconds_bucket", **m, le="+Inf") == 3
    assert _one(got, "strongroom_group_commit_operations_sum", **m) == 50
    assert "strongroom_dr_seconds_behind_primary" not in got  # not a standby


def test_a_follower_reports_no_follower_lag_and_a_standby_its_distance_from_the_primary() -> None:
    got = _exposed(member_families(_status(Role.FOLLOWER, standby=True), None, Tallies(), 0, "sqlite"))
    m = {"cluster": "c1", "member": "a"}
    assert _one(got, "strongroom_leader", **m) == 0
    assert "strongroom_follower_lag_entries" not in got
    assert "strongroom_persistent_store_state" not in got
    assert _one(got, "strongroom_dr_seconds_behind_primary", **m) == 1.5
    assert _one(got, "strongroom_dr_messages_behind_primary", **m) == 33


def test_every_family_a_member_exports_is_in_the_catalog() -> None:
    tallies = Tallies()
    tallies.deliveries[("orders", "orders.news", "audit")] += 1
    tallies.snapshots_sent["b"] += 1
    names = {f.name for f in member_families(_status(standby=True), _view(StoreState.AVAILABLE), tallies, 1, "rocksdb")}
    member_docs = {d.name for d in CATALOG if d.process == "member"}
    assert names == member_docs


def _readme_catalog() -> str:
    text = README.read_text()
    start = text.index("### Metrics catalog")
    end = text.index("\n### ", start + 1)
    return text[start:end]


def test_the_readme_catalog_lists_every_metric_and_no_other() -> None:
    section = _readme_catalog()
    listed = set(re.findall(r"`(strongroom_[a-z_]+)`", section))
    assert listed == {d.exposed for d in CATALOG}, (listed ^ {d.exposed for d in CATALOG})


def test_the_stats_line_gives_rates_pending_and_latency_of_the_interval() -> None:
    tallies = Tallies()
    first = sample_of(_status(), tallies, 1024 * 1024, at=100.0)
    tallies.stored["orders"] += 500
    tallies.acked["orders"] += 250
    tallies.deliveries[("orders", "orders.news", "audit")] += 300
    for _ in range(99):
        tallies.commit_seconds.observe(0.0015)
        tallies.round_operations.observe(5)
    tallies.commit_seconds.observe(0.3)
    tallies.round_operations.observe(5)
    tallies.log_write_seconds.observe(0.0009)
    line = stats_line(first, sample_of(_status(), tallies, 3 * 1024 * 1024, at=110.0))
    assert line.startswith("leader epoch 7, commit index 120 (+0.0/s), disk 3.0 MiB")
    assert "stored 50.0/s, acked 25.0/s, delivered 30.0/s" in line
    assert "pending 82 messages (8.0 KiB) on 3 durables" in line
    assert "100 rounds (5.0 ops each), commit p50 <= 2.0 ms p99 <= 2.0 ms" in line
    assert "log write p99 <= 1.0 ms" in line
    quiet = stats_line(first, sample_of(_status(), Tallies(), 0, at=160.0))
    assert "rounds" not in quiet and "log write" not in quiet


def test_settings_from_the_environment() -> None:
    base = MemberConfig(cluster="c", member="a", data_dir=Path("/tmp/x"), etcd_endpoints="127.0.0.1:1")
    set_ = base.with_environment({"STRONGROOM_STATS_INTERVAL": "2.5", "STRONGROOM_METRICS_LISTEN": "0.0.0.0:9464"})
    assert (set_.stats_interval, set_.metrics_listen) == (2.5, "0.0.0.0:9464")
    assert base.with_environment({}).stats_interval == 60.0
    for bad in ("soon", "-1"):
        with pytest.raises(ValueError, match="STRONGROOM_STATS_INTERVAL"):
            base.with_environment({"STRONGROOM_STATS_INTERVAL": bad})
