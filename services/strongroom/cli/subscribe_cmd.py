"""`strongroom subscribe DEST [--durable NAME]`: receive (and acknowledge) messages of a durable
or a queue, one line each (`--json`: the client's `message_json`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from strongroom.cli.common import (
    CLIENT_NAME,
    CliError,
    ExitCode,
    parse_match,
    positive,
    resolve_endpoints,
    say_error,
    seconds,
    where_options,
)

if TYPE_CHECKING:
    from strongroom.client import AckMode, Subscription
    from strongroom.errors import StrongroomError

__all__ = ["acks_for", "add_parsers", "cmd_subscribe", "durable_refusal"]

LAST_VALUE = "lastvalue"


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Print messages until `--count` arrived, `--timeout` passed without one, or the
    subscription is closed; exit 1 if fewer than `--count` arrived."""
    matcher = parse_match(args.match)
    if args.kind == LAST_VALUE and args.ack == "explicit":
        raise CliError.usage("--ack explicit: a last-value durable's messages are not acknowledged; leave out --ack")
    return asyncio.run(_subscribe(args, matcher))


def acks_for(sub: Subscription, chosen: str | None) -> AckMode | None:
    """Who acknowledges on `sub`, now that the leader said what it opened: nobody on a last-value
    durable (it takes no acks), else `--ack` (default explicit: this command acks each message
    once printed). `--ack explicit` on a last-value durable cannot apply: a usage error."""
    from strongroom.client import AckMode, DurableKind

    if sub.kind is DurableKind.LAST_VALUE:
        if chosen == AckMode.EXPLICIT:
            raise CliError.usage(f"--ack explicit: durable {sub.durable!r} on {sub.destination!r} is last-value, "
                                 f"whose messages are not acknowledged; leave out --ack")
        return None
    return AckMode(chosen or AckMode.EXPLICIT)


def durable_refusal(err: StrongroomError, durable: str | None) -> CliError | None:
    """The usage error a refused subscription stands for when no `--durable` was given and the
    destination needs one (a topic or an endpoint; a queue needs none); None otherwise."""
    from strongroom.errors import InvalidArgument

    if durable or not isinstance(err, InvalidArgument) or "durable name" not in err.message:
        return None
    return CliError.usage(f"--durable NAME is required here: {err.message}")


async def _subscribe(args: argparse.Namespace, matcher: dict[str, object]) -> int:
    from strongroom.client import AckMode, Client, message_json
    from strongroom.errors import StrongroomError, SubscriptionClosed

    client = Client(resolve_endpoints(args), client_name=CLIENT_NAME)
    received = 0
    why = ""
    try:
        # No more credit than messages wanted: extra deliveries would only come back as redeliveries.
        credit = min(256, args.count) if args.count else 256
        try:
            sub = await client.subscribe(args.destination, args.durable or "", kind=args.kind,
                                         ack=args.ack or AckMode.EXPLICIT, credit=credit, matcher=matcher,
                                         replay_from_seq=args.replay_from_seq,
                                         replay_from_time=args.replay_from_time)
        except StrongroomError as err:
            raise durable_refusal(err, args.durable) or err from None
        try:
            acks = acks_for(sub, args.ack)
            if sub.queue and args.durable:
                say_error(f"note: {args.destination!r} is a queue: its subscribers share it, "
                          f"so --durable {args.durable!r} is not used")
            while args.count is None or received < args.count:
                try:
                    m = await sub.next(timeout=args.timeout)
                except TimeoutError:
                    why = f"no message for {args.timeout:g} s"
                    break
                except SubscriptionClosed as closed:
                    # A second subscriber of the standard durable took over.
                    why = f"the subscription was closed: {closed.reason}"
                    break
                data = message_json(m)
                if args.json:
                    print(json.dumps(data), flush=True)
                else:
                    body = data["body"] if data["body_encoding"] == "utf-8" else f"(base64) {data['body']}"
                    redelivered = f" (delivery {m.delivery_count})" if m.delivery_count > 1 else ""
                    print(f"{m.seq}: {body}{redelivered}", flush=True)
                if acks is AckMode.EXPLICIT:
                    await sub.ack(m)
                received += 1
        finally:
            await sub.close()
    finally:
        await client.close()
    if args.count is not None and received < args.count:
        say_error(f"received {received} of {args.count} messages ({why})")
        return ExitCode.FAILED
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `subscribe`."""
    from strongroom.client.subscription import AckMode, DurableKind

    p = sub.add_parser("subscribe", parents=[where_options()], help="receive messages of a durable or a queue")
    p.add_argument("destination", metavar="DEST")
    p.add_argument("--durable", default=None, metavar="NAME",
                   help="durable name: required on a topic or an endpoint; a queue needs none (its "
                        "subscribers share it), and one given there is not used (a note says so)")
    p.add_argument("--kind", choices=[k.value for k in DurableKind], default=None,
                   help="durable kind (default: standard on a topic; a queue is always shared)")
    p.add_argument("--count", type=positive, default=None, metavar="N", help="stop after N messages")
    p.add_argument("--ack", choices=[a.value for a in AckMode], default=None,
                   help="acknowledgment (default: explicit, each message acked once printed; none on a "
                        "last-value durable, which takes no acks, where explicit is refused)")
    p.add_argument("--timeout", type=seconds, default=None, metavar="S",
                   help="stop after S seconds without a message")
    p.add_argument("--match", action="append", default=[], metavar="FIELD=VALUE",
                   help="content matcher condition (repeatable): FIELD=VALUE (a JSON value types it: "
                        "sym=A is a string, qty=5 an integer, px=1.5 a float, ok=true a boolean), "
                        "FIELD:present or FIELD:absent")
    p.add_argument("--replay-from-seq", type=positive, default=None, metavar="SEQ",
                   help="reposition the durable to this store sequence first")
    p.add_argument("--replay-from-time", type=float, default=None, metavar="UNIX_SECONDS",
                   help="reposition the durable to messages published at or after this time")
    p.add_argument("--json", action="store_true", help="one JSON line per message")
    p.set_defaults(func=cmd_subscribe)
