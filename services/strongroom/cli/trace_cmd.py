"""`strongroom trace`: message tracing (README, "Message tracing").

    strongroom trace on (--destination D | --producer P) [--for SECONDS] [--json]
    strongroom trace off [--destination D | --producer P] [--json]
    strongroom trace show [--destination D] [--producer P [--sequence N]] [--store S --seq N]
                          [--limit N] [--json]

`on` turns tracing on in the cluster's etcd for a destination (a name, or a pattern with `*`) or
a producer id, for SECONDS (default 600, at most 86400): from then on every member logs each step
of each matching message (received, committed, delivered, acked, expired, discarded,
dead_lettered, deleted) and keeps the newest 10,000. `off` ends one filter (no option: all of
them). Both print the filters in force. `show` asks every member for the steps it kept that
match every criterion given and prints them in time order, one line each with the member: one
message followed across the cluster (`--producer P --sequence N`, or `--store S --seq N`).

Members: `-s` (or $STRONGROOM_ENDPOINTS), else the local state file's.
Exit status: 0 done (`show`: steps found); 1 refused, no step found, or no member answered;
2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from strongroom.cli.common import (
    CLIENT_NAME,
    ExitCode,
    add_command_group,
    print_json,
    proto_dict,
    resolve_endpoints,
    say_error,
    where_options,
)

__all__ = ["add_parsers"]


def _when(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _print_filters(settings: Any) -> None:
    if not settings.filters:
        print("message tracing is off")
    for f in settings.filters:
        what = f"producer {f.producer_id}" if f.producer_id else f"destination {f.destination}"
        left = max(0.0, f.until - time.time())
        print(f"tracing {what} for {left:.0f} s more (until "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(f.until))})")


async def _switch(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME, timeout=args.timeout) as client:
        settings = await client.set_message_trace(args.destination, args.producer, args.seconds,
                                                  off=args.trace_command == "off")
    if args.json:
        print_json(proto_dict(settings), indent=2)
    else:
        _print_filters(settings)
    return ExitCode.OK


async def _show(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME, timeout=args.timeout) as client:
        steps, silent = await client.message_trace(args.destination, args.producer, args.sequence, args.store,
                                                   args.seq, args.limit)
        asked = len(client.endpoints)
    for address in silent:
        say_error(f"{address}: did not answer; its steps are missing")
    if len(silent) == asked:
        return ExitCode.FAILED
    if args.json:
        print_json([proto_dict(s) for s in steps], indent=2)
    else:
        for s in steps:
            where = f"{s.store}/{s.message_seq}" if s.message_seq else "-"
            ident = f"{s.producer_id}:{s.sequence}" if s.producer_id else "-"
            index = f" index {s.log_index}" if s.log_index else ""
            parent = f" traceparent {s.traceparent}" if s.traceparent else ""
            print(f"{_when(s.time)} {s.member:<10} {s.step:<13} {where:<16} {ident:<24} {s.destination}{index}"
                  f"{' ' + s.detail if s.detail else ''}{parent}")
        if not steps:
            print("no traced step matches (is tracing on? `strongroom trace on`)")
    return ExitCode.OK if steps else ExitCode.FAILED


def add_parsers(sub: Any) -> None:
    """Add `trace on`, `trace off` and `trace show`."""
    common = where_options()
    group = add_command_group(sub, "trace", common, "message tracing: on, off, show",
                              "Trace every step of the messages of a destination or a producer id on every member.")
    for name, text in (("on", "trace a destination (or pattern) or a producer id for a while"),
                       ("off", "stop tracing a destination or a producer id (neither: everything)")):
        p = group.add_parser(name, parents=[common], help=text)
        what = p.add_mutually_exclusive_group(required=name == "on")
        what.add_argument("--destination", default="", help="a destination name, or a pattern with *")
        what.add_argument("--producer", default="", help="a producer id")
        if name == "on":
            p.add_argument("--for", dest="seconds", type=float, default=0.0, metavar="SECONDS",
                           help="how long (default 600, at most 86400)")
        p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a member (default 10)")
        p.add_argument("--json", action="store_true", help="the filters in force as JSON")
        p.set_defaults(func=lambda args: asyncio.run(_switch(args)), seconds=0.0)
    p = group.add_parser("show", parents=[common], help="the traced steps every member kept, in time order")
    p.add_argument("--destination", default="", help="steps of messages sent to this destination")
    p.add_argument("--producer", default="", help="steps of messages of this producer id")
    p.add_argument("--sequence", type=int, default=0, help="with --producer: the producer's sequence (one message)")
    p.add_argument("--store", default="", help="steps of messages of this store")
    p.add_argument("--seq", type=int, default=0, help="with --store: the message's sequence in it (one message)")
    p.add_argument("--limit", type=int, default=0, help="at most this many steps per member (default 1000)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the members (default 10)")
    p.add_argument("--json", action="store_true", help="the steps as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_show(args)))
