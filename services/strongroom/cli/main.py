"""`strongroom`: run a local cluster, inspect it, publish, subscribe and drill failover.

    strongroom up [--realm FILE] [--data-dir DIR] [--detach]
    strongroom down [--data-dir DIR]
    strongroom status [--json]
    strongroom publish DEST [--count N] [--size B] [--body TEXT] [--no-confirm] [--json]
    strongroom subscribe DEST --durable NAME [--kind standard|shared|lastvalue] [--count N]
                         [--ack explicit|auto] [--timeout S] [--json]
    strongroom drill failover --platform local [--messages N] [--json]
    strongroom drill failover --platform kubernetes --namespace NS --release NAME [--cluster C]
                              [--force] [--messages N] [--json]
    strongroom bench [--runs N] [--messages N] [--quick] [--json]
    strongroom realm apply|get|validate|history ...
    strongroom map put|get|delete|list|cas STORE MAP [KEY] [VALUE] [--json]

Client commands reach the members named by `--endpoints` (or env STRONGROOM_ENDPOINTS), else
every member of the local launcher's state file in `--data-dir`. Exit codes: 0 success,
1 failure, 2 a domain error reported by the cluster (`error: REASON: message`) or bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import common_pb2
from strongroom.errors import InvalidArgument, StrongroomError

__all__ = ["CliError", "build_parser", "main", "make_body", "message_json", "resolve_endpoints", "run"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2

DURABLE_KINDS = ("standard", "shared", "lastvalue")
ACK_MODES = ("explicit", "auto")
PLATFORMS = ("local", "kubernetes")
PUBLISH_WINDOW = 256
PROGRESS_INTERVAL = 1.0


class CliError(Exception):
    """A failure reported as `error: message` with exit code 1."""


# --- arguments -----------------------------------------------------------------------------------


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {n}")
    return n


def _seconds(value: str) -> float:
    s = float(value)
    if s <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return s


def _common_options(endpoints: bool) -> argparse.ArgumentParser:
    """--data-dir (and --endpoints) accepted after the subcommand too; SUPPRESS keeps the global value."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, metavar="DIR",
                   help="local cluster data dir (env STRONGROOM_DATA_DIR, default ./.strongroom)")
    if endpoints:
        p.add_argument("--endpoints", default=argparse.SUPPRESS, metavar="HOST:PORT,...",
                       help="member addresses (env STRONGROOM_ENDPOINTS; default: the local state file)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="strongroom", description="Strongroom: a replicated, persistent message store.")
    parser.add_argument("--endpoints", default=None, metavar="HOST:PORT,...",
                        help="member addresses, comma-separated (env STRONGROOM_ENDPOINTS; "
                             "default: every member of the local state file)")
    parser.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                        help="local cluster data dir (env STRONGROOM_DATA_DIR, default ./.strongroom)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    local = _common_options(endpoints=False)
    client = _common_options(endpoints=True)

    p = sub.add_parser("up", parents=[local], help="start a local cluster (etcd, realm service, members)")
    p.add_argument("--realm", type=Path, default=None, metavar="FILE",
                   help="realm YAML to run (default: the built-in realm, one cluster of 3 members)")
    p.add_argument("--detach", action="store_true",
                   help="return once every cluster has a committed leader; stop later with `down`")
    p.set_defaults(func=_cmd_up)

    p = sub.add_parser("down", parents=[local], help="stop the local cluster of the data dir")
    p.set_defaults(func=_cmd_down)

    p = sub.add_parser("status", parents=[client], help="members, leader, epoch, commit index, stores")
    p.add_argument("--json", action="store_true", help="every member's raw status as JSON")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("publish", parents=[client], help="publish messages with confirmation")
    p.add_argument("destination", metavar="DEST")
    p.add_argument("--count", type=_positive, default=1, metavar="N", help="messages to publish (default 1)")
    p.add_argument("--size", type=_non_negative, default=None, metavar="B",
                   help="body size in bytes: the body is padded with '.' or cut to B bytes")
    p.add_argument("--body", default=None, metavar="TEXT",
                   help="body text; '{i}' is replaced by the message index (default 'message {i}')")
    p.add_argument("--no-confirm", action="store_true",
                   help="do not wait for commit (store_send_noconfirm)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                   help="a typed message field (repeatable; a JSON value types it: sym=A is a string, "
                        "qty=5 an integer, px=1.5 a float, ok=true a boolean)")
    p.add_argument("--json", action="store_true", help="print one JSON summary")
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser("subscribe", parents=[client], help="receive messages of a durable")
    p.add_argument("destination", metavar="DEST")
    p.add_argument("--durable", required=True, metavar="NAME", help="durable name")
    p.add_argument("--kind", choices=DURABLE_KINDS, default=None,
                   help="durable kind (default: standard on a topic; a queue is always shared)")
    p.add_argument("--count", type=_positive, default=None, metavar="N", help="stop after N messages")
    p.add_argument("--ack", choices=ACK_MODES, default="explicit", help="acknowledgment (default explicit)")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                   help="stop after S seconds without a message")
    p.add_argument("--match", action="append", default=[], metavar="FIELD=VALUE",
                   help="content matcher condition (repeatable): FIELD=VALUE (a JSON value types it: "
                        "sym=A is a string, qty=5 an integer, px=1.5 a float, ok=true a boolean), "
                        "FIELD:present or FIELD:absent")
    p.add_argument("--replay-from-seq", type=_positive, default=None, metavar="SEQ",
                   help="reposition the durable to this store sequence first")
    p.add_argument("--replay-from-time", type=float, default=None, metavar="UNIX_SECONDS",
                   help="reposition the durable to messages published at or after this time")
    p.add_argument("--json", action="store_true", help="one JSON line per message")
    p.set_defaults(func=_cmd_subscribe)

    p = sub.add_parser("drill", help="failure drills")
    drills = p.add_subparsers(dest="drill", metavar="DRILL", required=True)
    d = drills.add_parser("failover", parents=[local],
                          help="kill -9 the leader under confirmed publishing; verify nothing is lost")
    d.add_argument("--platform", choices=PLATFORMS, required=True,
                   help="where to run it: local (a temporary cluster of processes) or kubernetes "
                        "(a Helm release, through kubectl)")
    d.add_argument("--namespace", default="default", metavar="NS",
                   help="kubernetes: the release's namespace (default: default)")
    d.add_argument("--release", default=None, metavar="NAME", help="kubernetes: the Helm release name")
    d.add_argument("--cluster", default="default", metavar="C",
                   help="kubernetes: the persistence cluster to drill (default: default)")
    d.add_argument("--force", action="store_true",
                   help="kubernetes: delete the leader's pod with no grace period (like kill -9)")
    d.add_argument("--messages", type=_positive, default=1000, metavar="N",
                   help="messages to publish (default 1000); the leader dies at N/2 confirmed")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=_cmd_drill_failover)

    p = sub.add_parser("bench", help="benchmark against NATS JetStream, side by side (bench/)")
    p.add_argument("--runs", type=_positive, default=None, metavar="N",
                   help="rounds, each running every configuration once (default 5; 1 with --quick)")
    p.add_argument("--messages", type=_positive, default=None, metavar="N",
                   help="pipelined messages per run (default 40000); confirm gets N/20, fanout N/4")
    p.add_argument("--quick", action="store_true", help="one round with small counts (smoke test)")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")
    p.set_defaults(func=_cmd_bench)

    try:
        from strongroom.cli.realm_cmd import add_realm_parser
    except ImportError:  # the realm commands are optional; the rest of the CLI works without them
        pass
    else:
        add_realm_parser(sub)
    from strongroom.cli.map_cmd import add_map_parser

    add_map_parser(sub)
    return parser


