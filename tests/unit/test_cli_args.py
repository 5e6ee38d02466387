"""The `strongroom` command line: argument parsing of every subcommand, in-process."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from strongroom.cli import local_cmd, publish_cmd, subscribe_cmd, uow_cmd
from strongroom.cli import main as cli
from strongroom.cli.common import CliError, ExitCode, exit_code, resolve_endpoints
from strongroom.cli.main import build_parser
from strongroom.cli.publish_cmd import make_body
from strongroom.client import AckMode, DurableKind, Received, Subscription, message_json
from strongroom.local.launcher import member_endpoints


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


# --- up / down -----------------------------------------------------------------------------------


def test_up_defaults() -> None:
    args = parse("up")
    assert args.command == "up"
    assert args.realm is None
    assert args.detach is False
    assert args.data_dir is None
    assert args.func is local_cmd.cmd_up


def test_up_all_options() -> None:
    args = parse("up", "--realm", "r.yaml", "--data-dir", "/tmp/x", "--detach")
    assert args.realm == Path("r.yaml")
    assert args.data_dir == Path("/tmp/x")
    assert args.detach is True


def test_data_dir_before_or_after_the_subcommand() -> None:
    assert parse("--data-dir", "/a", "up").data_dir == Path("/a")
    assert parse("up", "--data-dir", "/b").data_dir == Path("/b")
    # After the subcommand wins, as the operator typed it last.
    assert parse("--data-dir", "/a", "down", "--data-dir", "/b").data_dir == Path("/b")
    assert parse("--data-dir", "/a", "down").data_dir == Path("/a")


def test_down() -> None:
    args = parse("down", "--data-dir", "d")
    assert args.command == "down"
    assert args.func is local_cmd.cmd_down


def test_up_rejects_unknown_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unrecognized arguments: --bogus" in usage_error(capsys, "up", "--bogus")


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in usage_error(capsys)


# --- status --------------------------------------------------------------------------------------


def test_status() -> None:
    args = parse("status")
    assert args.json is False and args.endpoints is None
    args = parse("--endpoints", "h1:1,h2:2", "status", "--json")
    assert args.json is True
    assert args.endpoints == "h1:1,h2:2"
    assert parse("status", "--endpoints", "h3:3").endpoints == "h3:3"


# --- publish -------------------------------------------------------------------------------------


def test_publish_defaults() -> None:
    args = parse("publish", "orders")
    assert args.destination == "orders"
    assert args.count == 1
    assert args.size is None and args.body is None
    assert args.no_confirm is False and args.json is False


def test_publish_all_options() -> None:
    args = parse("publish", "q.queue", "--count", "1000", "--size", "512", "--body", "hi {i}",
                 "--no-confirm", "--json")
    assert (args.count, args.size, args.body, args.no_confirm, args.json) == (1000, 512, "hi {i}", True, True)


@pytest.mark.parametrize("bad", [["--count", "0"], ["--count", "x"], ["--size", "-1"]])
def test_publish_rejects_bad_numbers(capsys: pytest.CaptureFixture[str], bad: list[str]) -> None:
    err = usage_error(capsys, "publish", "orders", *bad)
    assert bad[0] in err


@pytest.mark.parametrize("argv,message", [
    (["publish", "x", "--count", "abc"], "argument --count: 'abc' is not a positive integer"),
    (["publish", "x", "--count", "0"], "argument --count: '0' is not a positive integer"),
    (["publish", "x", "--size", "-1"], "argument --size: '-1' is not an integer of 0 or more"),
    (["map", "list", "st", "m", "--limit", "x"], "argument --limit: 'x' is not an integer of 0 or more"),
    (["subscribe", "x", "--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds above 0"),
    (["subscribe", "x", "--timeout", "nan"], "argument --timeout: 'nan' is not a number of seconds above 0"),
    (["uow", "send", "x", "--lifetime", "0"], "argument --lifetime: '0' is not a number of seconds above 0"),
    (["uow", "send", "x", "--status-multiple", "0"], "argument --status-multiple: '0' is not a positive integer"),
    (["uow", "receive", "x", "--wait", "61"], "argument --wait: '61' is not a number of seconds from 0 to 60"),
    (["uow", "receive", "x", "--wait", "-1"], "argument --wait: '-1' is not a number of seconds from 0 to 60"),
])
def test_a_bad_number_is_named_in_words(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    err = usage_error(capsys, *argv)
    assert err.rstrip().endswith(f"error: {message}")
    assert "invalid" not in err and "_positive" not in err


@pytest.mark.parametrize("argv,command,unknown", [
    (["publish", "x", "--cnt", "3"], "publish", "--cnt 3"),
    (["subscribe", "x", "--durable", "d", "--bogus"], "subscribe", "--bogus"),
    (["realm", "get", "--bogus"], "realm get", "--bogus"),
    (["map", "get", "st", "m", "k", "--bogus"], "map get", "--bogus"),
    (["uow", "send", "q", "--bogus"], "uow send", "--bogus"),
])
def test_an_unknown_option_shows_the_usage_of_its_command(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                          command: str, unknown: str) -> None:
    err = usage_error(capsys, *argv)
    assert err.startswith(f"usage: strongroom {command} ")
    assert err.rstrip().endswith(f"strongroom {command}: error: unrecognized arguments: {unknown}")


def test_publish_needs_a_destination(capsys: pytest.CaptureFixture[str]) -> None:
    assert "DEST" in usage_error(capsys, "publish")


# --- subscribe -----------------------------------------------------------------------------------


def test_subscribe_defaults() -> None:
    args = parse("subscribe", "orders", "--durable", "d1")
    # The server picks the kind (standard on a topic, shared on a queue); the ack mode follows
    # the kind the leader opened (`acks_for`): explicit, or none on a last-value durable.
    assert (args.destination, args.durable, args.kind, args.ack) == ("orders", "d1", None, None)
    assert args.count is None and args.timeout is None and args.json is False


def _opened(kind: DurableKind, durable: str = "board") -> Subscription:
    """A subscription as the leader opened it (no network: nothing is called)."""
    from strongroom.client.connection import Connection
    from strongroom.client.retry import RetryPolicy

    sub = Subscription(Connection("127.0.0.1:1", RetryPolicy()), "quotes", durable, None, AckMode.EXPLICIT, 1,
                       None)
    sub.kind = kind
    return sub


@pytest.mark.parametrize("kind", [DurableKind.STANDARD, DurableKind.SHARED])
def test_subscribe_acks_explicitly_by_default_where_the_durable_takes_acks(kind: DurableKind) -> None:
    assert subscribe_cmd.acks_for(_opened(kind), None) is AckMode.EXPLICIT
    assert subscribe_cmd.acks_for(_opened(kind), "explicit") is AckMode.EXPLICIT
    assert subscribe_cmd.acks_for(_opened(kind), "auto") is AckMode.AUTO


def test_subscribe_makes_no_acks_on_a_last_value_durable_and_refuses_explicit_ones() -> None:
    assert subscribe_cmd.acks_for(_opened(DurableKind.LAST_VALUE), None) is None
    assert subscribe_cmd.acks_for(_opened(DurableKind.LAST_VALUE), "auto") is None  # the client makes none
    with pytest.raises(CliError) as info:
        subscribe_cmd.acks_for(_opened(DurableKind.LAST_VALUE), "explicit")
    assert info.value.code == ExitCode.USAGE
    assert str(info.value) == ("--ack explicit: durable 'board' on 'quotes' is last-value, whose messages are "
                               "not acknowledged; leave out --ack")


def test_subscribe_refuses_explicit_acks_with_kind_lastvalue_before_reaching_the_cluster(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on port 1: reaching for the cluster would fail with 1, not 2.
    argv = ["-s", "127.0.0.1:1", "subscribe", "quotes", "--durable", "b", "--kind", "lastvalue", "--ack", "explicit"]
    assert cli.run(argv) == 2
    assert capsys.readouterr().err.startswith("error: --ack explicit: a last-value durable's messages are not")


def test_subscribe_all_options() -> None:
    args = parse("subscribe", "orders", "--durable", "d1", "--kind", "lastvalue", "--count", "5",
                 "--ack", "auto", "--timeout", "2.5", "--json")
    assert (args.kind, args.count, args.ack, args.timeout, args.json) == ("lastvalue", 5, "auto", 2.5, True)


def test_subscribe_takes_no_durable_name_for_a_queue() -> None:
    # A queue needs none; a topic or an endpoint does, which only the cluster knows: its refusal
    # becomes a usage error naming --durable (tests/integration/test_local_cluster.py runs it).
    assert parse("subscribe", "jobs.queue").durable is None


def test_a_refusal_for_want_of_a_durable_name_is_a_usage_error_naming_the_option() -> None:
    from strongroom.errors import InvalidArgument, UnknownDestination

    err = InvalidArgument("a topic subscription needs a durable name")
    usage = subscribe_cmd.durable_refusal(err, None)
    assert usage is not None and usage.code == ExitCode.USAGE
    assert str(usage) == "--durable NAME is required here: a topic subscription needs a durable name"
    assert subscribe_cmd.durable_refusal(err, "given") is None  # not for want of one
    assert subscribe_cmd.durable_refusal(InvalidArgument("unknown ack sync mode 7"), None) is None
    assert subscribe_cmd.durable_refusal(UnknownDestination("no destination matches"), None) is None


def test_subscribe_rejects_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "subscribe", "orders", "--durable", "d", "--kind", "exclusive")
    assert "invalid choice: 'exclusive'" in err


@pytest.mark.parametrize("bad", [["--ack", "never"], ["--timeout", "0"], ["--count", "-3"]])
def test_subscribe_rejects_bad_values(capsys: pytest.CaptureFixture[str], bad: list[str]) -> None:
    assert bad[0] in usage_error(capsys, "subscribe", "orders", "--durable", "d", *bad)


# --- durable -------------------------------------------------------------------------------------


def test_durable_list_filters_and_json() -> None:
    args = parse("durable", "list")
    assert (args.store, args.destination, args.json) == (None, None, False)
    args = parse("-s", "h1:1", "durable", "list", "--store", "default", "--destination", "orders", "--json")
    assert (args.store, args.destination, args.json, args.endpoints) == ("default", "orders", True, "h1:1")


# --- uow -----------------------------------------------------------------------------------------


def test_uow_send_defaults() -> None:
    args = parse("uow", "send", "jobs.queue")
    assert (args.destination, args.count, args.body, args.field, args.id) == ("jobs.queue", None, [], [], None)
    assert (args.persistent, args.persistent_status, args.lifetime, args.status_multiple) == (None, None, None, None)
    assert (args.user_status, args.no_commit, args.json) == (None, False, False)
    assert args.func is uow_cmd.cmd_send


def test_uow_send_all_options() -> None:
    args = parse("uow", "send", "jobs.queue", "--body", "a", "--body", "b", "--field", "n=1", "--id", "u-1",
                 "--no-persistent", "--persistent-status", "--lifetime", "2.5", "--status-multiple", "4",
                 "--user-status", "hi", "--no-commit", "--json")
    assert (args.body, args.field, args.id, args.persistent, args.persistent_status) == (
        ["a", "b"], ["n=1"], "u-1", False, True)
    assert (args.lifetime, args.status_multiple, args.user_status, args.no_commit, args.json) == (
        2.5, 4, "hi", True, True)
    assert parse("uow", "send", "q", "--count", "3").count == 3


@pytest.mark.parametrize("count", ["1", "3"])
def test_uow_send_takes_count_or_bodies_not_both(capsys: pytest.CaptureFixture[str], count: str) -> None:
    err = usage_error(capsys, "uow", "send", "q", "--count", count, "--body", "a")
    assert "argument --body: not allowed with argument --count" in err


def test_uow_send_field_without_a_value_is_a_usage_error() -> None:
    args = parse("uow", "send", "q", "--field", "x")
    with pytest.raises(CliError) as exc:
        uow_cmd.cmd_send(args)
    assert exc.value.code == ExitCode.USAGE and str(exc.value) == "--field 'x': use NAME=VALUE"


def test_uow_receive_commits_by_default_and_takes_one_settlement() -> None:
    args = parse("uow", "receive", "jobs.queue")
    assert (args.destination, args.receiver, args.wait, args.settle, args.user_status, args.json) == (
        "jobs.queue", "strongroom-cli", 0.0, "commit", None, False)
    assert args.func is uow_cmd.cmd_receive
    assert parse("uow", "receive", "q", "--backout").settle == "backout"
    assert parse("uow", "receive", "q", "--cancel", "--receiver", "w", "--wait", "60").settle == "cancel"


def test_uow_receive_refuses_two_settlements(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "uow", "receive", "q", "--commit", "--backout")
    assert "argument --backout: not allowed with argument --commit" in err


def test_uow_status() -> None:
    args = parse("uow", "status", "u-1", "--json", "-s", "h:1")
    assert (args.uow_id, args.json, args.endpoints, args.func) == ("u-1", True, "h:1", uow_cmd.cmd_status)


def test_uow_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in usage_error(capsys, "uow")


# --- drill ---------------------------------------------------------------------------------------


def test_drill_failover() -> None:
    args = parse("drill", "failover", "--platform", "local")
    assert (args.drill, args.platform, args.messages, args.json) == ("failover", "local", 1000, False)
    args = parse("drill", "failover", "--platform", "local", "--messages", "400", "--json")
    assert args.messages == 400 and args.json is True


def test_drill_needs_a_known_platform(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--platform" in usage_error(capsys, "drill", "failover")
    assert "invalid choice" in usage_error(capsys, "drill", "failover", "--platform", "mars")


def test_drill_needs_a_drill(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in usage_error(capsys, "drill")


# --- realm ---------------------------------------------------------------------------------------


def test_realm_subcommands_are_wired() -> None:
    pytest.importorskip("strongroom.cli.realm_cmd")
    args = parse("realm", "validate", "realm.yaml")
    assert callable(args.func)
    args = parse("realm", "apply", "realm.yaml")
    assert callable(args.func)
    assert callable(parse("realm", "get").func)
    assert callable(parse("realm", "history").func)


def test_cli_works_without_the_realm_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_realm_cmd(name: str, *args: object, **kwargs: object) -> object:
        if name == "strongroom.cli.realm_cmd":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_realm_cmd)
    assert parse("status").command == "status"


# --- endpoints, bodies, output -------------------------------------------------------------------


STATE = {
    "etcd": {"endpoint": "127.0.0.1:1", "pid": 1},
    "realm": {"address": "127.0.0.1:2", "pid": 2},
    "clusters": {"default": {"members": {
        "m1": {"address": "127.0.0.1:11", "pid": 11, "data_dir": "x", "log": "y"},
        "m2": {"address": "127.0.0.1:12", "pid": 12, "data_dir": "x", "log": "y"},
    }}},
    "data_dir": "/tmp/x",
}


def test_member_endpoints_of_a_state_file() -> None:
    assert member_endpoints(STATE) == ["127.0.0.1:11", "127.0.0.1:12"]


def test_endpoints_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "state.json").write_text(json.dumps(STATE))
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    assert resolve_endpoints(parse("--data-dir", str(tmp_path), "status")) == ["127.0.0.1:11", "127.0.0.1:12"]
    monkeypatch.setenv("STRONGROOM_ENDPOINTS", "e1:1, e2:2")
    assert resolve_endpoints(parse("--data-dir", str(tmp_path), "status")) == ["e1:1", "e2:2"]
    assert resolve_endpoints(parse("--endpoints", "x:9", "status")) == ["x:9"]


def test_no_endpoints_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    with pytest.raises(CliError, match="strongroom up"):
        resolve_endpoints(parse("--data-dir", str(tmp_path), "status"))


def test_status_without_endpoints_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    assert cli.run(["--data-dir", str(tmp_path), "status"]) == 1
    assert capsys.readouterr().err.startswith("error: no endpoints")


def test_make_body() -> None:
    assert make_body(None, None, 7) == b"message 7"
    assert make_body("x{i}y", None, 3) == b"x3y"
    assert make_body("abc", 6, 0) == b"abc..."
    assert make_body("abcdef", 2, 0) == b"ab"
    assert make_body(None, 0, 0) == b""


def _msg(body: bytes) -> Received:
    return Received(seq=4, body=body, fields={"n": 1, "raw": b"\x00"}, delivery_count=2, destination="",
                    producer_id="p", sequence=9)


def test_message_json_text_and_binary() -> None:
    text = message_json(_msg(b"hello"))
    assert text == {"seq": 4, "delivery_count": 2, "destination": "", "producer_id": "p", "sequence": 9,
                    "published_at": 0.0, "body": "hello", "body_encoding": "utf-8",
                    "fields": {"n": 1, "raw": "AA=="}}
    assert _msg(b"hello").to_json() == text  # the client's and the CLI's JSON are one
    binary = message_json(_msg(b"\xff\xfe"))
    assert binary["body"] == "//4=" and binary["body_encoding"] == "base64"
    json.dumps(binary)


def test_message_json_names_a_forwarded_message_s_origin() -> None:
    from strongroom.api.v1 import common_pb2

    msg = _msg(b"hello")
    assert "origin" not in message_json(msg)
    msg.origin = common_pb2.Origin(cluster="london", store="wide", sequence=12, previous=10)
    assert message_json(msg)["origin"] == {"cluster": "london", "store": "wide", "sequence": 12, "previous": 10}


def test_a_routed_store_s_origin_marks_on_one_line() -> None:
    from types import SimpleNamespace

    from strongroom.cli.status_cmd import origin_marks_line

    marks = [SimpleNamespace(cluster="london", destination="p.a", sequence=1234),
             SimpleNamespace(cluster="london", destination="p.b", sequence=55),
             SimpleNamespace(cluster="tokyo", destination="p.a", sequence=9)]
    assert origin_marks_line(marks) == ("forwarded here, highest origin sequence stored: from london: p.a 1234, "
                                        "p.b 55; from tokyo: p.a 9")
    many = [SimpleNamespace(cluster="london", destination=f"d{i}", sequence=i) for i in range(15)]
    assert origin_marks_line(many).endswith("d11 11; and 3 more (--json lists them)")


def test_domain_error_prints_reason_and_exits_1(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom.errors import UnknownDestination

    def boom(args: argparse.Namespace) -> int:
        raise UnknownDestination("no destination of the realm matches 'x'")

    monkeypatch.setattr(publish_cmd, "cmd_publish", boom)
    assert cli.run(["--endpoints", "h:1", "publish", "x"]) == 1  # the cluster refused
    assert capsys.readouterr().err.strip() == "error: UNKNOWN_DESTINATION: no destination of the realm matches 'x'"


# --- strongroom-persistence: where the replication link is advertised ----------------------------


def test_link_host_follows_advertise_then_the_listen_hosts() -> None:
    from strongroom.persistence.server import link_host

    assert link_host("127.0.0.1:7101", None, None) == "127.0.0.1"
    assert link_host("0.0.0.0:7101", "m1.peers.ns.svc:7101", None) == "m1.peers.ns.svc"
    assert link_host("0.0.0.0:7101", "m1.peers.ns.svc:7101", "0.0.0.0:7102") == "m1.peers.ns.svc"
    assert link_host("0.0.0.0:7101", None, "10.0.0.5:7102") == "10.0.0.5"


@pytest.mark.parametrize("listen,replication_listen", [("0.0.0.0:7101", None), ("[::]:7101", None),
                                                       ("127.0.0.1:7101", "0.0.0.0:7102")])
def test_link_host_refuses_a_wildcard_nobody_can_reach(listen: str, replication_listen: str | None) -> None:
    from strongroom.persistence.server import link_host

    with pytest.raises(ValueError, match="give --replication-advertise"):
        link_host(listen, None, replication_listen)


def test_gc_thresholds_default_and_setting() -> None:
    from strongroom.persistence.config import GC_THRESHOLDS, gc_thresholds

    assert gc_thresholds(None) == gc_thresholds("") == GC_THRESHOLDS
    assert gc_thresholds("700,10,10") == (700, 10, 10)
    for bad in ("700", "700,10", "a,b,c", "700,-1,10", "1,2,3,4"):
        with pytest.raises(ValueError, match="STRONGROOM_GC_THRESHOLDS"):
            gc_thresholds(bad)


def test_a_member_refuses_bad_gc_thresholds_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = dict(os.environ, STRONGROOM_GC_THRESHOLDS="lots")
    out = subprocess.run([sys.executable, "-m", "strongroom.persistence.main", "--etcd", "127.0.0.1:9",
                          "--cluster", "c", "--member", "m1", "--data-dir", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "STRONGROOM_GC_THRESHOLDS must be three counts" in out.stderr


# --- where the cluster is, exit codes -----------------------------------------------------------


def test_server_option_has_three_spellings_before_or_after_the_command() -> None:
    assert parse("-s", "a:1", "status").endpoints == "a:1"
    assert parse("--server", "a:1,b:2", "publish", "x").endpoints == "a:1,b:2"
    assert parse("status", "-s", "c:3").endpoints == "c:3"
    assert parse("map", "get", "st", "m", "k", "--server", "d:4").endpoints == "d:4"
    assert parse("realm", "get", "-s", "e:5").endpoints == "e:5"
    assert parse("realm", "--realm-address", "f:6", "history").endpoints == "f:6"  # the older spelling


def test_server_option_beats_the_environment_which_beats_the_state_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "state.json").write_text(json.dumps(STATE))
    monkeypatch.setenv("STRONGROOM_ENDPOINTS", "env:1")
    assert resolve_endpoints(parse("-s", "flag:1", "--data-dir", str(tmp_path), "status")) == ["flag:1"]
    assert resolve_endpoints(parse("--data-dir", str(tmp_path), "status")) == ["env:1"]
    monkeypatch.delenv("STRONGROOM_ENDPOINTS")
    assert resolve_endpoints(parse("--data-dir", str(tmp_path), "status")) == ["127.0.0.1:11", "127.0.0.1:12"]


def test_an_empty_server_list_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    with pytest.raises(CliError, match="names no address") as info:
        resolve_endpoints(parse("-s", " , ", "status"))
    assert info.value.code == ExitCode.USAGE


@pytest.mark.parametrize("argv,message", [
    (["-s", "nonsense", "status"], "-s/--server: 'nonsense' is not HOST:PORT"),
    (["--endpoints", "127.0.0.1:7101,nonsense", "publish", "x"], "-s/--server: 'nonsense' is not HOST:PORT"),
    (["subscribe", "x", "--durable", "d", "-s", "h:"], "-s/--server: 'h:' is not HOST:PORT"),
    (["map", "get", "st", "m", "k", "-s", "h:70000"], "-s/--server: 'h:70000' has a port outside 1-65535"),
    (["realm", "get", "-s", "nonsense"], "-s/--server: 'nonsense' is not HOST:PORT"),
])
def test_a_server_that_is_not_host_port_is_a_usage_error_naming_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    assert cli.run(argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_the_environment_variable_is_checked_the_same_way(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STRONGROOM_ENDPOINTS", "127.0.0.1:1,bad")
    assert cli.run(["status"]) == 2
    assert capsys.readouterr().err == "error: $STRONGROOM_ENDPOINTS: 'bad' is not HOST:PORT\n"


@pytest.mark.parametrize("good", ["127.0.0.1:7101", "[::1]:7101", "m1.peers.ns.svc.cluster.local:7101",
                                  "localhost:1", "h_2:65535"])
def test_host_port_forms_that_are_accepted(monkeypatch: pytest.MonkeyPatch, good: str) -> None:
    monkeypatch.delenv("STRONGROOM_ENDPOINTS", raising=False)
    assert resolve_endpoints(parse("-s", f"{good}, {good}", "status")) == [good, good]


def test_a_store_without_limits_says_no_limit() -> None:
    from types import SimpleNamespace

    from strongroom.api.v1 import common_pb2
    from strongroom.cli.status_cmd import _store_settings

    def store(max_messages: int, max_bytes: int) -> SimpleNamespace:
        return SimpleNamespace(storage="disk-sync", publisher_mode="store_confirm_send", max_messages=max_messages,
                               max_bytes=max_bytes, limit_policy=common_pb2.LIMIT_POLICY_DISCARD_OLDEST,
                               max_message_bytes=1 << 20, maps=True, map_count=0, routed=False, swapped_messages=0)

    assert _store_settings(store(0, 0)) == ("storage disk-sync, publisher store_confirm_send, no limit, "
                                            "max message 1.0 MiB, maps true (0), routed false")
    assert "limit 1000 messages, policy discard_oldest," in _store_settings(store(1000, 0))
    assert "limit 2.0 GiB, policy discard_oldest," in _store_settings(store(0, 2 << 30))
    assert "limit 1000 messages / 2.0 GiB, policy discard_oldest," in _store_settings(store(1000, 2 << 30))
    unspecified = store(5, 0)
    unspecified.limit_policy = common_pb2.LIMIT_POLICY_UNSPECIFIED
    assert "limit 5 messages, policy reject," in _store_settings(unspecified)


def test_a_closed_output_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    from strongroom.realm.model import DEFAULT_REALM_YAML

    realm = tmp_path / "realm.yaml"
    realm.write_text(DEFAULT_REALM_YAML)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away before the first line (`| head -0`)
    try:
        out = subprocess.run([sys.executable, "-m", "strongroom.cli.main", "realm", "validate", str(realm)],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (cli.OUTPUT_CLOSED, "")
    assert cli.OUTPUT_CLOSED == 141  # what a shell reports for a tool SIGPIPE ended


def test_one_exit_code_policy(capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom.errors import ConnectionFailed, KeyNotFound, StoreLimitExceeded

    cases: list[tuple[BaseException, int, str]] = [
        (CliError("no member answered"), 1, "error: no member answered"),
        (CliError.usage("--field 'x': use NAME=VALUE"), 2, "error: --field 'x': use NAME=VALUE"),
        (StoreLimitExceeded("store full"), 1, "error: STORE_LIMIT_EXCEEDED: store full"),
        (KeyNotFound("key 'k' not found"), 1, "error: KEY_NOT_FOUND: key 'k' not found"),
        (ConnectionFailed("UNAVAILABLE from h:1: down"), 1, "error: CONNECTION_FAILED: UNAVAILABLE from h:1: down"),
        (OSError("disk gone"), 1, "error: disk gone"),
    ]
    for exc, code, line in cases:
        assert exit_code(exc) == code
        assert capsys.readouterr().err.strip() == line
    assert exit_code(ValueError("a bug")) is None  # not a command's failure: it goes through


@pytest.mark.parametrize("argv,message", [
    (["publish", "x", "--count", "3", "--field", "novalue"], "--field 'novalue': use NAME=VALUE"),
    (["subscribe", "x", "--durable", "d", "--match", "weird"], "--match 'weird': use FIELD=VALUE"),
    (["map", "cas", "st", "m", "k", "--expected-version", "0"], "cas needs either VALUE or --delete"),
    (["map", "put", "st", "m", "k", "!!", "--base64"], "VALUE is not valid base64"),
    (["drill", "failover", "--platform", "kubernetes"], "--platform kubernetes needs --release"),
])
def test_usage_errors_found_after_parsing_exit_2_before_reaching_the_cluster(
        capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    # Nothing listens on port 1: reaching for the cluster would fail with 1, not 2.
    assert cli.run(["-s", "127.0.0.1:1", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_realm_service_from_the_older_variable_and_the_state_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from strongroom.cli.realm_cmd import locate_realm_service

    for name in ("STRONGROOM_ENDPOINTS", "STRONGROOM_REALM", "STRONGROOM_ETCD"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "state.json").write_text(json.dumps(STATE))
    assert locate_realm_service(parse("realm", "get", "--data-dir", str(tmp_path))) == "127.0.0.1:2"
    monkeypatch.setenv("STRONGROOM_REALM", "realm:9")
    assert locate_realm_service(parse("realm", "get", "--data-dir", str(tmp_path))) == "realm:9"
    monkeypatch.delenv("STRONGROOM_REALM")
    with pytest.raises(CliError, match="cannot find the realm service") as info:
        locate_realm_service(parse("realm", "get", "--data-dir", str(tmp_path / "none")))
    assert info.value.code == ExitCode.FAILED


def test_router_status_prints_what_was_sent_again_and_what_the_neighbour_held(capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom.api.v1 import router_pb2
    from strongroom.cli.router_cmd import print_routers

    status = router_pb2.RouterStatus(cluster="london", replica="r1", active=True)
    status.peers.add(cluster="rio", address="h:1", connected=True, forwarded_messages=1272, resent_messages=3,
                     duplicate_messages=2, stores=["wide"])
    status.peers.add(cluster="tokyo", address="h:2", connected=True, forwarded_messages=5, stores=["wide"])
    status.interest.add(cluster="rio", version=5).interests.add(store="wide", destination="quotes", content=True)
    print_routers([("h:0", status, "")])
    out = capsys.readouterr().out
    assert "route to rio (h:1): connected; 1272 forwarded (3 re-sent, 2 held there already), 0 waiting" in out
    assert "route to tokyo (h:2): connected; 5 forwarded, 0 waiting" in out  # nothing again: nothing said
    assert "interest of rio (version 5): wide/endpoints (via quotes)" in out
