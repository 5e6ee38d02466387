"""The local cluster end to end: `strongroom up/status/publish/subscribe/down/drill` as subprocesses
on real etcd, the real realm service and three real persistence members.

One detached cluster serves the module; the last tests stop it with `down`, restart it over its
stale state file and stop it again. Every pid of a state file is killed in `finally` regardless.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import STRONGROOM, local_strongroom

from strongroom.local.launcher import live_pids, load_state
from strongroom.local.process import pid_alive

strongroom = local_strongroom


def kill_state_pids(state: dict[str, Any] | None) -> None:
    """Last resort of a teardown: SIGKILL whatever a state file lists and is still running."""
    if not state:
        return
    for _, pid in live_pids(state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def all_pids(state: dict[str, Any]) -> list[int]:
    pids = [state["etcd"]["pid"], state["realm"]["pid"]]
    for cluster in state["clusters"].values():
        pids += [m["pid"] for m in cluster["members"].values()]
    return pids


def statuses(data_dir: Path) -> list[dict[str, Any]]:
    result = strongroom("status", "--json", "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    out: list[dict[str, Any]] = json.loads(result.stdout)
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A detached local cluster (default realm: one cluster of 3 members)."""
    path = tmp_path_factory.mktemp("local-cluster")
    try:
        result = strongroom("up", "--detach", "--data-dir", str(path))
        assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}"
        yield path
    finally:
        state = load_state(path)
        strongroom("down", "--data-dir", str(path), timeout=60)
        kill_state_pids(state)
        kill_state_pids(load_state(path))


def test_up_writes_the_state_file_and_prints_the_endpoints(data_dir: Path) -> None:
    state = load_state(data_dir)
    assert state is not None
    assert state["data_dir"] == str(data_dir)
    members = state["clusters"]["default"]["members"]
    assert sorted(members) == ["m1", "m2", "m3"]
    for name, member in members.items():
        assert member["address"].startswith("127.0.0.1:")
        assert Path(member["data_dir"]) == data_dir / "default" / name
        assert Path(member["log"]) == data_dir / "logs" / f"default-{name}.log"
    assert state["etcd"]["endpoint"].startswith("127.0.0.1:")
    assert state["realm"]["address"].startswith("127.0.0.1:")
    assert all(pid_alive(pid) for pid in all_pids(state))


def test_status_shows_three_members_and_exactly_one_leader(data_dir: Path) -> None:
    replies = statuses(data_dir)
    assert len(replies) == 3
    assert all("error" not in r for r in replies), replies
    assert {r["member"] for r in replies} == {"m1", "m2", "m3"}
    leaders = [r for r in replies if r["role"] == "leader"]
    assert len(leaders) == 1, [(r["member"], r["role"]) for r in replies]
    leader = leaders[0]
    assert {r["leader"] for r in replies} == {leader["member"]}
    assert {m["name"] for m in leader["members"]} == {"m1", "m2", "m3"}
    assert int(leader["epoch"]) > 0
    human = strongroom("status", "--data-dir", str(data_dir))
    assert human.returncode == 0, human.stderr
    assert f"leader {leader['member']}" in human.stdout


