"""`strongroom subscribe DEST --durable NAME`: receive (and acknowledge) messages of a durable,
one line each (`--json`: the client's `message_json`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from strongroom.cli.common import (
    CLIENT_NAME,
    ExitCode,
    parse_match,
    positive,
    resolve_endpoints,
    say_error,
    seconds,
    where_options,
)

__all__ = ["add_parsers", "cmd_subscribe"]


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Print messages until `--count` arrived, `--timeout` passed without one, or the
    subscription is closed; exit 1 if fewer than `--count` arrived."""
    matcher = parse_match(args.match)
    return asyncio.run(_subscribe(args, matcher))


async def _subscribe(args: argparse.Namespace, matcher: dict[str, object]) -> int:
    from strongroom.client import AckMode, Client, message_json
    from strongroom.errors import SubscriptionClosed

    client = Client(resolve_endpoints(args), client_name=CLIENT_NAME)
    received = 0
    why = ""
    try:
        # No more credit than messages wanted: extra deliveries would only come back as redeliveries.
        credit = min(256, args.count) if args.count else 256
        sub = await client.subscribe(args.destination, args.durable, kind=args.kind, ack=args.ack,
                                     credit=credit, matcher=matcher,
                                     replay_from_seq=args.replay_from_seq, replay_from_time=args.replay_from_time)
        try:
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
                if args.ack == AckMode.EXPLICIT:
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

    p = sub.add_parser("subscribe", parents=[where_options()], help="receive messages of a durable")
    p.add_argument("destination", metavar="DEST")
    p.add_argument("--durable", required=True, metavar="NAME", help="durable name")
    p.add_argument("--kind", choices=[k.value for k in DurableKind], default=None,
                   help="durable kind (default: standard on a topic; a queue is always shared)")
    p.add_argument("--count", type=positive, default=None, metavar="N", help="stop after N messages")
    p.add_argument("--ack", choices=[a.value for a in AckMode], default=AckMode.EXPLICIT.value,
                   help="acknowledgment (default explicit)")
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
