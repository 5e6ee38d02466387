"""`endpoints_from_environment`: the client finds the cluster as the `strongroom` commands do
without `-s`: `$STRONGROOM_ENDPOINTS`, else the members of the local cluster's state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strongroom.client import endpoints_from_environment
from strongroom.errors import InvalidArgument
from strongroom.local.launcher import state_path


def write_state(data_dir: Path, members: dict[str, str]) -> None:
    """A state file as `strongroom up` writes it, with one cluster of `members` (name: address)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster = {"members": {name: {"address": address, "pid": 1} for name, address in members.items()}}
    state_path(data_dir).write_text(json.dumps({"clusters": {"default": cluster}}))


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither variable set, and the working directory empty (no ./.strongroom)."""
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    monkeypatch.delenv("STRONGROOM_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)


def test_the_variable_wins_over_a_state_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_state(tmp_path / ".strongroom", {"m1": "127.0.0.1:1001"})
    monkeypatch.setenv("STRONGROOM_ENDPOINTS", " 10.0.0.1:7101, 10.0.0.2:7101 ,")
    assert endpoints_from_environment() == ["10.0.0.1:7101", "10.0.0.2:7101"]


def test_a_variable_naming_no_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRONGROOM_ENDPOINTS", " , ")
    with pytest.raises(InvalidArgument, match="STRONGROOM_ENDPOINTS names no address"):
        endpoints_from_environment()


def test_the_members_of_the_state_file_in_the_default_data_dir(tmp_path: Path) -> None:
    write_state(tmp_path / ".strongroom", {"m1": "127.0.0.1:1001", "m2": "127.0.0.1:1002"})
    assert endpoints_from_environment() == ["127.0.0.1:1001", "127.0.0.1:1002"]


def test_the_data_dir_of_the_variable_and_of_the_argument(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_state(tmp_path / "from-env", {"m1": "127.0.0.1:2001"})
    write_state(tmp_path / "given", {"m1": "127.0.0.1:3001"})
    monkeypatch.setenv("STRONGROOM_DATA_DIR", str(tmp_path / "from-env"))
    assert endpoints_from_environment() == ["127.0.0.1:2001"]
    assert endpoints_from_environment(tmp_path / "given") == ["127.0.0.1:3001"]


def test_no_state_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as caught:
        endpoints_from_environment()
    assert "STRONGROOM_ENDPOINTS" in caught.value.message and "strongroom up" in caught.value.message
    assert str(state_path(tmp_path / ".strongroom")) in caught.value.message


def test_a_state_file_without_members_is_refused(tmp_path: Path) -> None:
    write_state(tmp_path / "empty", {})
    with pytest.raises(InvalidArgument, match="lists no members"):
        endpoints_from_environment(tmp_path / "empty")
