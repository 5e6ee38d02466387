"""The benchmark's disaster-recovery configurations (bench/standby.py, issue 22): disk-sync with a
standby set attached, shipping or stopped, beside disk-sync in the same round; the realm they
run, the figures and ratios they report, and the README subsection written from them. Pure logic,
in-process: nothing is started (the real runs are the benchmark's smoke round, tests/bench)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import readme, runner
from bench.common import Params, Progress
from bench.ours import CLUSTER, CONFIGS, StrongroomTarget, realm_for
from bench.standby import (
    BASELINE,
    NICE,
    NICED_CONFIG,
    STANDBY_CONFIG,
    STANDBY_CONFIGS,
    STANDBY_FIGURES,
    STOPPED_CONFIG,
    StandbyMeter,
    StandbyTarget,
    renice,
)
from strongroom.realm.model import parse_realm

ADDRESSES = ["127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603"]


# --- configurations and pairing -----------------------------------------------------------------


def test_the_standby_configurations_run_in_every_round_after_disk_sync() -> None:
    configs = [c for _, c in runner.ORDER]
    assert set(STANDBY_CONFIGS) <= set(configs)
    assert all(s == "strongroom" for s, c in runner.ORDER if c in STANDBY_CONFIGS)
    assert configs.index(BASELINE) < configs.index(STANDBY_CONFIG) < configs.index(NICED_CONFIG) < configs.index(
        STOPPED_CONFIG)
    for config in STANDBY_CONFIGS:
        assert CONFIGS[config] == CONFIGS[BASELINE]  # the same storage mode, no prefix


def test_only_selects_the_pair_and_its_stopped_variant_in_round_order() -> None:
    chosen = runner.select(f"{STOPPED_CONFIG}, {STANDBY_CONFIG},{BASELINE},{NICED_CONFIG}")
    assert chosen == [("strongroom", c) for c in (BASELINE, STANDBY_CONFIG, NICED_CONFIG, STOPPED_CONFIG)]
    with pytest.raises(ValueError, match="disk-sync-standby-down"):
        runner.select("disk-sync-standby-down")


def test_each_standby_configuration_gets_a_standby_target(tmp_path: Path) -> None:
    shipping = runner._make_target("strongroom", STANDBY_CONFIG, tmp_path / "a", Progress(out=lambda _s: None))
    stopped = runner._make_target("strongroom", STOPPED_CONFIG, tmp_path / "b", Progress(out=lambda _s: None))
    niced = runner._make_target("strongroom", NICED_CONFIG, tmp_path / "e", Progress(out=lambda _s: None))
    plain = runner._make_target("strongroom", BASELINE, tmp_path / "c", Progress(out=lambda _s: None))
    assert isinstance(shipping, StandbyTarget) and not shipping.stopped and not shipping.niced
    assert isinstance(stopped, StandbyTarget) and stopped.stopped and not stopped.niced
    assert isinstance(niced, StandbyTarget) and niced.niced and not niced.stopped
    assert type(plain) is StrongroomTarget
    assert shipping.storage == plain.storage == "disk-sync" and shipping.events_dir is None
    with pytest.raises(ValueError, match="not a standby configuration"):
        StandbyTarget(BASELINE, tmp_path / "d", Progress(out=lambda _s: None))


def test_every_standby_pair_compares_confirm_p50_p99_and_throughput_with_disk_sync() -> None:
    pairs = {(ours, peer, fig): target for ours, peer, fig, target in runner.RATIOS}
    for config in STANDBY_CONFIGS:
        for fig in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s"):
            assert (config, BASELINE, fig) in pairs
            assert pairs[(config, BASELINE, fig)] is None  # shown; the issue names no tolerance
    assert all(fig in runner.FIGURES for _, _, fig, _ in runner.RATIOS)
    assert STANDBY_FIGURES.items() <= runner.FIGURES.items()


def test_which_configuration_measures_which_figure() -> None:
    applies = runner.figure_applies
    assert applies(BASELINE, "confirm.p99_ms") and applies(STOPPED_CONFIG, "confirm.p99_ms")
    assert not applies(BASELINE, "event_log.rows") and applies("disk-sync-events", "event_log.rows")
    for figure in ("confirm.standby_cpu_s_per_1k", "pipelined.standby_cpu_s_per_1k", "confirm.dr_cpu_s_per_1k",
                   "pipelined.dr_cpu_s_per_1k", "standby.behind_entries"):
        assert all(applies(config, figure) for config in STANDBY_CONFIGS)
        assert not applies(BASELINE, figure) and not applies("nats-fsync", figure)
    # A stopped standby never holds what the primary commits: no catch-up to time.
    for figure in ("standby.after_confirm_s", "standby.catch_up_s"):
        assert applies(STANDBY_CONFIG, figure) and applies(NICED_CONFIG, figure) and not applies(STOPPED_CONFIG, figure)


# --- the realm ----------------------------------------------------------------------------------


def test_the_standby_realm_is_disk_syncs_with_a_standby_set_reading_the_members_addresses() -> None:
    plain = parse_realm(realm_for("disk-sync"), "plain")
    realm = parse_realm(realm_for("disk-sync", primary=ADDRESSES), "standby")
    cluster, plain_cluster = realm.cluster(CLUSTER), plain.cluster(CLUSTER)
    assert cluster is not None and cluster.standby is not None and plain_cluster is not None
    assert [m.address for m in cluster.members] == ADDRESSES
    assert [m.name for m in cluster.members] == ["m1", "m2", "m3"]
    assert [m.name for m in cluster.standby.members] == ["s1", "s2", "s3"]
    assert cluster.standby.primary == ADDRESSES
    assert cluster.storage == plain_cluster.storage
    assert realm.stores == plain.stores and realm.destinations == plain.destinations
    assert plain_cluster.standby is None
    with pytest.raises(ValueError, match="3 primary addresses"):
        realm_for("disk-sync", primary=ADDRESSES[:2])


def test_a_standby_target_gives_its_members_fixed_free_addresses(tmp_path: Path) -> None:
    target = StandbyTarget(STANDBY_CONFIG, tmp_path, Progress(out=lambda _s: None))
    cluster = parse_realm(target.realm_text(), "bench").cluster(CLUSTER)
    assert cluster is not None and cluster.standby is not None
    addresses = [m.address for m in cluster.members]
    assert len(set(addresses)) == 3 and all(a and a.startswith("127.0.0.1:") for a in addresses)
    assert cluster.standby.primary == addresses


def test_the_standby_meter_adds_the_standby_sites_cpu_and_the_dr_services_alone() -> None:
    me, gone = os.getpid(), 2**22 + 1  # a pid no process has (pid_max is at most 2**22)
    meter = StandbyMeter(me, [me], [me], dr_pid=gone).start()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    out = meter.stop(1000)
    assert set(out) == {"leader_cpu_s_per_1k", "servers_cpu_s_per_1k", "client_cpu_s_per_1k", "standby_cpu_s_per_1k",
                        "dr_cpu_s_per_1k"}
    assert out["standby_cpu_s_per_1k"] > 0 and out["dr_cpu_s_per_1k"] == 0
    dr = StandbyMeter(gone, [gone], [], dr_pid=me).start()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    out = dr.stop(1000)
    assert out["dr_cpu_s_per_1k"] > 0 and out["standby_cpu_s_per_1k"] == out["dr_cpu_s_per_1k"]


def test_renice_lowers_every_thread_of_a_process() -> None:
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{child.pid}/task")) < 2:
            assert time.monotonic() < deadline, "the child did not start its thread"
            time.sleep(0.01)
        renice(child.pid, NICE)
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) == 2 and all(os.getpriority(os.PRIO_PROCESS, t) == NICE for t in tids)
    finally:
        child.kill()
        child.wait()


# --- the result document and the README ---------------------------------------------------------


def _results(p50: float, standby: bool, shipping: bool) -> dict[str, Any]:
    confirm: dict[str, float] = {"msgs_per_s": 1000 / p50, "p50_ms": p50, "p99_ms": 2 * p50, "x10_p50_ms": 10 * p50,
                                 "seconds": 5.0, "leader_cpu_s_per_1k": 0.1, "servers_cpu_s_per_1k": 0.2,
                                 "client_cpu_s_per_1k": 0.05}
    pipe = {"msgs_per_s": 30000.0, "seconds": 1.0, "leader_cpu_s_per_1k": 0.016, "servers_cpu_s_per_1k": 0.033,
            "client_cpu_s_per_1k": 0.008}
    out: dict[str, Any] = {"confirm": confirm, "pipelined": dict(pipe), "consume": {"msgs_per_s": 60000.0},
                           "fanout": {"deliveries_per_s": 65000.0}, "pipelined_x4": dict(pipe),
                           "pipelined_x16": dict(pipe)}
    if standby:
        for workload, cpu in (("confirm", 0.3), ("pipelined", 0.03)):
            out[workload].update(standby_cpu_s_per_1k=cpu if shipping else 0.0, dr_cpu_s_per_1k=cpu / 3 if shipping else 0.0)
        out["standby"] = {"behind_entries": 0.0 if shipping else 500.0, "dr_reads_leader": 1.0}
        if shipping:
            out["standby"].update(after_confirm_s=0.002, catch_up_s=0.5)
    return out


def _doc(order: list[tuple[str, str]]) -> dict[str, Any]:
    """A results document of three rounds of `order` (the tests using it take `bench_test_machine`)."""
    p50 = {BASELINE: 1.0, STANDBY_CONFIG: 1.1, NICED_CONFIG: 1.05, STOPPED_CONFIG: 1.0, "nats-fsync": 1.0}
    raw: list[dict[str, Any]] = [{"round": rnd, "system": system, "config": config, "loadavg_at_start": 0.1, "seconds": 10.0, "notes": [],
            "results": _results(p50[config] + rnd / 100, config in STANDBY_CONFIGS, config != STOPPED_CONFIG)}
           for rnd in (1, 2, 3) for system, config in order]
    return runner._document(raw, 3, Params(), dt.datetime(2026, 11, 24, tzinfo=dt.UTC), 120.0, ROOT, order)


PAIR = [("strongroom", c) for c in (BASELINE, STANDBY_CONFIG, NICED_CONFIG, STOPPED_CONFIG)]


def test_the_document_gives_the_ratio_of_the_medians_with_and_without_a_standby(
        bench_test_machine: None) -> None:
    doc = _doc(PAIR)
    ratios = {(r["ours"], r["figure"]): r for r in doc["ratios"] if r["peer"] == BASELINE}
    assert ratios[(STANDBY_CONFIG, "confirm.p50_ms")]["ratio"] == pytest.approx(1.12 / 1.02)
    assert ratios[(STOPPED_CONFIG, "confirm.p99_ms")]["ratio"] == pytest.approx(1.0)
    assert ratios[(NICED_CONFIG, "confirm.msgs_per_s")]["ratio"] == pytest.approx(1.02 / 1.07)
    assert ratios[(STANDBY_CONFIG, "confirm.p50_ms")]["met"] is None  # no target
    summary = doc["summary"]
    assert summary[STANDBY_CONFIG]["standby.catch_up_s"]["median"] == 0.5
    assert summary[STOPPED_CONFIG]["standby.behind_entries"]["median"] == 500
    assert "standby.catch_up_s" not in summary[STOPPED_CONFIG]
    assert summary[STANDBY_CONFIG]["confirm.standby_cpu_s_per_1k"]["values"] == [0.3, 0.3, 0.3]
    assert doc["conditions"]["standby"]["configs"] == list(STANDBY_CONFIGS)
    for config in STANDBY_CONFIGS:  # what the figures table shows is what the configuration measures
        for figure in runner.FIGURES:
            assert (figure in summary[config]) == runner.figure_applies(config, figure), (config, figure)

    report = runner.format_report(doc)
    assert f"{STOPPED_CONFIG} / {BASELINE}" in report and "confirm p99 [ms]" in report
    assert "standby site CPU, confirm [s/1k msgs]" in report


def test_a_run_of_the_pair_alone_writes_only_the_standby_subsection(bench_test_machine: None) -> None:
    text = readme.markdown(_doc(PAIR), "bench/results/X.json")
    assert text.startswith(readme.STANDBY_HEADING + "\n")
    assert "**Run of 2026-11-24** (3 rounds" in text and "`bench/results/X.json`" in text
    assert f"| figure | {BASELINE} | {STANDBY_CONFIG} | {NICED_CONFIG} | {STOPPED_CONFIG} |" in text
    assert "| confirm p50 (ms) | 1.02 (1.01–1.03) | 1.12 (1.11–1.13) | 1.07 (1.06–1.08) | 1.02 (1.01–1.03) |" in text
    assert (f"| figure | {STANDBY_CONFIG} / {BASELINE} | {NICED_CONFIG} / {BASELINE} | {STOPPED_CONFIG} / {BASELINE} |"
            in text)
    assert "| confirm p50 (ms) | 1.10× | 1.05× | 1.00× |" in text
    words = " ".join(text.split())  # the paragraphs are filled to 100 columns
    assert "3 of 3 rounds of `disk-sync-standby`, 3 of 3 rounds of `disk-sync-standby-niced`" in words
    assert "`disk-sync` confirmed a publish in 1.02 ms at p50 and 2.04 ms at p99;" in words
    assert "; niced 1.07 ms and 2.14 ms (1.05× and 1.05×);" in words
    # 0.2 ms (members) + 0.05 (client) + 0.3 (standby site) of CPU per publish, on 2 cores
    assert ("`disk-sync-standby`: 0.55 ms of CPU per confirmed publish, members, client and standby site together, "
            "which 2 cores cannot give in less than 0.28 ms; each publish took 1.12 ms.") in words
    assert "| primary members CPU, confirm (s/1k msgs) | 0.200 (0.200–0.200) | 0.200 (" in text
    assert "| DR service CPU, confirm (s/1k msgs) | - | 0.100 (0.100–0.100) | 0.100 (0.100–0.100) | 0.000 (" in text
    assert "## " not in text.replace(readme.STANDBY_HEADING, "")  # no other (sub)section

    section = "# X\n\n## Benchmarks\n\nmain body\n\n### Routing\n\nr\n\n### Where the time goes\n\nkept\n\n## Next\n"
    new = readme.replace_subsection(section, text)
    assert new.index("### Routing") < new.index(readme.STANDBY_HEADING) < new.index("### Where the time goes")
    assert "main body" in new and "kept" in new and new.endswith("## Next\n")
    assert readme.replace_subsection(new, text) == new  # rewritten in place


def test_a_whole_run_keeps_the_standby_configurations_out_of_the_main_table(bench_test_machine: None) -> None:
    order = [*PAIR, ("nats", "nats-fsync")]
    text = readme.markdown(_doc(order))
    main, _, standby = text.partition(readme.STANDBY_HEADING)
    assert f"| figure | {BASELINE} | nats-fsync |" in main
    assert STANDBY_CONFIG not in main.split("Median (min–max)")[1]
    assert f"| figure | {BASELINE} | {STANDBY_CONFIG} | {NICED_CONFIG} | {STOPPED_CONFIG} |" in standby
    assert f"{STANDBY_CONFIG} / {BASELINE}" in standby
