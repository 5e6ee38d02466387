"""`strongroom uow send|receive|status|subscribe|unsubscribe|subscriptions`: units of work and
durable publications from the command line.

    strongroom uow send DEST [--count N | --body TEXT ...] [--field NAME=VALUE ...] [--id ID]
                        [--persistent/--no-persistent] [--persistent-status/--no-persistent-status]
                        [--lifetime S] [--status-multiple N] [--user-status S] [--no-commit] [--json]
    strongroom uow receive DEST [--receiver NAME] [--wait S] [--commit | --backout | --cancel]
                           [--user-status S] [--json]
    strongroom uow status ID [--json]
    strongroom uow subscribe TOPIC NAME [--json]
    strongroom uow unsubscribe TOPIC NAME [--json]
    strongroom uow subscriptions [TOPIC] [--json]

`send` sends one UOW, committed (ACCEPTED) unless `--no-commit` leaves it open (RECEIVED,
nothing of it visible; its sender's conversation timeout backs it out). `receive` takes the
oldest committed UOW of a queue, prints its messages and settles it: commit (the default),
back out or cancel. On a durable topic, `send` publishes (a publication every durable subscriber
that subscribed before its commit receives) and `receive --receiver NAME` takes the subscriber
NAME's next publication; `subscribe` and `unsubscribe` begin and end a durable subscription.

Exit status: 0 done; 1 the cluster refused (UNKNOWN_UOW, UOW_STATE, ...) or `receive` got no UOW
within `--wait`; 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from strongroom.cli.common import (
    CLIENT_NAME,
    CliError,
    ExitCode,
    add_command_group,
    positive,
    print_json,
    resolve_endpoints,
    seconds,
    where_options,
)
from strongroom.cli.publish_cmd import FIELD_HELP, make_body, message_fields
from strongroom.observability.statslog import human_bytes
from strongroom.uow.values import MAX_WAIT_SECONDS

if TYPE_CHECKING:
    from strongroom.api.v1 import common_pb2
    from strongroom.client.uow import ReceivedUnitOfWork, UowStatusInfo

__all__ = ["add_parsers", "cmd_receive", "cmd_send", "cmd_status", "cmd_subscribe", "cmd_subscriptions",
           "cmd_unsubscribe", "wait_seconds"]

COMMIT, BACKOUT, CANCEL = "commit", "backout", "cancel"


def wait_seconds(value: str) -> float:
    """An argument type: seconds to wait for a UOW, 0 (answer at once) to 60."""
    try:
        s = float(value)
    except ValueError:
        s = -1.0
    if not 0 <= s <= MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds from 0 to {MAX_WAIT_SECONDS:g}")
    return s


def _user_status(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _user_status_text(data: bytes) -> str:
    """As `UowStatusInfo.to_json` shows a user status: UTF-8 text, else hex."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data.hex()


# --- send ----------------------------------------------------------------------------------------


def cmd_send(args: argparse.Namespace) -> int:
    """Send one UOW of `--count` messages (or one per `--body`), committed unless `--no-commit`."""
    return asyncio.run(_send(args, message_fields(args.field)))


async def _send(args: argparse.Namespace, fields: dict[str, object] | None) -> int:
    from strongroom.client import Client

    bodies = [b.encode() for b in args.body] or [make_body(None, None, i) for i in range(args.count or 1)]
    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        uow = client.unit_of_work(args.destination, args.id, args.persistent, args.persistent_status,
                                  args.lifetime, args.status_multiple)
        uow.user_status = _user_status(args.user_status)
        for body in bodies:
            uow.add(body, fields)
        result = await (uow.send() if args.no_commit else uow.commit())
    if args.json:
        print_json({"destination": args.destination, **asdict(result)})
        return ExitCode.OK
    print(result.uow_id)
    duplicate = " (duplicate: already sent under this id, nothing more stored)" if result.duplicate else ""
    kept = "; open, not committed: nothing of it is visible" if args.no_commit else ""
    print(f"{result.status} on {args.destination}: {result.messages} message{'s' * (result.messages != 1)}"
          f"{duplicate}{kept}")
    return ExitCode.OK


# --- receive -------------------------------------------------------------------------------------


