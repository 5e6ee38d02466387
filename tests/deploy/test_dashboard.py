"""The Grafana dashboard (deploy/grafana/strongroom.json): what its generator makes from the metrics
catalog, a panel for every metric, no expression naming a metric the members do not export, and
panels that do not overlap."""

from __future__ import annotations

import json
import re

from strongroom.observability.catalog import CATALOG
from strongroom.observability.dashboard import DASHBOARD, dashboard, main


def test_the_file_is_what_the_generator_makes() -> None:
    assert main(["--check"]) == 0
    assert json.loads(DASHBOARD.read_text()) == dashboard()


def _exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_every_metric_of_the_catalog_has_a_panel_and_no_panel_names_another() -> None:
    named = {m for e in _exprs() for m in re.findall(r"\b(strongroom_[a-z_]+)", e)}
    exported = {d.exposed for d in CATALOG} | {f"{d.name}_bucket" for d in CATALOG if d.kind == "histogram"}
    assert named <= exported, named - exported
    shown = {d.name for d in CATALOG if d.exposed in named or f"{d.name}_bucket" in named}
    assert shown == {d.name for d in CATALOG}


def test_every_query_selects_the_chosen_clusters_and_members() -> None:
    members = {d.exposed for d in CATALOG if d.process == "member"} | \
        {f"{d.name}_bucket" for d in CATALOG if d.process == "member"}
    realm = {d.exposed for d in CATALOG if d.process == "realm"}
    for expr in _exprs():
        if any(re.search(rf"\b{m}\b", expr) for m in realm):
            continue  # the realm service serves every cluster
        assert '{cluster=~"$cluster"' in expr, expr
        if any(re.search(rf"\b{m}{{", expr) for m in members):
            assert '{cluster=~"$cluster", member=~"$member"}' in expr, expr
    names = [v["name"] for v in dashboard()["templating"]["list"]]
    assert names == ["datasource", "cluster", "member"]


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, p["title"]
        assert g["x"] + g["w"] <= 24
        taken |= cells
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
