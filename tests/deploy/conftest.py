"""Fixtures of the chart, image and drill checks (no cluster, no Docker engine, no network)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chartkit import SCENARIOS, Rendered, render_scenario


@pytest.fixture(params=[p.name for p in SCENARIOS])
def scenario(request: pytest.FixtureRequest) -> Iterator[Rendered]:
    """Each ci/values-*.yaml scenario, rendered."""
    yield render_scenario(request.param)