# --- helpers -------------------------------------------------------------------------------------


def _data_dir(args: argparse.Namespace) -> Path:
    from strongroom.local.launcher import default_data_dir

    given = getattr(args, "data_dir", None)
    return Path(given).absolute() if given else default_data_dir()


def resolve_endpoints(args: argparse.Namespace) -> list[str]:
    """--endpoints, else $STRONGROOM_ENDPOINTS, else every member of the local state file."""
    from strongroom.local.launcher import load_state, member_endpoints

    raw = getattr(args, "endpoints", None) or os.environ.get("STRONGROOM_ENDPOINTS")
    if raw:
        endpoints = [e.strip() for e in raw.split(",") if e.strip()]
        if endpoints:
            return endpoints
        raise CliError("--endpoints is empty")
    data_dir = _data_dir(args)
    state = load_state(data_dir)
    if state is None:
        raise CliError(f"no endpoints: pass --endpoints or set STRONGROOM_ENDPOINTS, "
                       f"or start a local cluster with `strongroom up` (no state file in {data_dir})")
    endpoints = member_endpoints(state)
    if not endpoints:
        raise CliError(f"the state file in {data_dir} lists no members")
    return endpoints


def make_body(template: str | None, size: int | None, index: int) -> bytes:
    """The body of message `index`: the template with '{i}' replaced, padded or cut to `size`."""
    text = (template if template is not None else "message {i}").replace("{i}", str(index))
    body = text.encode()
    if size is not None:
        body = body[:size] if len(body) >= size else body + b"." * (size - len(body))
    return body