def test_up_again_says_already_running(data_dir: Path) -> None:
    result = strongroom("up", "--detach", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert "already running" in result.stderr


def test_publish_100_then_subscribe_returns_them_in_order(data_dir: Path) -> None:
    dd = ["--data-dir", str(data_dir)]
    # A topic keeps messages only for durables that exist: create the durable first.
    created = strongroom("subscribe", "it.orders", "--durable", "it", "--timeout", "1", *dd)
    assert created.returncode == 0, created.stderr
    published = strongroom("publish", "it.orders", "--count", "100", "--body", "order {i}", "--json", *dd)
    assert published.returncode == 0, published.stderr
    summary = json.loads(published.stdout)
    assert summary["count"] == 100 and summary["confirmed"] == 100
    received = strongroom("subscribe", "it.orders", "--durable", "it", "--count", "100", "--timeout", "20",
                          "--json", *dd)
    assert received.returncode == 0, received.stderr
    lines = [json.loads(line) for line in received.stdout.splitlines()]
    assert [m["body"] for m in lines] == [f"order {i}" for i in range(100)]
    seqs = [m["seq"] for m in lines]
    assert seqs == sorted(seqs) and len(set(seqs)) == 100
    assert all(m["delivery_count"] == 1 for m in lines)


def test_a_queue_needs_no_durable_name_and_a_topic_does(data_dir: Path) -> None:
    dd = ["--data-dir", str(data_dir)]
    assert strongroom("publish", "it.jobs.queue", "--body", "job 1", *dd).returncode == 0
    plain = strongroom("subscribe", "it.jobs.queue", "--count", "1", "--timeout", "20", *dd)
    assert (plain.returncode, plain.stdout.split(": ", 1)[-1], plain.stderr) == (0, "job 1\n", "")
    assert strongroom("publish", "it.jobs.queue", "--body", "job 2", *dd).returncode == 0
    named = strongroom("subscribe", "it.jobs.queue", "--durable", "billing", "--count", "1", "--timeout", "20", *dd)
    assert (named.returncode, named.stdout.split(": ", 1)[-1]) == (0, "job 2\n"), named.stderr
    assert named.stderr == ("note: 'it.jobs.queue' is a queue: its subscribers share it, so --durable 'billing' "
                            "is not used\n")
    topic = strongroom("subscribe", "it.orders", "--timeout", "1", *dd)
    assert topic.returncode == 2  # a usage error, as when argparse required --durable
    assert topic.stderr == "error: --durable NAME is required here: a topic subscription needs a durable name\n"


def test_subscribe_acks_as_the_durable_kind_takes_them(data_dir: Path, tmp_path: Path) -> None:
    """A last-value durable takes no acks: subscribe makes none by default (it used to ack each
    message and, with sync acks, fail after printing it), and refuses an explicit --ack explicit;
    the kind comes from --kind or, without it, from what the leader opened (an endpoint's
    template, or the existing durable). DURABLE_MISMATCH names kinds in the realm's words."""
    import yaml

    dd = ["--data-dir", str(data_dir)]
    before = strongroom("realm", "get", *dd)
    assert before.returncode == 0, before.stderr
    realm = yaml.safe_load(before.stdout)
    realm["destinations"].insert(0, {"name": "it.prices", "kind": "topic", "store": "default", "ack_mode": "sync"})
    realm.setdefault("durable_templates", []).append(
        {"name": "it-latest", "kind": "last-value", "key_field": "sym", "ack_mode": "sync"})
    realm.setdefault("endpoints", []).append({"name": "it.board", "store": "default", "template": "it-latest"})
    changed, original = tmp_path / "realm.yaml", tmp_path / "original.yaml"
    changed.write_text(yaml.safe_dump(realm, sort_keys=False))
    original.write_text(before.stdout)
    assert strongroom("realm", "apply", str(changed), *dd).returncode == 0
    try:
        lv = ["subscribe", "it.prices", "--durable", "board", "--kind", "lastvalue", *dd]
        assert strongroom(*lv, "--timeout", "1").returncode == 0  # creates the durable
        for body in ("p1", "p2"):
            assert strongroom("publish", "it.prices", "--body", body, *dd).returncode == 0
        latest = strongroom(*lv, "--count", "1", "--timeout", "20")
        assert (latest.returncode, latest.stdout.split(": ", 1)[-1], latest.stderr) == (0, "p2\n", "")
        explicit = strongroom(*lv, "--count", "1", "--ack", "explicit")
        assert explicit.returncode == 2 and explicit.stderr.startswith("error: --ack explicit: ")
        auto = strongroom(*lv, "--count", "1", "--timeout", "20", "--ack", "auto")  # worked before, works on
        assert (auto.returncode, auto.stdout.split(": ", 1)[-1]) == (0, "p2\n"), auto.stderr

        board = ["subscribe", "it.board", "--durable", "b", "--match", "sym=A", *dd]  # no --kind
        assert strongroom(*board, "--timeout", "1").returncode == 0
        assert strongroom("publish", "it.board", "--field", "sym=A", "--body", "a1", *dd).returncode == 0
        got = strongroom(*board, "--count", "1", "--timeout", "20")
        assert (got.returncode, got.stdout.split(": ", 1)[-1], got.stderr) == (0, "a1\n", "")
        refused = strongroom(*board, "--count", "1", "--timeout", "20", "--ack", "explicit")
        assert refused.returncode == 2
        assert refused.stderr == ("error: --ack explicit: durable 'b' on 'it.board' is last-value, whose messages "
                                  "are not acknowledged; leave out --ack\n")

        # Without --kind a subscriber takes the existing durable as it is; naming another kind is refused.
        as_is = strongroom("subscribe", "it.prices", "--durable", "board", "--count", "1", "--timeout", "20", *dd)
        assert (as_is.returncode, as_is.stdout.split(": ", 1)[-1], as_is.stderr) == (0, "p2\n", "")
        mismatch = strongroom("subscribe", "it.prices", "--durable", "board", "--kind", "standard", "--timeout", "1",
                              *dd)
        assert mismatch.returncode == 1
        assert mismatch.stderr == ("error: DURABLE_MISMATCH: durable 'board' on 'it.prices' exists with kind "
                                   "last-value, not standard\n")
    finally:
        assert strongroom("realm", "apply", str(original), *dd).returncode == 0


def test_a_closed_output_pipe_ends_a_command_quietly(data_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STRONGROOM_ENDPOINTS", "STRONGROOM_DATA_DIR")}
    read_end, write_end = os.pipe()
    os.close(read_end)  # `strongroom realm get | head -0`
    try:
        out = subprocess.run([*STRONGROOM, "realm", "get", "--data-dir", str(data_dir)], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=60, env=env, check=False)
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert "Broken pipe" not in out.stderr and "Traceback" not in out.stderr and "error" not in out.stderr


def test_a_stale_state_file_fails_fast_naming_the_addresses(tmp_path: Path) -> None:
    from strongroom.local.etcdproc import free_port

    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    members = {f"m{i}": {"address": a, "pid": 999_999_990 + i} for i, a in enumerate(addresses, 1)}
    (tmp_path / "state.json").write_text(json.dumps({"clusters": {"default": {"members": members}}}))
    started = time.monotonic()
    result = strongroom("publish", "orders", "--data-dir", str(tmp_path))
    assert time.monotonic() - started < 20  # the retry policy's 5 s, not its 30
    assert result.returncode == 1
    assert result.stderr.startswith("error: CONNECTION_FAILED: no member could be reached for "), result.stderr
    for address in addresses:
        assert f"{address} (connection refused)" in result.stderr


def test_unknown_destination_is_a_domain_error(data_dir: Path) -> None:
    # The default realm maps every name; an invalid name must still be refused precisely.
    result = strongroom("publish", "bad name!", "--data-dir", str(data_dir))
    assert result.returncode == 1  # the cluster refused
    assert result.stderr.startswith("error: UNKNOWN_DESTINATION: ")


def test_a_publish_nothing_wants_is_reported_as_not_stored(data_dir: Path) -> None:
    """On the default realm a topic stores a message only for the durables that want it: the
    CLI says so instead of printing a message sequence of 0."""
    one = strongroom("publish", "it.nobody.wants", "--data-dir", str(data_dir))
    assert one.returncode == 0, one.stderr
    assert "not stored: no durable wants 'it.nobody.wants'" in one.stdout
    many = strongroom("publish", "it.nobody.wants", "--count", "3", "--json", "--data-dir", str(data_dir))
    assert many.returncode == 0, many.stderr
    summary = json.loads(many.stdout)
    assert (summary["confirmed"], summary["not_stored"]) == (3, 3)
    queued = strongroom("publish", "it.stored.queue", "--json", "--data-dir", str(data_dir))
    assert json.loads(queued.stdout)["not_stored"] == 0


def test_server_option_reaches_the_cluster_and_the_realm_service(data_dir: Path, tmp_path: Path) -> None:
    """-s names the members for the client commands; the realm commands find the realm service
    from the same -s (members of the local cluster: its state file; the realm service itself:
    asked directly, from anywhere), and from STRONGROOM_ENDPOINTS likewise."""
    state = load_state(data_dir)
    assert state is not None
    members = ",".join(m["address"] for m in state["clusters"]["default"]["members"].values())
    realm_address = state["realm"]["address"]
    nowhere = tmp_path / "no-state-here"  # a data dir without a state file: only -s can help

    status = strongroom("status", "--json", "-s", members, "--data-dir", str(nowhere))
    assert status.returncode == 0, status.stderr
    assert {r["member"] for r in json.loads(status.stdout)} == {"m1", "m2", "m3"}
    published = strongroom("--server", members, "publish", "it.server.queue", "--json", "--data-dir", str(nowhere))
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["confirmed"] == 1

    by_members = strongroom("realm", "get", "--json", "-s", members, "--data-dir", str(data_dir))
    assert by_members.returncode == 0, by_members.stderr
    current = json.loads(by_members.stdout)
    assert current["version"] >= 1 and "clusters" in current["yaml"]
    by_realm = strongroom("realm", "history", "--json", "-s", realm_address, "--data-dir", str(nowhere))
    assert by_realm.returncode == 0, by_realm.stderr
    assert [v["version"] for v in json.loads(by_realm.stdout)][-1] == current["version"]
    # No setting of the shell but the certificate a user of a TLS cluster holds.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_") or k.startswith("STRONGROOM_TLS_")}
    by_env = subprocess.run([*STRONGROOM, "realm", "get", "--json", "--data-dir", str(nowhere)],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**env, "STRONGROOM_ENDPOINTS": f"{members},{realm_address}"})
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout)["version"] == current["version"]
    # Members of no local cluster (no state file names them): they say in their status where
    # the realm service registered.
    remote = strongroom("realm", "get", "--json", "-s", members, "--data-dir", str(nowhere))
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["version"] == current["version"]
    assert {r["realm_service"] for r in json.loads(status.stdout)} == {realm_address}
    # Nothing that answers: said plainly, exit 1.
    from strongroom.local.etcdproc import free_port

    lost = strongroom("realm", "get", "-s", f"127.0.0.1:{free_port()}", "--data-dir", str(nowhere))
    assert lost.returncode == 1
    assert "cannot find the realm service" in lost.stderr and "did not answer" in lost.stderr


