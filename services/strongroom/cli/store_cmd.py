"""`strongroom store`: the persistent store of a cluster (docs/store-operations.md).

    strongroom store status --cluster C [--json]
    strongroom store disconnect --cluster C [--reason TEXT] [--json]
    strongroom store connect --cluster C [--reason TEXT] [--json]
    strongroom store allow-new --cluster C [--reason TEXT] [--json]
    strongroom store unload | load | compare-reports ...   (store_migrate_cmd.py: migration)

`status`: whether the cluster's persistent store (its replicated log and state) is available,
unavailable or takes no new units of work, since when and why, and what it holds against the
realm's capacity (`AdminService.GetPersistentStore`; any member answers, from etcd).

`disconnect` (EntireX's DISCONNECT-PSTORE): every command that needs persistence fails at once
with PSTORE_UNAVAILABLE, what was queued for the log and not yet stored is backed out, no
lifetime or time-to-live runs on the store; non-replicated stores and units of work that are
neither persistent nor of persistent status go on. `connect` (CONNECT-PSTORE): available again,
taking no new units of work: commands that consume are served, producing ones get NO_NEW_UOW.
`allow-new`: everything is served again (refused while the store is over its capacity).
A wrong transition is refused with PSTORE_STATE and changes nothing. The leader answers and
enforces the new state before it does.

Members: `-s` (or $STRONGROOM_ENDPOINTS), else the cluster's members in the local state file.
Exit status: 0 done; 1 refused (PSTORE_STATE, UNKNOWN_CLUSTER) or no member answered; 2 bad usage.
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
    proto_dict,
    resolve_endpoints,
    where_options,
)
from strongroom.cli import store_migrate_cmd
from strongroom.cli.status_cmd import store_line

__all__ = ["add_parsers"]

_DONE = {"disconnect": "disconnected", "connect": "connected (no new units of work)",
         "allow-new": "taking new units of work again"}


def _endpoints(args: argparse.Namespace) -> list[str]:
    """The members to ask: `-s`, else $STRONGROOM_ENDPOINTS, else the cluster's members in the
    local state file."""
    if getattr(args, "at_cluster", None) is None:
        args.at_cluster = args.cluster
    return resolve_endpoints(args)


async def _run(args: argparse.Namespace) -> int:
    from strongroom.client import Client
    from strongroom.errors import StrongroomError

    action = args.store_command
    async with Client(_endpoints(args), client_name=CLIENT_NAME, timeout=args.timeout) as client:
        try:
            if action == "status":
                answer = await client.persistent_store(args.cluster)
            else:
                answer = await client.change_persistent_store(action, args.cluster, args.reason)
        except StrongroomError as err:
            if not args.json:
                raise
            print_json({"cluster": args.cluster, "error": err.reason, "message": err.message}, indent=2)
            return ExitCode.FAILED
    if args.json:
        print_json(proto_dict(answer), indent=2)
        return ExitCode.OK
    if action != "status":
        where = "enforced by the leader" if answer.enforced else "the leader enforces it once one is elected"
        print(f"cluster {answer.cluster}: persistent store {_DONE[action]} ({where}, {answer.member})")
    print(f"cluster {answer.cluster}: {store_line(answer)}")
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `store status`, `store disconnect`, `store connect` and `store allow-new`."""
    common = where_options()
    group = add_command_group(sub, "store", common, "the persistent store: status, disconnect, connect, allow-new, unload, load, compare-reports",
                              "A cluster's persistent store (its replicated log and state): available, "
                              "unavailable, or taking no new units of work (docs/store-operations.md).")
    helps = {"status": "available, unavailable or no new units of work; since when and why; capacity",
             "disconnect": "refuse every command that needs persistence (PSTORE_UNAVAILABLE)",
             "connect": "connect a disconnected store: consumers only (producers get NO_NEW_UOW)",
             "allow-new": "lift 'no new units of work': everything is served again"}
    for name, text in helps.items():
        p = group.add_parser(name, parents=[common], help=text)
        p.add_argument("--cluster", required=True, help="the cluster whose persistent store it is")
        if name != "status":
            p.add_argument("--reason", default="", help="why, in words: recorded with the state and shown in status")
        p.add_argument("--timeout", type=float, default=10.0,
                       help="seconds to wait for a leader (or any member) to answer (default 10)")
        p.add_argument("--json", action="store_true", help="the persistent store as JSON")
        p.set_defaults(func=lambda args: asyncio.run(_run(args)), reason="")
    store_migrate_cmd.add_parsers(group)
