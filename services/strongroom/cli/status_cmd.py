"""`strongroom status`: every member's view of its cluster (leader, epoch, commit and applied
index, how each member gets its appends, the units-of-work pseudo-clock) and each store's
settings, units of work, origin marks (a routed store) and durables; with the local state file,
the routers and, per site of a cluster with a standby set, its DR service's state (`--json`:
each member's `dr_service`, the DR service of the member's site)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from strongroom.api.v1 import admin_pb2, common_pb2
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
from strongroom.observability.statslog import human_bytes
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX

__all__ = ["add_parsers", "cmd_status", "durable_kind", "human_bytes", "store_line"]


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status of every member (`--json`: each member's raw status)."""
    return asyncio.run(_status(args))


DrSites = dict[tuple[str, bool], tuple[str, Any, str]]
"""Per (cluster, whether the site runs its standby set): its DR service's (address, status or
None, error)."""


async def _dr_sites(args: argparse.Namespace) -> DrSites:
    """The DR service of each site of the local state file's clusters, asked for its status."""
    from strongroom.cli.dr_cmd import fetch_dr_statuses, state_dr_sites

    listed = state_dr_sites(args)
    replies = await fetch_dr_statuses([address for _, _, address in listed])
    return {(cluster, site == "standby"): reply for (cluster, site, _), reply in zip(listed, replies, strict=True)}


def _dr_json(reply: tuple[str, Any, str]) -> dict[str, Any]:
    address, st, error = reply
    return {"address": address, **(proto_dict(st) if st is not None else {"error": error})}


async def _status(args: argparse.Namespace) -> int:
    from strongroom.local.launcher import fetch_statuses

    endpoints = resolve_endpoints(args)
    drs: DrSites = {}
    if explicit_servers(args) is None:
        # The local state file's standby sets too (clients are never given them: they serve none).
        from strongroom.local.launcher import load_state, standby_endpoints

        state = load_state(data_dir(args)) or {}
        endpoints += [a for a in standby_endpoints(state) if a not in endpoints]
        drs = await _dr_sites(args)
    replies = await fetch_statuses(endpoints, timeout=3.0)
    if args.json:
        out: list[dict[str, Any]] = []
        for r in replies:
            if r.status is not None:
                dr = drs.get((r.status.cluster, r.status.standby))
                out.append({"endpoint": r.endpoint, **proto_dict(r.status),
                            **({"dr_service": _dr_json(dr)} if dr is not None else {})})
            else:
                out.append({"endpoint": r.endpoint, "error": r.error})
        print(json.dumps(out, indent=2))
        return ExitCode.OK if any(r.status is not None for r in replies) else ExitCode.FAILED
    if not any(r.status is not None for r in replies):
        for r in replies:
            say_error(f"{r.endpoint}: {r.error}")
        raise CliError("no member answered")
    _print_status(replies, drs)
    routers = state_routers(args) if explicit_servers(args) is None else []
    if routers:
        print_routers(await fetch_router_statuses(routers))
    return ExitCode.OK


