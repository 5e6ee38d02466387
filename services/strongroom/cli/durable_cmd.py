"""`strongroom durable delete`: remove a durable and release the messages it holds.

    strongroom durable delete DESTINATION [NAME] [--endpoint] [--json]

The durable is named as `strongroom status` lists it: the destination (or endpoint) it was
created on and its name; `--endpoint` for one opened through an endpoint; no NAME for a queue's
own durable (which deletes the queue's messages). Its open subscriptions end with
DURABLE_DELETED. The usual case is a durable status marks unreachable after a realm change.

Exit status: 0 deleted; 1 the cluster refused (no such durable: UNKNOWN_DURABLE); 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from strongroom.cli.common import (
    CLIENT_NAME,
    ExitCode,
    add_command_group,
    print_json,
    resolve_endpoints,
    where_options,
)

__all__ = ["add_parsers"]


async def _delete(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        store, released = await client.delete_durable(args.destination, args.name, args.endpoint)
    if args.json:
        print_json({"destination": args.destination, "durable": args.name, "content": args.endpoint,
                    "store": store, "released_messages": released})
    else:
        what = f"durable {args.name!r} on {args.destination!r}" if args.name else f"queue {args.destination!r}"
        print(f"deleted {what} (store {store}): released {released} message{'s' * (released != 1)}")
    return ExitCode.OK


def add_parsers(subparsers: Any) -> None:
    """Add `durable` and its subcommands."""
    common = where_options()
    sub = add_command_group(subparsers, "durable", common, "operate on durables (delete)", "Operate on durables.")
    p: argparse.ArgumentParser = sub.add_parser(
        "delete", parents=[common], help="delete a durable and release the messages it holds",
        description="Delete a durable, named as `strongroom status` lists it, and release the messages it holds.")
    p.add_argument("destination", metavar="DESTINATION", help="the destination or endpoint it was created on")
    p.add_argument("name", metavar="NAME", nargs="?", default="",
                   help="its name (none: a queue's own durable, with the queue's messages)")
    p.add_argument("--endpoint", action="store_true", help="it was opened through an endpoint (status: content)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lambda args: asyncio.run(_delete(args)))
