"""The realm service end to end: a real `strongroom-realm` process on a real etcd, over real gRPC,
and the `strongroom realm` CLI as subprocesses.

The realm lives at fixed etcd keys, so every test takes an etcd of its own (`fresh_etcd`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from harness import scrape, value

from strongroom.api.v1 import realm_pb2, realm_pb2_grpc
from strongroom.errors import ERROR_DOMAIN, RealmInvalid
from strongroom.etcd import EtcdClient, KeyValue
from strongroom.keys import REALM_CURRENT, REALM_SERVICE, realm_version_key
from strongroom.local.etcdproc import EtcdProcess, free_port
from strongroom.local.process import realm_argv, spawn, stop_processes
from strongroom.realm.model import DEFAULT_REALM_YAML
from strongroom.channels import open_sync_channel
from strongroom.realm.store import (
    RealmStore,
    RealmVersionConflict,
    load_current_realm,
)

V1 = """\
clusters:
  - name: c1
    members:
      - name: m1
stores:
  - name: s1
    cluster: c1
destinations:
  - name: "*"
    store: s1
"""
V2 = V1.replace("      - name: m1\n", "      - name: m1\n      - name: m2\n      - name: m3\n")
# Line 7 names a cluster the realm does not define.
INVALID = V1.replace("cluster: c1", "cluster: nowhere")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any STRONGROOM_* setting of the developer's shell (the test
    session's TLS settings kept: tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_") or k.startswith("STRONGROOM_TLS_")}
    env.update(extra)
    return env


def etcd_get(endpoint: str, key: str) -> KeyValue | None:
    async def get() -> KeyValue | None:
        etcd = EtcdClient(endpoint)
        try:
            return await etcd.get(key)
        finally:
            await etcd.close()

    return asyncio.run(get())


# --- the realm process ---------------------------------------------------------------------------


@dataclass
class RealmProcess:
    """A running `strongroom-realm`."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM by pid, SIGKILL if it hangs; the exit code."""
        stop_processes([self.process], timeout)
        return self.process.returncode


LISTENING = re.compile(r"^realm service listening on 127\.0\.0\.1:(\d+)$", re.MULTILINE)


