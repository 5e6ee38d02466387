"""Fixtures for integration tests: a real etcd and real member processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import SHARED_DESTINATIONS, SHARED_STORES, Cluster, realm_yaml, start_cluster


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-member disk-sync cluster for the semantics tests of a module (distinct destinations)."""
    etcd, cluster = start_cluster(tmp_path_factory.mktemp("shared"), realm_yaml(extra_stores=SHARED_STORES,
                                                                         extra_destinations=SHARED_DESTINATIONS))
    try:
        yield cluster
    finally:
        cluster.stop_all()
        etcd.stop()  # type: ignore[attr-defined]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[object]:
    """Factory for a cluster of the test's own: make_cluster(storage="disk-sync", members=3)."""
    started: list[tuple[object, Cluster]] = []

    def make(storage: str = "disk-sync", members: int = 3, **kw: object) -> Cluster:
        etcd, cluster = start_cluster(tmp_path, realm_yaml(storage=storage, members=members, **kw), members)  # type: ignore[arg-type]
        started.append((etcd, cluster))
        cluster.etcd_process = etcd  # type: ignore[attr-defined]
        return cluster

    try:
        yield make
    finally:
        for etcd, cluster in started:
            cluster.stop_all()
            etcd.stop()  # type: ignore[attr-defined]
