"""Strongroom picks gRPC's classic pollers before gRPC starts, unless the environment chose."""

from __future__ import annotations

import os
import subprocess
import sys

import strongroom

SHOW = "import os; {first}; print(os.environ.get('GRPC_EXPERIMENTS'))"


def _run(first: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", SHOW.format(first=first)], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env.update(extra)
    return env


def test_importing_strongroom_first_selects_the_classic_pollers() -> None:
    assert _run("import strongroom.client", _env()) == strongroom.GRPC_EXPERIMENTS


def test_a_choice_in_the_environment_is_kept_even_empty() -> None:
    assert _run("import strongroom", _env(GRPC_EXPERIMENTS="")) == ""
    assert _run("import strongroom", _env(GRPC_EXPERIMENTS="some_flag")) == "some_flag"


def test_grpc_imported_before_strongroom_keeps_its_default() -> None:
    assert _run("import grpc, strongroom", _env()) == "None"


FORKS = """
import asyncio, subprocess, sys
import strongroom
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

async def main():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stub = health_pb2_grpc.HealthStub(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
    running = True
    async def calls():
        while running:
            await stub.Check(health_pb2.HealthCheckRequest())
    load = [asyncio.create_task(calls()) for _ in range(4)]
    failed = 0
    for _ in range(int(sys.argv[1])):
        child = await asyncio.to_thread(subprocess.run, ["/bin/true"], preexec_fn=lambda: None,
                                        close_fds=True, capture_output=True)
        failed += child.returncode != 0
        await asyncio.sleep(0.01)
    running = False
    await asyncio.gather(*load)
    await server.stop(None)
    print(failed)

asyncio.run(main())
"""


def test_a_fork_with_preexec_fn_during_calls_starts_its_child() -> None:
    """PySpark's way of starting its JVM (fork, preexec_fn, close_fds, exec) while gRPC calls
    are in flight: with gRPC's fork handlers on, about one child in a hundred aborted before
    it could exec (JAVA_GATEWAY_EXITED in the Spark tests)."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run([sys.executable, "-c", FORKS, "300"], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0", out.stderr[-2000:]
    assert "epoll_wait error" not in out.stderr