def _jsonable(value: Any) -> Any:
    from google.protobuf.message import Message

    if isinstance(value, Message):
        return _proto_dict(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _proto_dict(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    try:
        result = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True,
                                           unquote_int64_if_possible=True)
    except TypeError:  # protobuf < 7: 64-bit integers stay quoted
        result = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True)
    return dict(result)


def message_json(m: Any) -> dict[str, Any]:
    """A received message as a JSON object (the client's `Received.to_json` shape).

    seq, delivery_count, destination, producer_id, sequence, body (UTF-8 text, else base64, as
    body_encoding says) and fields.
    """
    body = bytes(m.body)
    try:
        text, encoding = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(body).decode(), "base64"
    return {
        "seq": int(m.seq),
        "delivery_count": int(getattr(m, "delivery_count", 1)),
        "destination": str(getattr(m, "destination", "")),
        "producer_id": str(getattr(m, "producer_id", "")),
        "sequence": int(getattr(m, "sequence", 0)),
        "body": text,
        "body_encoding": encoding,
        "fields": _jsonable(dict(getattr(m, "fields", None) or {})),
    }


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Progress:
    """A progress line on stderr, at most once a second (overwritten in place on a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.printed = False

    def show(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
        self.printed = True

    def done(self) -> None:
        if self.printed and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# --- commands ------------------------------------------------------------------------------------


def _cmd_up(args: argparse.Namespace) -> int:
    from strongroom.local.launcher import up

    return up(args.realm, _data_dir(args), args.detach)


def _cmd_down(args: argparse.Namespace) -> int:
    from strongroom.local.launcher import down

    return down(_data_dir(args))


def _cmd_status(args: argparse.Namespace) -> int:
    return asyncio.run(_status(args))


async def _status(args: argparse.Namespace) -> int:
    from strongroom.local.launcher import fetch_statuses

    endpoints = resolve_endpoints(args)
    replies = await fetch_statuses(endpoints, timeout=3.0)
    if args.json:
        out: list[dict[str, Any]] = []
        for r in replies:
            if r.status is not None:
                out.append({"endpoint": r.endpoint, **_proto_dict(r.status)})
            else:
                out.append({"endpoint": r.endpoint, "error": r.error})
        print(json.dumps(out, indent=2))
        return EXIT_OK if any(r.status is not None for r in replies) else EXIT_FAILED
    if not any(r.status is not None for r in replies):
        for r in replies:
            _err(f"{r.endpoint}: {r.error}")
        raise CliError("no member answered")
    _print_status(replies)
    return EXIT_OK


def _print_status(replies: Sequence[Any]) -> None:
    by_cluster: dict[str, list[Any]] = {}
    for r in replies:
        if r.status is not None:
            by_cluster.setdefault(r.status.cluster, []).append(r)
    answered = {r.endpoint for rs in by_cluster.values() for r in rs}
    errors = {r.endpoint: r.error for r in replies if r.status is None}
    listed: set[str] = set()
    for cluster, rs in by_cluster.items():
        statuses = [r.status for r in rs]
        leaders = [s for s in statuses if s.role == "leader"]
        ref = leaders[0] if leaders else max(statuses, key=lambda s: (s.epoch, s.commit_index))
        own = {s.member: s for s in statuses}
        leader = ref.leader or (leaders[0].member if leaders else "")
        print(f"cluster {cluster}: leader {leader or '(none)'}, epoch {ref.epoch}, "
              f"commit index {ref.commit_index}, storage {ref.storage or '?'}, realm version {ref.realm_version}")
        names = [m.name for m in ref.members] or sorted(own)
        addresses = {r.status.member: r.endpoint for r in rs}
        addresses.update({m.name: m.address for m in ref.members if m.address})
        match = {m.name: m.match_index for m in ref.members}
        via = {m.name: m.replication for m in ref.members}
        print(f"    {'MEMBER':<12} {'ADDRESS':<22} {'ROLE':<11} {'COMMIT':>8} {'APPLIED':>8} {'MATCH':>8} "
              f"{'APPENDS':<7}")
        for name in names:
            s = own.get(name)
            mark = "*" if name == leader else " "
            address = addresses.get(name, "")
            listed.add(address)
            if s is None:
                why = f"  ({errors[address].split(':', 1)[0]})" if address in errors else ""
                print(f"  {mark} {name:<12} {address:<22} {'unreachable':<11}{why}")
                continue
            m_index = str(match.get(name, "")) if leaders else ""
            appends = via.get(name, "") if leaders else ""
            behind = "" if s.synced else "  (catching up)"
            print(f"  {mark} {name:<12} {address:<22} {s.role:<11} {s.commit_index:>8} {s.applied_index:>8} "
                  f"{m_index:>8} {appends:<7}{behind}")
            if s.apply_stopped:
                print(f"      {name}: {s.apply_stopped}")
        if ref.indexes_on_disk or ref.memory_budget_bytes:
            print(f"  indexes on disk {str(ref.indexes_on_disk).lower()}, memory budget "
                  f"{_human_bytes(ref.memory_budget_bytes) if ref.memory_budget_bytes else '-'}")
        for store in ref.stores:
            kind = "replicated" if store.replicated else "not replicated"
            print(f"  store {store.name} ({kind}): {store.messages} messages, {_human_bytes(store.bytes)}")
            print(f"    {_store_settings(store)}")
            for d in store.durables:
                dkind = common_pb2.DurableKind.Name(d.kind).removeprefix("DURABLE_KIND_").lower()
                if d.key_field:
                    dkind += f" by {d.key_field}"
                label = f"durable {d.name}" if d.name else "queue durable"
                where = f"endpoint {d.destination}" if d.content else d.destination
                interest = f" [{d.matcher}]" if d.matcher else ""
                ack = {common_pb2.ACK_SYNC_MODE_SYNC: ", sync acks", common_pb2.ACK_SYNC_MODE_ASYNC: ""}.get(
                    d.ack_sync_mode, "")
                print(f"    {label} on {where}{interest} ({dkind}{ack}): {d.pending_messages} pending "
                      f"({_human_bytes(d.pending_bytes)}), {d.unacked} unacked, {d.subscribers} subscriber(s)")
    for r in replies:
        if r.endpoint not in answered and r.endpoint not in listed:
            print(f"unreachable: {r.endpoint} ({r.error})")


def _store_settings(store: Any) -> str:
    """A store's realm settings on one line (the stores grid)."""
    policy = common_pb2.LimitPolicy.Name(store.limit_policy).removeprefix("LIMIT_POLICY_").lower() or "reject"
    limits = (f"max {store.max_messages or '-'} messages / "
              f"{_human_bytes(store.max_bytes) if store.max_bytes else '-'}, policy {policy}")
    extra = f", {store.swapped_messages} swapped" if store.swapped_messages else ""
    return (f"storage {store.storage}, publisher {store.publisher_mode}, {limits}, "
            f"max message {_human_bytes(store.max_message_bytes)}, maps {str(store.maps).lower()} "
            f"({store.map_count}), routed {str(store.routed).lower()}{extra}")


