"""`strongroom status`: every member's view of its cluster (leader, epoch, commit and applied
index, how each member gets its appends, the units-of-work pseudo-clock) and each store's
settings, units of work, origin marks (a routed store) and durables."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from typing import Any

from strongroom.api.v1 import common_pb2
from strongroom.cli.common import (
    CliError,
    ExitCode,
    data_dir,
    explicit_servers,
    proto_dict,
    resolve_endpoints,
    say_error,
    where_options,
)
from strongroom.cli.router_cmd import fetch_router_statuses, print_routers, state_routers
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX

__all__ = ["add_parsers", "cmd_status", "durable_kind", "human_bytes"]


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status of every member (`--json`: each member's raw status)."""
    return asyncio.run(_status(args))


async def _status(args: argparse.Namespace) -> int:
    from strongroom.local.launcher import fetch_statuses

    endpoints = resolve_endpoints(args)
    if explicit_servers(args) is None:
        # The local state file's standby sets too (clients are never given them: they serve none).
        from strongroom.local.launcher import load_state, standby_endpoints

        state = load_state(data_dir(args)) or {}
        endpoints += [a for a in standby_endpoints(state) if a not in endpoints]
    replies = await fetch_statuses(endpoints, timeout=3.0)
    if args.json:
        out: list[dict[str, Any]] = []
        for r in replies:
            if r.status is not None:
                out.append({"endpoint": r.endpoint, **proto_dict(r.status)})
            else:
                out.append({"endpoint": r.endpoint, "error": r.error})
        print(json.dumps(out, indent=2))
        return ExitCode.OK if any(r.status is not None for r in replies) else ExitCode.FAILED
    if not any(r.status is not None for r in replies):
        for r in replies:
            say_error(f"{r.endpoint}: {r.error}")
        raise CliError("no member answered")
    _print_status(replies)
    routers = state_routers(args) if explicit_servers(args) is None else []
    if routers:
        print_routers(await fetch_router_statuses(routers))
    return ExitCode.OK


def _print_status(replies: Sequence[Any]) -> None:
    by_cluster: dict[str, list[Any]] = {}
    for r in replies:
        if r.status is not None:
            # A disaster-recovery standby set is shown apart from its cluster's primary set.
            by_cluster.setdefault(r.status.cluster + (" (standby set)" if r.status.standby else ""), []).append(r)
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
              f"commit index {ref.commit_index}, storage {ref.storage or '?'}, realm version {ref.realm_version}, "
              f"uow clock {ref.uow_clock:.1f} s")
        if ref.dr_role and (ref.dr_role != "primary" or ref.generation or ref.standby):
            fenced = f", superseded by generation {ref.newer_generation}" if ref.dr_role == "fenced" else ""
            print(f"  DR role at this site: {ref.dr_role}, generation {ref.generation}{fenced}")
        if ref.standby and ref.primary_commit_index:
            behind = max(0, ref.primary_commit_index - ref.last_index)
            print(f"  behind the primary: {behind} entries, {ref.seconds_behind_primary:.1f} s "
                  f"(primary commit index {ref.primary_commit_index})")
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
                  f"{human_bytes(ref.memory_budget_bytes) if ref.memory_budget_bytes else '-'}")
        for store in ref.stores:
            kind = "replicated" if store.replicated else "not replicated"
            print(f"  store {store.name} ({kind}): {store.messages} messages, {human_bytes(store.bytes)}")
            print(f"    {_store_settings(store)}")
            if store.uows:
                print(f"    units of work: {store.uows} ({store.uows_pending} committed, not settled), "
                      f"{store.uow_messages} messages, {human_bytes(store.uow_bytes)}")
            if store.origin_marks:
                print(f"    {origin_marks_line(store.origin_marks)}")
            for d in store.durables:
                dkind = durable_kind(d)
                if d.key_field:
                    dkind += f" by {d.key_field}"
                if d.name.startswith(ROUTE_DURABLE_PREFIX):
                    print(f"    waiting to forward to {d.name.removeprefix(ROUTE_DURABLE_PREFIX)}: {d.destination} "
                          f"{d.pending_messages} messages ({human_bytes(d.pending_bytes)}), {d.unacked} in flight")
                    continue
                label = f"{'static ' if d.static else ''}durable {d.name}" if d.name else "queue durable"
                where = f"endpoint {d.destination}" if d.content else d.destination
                interest = f" [{d.matcher}]" if d.matcher else ""
                ack = {common_pb2.ACK_SYNC_MODE_SYNC: ", sync acks", common_pb2.ACK_SYNC_MODE_ASYNC: ""}.get(
                    d.ack_sync_mode, "")
                expiry = (f", expires in {d.expires_in_seconds:.1f} s unused" if d.HasField("expires_in_seconds")
                          else "")
                print(f"    {label} on {where}{interest} ({dkind}{ack}): {d.pending_messages} pending "
                      f"({human_bytes(d.pending_bytes)}), {d.unacked} unacked, {d.subscribers} subscriber(s){expiry}")
                if d.unreachable:
                    delete = f"strongroom durable delete {d.destination}{f' {d.name}' if d.name else ''}" + (
                        " --endpoint" if d.content else "")
                    print(f"      UNREACHABLE: {d.unreachable_reason}; it takes no new messages and keeps its "
                          f"backlog until the realm reaches it again, or `{delete}`")
    for r in replies:
        if r.endpoint not in answered and r.endpoint not in listed:
            print(f"unreachable: {r.endpoint} ({r.error})")