def cmd_receive(args: argparse.Namespace) -> int:
    """Receive one UOW, print it and settle it; exit 1 when none came within `--wait`."""
    return asyncio.run(_receive(args))


async def _receive(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        got = await client.receive_uow(args.destination, args.receiver, args.wait)
        if got is None:
            raise CliError(f"no unit of work on {args.destination!r} within {args.wait:g} s")
        if not args.json:
            _print_received(got)
        settled = await _settle(got, args.settle, _user_status(args.user_status))
    if args.json:
        print_json({"uow_id": got.uow_id, "destination": got.destination, "receiver": got.receiver,
                    "backout_count": got.backout_count, "user_status": _user_status_text(got.user_status),
                    "messages": [_message_json(i, len(got.messages), m) for i, m in enumerate(got.messages, 1)],
                    "settlement": args.settle, **settled})
    else:
        dead_letter = f", moved to {settled['dead_lettered_to']}" if settled.get("dead_lettered_to") else ""
        count = f", backout count {settled['backout_count']}" if args.settle == BACKOUT else ""
        print(f"{args.settle}: {settled['status']}{count}{dead_letter}")
    return ExitCode.OK


async def _settle(got: ReceivedUnitOfWork, settlement: str, user_status: bytes | None) -> dict[str, Any]:
    """Settle as asked; what the leader said, for printing."""
    if settlement == BACKOUT:
        status, backouts, dead_letter = await got.backout(user_status)
        return {"status": status, "backout_count": backouts, "dead_lettered_to": dead_letter}
    settle = got.commit if settlement == COMMIT else got.cancel
    return {"status": await settle(user_status)}


def _message_json(index: int, count: int, m: common_pb2.Message) -> dict[str, object]:
    """One message of a received UOW as JSON: its place in the UOW ("index" of "count"), then
    body, body_encoding and fields as `message_json` shows a delivered message's (a UOW's
    messages have no store sequence or delivery count of their own, so not the rest)."""
    from strongroom.client import Received, message_json
    from strongroom.client.messages import from_field

    shown = message_json(Received(seq=0, body=m.body, fields={k: from_field(v) for k, v in m.fields.items()},
                                  delivery_count=0, destination="", producer_id="", sequence=0))
    return {"index": index, "count": count, **{k: shown[k] for k in ("body", "body_encoding", "fields")}}


def _print_received(got: ReceivedUnitOfWork) -> None:
    n = len(got.messages)
    user_status = f", user status {_user_status_text(got.user_status)!r}" if got.user_status else ""
    print(f"{got.uow_id} from {got.destination}: {n} message{'s' * (n != 1)}, backout count "
          f"{got.backout_count}{user_status}")
    for i, m in enumerate(got.messages, 1):
        data = _message_json(i, n, m)
        body = data["body"] if data["body_encoding"] == "utf-8" else f"(base64) {data['body']}"
        fields = f" {json.dumps(data['fields'])}" if data["fields"] else ""
        print(f"{i}/{n} {body}{fields}")


# --- status --------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    """Print a UOW's status by id."""
    return asyncio.run(_status(args))


async def _status(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        info = await client.uow_status(args.uow_id)
    if args.json:
        print_json(info.to_json())
    else:
        _print_status(info)
    return ExitCode.OK


def _yes(flag: bool) -> str:
    return "persistent" if flag else "not persistent"


def _print_status(s: UowStatusInfo) -> None:
    """Every field of the status, one per line; times are pseudo-clock seconds."""
    rows = [
        ("destination", f"{s.destination} (store {s.store})"),
        ("messages", f"{s.messages} ({human_bytes(s.bytes)})"),
        ("backout count", str(s.backout_count)),
        ("user status", repr(_user_status_text(s.user_status)) if s.user_status else "-"),
        ("receiver", s.receiver or "-"),
        ("persistence", f"messages {_yes(s.persistent)}, status {_yes(s.persistent_status)}"),
        ("lifetime", (f"{s.lifetime_seconds:g} s, status kept {s.status_lifetime_multiple} lifetime"
                      f"{'s' * (s.status_lifetime_multiple != 1)} after completion")),
        ("created at", f"{s.created_at:.1f}"),
        ("completed at", f"{s.completed_at:.1f}" if s.completed_at else "-"),
        # While it lives: its lifetime ends then; once complete: its status is deleted then.
        ("status expires at" if s.completed_at else "lifetime ends at",
         f"{s.expires_at:.1f}" if s.expires_at else "-"),
        ("clock now", f"{s.clock:.1f} (pseudo-clock seconds)"),
    ]
    if s.dead_lettered_from:
        rows.append(("dead-lettered from", s.dead_lettered_from))
    if s.publication:
        rows.append(("subscribers", ", ".join(f"{x.subscriber} {x.status}" + (f" (backouts {x.backout_count})"
                                                                              if x.backout_count else "")
                                              for x in s.subscribers) or "none"))
    print(f"{'publication' if s.publication else 'uow'} {s.uow_id}: {s.status}")
    for name, value in rows:
        print(f"  {name + ':':<19} {value}")


# --- durable subscriptions -----------------------------------------------------------------------


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Subscribe durably to a durable topic."""
    return asyncio.run(_subscription_call(args, subscribe=True))


def cmd_unsubscribe(args: argparse.Namespace) -> int:
    """End a durable subscription."""
    return asyncio.run(_subscription_call(args, subscribe=False))


async def _subscription_call(args: argparse.Namespace, subscribe: bool) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        if subscribe:
            sub, created = await client.subscribe_publications(args.topic, args.subscriber)
            out: dict[str, Any] = {**asdict(sub), "created": created}
            text = (f"{'subscribed' if created else 'already subscribed (marked used)'}: {sub.subscriber} on "
                    f"{sub.topic}, {sub.pending} publication(s) pending, expires at {sub.expires_at:.1f} unless used")
        else:
            released = await client.unsubscribe_publications(args.topic, args.subscriber)
            out = {"topic": args.topic, "subscriber": args.subscriber, "released": released}
            text = f"unsubscribed: {args.subscriber} from {args.topic}, {released} publication(s) released"
    if args.json:
        print_json(out)
    else:
        print(text)
    return ExitCode.OK


def cmd_subscriptions(args: argparse.Namespace) -> int:
    """List the durable subscriptions."""
    return asyncio.run(_subscriptions(args))


async def _subscriptions(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        subs, clock = await client.publication_subscriptions(args.topic or "")
    if args.json:
        print_json({"clock": clock, "subscriptions": [asdict(s) for s in subs]})
        return ExitCode.OK
    if not subs:
        print("no durable subscriptions")
        return ExitCode.OK
    print(f"{'TOPIC':<24} {'SUBSCRIBER':<20} {'PENDING':>7} {'LAST USED':>10} {'EXPIRES IN':>11}")
    for s in subs:
        print(f"{s.topic:<24} {s.subscriber:<20} {s.pending:>7} {s.last_used:>10.1f} "
              f"{max(0.0, s.expires_at - clock):>10.0f}s")
    print(f"(times in pseudo-clock seconds; clock now {clock:.1f})")
    return ExitCode.OK


# --- parsers -------------------------------------------------------------------------------------


def add_parsers(subparsers: Any) -> None:
    """Add `uow` and its subcommands."""
    common = where_options()
    sub = add_command_group(subparsers, "uow", common, "units of work: send, receive and settle, status",
                            "Units of work: messages sent, received and settled as one.")

    p: argparse.ArgumentParser = sub.add_parser(
        "send", parents=[common], help="send one unit of work (committed unless --no-commit)",
        description="Send one unit of work to a queue and print its id and status. It is committed "
                    "(ACCEPTED: every message visible at once) unless --no-commit.")
    p.add_argument("destination", metavar="DEST", help="the queue, or a durable topic (a publication)")
    bodies = p.add_mutually_exclusive_group()
    bodies.add_argument("--count", type=positive, default=None, metavar="N",
                        help="N messages, bodies 'message 0' .. 'message N-1' (default 1)")
    bodies.add_argument("--body", action="append", default=[], metavar="TEXT",
                        help="a message with this body (repeatable: one message each, in order)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                   help=FIELD_HELP + "; on every message")
    p.add_argument("--id", default=None, metavar="ID",
                   help="the UOW's id (1-64 of A-Z a-z 0-9 . _ -; default a new random one); sending an id "
                        "already committed stores nothing more (duplicate)")
    p.add_argument("--persistent", action=argparse.BooleanOptionalAction, default=None,
                   help="messages stored through the replicated log (default: the destination's)")
    p.add_argument("--persistent-status", action=argparse.BooleanOptionalAction, default=None,
                   help="status kept through the log and after completion (default: the destination's)")
    p.add_argument("--lifetime", type=seconds, default=None, metavar="S",
                   help="lifetime in pseudo-clock seconds, more than 0 (default: the destination's)")
    p.add_argument("--status-multiple", type=positive, default=None, metavar="N",
                   help="a persistent status is kept N lifetimes after completion (default: the destination's)")
    p.add_argument("--user-status", default=None, metavar="TEXT", help="a user status to attach (up to 32 bytes)")
    p.add_argument("--no-commit", action="store_true",
                   help="leave it open (RECEIVED): nothing of it is visible, and the destination's conversation "
                        "timeout backs it out")
    p.add_argument("--json", action="store_true", help="one JSON object: id, status, messages, duplicate")
    p.set_defaults(func=cmd_send)

    p = sub.add_parser(
        "receive", parents=[common], help="receive one unit of work, print it and settle it",
        description="Receive the oldest committed unit of work of a queue, print its messages and settle it: "
                    "--commit (the default), --backout or --cancel. Exit status 1 when none came within --wait.")
    p.add_argument("destination", metavar="DEST", help="the queue, or a durable topic")
    p.add_argument("--receiver", default=CLIENT_NAME, metavar="NAME",
                   help=f"the receiver's name, shown by status (default {CLIENT_NAME}); on a durable topic, the "
                        f"subscriber's name")
    p.add_argument("--wait", type=wait_seconds, default=0.0, metavar="S",
                   help=f"wait up to S seconds for one, at most {MAX_WAIT_SECONDS:g} (default 0: answer at once)")
    settle = p.add_mutually_exclusive_group()
    settle.add_argument("--commit", dest="settle", action="store_const", const=COMMIT,
                        help="processed: its messages are deleted (the default)")
    settle.add_argument("--backout", dest="settle", action="store_const", const=BACKOUT,
                        help="give it back: offered again with its backout count one higher (past the "
                             "destination's threshold: moved to its dead-letter queue)")
    settle.add_argument("--cancel", dest="settle", action="store_const", const=CANCEL,
                        help="discard it (CANCELLED)")
    p.set_defaults(settle=COMMIT)
    p.add_argument("--user-status", default=None, metavar="TEXT",
                   help="a user status to attach when settling (up to 32 bytes)")
    p.add_argument("--json", action="store_true", help="one JSON object: the UOW, its messages, the settlement")
    p.set_defaults(func=cmd_receive)

    p = sub.add_parser("status", parents=[common], help="a unit of work's status by id",
                       description="A unit of work's status by id, while it lives and, when its status is "
                                   "persistent, for its status lifetime after it completed.")
    p.add_argument("uow_id", metavar="ID")
    p.add_argument("--json", action="store_true", help="one JSON object with every field")
    p.set_defaults(func=cmd_status)

    for name, func, what in (("subscribe", cmd_subscribe, "subscribe durably to a durable topic"),
                             ("unsubscribe", cmd_unsubscribe,
                              "end a durable subscription, releasing its pending publications")):
        p = sub.add_parser(name, parents=[common], help=what, description=what[0].upper() + what[1:] + ".")
        p.add_argument("topic", metavar="TOPIC", help="a topic whose realm rule says units_of_work.durable")
        p.add_argument("subscriber", metavar="NAME", help="the subscriber's name (1-64 of A-Z a-z 0-9 . _ -)")
        p.add_argument("--json", action="store_true", help="one JSON object")
        p.set_defaults(func=func)

    p = sub.add_parser("subscriptions", parents=[common], help="list the durable subscriptions",
                       description="The durable subscriptions to durable topics: pending publications, last use "
                                   "and expiry on the pseudo-clock.")
    p.add_argument("topic", metavar="TOPIC", nargs="?", default="", help="only this topic")
    p.add_argument("--json", action="store_true", help="one JSON object: clock and subscriptions")
    p.set_defaults(func=cmd_subscriptions)
