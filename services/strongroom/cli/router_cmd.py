"""`strongroom router status`: what each cluster's router sees of its routes.

    strongroom router status [--router HOST:PORT,...] [--json]

Asks each router (`RouterService.Status`): whether it is its cluster's active replica, and per
neighbour cluster whether the interest exchange with it works, what it forwarded there (stored
there once; and after failures, what it sent again and what the neighbour held already), what waits
at this cluster to be forwarded there (and for how long the oldest has waited), and the last
origin sequence the neighbour confirmed storing per origin and destination. A route with messages
waiting and no working link reads STUCK, never "lag 0". The routers are the `--router` addresses,
else the ones the local state file lists (`strongroom up` with a realm that has zones).
`strongroom status` prints the same section after the members.

Exit status: 0 every router answered; 1 one did not; 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from strongroom.channels import open_channel
from strongroom.cli.common import (
    CliError,
    ExitCode,
    add_command_group,
    data_dir,
    print_json,
    proto_dict,
    where_options,
)

__all__ = ["add_parsers", "fetch_router_statuses", "print_routers", "state_routers"]


def state_routers(args: argparse.Namespace) -> list[str]:
    """The router addresses of the local state file."""
    from strongroom.local.launcher import load_state

    state = load_state(data_dir(args)) or {}
    return [str(c["router"]["address"]) for c in state.get("clusters", {}).values()
            if isinstance(c.get("router"), dict) and c["router"].get("address")]


async def fetch_router_statuses(addresses: list[str], timeout: float = 3.0) -> list[tuple[str, Any, str]]:
    """(address, RouterStatus or None, error) per router, asked concurrently."""
    import grpc

    from strongroom.api.v1 import router_pb2, router_pb2_grpc

    async def one(address: str) -> tuple[str, Any, str]:
        async with open_channel(address, []) as channel:
            try:
                status = await router_pb2_grpc.RouterServiceStub(channel).Status(
                    router_pb2.RouterStatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                return address, None, f"{exc.code().name}: {exc.details()}"
            return address, status, ""

    return list(await asyncio.gather(*(one(a) for a in addresses)))


def _age(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def print_routers(replies: list[tuple[str, Any, str]]) -> None:
    """The routers section: one block per router, one line per route."""
    now = time.time()
    for address, status, error in replies:
        if status is None:
            print(f"router {address}: unreachable ({error})")
            continue
        role = "active" if status.active else f"standby (active: {status.active_replica or 'none known'})"
        metrics = f", metrics {status.metrics_url}" if status.metrics_url else ""
        print(f"router {status.cluster} ({status.replica}, {role}) at {address}{metrics}")
        for peer in status.peers:
            if peer.connected:
                link = "connected"
            elif peer.last_contact:
                link = f"NOT CONNECTED for {_age(now - peer.last_contact)}"
            else:
                link = "NOT CONNECTED (never)"
            waiting = f"{peer.waiting_messages} waiting"
            if peer.waiting_messages:
                waiting += f" (oldest {_age(peer.oldest_waiting_seconds)})"
                if not peer.connected:
                    waiting += " STUCK"
            again = ""
            if peer.resent_messages or peer.duplicate_messages:
                again = f" ({peer.resent_messages} re-sent, {peer.duplicate_messages} held there already)"
            print(f"  route to {peer.cluster} ({peer.address}): {link}; {peer.forwarded_messages} forwarded{again}, "
                  f"{waiting}, {peer.received_messages} received from it; stores {', '.join(peer.stores) or '-'}")
            if peer.last_error:
                print(f"    last error: {peer.last_error}")
            for mark in peer.remote_marks:
                when = f", {_age(now - mark.stored_at)} ago" if mark.stored_at else ""
                print(f"    {peer.cluster} holds {mark.destination} from {mark.cluster} up to origin sequence "
                      f"{mark.sequence}{when}")
        for record in status.interest:
            wants = ", ".join(sorted({f"{i.store}/endpoints (via {i.destination})" if i.content
                                      else f"{i.store}/{i.destination}" for i in record.interests})) or "nothing"
            print(f"  interest of {record.cluster} (version {record.version}): {wants}")


async def _status(args: argparse.Namespace) -> int:
    addresses = [a for raw in args.router or [] for a in raw.split(",") if a] or state_routers(args)
    if not addresses:
        raise CliError("no router to ask: give --router HOST:PORT, or start a realm with zones "
                       "(`strongroom up --realm FILE`)")
    replies = await fetch_router_statuses(addresses)
    if args.json:
        print_json([{"address": a, **proto_dict(s)} if s is not None else {"address": a, "error": e}
                    for a, s, e in replies], indent=2)
    else:
        print_routers(replies)
    return ExitCode.OK if all(s is not None for _, s, _ in replies) else ExitCode.FAILED


def add_parsers(sub: Any) -> None:
    """Add `router status`."""
    common = where_options(servers=False)
    group = add_command_group(sub, "router", common, "routers of routed stores: routes, interest, waiting",
                              "The routers that forward routed stores between the clusters of their zones.")
    p = group.add_parser("status", parents=[common], help="each router's routes, what waits and what was forwarded")
    p.add_argument("--router", action="append", metavar="HOST:PORT,...",
                   help="router addresses (default: those of the local state file)")
    p.add_argument("--json", action="store_true", help="each router's raw status as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_status(args)))
