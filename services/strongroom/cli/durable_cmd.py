"""`strongroom durable list` and `strongroom durable delete`: the durables of a cluster.

    strongroom durable list [--store S] [--destination D] [--json]
    strongroom durable delete DESTINATION [NAME] [--endpoint | --publication] [--json]

`list` asks the leader (`AdminService.ListDurables`) for every durable: store, destination or
endpoint, name, kind (standard, shared, lastvalue, or queue for a queue's own durable), pending
messages, subscribers, whether it is suspended or static, its last use on the pseudo-clock and
when it expires if it stays unused; then (`UowService.ListSubscriptions`) the durable
subscriptions to durable topics, as rows of kind `publication` (pending: the publications it has
still to receive or settle).

`delete` names the durable as `list` (or `strongroom status`) shows it: the destination (or
endpoint) it was created on and its name; `--endpoint` for one opened through an endpoint; no
NAME for a queue's own durable (which deletes the queue's messages); `--publication` for a
durable subscription to a durable topic (it ends as `strongroom uow unsubscribe` ends it,
releasing the publications it had still to receive; NOT_SUBSCRIBED when there is none). Its open subscriptions end
with DURABLE_DELETED. The usual case is a durable status marks unreachable after a realm change.

Exit status: 0 done; 1 the cluster refused (no such durable: UNKNOWN_DURABLE; no such store:
UNKNOWN_STORE); 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from strongroom.cli.common import (
    CLIENT_NAME,
    CliError,
    ExitCode,
    add_command_group,
    print_json,
    resolve_endpoints,
    where_options,
)
from strongroom.cli.status_cmd import durable_kind

__all__ = ["add_parsers"]


async def _delete(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    if args.publication:
        return await _delete_subscription(args)
    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        store, released = await client.delete_durable(args.destination, args.name, args.endpoint)
    if args.json:
        print_json({"destination": args.destination, "durable": args.name, "content": args.endpoint,
                    "store": store, "released_messages": released})
    else:
        what = f"durable {args.name!r} on {args.destination!r}" if args.name else f"queue {args.destination!r}"
        print(f"deleted {what} (store {store}): released {released} message{'s' * (released != 1)}")
    return ExitCode.OK


async def _delete_subscription(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    if not args.name or args.endpoint:
        raise CliError("--publication names a durable topic and a subscriber: durable delete TOPIC NAME "
                       "--publication (not with --endpoint)", ExitCode.USAGE)
    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        released = await client.unsubscribe_publications(args.destination, args.name)
    if args.json:
        print_json({"destination": args.destination, "durable": args.name, "publication": True,
                    "released_publications": released})
    else:
        print(f"deleted durable subscription {args.name!r} to {args.destination!r}: released {released} "
              f"publication{'s' * (released != 1)}")
    return ExitCode.OK


def _subscription_row(s: Any, clock: float) -> dict[str, Any]:
    """One durable subscription to a durable topic, as a row of `durable list --json`."""
    return {
        "store": s.store, "destination": s.topic, "endpoint": False, "name": s.subscriber, "kind": "publication",
        "pending_messages": s.pending, "pending_bytes": 0, "unacked": 0, "subscribers": 0, "attached": False,
        "suspended": False, "unreachable_reason": "", "static": False, "last_used": s.last_used,
        "expiry_seconds": s.expires_at - s.last_used, "expires_in_seconds": max(0.0, s.expires_at - clock),
    }


def _row(d: Any) -> dict[str, Any]:
    """One durable of `durable list --json`."""
    return {
        "store": d.store, "destination": d.destination, "endpoint": d.content, "name": d.name,
        "kind": durable_kind(d) if d.name else "queue", "pending_messages": d.pending_messages,
        "pending_bytes": d.pending_bytes, "unacked": d.unacked, "subscribers": d.subscribers,
        "attached": d.attached, "suspended": d.unreachable, "unreachable_reason": d.unreachable_reason,
        "static": d.static, "last_used": d.last_used, "expiry_seconds": d.expiry_seconds,
        "expires_in_seconds": d.expires_in_seconds if d.HasField("expires_in_seconds") else None,
    }


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


async def _list(args: argparse.Namespace) -> int:
    from strongroom.client import Client

    async with Client(resolve_endpoints(args), client_name=CLIENT_NAME) as client:
        listed = await client.list_durables(args.store or "", args.destination or "")
        subscriptions, _ = await client.publication_subscriptions()
    rows = [_row(d) for d in listed.durables]
    # Durable subscriptions to durable topics: `pending_messages` counts their publications.
    rows += [_subscription_row(s, listed.clock) for s in subscriptions
             if (not args.store or s.store == args.store) and (not args.destination or s.topic == args.destination)]
    if args.json:
        print_json({"clock": listed.clock, "durables": rows}, indent=2)
        return ExitCode.OK
    print(f"pseudo-clock {_seconds(listed.clock)}; {len(rows)} durable{'s' * (len(rows) != 1)}")
    if not rows:
        return ExitCode.OK
    table = [("STORE", "DESTINATION", "NAME", "KIND", "PENDING", "SUBSCRIBERS", "STATE", "LAST USED", "EXPIRES IN")]
    for r in rows:
        state = ", ".join(w for w, on in (("suspended", r["suspended"]), ("static", r["static"])) if on) or "-"
        if r["attached"] or r["subscribers"]:
            used = "in use"
        else:
            used = f"{_seconds(listed.clock - r['last_used'])} ago" if r["last_used"] else "-"
        left = r["expires_in_seconds"]
        expires = "never" if not r["expiry_seconds"] else _seconds(left) if left is not None else "-"
        where = f"endpoint {r['destination']}" if r["endpoint"] else r["destination"]
        table.append((r["store"], where, r["name"] or "-", r["kind"], str(r["pending_messages"]),
                      str(r["subscribers"]), state, used, expires))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.rjust(w) if i in (4, 5) else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return ExitCode.OK


def add_parsers(subparsers: Any) -> None:
    """Add `durable` and its subcommands."""
    common = where_options()
    sub = add_command_group(subparsers, "durable", common, "list or delete durables", "Operate on durables.")
    p: argparse.ArgumentParser = sub.add_parser(
        "list", parents=[common], help="every durable of the cluster, with its use and expiry",
        description="List every durable of the cluster as the leader sees it: pending messages, subscribers, "
                    "suspended or static, last use and expiry on the pseudo-clock.")
    p.add_argument("--store", metavar="STORE", help="only the durables of this store")
    p.add_argument("--destination", metavar="NAME",
                   help="only the durables created on this destination or endpoint (exact name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lambda args: asyncio.run(_list(args)))
    p = sub.add_parser(
        "delete", parents=[common], help="delete a durable and release the messages it holds",
        description="Delete a durable, named as `strongroom status` lists it, and release the messages it holds.")
    p.add_argument("destination", metavar="DESTINATION", help="the destination or endpoint it was created on")
    p.add_argument("name", metavar="NAME", nargs="?", default="",
                   help="its name (none: a queue's own durable, with the queue's messages)")
    p.add_argument("--endpoint", action="store_true", help="it was opened through an endpoint (status: content)")
    p.add_argument("--publication", action="store_true",
                   help="a durable subscription to a durable topic (list: kind publication)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lambda args: asyncio.run(_delete(args)))