def launch_realm(etcd: EtcdProcess, workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    return spawn(realm_argv(etcd.endpoint, "127.0.0.1:0", extra), workdir / "realm.log", env=clean_env(),
                 cwd=workdir)


def wait_listening(process: subprocess.Popen[bytes], log_path: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = LISTENING.search(log_path.read_text())
        if m:
            return int(m.group(1))
        if process.poll() is not None:
            raise AssertionError(f"strongroom-realm exited with {process.returncode}:\n{log_path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"strongroom-realm did not start:\n{log_path.read_text()}")


@pytest.fixture
def start_realm(fresh_etcd: EtcdProcess, tmp_path: Path) -> Iterator[Callable[..., RealmProcess]]:
    """Start realm processes on the test's etcd; every one is stopped after the test."""
    started: list[RealmProcess] = []

    def start(*extra: str) -> RealmProcess:
        workdir = tmp_path / f"realm{len(started)}"
        process = launch_realm(fresh_etcd, workdir, *extra)
        proc = RealmProcess(process=process, port=0, log_path=workdir / "realm.log")
        started.append(proc)
        proc.port = wait_listening(process, proc.log_path)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


@pytest.fixture
def realm(start_realm: Callable[..., RealmProcess]) -> RealmProcess:
    return start_realm()


@pytest.fixture
def stub(realm: RealmProcess) -> Iterator[realm_pb2_grpc.RealmServiceStub]:
    with open_sync_channel(realm.address, []) as channel:
        yield realm_pb2_grpc.RealmServiceStub(channel)


def apply(stub: realm_pb2_grpc.RealmServiceStub, text: str, source: str = "realm.yaml",
          expected: int = 0) -> realm_pb2.RealmVersion:
    return stub.Apply(realm_pb2.ApplyRealmRequest(yaml=text, source_name=source, expected_version=expected),
                      timeout=10)


def details(exc: grpc.RpcError) -> str:
    """The status message of a failed call."""
    return str(exc.details())  # type: ignore[attr-defined]


def error_info(exc: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    assert status is not None, "the error carries no google.rpc.Status"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError("the status carries no ErrorInfo")


# --- Apply / Get / History -----------------------------------------------------------------------


def test_apply_versions_get_and_history(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    before = time.time()
    v1 = apply(stub, V1, "v1.yaml")
    v2 = apply(stub, V2, "v2.yaml")
    assert (v1.version, v2.version) == (1, 2)
    assert v1.digest == sha256(V1) and v2.digest == sha256(V2)
    assert before - 1 <= v1.applied_at <= v2.applied_at <= time.time() + 1

    current = stub.Get(realm_pb2.GetRealmRequest(), timeout=10)
    assert (current.version, current.yaml, current.source_name) == (2, V2, "v2.yaml")
    normalized = json.loads(current.normalized_json)
    assert [m["name"] for m in normalized["clusters"][0]["members"]] == ["m1", "m2", "m3"]
    assert normalized["clusters"][0]["storage"] == "disk-sync"  # default filled in

    first = stub.Get(realm_pb2.GetRealmRequest(version=1), timeout=10)
    assert (first.version, first.yaml, first.source_name, first.digest) == (1, V1, "v1.yaml", sha256(V1))

    history = stub.History(realm_pb2.RealmHistoryRequest(), timeout=10).versions
    assert [(v.version, v.digest, v.source_name) for v in history] == [
        (1, sha256(V1), "v1.yaml"), (2, sha256(V2), "v2.yaml")]
    assert all(v.yaml == "" for v in history), "History leaves the document text out"


def test_applying_the_current_document_again_creates_no_version(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    apply(stub, V1)
    first = apply(stub, V2)
    again = apply(stub, V2, "same-again.yaml")
    assert again.version == first.version == 2
    assert again.applied_at == first.applied_at and again.source_name == "realm.yaml"
    assert len(stub.History(realm_pb2.RealmHistoryRequest(), timeout=10).versions) == 2
    # Going back to an older document is a new version, not a rollback of the counter.
    assert apply(stub, V1).version == 3


def test_invalid_apply_is_rejected_with_its_location_and_changes_nothing(
        stub: realm_pb2_grpc.RealmServiceStub) -> None:
    apply(stub, V1, "good.yaml")
    with pytest.raises(grpc.RpcError) as info:
        apply(stub, INVALID, "bad.yaml")
    exc = info.value
    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "bad.yaml:7:5: stores[0].cluster:" in details(exc)
    assert "'nowhere'" in details(exc)
    err = error_info(exc)
    assert (err.reason, err.domain) == ("REALM_INVALID", ERROR_DOMAIN)
    assert err.metadata["problem_count"] == "1"
    assert err.metadata["problems"].startswith("bad.yaml:7:5: stores[0].cluster:")

    current = stub.Get(realm_pb2.GetRealmRequest(), timeout=10)
    assert (current.version, current.yaml, current.source_name) == (1, V1, "good.yaml")
    assert len(stub.History(realm_pb2.RealmHistoryRequest(), timeout=10).versions) == 1


def test_the_realm_service_metrics_count_applies_and_follow_the_version(
        start_realm: Callable[..., RealmProcess]) -> None:
    port = free_port()
    realm = start_realm("--metrics-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/metrics"
    assert f"realm service metrics {url}" in realm.log()
    with open_sync_channel(realm.address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)
        apply(stub, V1)
        apply(stub, V2)
        apply(stub, V2)  # the same document again: accepted, no new version
        with pytest.raises(grpc.RpcError):
            apply(stub, INVALID, "bad.yaml")
        with pytest.raises(grpc.RpcError):
            apply(stub, V1, expected=1)  # version 2 is current
    deadline = time.time() + 10
    while value(scrape(url), "strongroom_realm_version", address=realm.address) != 2:  # the watch follows etcd
        assert time.time() < deadline, scrape(url)
        time.sleep(0.1)
    samples = scrape(url)
    assert {labels["outcome"]: v for labels, v in samples["strongroom_realm_applies_total"]} == \
        {"accepted": 3, "REALM_INVALID": 1, "REALM_VERSION_CONFLICT": 1}


def test_a_yaml_syntax_error_is_rejected_with_its_line(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        apply(stub, "clusters:\n  - name: c1\n   members: [\n", "broken.yaml")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "broken.yaml:3:" in details(info.value)
    assert error_info(info.value).reason == "REALM_INVALID"


def test_a_huge_invalid_document_still_gets_a_clean_error(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    # 400 problems would overflow gRPC's 8 KiB trailer limit if all were sent.
    text = V1.replace("    cluster: c1\n", "    cluster: c1\n" + "".join(
        f"    unknown_setting_number_{i}: {i}\n" for i in range(400)))
    with pytest.raises(grpc.RpcError) as info:
        apply(stub, text, "huge.yaml")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "huge.yaml:8:5: stores[0].unknown_setting_number_0: unknown key" in details(info.value)
    assert "more problems" in details(info.value)
    err = error_info(info.value)
    assert err.reason == "REALM_INVALID" and err.metadata["problem_count"] == "400"


def test_expected_version_guards_against_a_concurrent_change(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        apply(stub, V1, expected=1)
    assert info.value.code() == grpc.StatusCode.ABORTED
    apply(stub, V1)
    assert apply(stub, V2, expected=1).version == 2
    with pytest.raises(grpc.RpcError) as info:
        apply(stub, DEFAULT_REALM_YAML, expected=1)
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert error_info(info.value).reason == "REALM_VERSION_CONFLICT"
    assert "version 2 is current" in details(info.value)
    assert stub.Get(realm_pb2.GetRealmRequest(), timeout=10).version == 2


def test_get_before_any_apply_and_of_a_missing_version_is_not_found(
        stub: realm_pb2_grpc.RealmServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.Get(realm_pb2.GetRealmRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    apply(stub, V1)
    with pytest.raises(grpc.RpcError) as info:
        stub.Get(realm_pb2.GetRealmRequest(version=9), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "9" in details(info.value)


# --- Validate / Watch / health -------------------------------------------------------------------


def test_validate_returns_located_problems_and_stores_nothing(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    bad = V1.replace("  - name: c1\n", "  - name: c1\n    storage: tape\n").replace(
        "    cluster: c1\n", "    cluster: c1\n    colour: red\n")
    reply = stub.Validate(realm_pb2.ValidateRealmRequest(yaml=bad, source_name="check.yaml"), timeout=10)
    assert not reply.valid
    found = {(p.file, p.line, p.column, p.path) for p in reply.problems}
    assert found == {("check.yaml", 3, 5, "clusters[0].storage"), ("check.yaml", 9, 5, "stores[0].colour")}
    assert any("'tape' is not one of" in p.message for p in reply.problems)

    dangling = stub.Validate(realm_pb2.ValidateRealmRequest(yaml=INVALID, source_name="x.yaml"), timeout=10)
    [problem] = dangling.problems
    assert (problem.file, problem.line, problem.column, problem.path) == ("x.yaml", 7, 5, "stores[0].cluster")
    assert problem.message == "store 's1' names cluster 'nowhere', which the realm does not define"

    syntax = stub.Validate(realm_pb2.ValidateRealmRequest(yaml="clusters: [\n", source_name="s.yaml"), timeout=10)
    [problem] = syntax.problems
    assert (problem.file, problem.line, problem.path) == ("s.yaml", 2, "")
    assert problem.message

    good = stub.Validate(realm_pb2.ValidateRealmRequest(yaml=V1), timeout=10)
    assert good.valid and not good.problems
    assert json.loads(good.normalized_json)["stores"][0]["replicated"] is True
    with pytest.raises(grpc.RpcError) as info:
        stub.Get(realm_pb2.GetRealmRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, "Validate must not store anything"


def test_watch_sends_the_current_version_then_each_new_one(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    apply(stub, V1)
    call = stub.Watch(realm_pb2.WatchRealmRequest(), timeout=30)
    try:
        first = next(call)
        assert (first.version, first.yaml) == (1, V1)
        apply(stub, V2, "next.yaml")
        second = next(call)
        assert (second.version, second.yaml, second.source_name) == (2, V2, "next.yaml")
        apply(stub, V2)  # identical: no new version, so nothing is sent for it
        apply(stub, DEFAULT_REALM_YAML)
        assert next(call).version == 3
    finally:
        call.cancel()


def test_watch_on_an_empty_realm_waits_for_the_first_apply(stub: realm_pb2_grpc.RealmServiceStub) -> None:
    call = stub.Watch(realm_pb2.WatchRealmRequest(), timeout=30)
    try:
        time.sleep(0.3)  # let the watch reach etcd before the apply
        apply(stub, V1)
        assert next(call).version == 1
    finally:
        call.cancel()


def test_health_reports_serving_and_reflection_lists_the_service(realm: RealmProcess) -> None:
    with open_sync_channel(realm.address, []) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "strongroom.v1.RealmService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        [answer] = list(reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        names = {s.name for s in answer.list_services_response.service}
        assert {"strongroom.v1.RealmService", "grpc.health.v1.Health"} <= names


def test_reflection_is_served_as_v1_too(realm: RealmProcess) -> None:
    """grpcurl and newer tools ask grpc.reflection.v1 first (its messages encode as v1alpha's)."""
    with open_sync_channel(realm.address, []) as channel:
        info = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                     request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                     response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        listed, described = list(info(iter([
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="strongroom.v1.RealmService")]), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {"strongroom.v1.RealmService", "grpc.reflection.v1.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto


# --- process lifecycle ---------------------------------------------------------------------------


def test_registers_in_etcd_and_deregisters_on_sigterm(realm: RealmProcess, fresh_etcd: EtcdProcess) -> None:
    kv = etcd_get(fresh_etcd.endpoint, REALM_SERVICE)
    assert kv is not None and kv.value.decode() == realm.address
    assert kv.lease != 0, "the registration must vanish with the process"
    started = time.monotonic()
    assert realm.stop() == 0
    assert time.monotonic() - started < 8
    assert etcd_get(fresh_etcd.endpoint, REALM_SERVICE) is None
    assert "realm service listening on" in realm.log()


def test_realm_file_is_applied_only_when_etcd_has_no_realm(
        start_realm: Callable[..., RealmProcess], tmp_path: Path) -> None:
    first_file, second_file = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first_file.write_text(V1)
    second_file.write_text(V2)
    first = start_realm("--realm-file", str(first_file))
    with open_sync_channel(first.address, []) as channel:
        current = realm_pb2_grpc.RealmServiceStub(channel).Get(realm_pb2.GetRealmRequest(), timeout=10)
    assert (current.version, current.yaml, current.source_name) == (1, V1, str(first_file))
    assert first.stop() == 0

    second = start_realm("--realm-file", str(second_file))
    with open_sync_channel(second.address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)
        current = stub.Get(realm_pb2.GetRealmRequest(), timeout=10)
        assert (current.version, current.yaml) == (1, V1), "an existing realm must not be overwritten"
        assert len(stub.History(realm_pb2.RealmHistoryRequest(), timeout=10).versions) == 1


def test_an_invalid_realm_file_stops_startup_with_its_location(
        fresh_etcd: EtcdProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(INVALID)
    process = launch_realm(fresh_etcd, tmp_path / "w", "--realm-file", str(bad))
    try:
        assert process.wait(30) == 1
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert f"{bad}:7:5: stores[0].cluster:" in (tmp_path / "w" / "realm.log").read_text()
    assert etcd_get(fresh_etcd.endpoint, REALM_CURRENT) is None


# --- the CLI -------------------------------------------------------------------------------------


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strongroom.cli.main", "realm", *args],
                          check=False, capture_output=True, text=True, cwd=cwd, env=clean_env(**env), timeout=60)


def test_cli_validate_works_offline(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(V1)
    (tmp_path / "bad.yaml").write_text(INVALID)
    ok = cli("validate", "good.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "valid" in ok.stdout

    bad = cli("validate", "bad.yaml", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stdout.strip().startswith("bad.yaml:7:5: stores[0].cluster: store 's1' names cluster 'nowhere'")

    as_json = cli("validate", "bad.yaml", "--json", cwd=tmp_path)
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["valid"] is False
    assert report["problems"] == [{
        "file": "bad.yaml", "line": 7, "column": 5, "path": "stores[0].cluster",
        "message": "store 's1' names cluster 'nowhere', which the realm does not define"}]

    missing = cli("validate", "absent.yaml", cwd=tmp_path)
    assert missing.returncode == 1 and "absent.yaml" in missing.stderr


def test_cli_apply_get_and_history_through_etcd_discovery(
        realm: RealmProcess, fresh_etcd: EtcdProcess, tmp_path: Path) -> None:
    (tmp_path / "v1.yaml").write_text(V1)
    (tmp_path / "v2.yaml").write_text(V2)
    (tmp_path / "bad.yaml").write_text(INVALID)
    etcd = ("--etcd", fresh_etcd.endpoint)

    for name in ("v1.yaml", "v2.yaml"):
        done = cli("apply", name, *etcd, cwd=tmp_path)
        assert done.returncode == 0, done.stderr

    bad = cli("apply", "bad.yaml", *etcd, cwd=tmp_path)
    assert bad.returncode == 1
    assert "bad.yaml:7:5: stores[0].cluster:" in bad.stderr.splitlines()[0]

    got = cli("get", "--json", *etcd, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    current = json.loads(got.stdout)
    assert (current["version"], current["yaml"], current["source_name"]) == (2, V2, "v2.yaml")
    assert current["digest"] == sha256(V2)
    assert len(current["normalized"]["clusters"][0]["members"]) == 3

    old = cli("get", "--version", "1", *etcd, cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    assert old.stdout == V1, "plain `get` prints the document so it round-trips"

    history = cli("history", "--json", *etcd, cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    assert [(v["version"], v["source_name"]) for v in json.loads(history.stdout)] == [
        (1, "v1.yaml"), (2, "v2.yaml")]

    table = cli("history", *etcd, cwd=tmp_path)
    assert table.returncode == 0
    assert [line.split()[0] for line in table.stdout.splitlines()[1:]] == ["1", "2"]

    conflict = cli("apply", "v1.yaml", "--expected-version", "1", *etcd, cwd=tmp_path)
    assert conflict.returncode == 1 and "version 2 is current" in conflict.stderr


def test_cli_finds_the_service_by_env_flag_and_state_file(realm: RealmProcess, tmp_path: Path) -> None:
    (tmp_path / "v1.yaml").write_text(V1)
    applied = cli("apply", "v1.yaml", cwd=tmp_path, STRONGROOM_REALM=realm.address)
    assert applied.returncode == 0, applied.stderr

    flag = cli("--realm-address", realm.address, "get", "--json", cwd=tmp_path)
    assert flag.returncode == 0, flag.stderr
    assert json.loads(flag.stdout)["version"] == 1

    nowhere = cli("history", cwd=tmp_path)
    assert nowhere.returncode == 1 and "cannot find the realm service" in nowhere.stderr

    state_dir = tmp_path / ".strongroom"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps({"realm": {"address": realm.address}}))
    local = cli("history", "--json", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert [v["version"] for v in json.loads(local.stdout)] == [1]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_env_dir = cli("get", "--json", cwd=elsewhere, STRONGROOM_DATA_DIR=str(state_dir))
    assert by_env_dir.returncode == 0, by_env_dir.stderr


def test_cli_finds_the_service_named_by_server_among_other_addresses(realm: RealmProcess, tmp_path: Path) -> None:
    from strongroom.local.etcdproc import free_port

    (tmp_path / "v1.yaml").write_text(V1)
    applied = cli("-s", realm.address, "apply", "v1.yaml", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    # Each address is asked whether it is the realm service; one that does not answer is passed over.
    mixed = cli("history", "--json", "--server", f"127.0.0.1:{free_port()},{realm.address}", cwd=tmp_path)
    assert mixed.returncode == 0, mixed.stderr
    assert [v["version"] for v in json.loads(mixed.stdout)] == [1]
    by_env = cli("get", "--json", cwd=tmp_path, STRONGROOM_ENDPOINTS=realm.address)
    assert by_env.returncode == 0 and json.loads(by_env.stdout)["version"] == 1


def test_cli_reports_an_unreachable_service(tmp_path: Path) -> None:
    from strongroom.local.etcdproc import free_port

    done = cli("get", "--realm-address", f"127.0.0.1:{free_port()}", cwd=tmp_path)
    assert done.returncode == 1
    assert "UNAVAILABLE" in done.stderr


# --- the store in-process, against etcd ----------------------------------------------------------


async def test_concurrent_applies_each_get_their_own_version(fresh_etcd: EtcdProcess) -> None:
    etcd = EtcdClient(fresh_etcd.endpoint)
    try:
        store = RealmStore(etcd)
        docs = [V1.replace("name: s1", f"name: s{i}").replace("store: s1", f"store: s{i}") for i in range(8)]
        results = await asyncio.gather(*(store.apply(d, f"d{i}.yaml") for i, d in enumerate(docs)))
        assert sorted(r.version for r in results) == list(range(1, 9))
        history = await store.history()
        assert [v.version for v in history] == list(range(1, 9))
        assert sorted(v.yaml for v in history) == sorted(docs), "no apply may be lost"
        current = await store.get()
        assert current.version == 8
        assert (await etcd.get(realm_version_key(8))).value == (await etcd.get(REALM_CURRENT)).value  # type: ignore[union-attr]

        loaded = await load_current_realm(etcd)
        assert loaded is not None and loaded[0] == 8
        assert loaded[1].stores[0].name == current.realm().stores[0].name

        with pytest.raises(RealmVersionConflict):
            await store.apply(DEFAULT_REALM_YAML, expected_version=7)
        with pytest.raises(RealmInvalid):
            await store.apply(INVALID)
        assert (await store.get()).version == 8
    finally:
        await etcd.close()


async def test_load_current_realm_is_none_before_the_first_apply(fresh_etcd: EtcdProcess) -> None:
    etcd = EtcdClient(fresh_etcd.endpoint)
    try:
        assert await load_current_realm(etcd) is None
        store = RealmStore(etcd)
        first = await store.bootstrap(V1, "boot.yaml")
        assert first.version == 1
        # A second bootstrap with another document keeps the first.
        assert (await store.bootstrap(V2, "other.yaml")).yaml == V1
        loaded = await load_current_realm(etcd)
        assert loaded is not None and loaded[0] == 1 and loaded[1].clusters[0].name == "c1"
    finally:
        await etcd.close()