def _print_status(replies: Sequence[Any], drs: DrSites | None = None) -> None:
    from strongroom.cli.dr_cmd import print_dr

    drs = drs or {}
    by_cluster: dict[str, list[Any]] = {}
    for r in replies:
        if r.status is not None:
            # A disaster-recovery standby set is shown apart from its cluster's primary set.
            by_cluster.setdefault(r.status.cluster + (" (standby set)" if r.status.standby else ""), []).append(r)
    answered = {r.endpoint for rs in by_cluster.values() for r in rs}
    errors = {r.endpoint: r.error for r in replies if r.status is None}
    listed: set[str] = set()
    for cluster, rs in by_cluster.items():
        shared = [r for r in rs if r.status.HasField("shared_store")]
        # A shared store's standby is listed on its own line below, not as the member.
        rs = [r for r in rs if r.status.shared_store.run_mode != "standby"] or rs
        statuses = [r.status for r in rs]
        leaders = [s for s in statuses if s.role == "leader"]
        ref = leaders[0] if leaders else max(statuses, key=lambda s: (s.epoch, s.commit_index))
        own = {s.member: s for s in statuses}
        leader = ref.leader or (leaders[0].member if leaders else "")
        print(f"cluster {cluster}: leader {leader or '(none)'}, epoch {ref.epoch}, "
              f"commit index {ref.commit_index}, storage {ref.storage or '?'}, realm version {ref.realm_version}, "
              f"uow clock {ref.uow_clock:.1f} s")
        if ref.HasField("persistent_store"):
            print(f"  {store_line(ref.persistent_store)}")
        if ref.membership_change or (ref.voters and list(ref.voters) != [m.name for m in ref.members]):
            print(f"  voters: {', '.join(ref.voters)}"
                  + (f"; membership change: {ref.membership_change}" if ref.membership_change else ""))
        for s in statuses:
            if s.store_damage:
                print(f"  member {s.member}: {s.store_damage}")
        if ref.events_published_index:
            print(f"  store event log published through log index {ref.events_published_index} "
                  f"(applied {ref.applied_index})")
        for r in shared:  # a shared store's instances (docs/store-operations.md), each as it answers
            inst = r.status.shared_store
            doing = f": {inst.state}" if inst.state else ""
            print(f"  shared store instance {r.endpoint}: {inst.run_mode}{doing} (partner {inst.partner_address}, "
                  f"store {inst.store_id or 'new'}, control interval {inst.control_interval_seconds:g} s)")
        if ref.dr_role and (ref.dr_role != "primary" or ref.generation or ref.standby):
            fenced = f", superseded by generation {ref.newer_generation}" if ref.dr_role == "fenced" else ""
            print(f"  DR role at this site: {ref.dr_role}, generation {ref.generation}{fenced}")
        if ref.standby and ref.primary_commit_index:
            behind = max(0, ref.primary_commit_index - ref.last_index)
            print(f"  behind the primary: {behind} entries, {ref.seconds_behind_primary:.1f} s, "
                  f"{ref.messages_behind_primary} messages (primary commit index {ref.primary_commit_index})")
        dr = drs.get((ref.cluster, ref.standby))
        if dr is not None:  # the DR service of this set's site
            print_dr(*dr, indent="  ", label=f"DR service at this site ({dr[0]})")
        names = [m.name for m in ref.members] or sorted(own)
        addresses = {r.status.member: r.endpoint for r in rs}
        addresses.update({m.name: m.address for m in ref.members if m.address})
        match = {m.name: m.match_index for m in ref.members}
        via = {m.name: m.replication for m in ref.members}
        # Who cannot write its storage: as the member itself says, else as the leader heard.
        cannot = {m.name: (m.cannot_store, m.cannot_store_since) for m in ref.members if m.cannot_store}
        cannot.update({m.name: (m.cannot_store, m.cannot_store_since) for s in statuses for m in s.members
                       if m.name == s.member and m.cannot_store})
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
                if name in cannot:
                    print(f"      {name}: CANNOT STORE {storage_since(cannot[name][1])}: {cannot[name][0]}")
                continue
            m_index = str(match.get(name, "")) if leaders else ""
            appends = via.get(name, "") if leaders else ""
            behind = "" if s.synced else "  (catching up)"
            if leaders and name in match and not next(m.voter for m in ref.members if m.name == name):
                behind += "  (not a voter)"
            print(f"  {mark} {name:<12} {address:<22} {s.role:<11} {s.commit_index:>8} {s.applied_index:>8} "
                  f"{m_index:>8} {appends:<7}{behind}")
            if s.apply_stopped:
                print(f"      {name}: {s.apply_stopped}")
            if name in cannot:
                print(f"      {name}: CANNOT STORE {storage_since(cannot[name][1])}: {cannot[name][0]}")
        urls = [f"{s.member} {s.metrics_url}" for s in statuses if s.metrics_url]
        if urls:
            print(f"  metrics: {', '.join(urls)}")
        if ref.dedup_producers:
            print(f"  deduplication windows of {ref.dedup_producers} producer id(s)")
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


_STORE_STATES = {admin_pb2.PERSISTENT_STORE_STATE_AVAILABLE: "available",
                 admin_pb2.PERSISTENT_STORE_STATE_UNAVAILABLE: "UNAVAILABLE",
                 admin_pb2.PERSISTENT_STORE_STATE_NO_NEW_UOW: "NO NEW UNITS OF WORK"}


def store_line(ps: Any) -> str:
    """A cluster's persistent store (a PersistentStore) on one line: its state, since when and why,
    what it holds against its capacity, and the command that lifts the state."""
    text = f"persistent store: {_STORE_STATES.get(ps.state, '?')}"
    if ps.since:
        text += f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ps.since))}"
    if ps.reason:
        text += f" ({ps.reason})"
    if ps.capacity_messages or ps.capacity_bytes:
        bounds = [f"{ps.messages} of {ps.capacity_messages} messages"] if ps.capacity_messages else []
        bounds += [f"{human_bytes(ps.bytes)} of {human_bytes(ps.capacity_bytes)}"] if ps.capacity_bytes else []
        text += f"; holds {', '.join(bounds)}" + (" (OVER CAPACITY)" if ps.over_capacity else "")
    for failure in ps.cannot_store:
        text += f"; {failure.member} CANNOT STORE {storage_since(failure.since)}: {failure.cannot_store}"
    if ps.state == admin_pb2.PERSISTENT_STORE_STATE_UNAVAILABLE and ps.cause == admin_pb2.PERSISTENT_STORE_CAUSE_DISK:
        text += "; commands that need persistence are refused until a majority of the members can store again"
    elif ps.state == admin_pb2.PERSISTENT_STORE_STATE_UNAVAILABLE:
        text += f"; commands that need persistence are refused: `strongroom store connect --cluster {ps.cluster}`"
    elif ps.state == admin_pb2.PERSISTENT_STORE_STATE_NO_NEW_UOW:
        text += f"; producing commands are refused: `strongroom store allow-new --cluster {ps.cluster}`"
    return text


def storage_since(since: float) -> str:
    """Since when a member cannot store, in words."""
    return f"since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if since else "now"


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


def add_parsers(sub: Any) -> None:
    """Add `status`."""
    p = sub.add_parser("status", parents=[where_options()], help="members, leader, epoch, commit index, stores")
    p.add_argument("--json", action="store_true", help="every member's raw status as JSON")
    p.set_defaults(func=cmd_status)
