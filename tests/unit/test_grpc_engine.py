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