def test_a_refusal_exits_1_and_a_usage_error_2_from_every_command_kind(data_dir: Path, tmp_path: Path) -> None:
    from strongroom.local.etcdproc import free_port

    dd = ["--data-dir", str(data_dir)]
    realm_file = tmp_path / "realm.yaml"
    got = strongroom("realm", "get", *dd)
    assert got.returncode == 0, got.stderr
    realm_file.write_text(got.stdout + "# another document: a new version, if it were applied\n")
    refusals = {
        "publish": (["publish", "bad name!", *dd], "UNKNOWN_DESTINATION"),
        "subscribe": (["subscribe", "bad name!", "--durable", "d", "--timeout", "1", *dd], "UNKNOWN_DESTINATION"),
        "map": (["map", "put", "default", "m", "", "v", *dd], "INVALID_ARGUMENT"),
        "map get": (["map", "get", "default", "m", "absent", *dd], "KEY_NOT_FOUND"),
        "realm": (["realm", "apply", str(realm_file), "--expected-version", "999", *dd], "REALM_VERSION_CONFLICT"),
    }
    for kind, (argv, reason) in refusals.items():
        result = strongroom(*argv)
        assert result.returncode == 1, (kind, result.stderr)
        assert result.stderr.startswith(f"error: {reason}: "), (kind, result.stderr)
    unreachable = strongroom("status", "-s", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1 and "no member answered" in unreachable.stderr
    usage = {
        "publish": ["publish", "x", "--count", "0", *dd],
        "publish field": ["publish", "x", "--field", "novalue", *dd],
        "subscribe": ["subscribe", "x", *dd],
        "map": ["map", "cas", "default", "m", "k", "--expected-version", "0", *dd],
        "realm": ["realm", "apply", *dd],
        "status": ["status", "--bogus", *dd],
        "server": ["status", "-s", "nonsense"],
        "count": ["publish", "x", "--count", "abc", *dd],
    }
    for kind, argv in usage.items():
        result = strongroom(*argv)
        assert result.returncode == 2, (kind, result.stderr)


def test_invalid_realm_prints_file_and_line_and_starts_nothing(tmp_path: Path) -> None:
    realm = tmp_path / "bad-realm.yaml"
    realm.write_text(
        "clusters:\n"
        "  - name: c1\n"
        "    members:\n"
        "      - name: m1\n"
        "stores:\n"
        "  - name: s1\n"
        "    cluster: nowhere\n"  # line 7: a cluster the realm does not define
        "destinations:\n"
        "  - name: orders\n"
        "    store: missing\n"  # line 10: a store the realm does not define
    )
    data = tmp_path / "data"
    result = strongroom("up", "--realm", str(realm), "--data-dir", str(data), "--detach")
    assert result.returncode == 1
    assert f"{realm}:7:" in result.stderr and "'nowhere'" in result.stderr, result.stderr
    assert f"{realm}:10:" in result.stderr and "'missing'" in result.stderr, result.stderr
    assert not (data / "state.json").exists()
    assert not (data / "etcd").exists() and not (data / "logs").exists()


_BEFORE_DOWN: dict[str, int] = {}


def test_down_leaves_no_process_alive(data_dir: Path) -> None:
    leader = next(r for r in statuses(data_dir) if r.get("role") == "leader")
    _BEFORE_DOWN["commit_index"] = int(leader["commit_index"])
    state = load_state(data_dir)
    assert state is not None
    pids = all_pids(state)
    result = strongroom("down", "--data-dir", str(data_dir), timeout=60)
    assert result.returncode == 0, result.stderr
    # "stopped" means stopped: no thread of any of them runs once `down` has said it.
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert not (data_dir / "state.json").exists()
    # A second `down` has nothing to do.
    again = strongroom("down", "--data-dir", str(data_dir))
    assert again.returncode == 0


def test_up_over_a_stale_state_file_reuses_the_data(data_dir: Path) -> None:
    stale = {"etcd": {"endpoint": "127.0.0.1:1", "pid": 999_999_999}, "realm": {}, "clusters": {},
             "data_dir": str(data_dir)}
    (data_dir / "state.json").write_text(json.dumps(stale))
    result = strongroom("up", "--detach", "--data-dir", str(data_dir))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "stale" in result.stdout
    replies = statuses(data_dir)
    assert len([r for r in replies if r.get("role") == "leader"]) == 1
    # The members restarted on their data: the log goes on from where it was.
    leader = next(r for r in replies if r.get("role") == "leader")
    assert int(leader["commit_index"]) > _BEFORE_DOWN.get("commit_index", 0)
    state = load_state(data_dir)
    assert state is not None
    pids = all_pids(state)
    assert strongroom("down", "--data-dir", str(data_dir), timeout=60).returncode == 0
    assert [pid for pid in pids if pid_alive(pid)] == []


@pytest.mark.slow
def test_failover_drill_loses_nothing() -> None:
    result = strongroom("drill", "failover", "--platform", "local", "--messages", "400", "--json", timeout=280)
    assert result.stdout.strip(), result.stderr
    report = json.loads(result.stdout)
    assert report["lost"] == 0, report
    assert report["duplicated"] == 0, report
    assert report["confirmed"] == 400, report
    assert report["received"] == 400, report
    assert report["old_leader"] != report["new_leader"], report
    assert report["ok"] is True, (report, result.stderr)
    assert result.returncode == 0