def _cmd_publish(args: argparse.Namespace) -> int:
    return asyncio.run(_publish(args))


async def _publish(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    for f in args.field:
        if "=" not in f:
            raise InvalidArgument(f"--field {f!r}: use NAME=VALUE")
    fields = parse_match(args.field) or None
    endpoints = resolve_endpoints(args)
    client = Client(endpoints, client_name="strongroom-cli")
    progress = _Progress()
    sent = confirmed = duplicates = 0
    errors: list[BaseException] = []
    last: Any = None
    start = time.monotonic()
    reporter: asyncio.Task[None] | None = None

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            elapsed = time.monotonic() - start
            progress.show(f"{sent}/{args.count} sent, {confirmed} confirmed, {confirmed / elapsed:,.0f} msgs/s")

    def record(result: Any) -> None:
        nonlocal confirmed, duplicates, last
        last = result
        if getattr(result, "confirmed", False):
            confirmed += 1
        if getattr(result, "duplicate", False):
            duplicates += 1

    pending: set[asyncio.Future[Any]] = set()

    def on_done(fut: asyncio.Future[Any]) -> None:
        pending.discard(fut)
        if fut.cancelled():
            errors.append(asyncio.CancelledError())
        elif fut.exception() is not None:
            errors.append(fut.exception())  # type: ignore[arg-type]
        else:
            record(fut.result())

    try:
        if args.count > 1:
            reporter = asyncio.create_task(report())
        confirm = False if args.no_confirm else None  # None: the store's publisher mode
        if args.count == 1:
            record(await client.publish(args.destination, make_body(args.body, args.size, 0), fields=fields,
                                        confirm=confirm))
            sent = 1
        else:
            pub = client.publisher(args.destination, window=PUBLISH_WINDOW, confirm=confirm)
            try:
                for i in range(args.count):
                    if errors:  # a refused message (unknown destination, too large): stop at once
                        break
                    f = await pub.send(make_body(args.body, args.size, i), fields)
                    sent += 1
                    pending.add(f)
                    f.add_done_callback(on_done)
                while pending and not errors:
                    await asyncio.wait(set(pending), return_when=asyncio.FIRST_EXCEPTION)
            finally:
                # After a failure nothing more will be confirmed; do not let close() wait for it.
                for f in list(pending):
                    f.cancel()
                await pub.close()
            await asyncio.sleep(0)  # let the last done-callbacks run
    finally:
        if reporter is not None:
            reporter.cancel()
        progress.done()
        await client.close()
    seconds = time.monotonic() - start
    if errors:
        raise errors[0]
    rate = sent / seconds if seconds > 0 else 0.0
    if args.json:
        summary: dict[str, Any] = {"destination": args.destination, "count": sent, "confirmed": confirmed,
                                   "duplicates": duplicates, "seconds": round(seconds, 3),
                                   "msgs_per_s": round(rate, 1)}
        if args.count == 1 and last is not None:
            summary["message_seq"] = int(getattr(last, "message_seq", 0))
        print(json.dumps(summary))
    elif args.count == 1 and last is not None:
        state = "confirmed" if getattr(last, "confirmed", False) else "not confirmed"
        dup = ", duplicate" if getattr(last, "duplicate", False) else ""
        print(f"published to {args.destination}: message seq {getattr(last, 'message_seq', 0)} ({state}{dup})")
    else:
        print(f"published {sent} messages to {args.destination} in {seconds:.2f} s ({rate:,.0f} msgs/s), "
              f"{confirmed} confirmed" + (f", {duplicates} duplicates" if duplicates else ""))
    return EXIT_OK


def parse_match(conditions: Sequence[str]) -> dict[str, object]:
    """`--match` options as a matcher spec; raises InvalidArgument naming the bad option."""
    from strongroom.client import ABSENT, PRESENT

    spec: dict[str, object] = {}
    for cond in conditions:
        if "=" in cond:
            name, raw = cond.split("=", 1)
            try:
                value: object = json.loads(raw)
            except ValueError:
                value = raw
            if not isinstance(value, (str, int, float, bool)):
                value = raw
        elif cond.endswith(":present") or cond.endswith(":absent"):
            name, test = cond.rsplit(":", 1)
            value = PRESENT if test == "present" else ABSENT
        else:
            raise InvalidArgument(f"--match {cond!r}: use FIELD=VALUE, FIELD:present or FIELD:absent")
        if not name:
            raise InvalidArgument(f"--match {cond!r}: the field name is empty")
        spec[name] = value
    return spec


def _cmd_subscribe(args: argparse.Namespace) -> int:
    return asyncio.run(_subscribe(args))


async def _subscribe(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    endpoints = resolve_endpoints(args)
    client = Client(endpoints, client_name="strongroom-cli")
    received = 0
    timed_out = False
    try:
        # No more credit than messages wanted: extra deliveries would only come back as redeliveries.
        credit = min(256, args.count) if args.count else 256
        sub = await client.subscribe(args.destination, args.durable, kind=args.kind, ack=args.ack,
                                     credit=credit, matcher=parse_match(args.match),
                                     replay_from_seq=args.replay_from_seq, replay_from_time=args.replay_from_time)
        try:
            while args.count is None or received < args.count:
                # next() returns None after `timeout` s without a message, or once the
                # subscription is closed (a second standard subscriber replaced it).
                m = await sub.next(timeout=args.timeout)
                if m is None:
                    timed_out = args.timeout is not None and not getattr(sub, "closed_reason", "")
                    break
                if args.json:
                    print(json.dumps(message_json(m)), flush=True)
                else:
                    data = message_json(m)
                    body = data["body"] if data["body_encoding"] == "utf-8" else f"(base64) {data['body']}"
                    redelivered = f" (delivery {data['delivery_count']})" if data["delivery_count"] > 1 else ""
                    print(f"{data['seq']}: {body}{redelivered}", flush=True)
                if args.ack == "explicit":
                    await sub.ack(m)
                received += 1
        finally:
            await sub.close()
    finally:
        await client.close()
    if args.count is not None and received < args.count:
        why = (f"no message for {args.timeout:g} s" if timed_out else
               f"the subscription was closed: {getattr(sub, 'closed_reason', '') or 'ended'}")
        _err(f"received {received} of {args.count} messages ({why})")
        return EXIT_FAILED
    return EXIT_OK


def _cmd_drill_failover(args: argparse.Namespace) -> int:
    from strongroom.drill import failover_drill_local

    def progress(line: str) -> None:
        _err(f"drill: {line}")

    if args.platform == "kubernetes":
        from strongroom.drill_k8s import failover_drill_kubernetes

        if not args.release:
            _err("error: --platform kubernetes needs --release NAME (the Helm release)")
            return EXIT_ERROR
        report = asyncio.run(failover_drill_kubernetes(args.namespace, args.release, args.cluster,
                                                       args.messages, force=args.force, progress=progress))
    else:
        data_dir = getattr(args, "data_dir", None)
        report = asyncio.run(failover_drill_local(args.messages, Path(data_dir) if data_dir else None, progress))
    if args.json:
        print(json.dumps(report))
    else:
        print(f"failover drill ({args.platform}, {args.messages} messages): {'OK' if report['ok'] else 'FAILED'}")
        for key in ("confirmed", "received", "lost", "duplicated", "out_of_order", "leaderless_seconds",
                    "publish_gap_seconds", "old_leader", "new_leader", "publish_errors", "problem", "logs"):
            if key in report:
                print(f"  {key.replace('_', ' ')}: {report[key]}")
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _cmd_bench(args: argparse.Namespace) -> int:
    # The benchmark suite lives in bench/ at the root of the source tree, beside services/.
    root = Path(__file__).resolve().parents[3]
    if (root / "bench" / "runner.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        from bench.runner import run_cli
    except ImportError as exc:
        raise CliError(f"the benchmark suite (bench/) is not importable: {exc}; run from a source checkout "
                       f"with `pip install -e '.[bench]'`") from None
    return run_cli(args.runs, args.messages, args.quick, args.json)


# --- entry point ---------------------------------------------------------------------------------


def _domain_error(exc: BaseException) -> StrongroomError | None:
    if isinstance(exc, StrongroomError):
        return exc
    if isinstance(exc, grpc.RpcError):
        from strongroom.grpcerrors import from_rpc_error

        return from_rpc_error(exc)
    return None


def run(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command; returns the exit code."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except CliError as exc:
        _err(f"error: {exc}")
        return EXIT_FAILED
    except (StrongroomError, grpc.RpcError) as exc:
        err = _domain_error(exc)
        if err is not None:
            _err(f"error: {err.reason}: {err.message}")
        elif isinstance(exc, grpc.aio.AioRpcError):
            _err(f"error: {exc.code().name}: {exc.details()}")
        else:
            _err(f"error: {exc}")
        return EXIT_ERROR
    except (OSError, TimeoutError) as exc:
        _err(f"error: {exc}")
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `strongroom`."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
