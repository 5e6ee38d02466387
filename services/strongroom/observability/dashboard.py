"""The Grafana dashboard of the metrics catalog (deploy/grafana/strongroom.json), made from the
catalog so every metric has its panel and no panel names a metric that does not exist.

    python -m strongroom.observability.dashboard            # write deploy/grafana/strongroom.json
    python -m strongroom.observability.dashboard --check    # exit 1 if the file is not what it makes

Rows follow the catalog's sections; a gauge is drawn as it is, a counter as its rate per second,
a histogram as its p50 and p99 (histogram_quantile over 5 minutes). Variables: the Prometheus
data source, the cluster and the member (both multi-valued, "All" by default; the member choice
applies to the members' panels, the routers' and DR services' follow the cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from strongroom.observability.catalog import CATALOG, MetricDoc

__all__ = ["DASHBOARD", "dashboard", "main"]

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "strongroom.json"

_ROWS = (
    ("Members and the log", ("strongroom_member_info", "strongroom_leader", "strongroom_epoch",
                             "strongroom_commit_index", "strongroom_applied_index", "strongroom_last_index",
                             "strongroom_snapshot_index", "strongroom_synced", "strongroom_store_damaged",
                             "strongroom_persistent_store_state", "strongroom_scrubs", "strongroom_scrub_failures",
                             "strongroom_scrub_last_clean_timestamp_seconds", "strongroom_scrub_last_seconds")),
    ("Commit latency and storage", ("strongroom_commit_seconds", "strongroom_group_commit_operations",
                                    "strongroom_log_write_seconds", "strongroom_disk_bytes",
                                    "strongroom_database_memory_bytes",
                                    "strongroom_memory_payload_bytes", "strongroom_dedup_producers",
                                    "strongroom_dedup_producers_forgotten")),
    ("Replication", ("strongroom_follower_lag_entries", "strongroom_follower_reachable", "strongroom_snapshots_sent",
                     "strongroom_snapshots_installed", "strongroom_log_backtracks", "strongroom_catchups")),
    ("Stores", ("strongroom_store_messages", "strongroom_store_bytes", "strongroom_store_swapped_messages",
                "strongroom_store_uows_pending", "strongroom_messages_stored", "strongroom_messages_acked",
                "strongroom_messages_expired", "strongroom_messages_discarded", "strongroom_messages_dead_lettered")),
    ("Durables", ("strongroom_durable_pending_messages", "strongroom_durable_pending_bytes",
                  "strongroom_durable_unacked_messages", "strongroom_durable_subscribers", "strongroom_deliveries",
                  "strongroom_redeliveries")),
    ("Forwarding and disaster recovery", ("strongroom_forward_pending_messages", "strongroom_dr_seconds_behind_primary",
                                          "strongroom_dr_messages_behind_primary")),
    ("Routers", ("strongroom_router_active", "strongroom_route_connected", "strongroom_route_forwarded_messages",
                 "strongroom_route_received_messages", "strongroom_route_resent_messages",
                 "strongroom_route_duplicate_messages", "strongroom_route_waiting_messages",
                 "strongroom_route_oldest_waiting_seconds")),
    ("Realm service", ("strongroom_realm_version", "strongroom_realm_applies")),
    ("DR services", ("strongroom_dr_shipping", "strongroom_dr_generation", "strongroom_dr_entries_behind",
                     "strongroom_dr_messages_behind", "strongroom_dr_seconds_behind", "strongroom_dr_shipped_bytes",
                     "strongroom_dr_shipped_batches", "strongroom_dr_shipped_snapshots", "strongroom_dr_reconnects")),
    ("Refused connections and calls", ("strongroom_refused", "strongroom_router_refused", "strongroom_dr_refused",
                                       "strongroom_realm_refused")),
)

_SELECTS = {"member": '{cluster=~"$cluster", member=~"$member"}', "router": '{cluster=~"$cluster"}',
            "dr": '{cluster=~"$cluster"}', "realm": ""}
"""Each process's selection by the dashboard's variables (the realm service serves every cluster)."""
_UNITS = {"seconds": "s", "bytes": "bytes"}


def _legend(doc: MetricDoc) -> str:
    if doc.labels[0] != "cluster":  # the realm service's
        return " ".join(f"{{{{{label}}}}}" for label in doc.labels)
    who, *extra = doc.labels[1:]
    return " ".join([f"{{{{cluster}}}}/{{{{{who}}}}}", *(f"{{{{{label}}}}}" for label in extra)])


def _targets(doc: MetricDoc) -> list[dict[str, Any]]:
    select = _SELECTS[doc.process]
    if doc.kind == "counter":
        return [{"expr": f"rate({doc.exposed}{select}[1m])", "legendFormat": _legend(doc), "refId": "A"}]
    if doc.kind == "histogram":
        by = ", ".join((*doc.labels, "le"))
        return [{"expr": f"histogram_quantile({q}, sum by ({by}) (rate({doc.name}_bucket{select}[5m])))",
                 "legendFormat": f"p{int(q * 100)} {_legend(doc)}", "refId": ref}
                for q, ref in ((0.5, "A"), (0.99, "B"))]
    return [{"expr": f"{doc.exposed}{select}", "legendFormat": _legend(doc), "refId": "A"}]


def _unit(doc: MetricDoc) -> str:
    if doc.kind == "counter":
        return "ops"
    return next((unit for suffix, unit in _UNITS.items() if doc.name.endswith(suffix)), "short")


def _panel(doc: MetricDoc, ident: int, x: int, y: int) -> dict[str, Any]:
    title = doc.exposed + (" (per second)" if doc.kind == "counter" else "")
    return {"id": ident, "type": "timeseries", "title": title, "description": doc.help,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": _unit(doc)}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": _targets(doc)}


def _variable(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "type": "query", "label": name, "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2, "includeAll": True,
            "multi": True, "current": {"text": "All", "value": "$__all"}, "sort": 1}


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana imports it."""
    by_name = {doc.name: doc for doc in CATALOG}
    panels: list[dict[str, Any]] = []
    ident, y = 1, 0
    for title, names in _ROWS:
        panels.append({"id": ident, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        ident, y = ident + 1, y + 1
        for i, name in enumerate(names):
            panels.append(_panel(by_name[name], ident, (i % 3) * 8, y + (i // 3) * 8))
            ident += 1
        y += ((len(names) + 2) // 3) * 8
    return {
        "title": "Strongroom", "uid": "strongroom", "tags": ["strongroom", "messaging"], "timezone": "browser",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "description": "Strongroom clusters (members, routers, DR services): the README's metrics catalog, a panel "
                       "per metric.",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "label": "Prometheus", "query": "prometheus",
             "current": {}, "hide": 0},
            _variable("cluster", "label_values(strongroom_member_info, cluster)"),
            _variable("member", 'label_values(strongroom_member_info{cluster=~"$cluster"}, member)')]},
        "panels": panels,
    }


def _text() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strongroom.observability.dashboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from what it makes")
    args = parser.parse_args(argv)
    if args.check:
        if not DASHBOARD.exists() or DASHBOARD.read_text() != _text():
            print(f"{DASHBOARD} is stale: python -m strongroom.observability.dashboard", file=sys.stderr)
            return 1
        print(f"{DASHBOARD.name} is fresh")
        return 0
    DASHBOARD.parent.mkdir(parents=True, exist_ok=True)
    DASHBOARD.write_text(_text())
    print(f"wrote {DASHBOARD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