# Origin marks shown on a store's line; `--json` lists them all.
_MARKS_SHOWN = 12


def origin_marks_line(marks: Sequence[Any]) -> str:
    """A routed store's origin marks on one line: per origin cluster, each destination with the
    highest origin sequence stored here."""
    by_cluster: dict[str, list[str]] = {}
    for m in marks[:_MARKS_SHOWN]:
        by_cluster.setdefault(m.cluster, []).append(f"{m.destination} {m.sequence}")
    more = f"; and {len(marks) - _MARKS_SHOWN} more (--json lists them)" if len(marks) > _MARKS_SHOWN else ""
    return ("forwarded here, highest origin sequence stored: " +
            "; ".join(f"from {c}: {', '.join(ds)}" for c, ds in by_cluster.items()) + more)


def _store_settings(store: Any) -> str:
    """A store's realm settings on one line (the stores grid)."""
    policy = ("reject" if store.limit_policy == common_pb2.LIMIT_POLICY_UNSPECIFIED else
              common_pb2.LimitPolicy.Name(store.limit_policy).removeprefix("LIMIT_POLICY_").lower())
    bounds = [f"{store.max_messages} messages"] if store.max_messages else []
    bounds += [human_bytes(store.max_bytes)] if store.max_bytes else []
    # A policy says what happens at the limit, so it is shown only with one.
    limits = f"limit {' / '.join(bounds)}, policy {policy}" if bounds else "no limit"
    extra = f", {store.swapped_messages} swapped" if store.swapped_messages else ""
    return (f"storage {store.storage}, publisher {store.publisher_mode}, {limits}, "
            f"max message {human_bytes(store.max_message_bytes)}, maps {str(store.maps).lower()} "
            f"({store.map_count}), routed {str(store.routed).lower()}{extra}")



def durable_kind(d: Any) -> str:
    """A DurableStatus's kind as the CLI names it (`subscribe --kind`): standard, shared,
    lastvalue."""
    return str(common_pb2.DurableKind.Name(d.kind)).removeprefix("DURABLE_KIND_").lower()


def human_bytes(n: int) -> str:
    """A byte count for people (B, KiB, MiB, GiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def add_parsers(sub: Any) -> None:
    """Add `status`."""
    p = sub.add_parser("status", parents=[where_options()], help="members, leader, epoch, commit index, stores")
    p.add_argument("--json", action="store_true", help="every member's raw status as JSON")
    p.set_defaults(func=cmd_status)
