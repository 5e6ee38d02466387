"""`strongroom dr`: disaster recovery, from the standby site's DR services.

    strongroom dr status [--dr HOST:PORT,...] [--json]
    strongroom dr activate --cluster C [--dr HOST:PORT] [--force] [--json]
    strongroom dr manifest --cluster C [-s HOST:PORT,...] [--from N] [--out FILE] [--json]
    strongroom dr demote --cluster C [-s HOST:PORT,...] [--manifest FILE | --no-manifest] [--json]

`dr status`: what each DR service does, and how far each cluster's standby set is behind its
primary.

Asks each DR service (`DrService.Status`, the `strongroom-dr` at each site of a cluster with a
standby set): its site's DR role and generation and what it does for it (shipping, nothing at a
primary, fencing the old primary after an activation, nothing while fenced); shipping, the
primary's commit index as its committed-entry stream last said, the standby's last index, the
entries, messages and seconds behind (messages: those the primary had stored through its applied
index, against the standby's through its own), the primary member being read, and how often the
stream was opened again or shipping started over. The DR services are the `--dr` addresses, else
the ones the local state file lists (`strongroom up` with a realm whose clusters have standby sets
runs one at each of their sites). Design: docs/dr.md.

`dr activate`: the primary site is lost; make the standby site the cluster's primary
(`DrService.Activate` at the DR service of the site that is the standby now: of the state file's,
the one whose site says so, else the standby site's; docs/dr.md) and print the tail loss: the old
primary's last commit index heard, the last index the new primary holds, and the entries between
and the messages they stored (lower bounds unless the activation was a planned switchover).
Refused while the primary answers and has a leader, unless
`--force` (then the primary is fenced and drained first: nothing is lost).

`dr manifest` (at the old primary's site, once its disk is back and it is fenced): the lost
tail read from its log, from the last index both sites share + 1 to its commit index: every
message published there (with its id, for re-publishing) and every acknowledgment, as JSON lines
in `--out`, with the sums per store printed (`dr/manifest.py`).

`dr demote` (at the fenced old primary's site): write the manifest (unless `--no-manifest`), then
make the site the standby of the newer primary (`AdminService.Demote`): its members cut their
logs back to the last shared index and the DR service at that site (`strongroom up` runs one at
each site) ships the rest. Members are
`-s` (or $STRONGROOM_ENDPOINTS, or the local state file's).

Exit status: 0 every DR service answered (activated); 1 one did not (refused); 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from strongroom.cli.common import (
    CliError,
    ExitCode,
    add_command_group,
    data_dir,
    print_json,
    proto_dict,
    where_options,
)

__all__ = ["add_parsers", "fetch_dr_statuses", "print_dr", "site_member", "state_dr_sites", "state_drs",
           "write_manifest"]


def state_dr_sites(args: argparse.Namespace, cluster: str | None = None) -> list[tuple[str, str, str]]:
    """(cluster, site, address) of every DR service of the local state file (of `cluster` only,
    when given): the standby site's ("standby") and the primary site's ("primary")."""
    from strongroom.local.statefile import dr_services, load_state

    return dr_services(load_state(data_dir(args)) or {}, cluster)


def state_drs(args: argparse.Namespace, cluster: str | None = None) -> list[str]:
    """The DR service addresses of the local state file (of `cluster` only, when given), each
    cluster's standby site's first."""
    return [address for _, _, address in state_dr_sites(args, cluster)]


def print_dr(address: str, st: Any, error: str, site: str = "", indent: str = "", label: str = "") -> None:
    """One DR service's status in words (two lines while shipping), or why it gave none;
    `label` names it (default: "dr CLUSTER at ADDRESS (SITE site)")."""
    from strongroom.dr.describe import dr_state

    at = f" ({site} site)" if site else ""
    if st is None:
        print(f"{indent}{label or f'dr at {address}{at}'}: unreachable ({error})")
        return
    print(f"{indent}{label or f'dr {st.cluster} at {address}{at}'}: {dr_state(st)}")
    if st.metrics_url:
        print(f"{indent}  metrics {st.metrics_url}")
    if st.state == "shipping":
        print(f"{indent}  reading {st.primary_member or '(none)'} of {', '.join(st.primary)}; standby set "
              f"{', '.join(st.standby)}; {st.reconnects} reconnects, {st.restarts} restarts")


async def fetch_dr_statuses(addresses: list[str]) -> list[tuple[str, Any, str]]:
    """Every DR service's status, or why it gave none: (address, status or None, error)."""
    return await _fetch(addresses)


async def _fetch(addresses: list[str]) -> list[tuple[str, Any, str]]:
    """Every DR service's status, or why it gave none: (address, status or None, error)."""
    from strongroom.dr.transport import dr_status
    from strongroom.errors import StrongroomError

    async def one(address: str) -> tuple[str, Any, str]:
        try:
            return address, await dr_status(address), ""
        except StrongroomError as err:
            return address, None, err.message
    return list(await asyncio.gather(*(one(a) for a in addresses)))


def _refused(args: argparse.Namespace, address: str, what: str, err: Any) -> int:
    """A refused (or failed) DR call: printed, or as JSON; the exit status."""
    if args.json:
        print_json({"address": address, "error": err.reason, "message": err.message}, indent=2)
    else:
        print(f"{what} of {args.cluster} refused ({err.reason}): {err.message}")
    return ExitCode.FAILED


async def _status(args: argparse.Namespace) -> int:
    addresses = [a for raw in args.dr or [] for a in raw.split(",") if a]
    sites = {} if addresses else {address: site for _, site, address in state_dr_sites(args)}
    addresses = addresses or list(sites)
    if not addresses:
        raise CliError("no DR service to ask: give --dr HOST:PORT, or start a realm with a standby set "
                       "(`strongroom up --realm examples/dr.yaml`)")
    replies = await _fetch(addresses)
    if args.json:
        print_json([{"address": a, **({"site": sites[a]} if a in sites else {}),
                     **(proto_dict(s) if s is not None else {"error": e})} for a, s, e in replies], indent=2)
    else:
        for address, st, error in replies:
            print_dr(address, st, error, sites.get(address, ""))
    return ExitCode.OK if all(s is not None for _, s, _ in replies) else ExitCode.FAILED


async def _standby_dr(addresses: list[str]) -> str:
    """Of a cluster's DR services (its standby site's first), the one at the site that is a
    standby now (after a fail back, the old primary's); the first when none says so, which then
    answers the activation with its refusal."""
    if len(addresses) == 1:
        return addresses[0]
    for address, st, _ in await _fetch(addresses):
        if st is not None and st.role == "standby":
            return address
    return addresses[0]


async def _activate(args: argparse.Namespace) -> int:
    from strongroom.dr.transport import activate_at
    from strongroom.errors import StrongroomError

    addresses = [a for raw in args.dr or [] for a in raw.split(",") if a]
    if len(addresses) > 1:
        raise CliError.usage(f"activate one cluster at one DR service, not {', '.join(addresses)}")
    if not addresses:
        listed = state_drs(args, args.cluster)
        if not listed:
            raise CliError.usage(f"cluster {args.cluster!r} has no standby set with a DR service here: give --dr "
                                 f"HOST:PORT (the DR service at the cluster's standby site)")
        addresses = [await _standby_dr(listed)]
    try:
        answer = await activate_at(addresses[0], args.cluster, args.force, args.timeout)
    except StrongroomError as err:
        return _refused(args, addresses[0], "activation", err)
    if args.json:
        print_json({"address": addresses[0], **proto_dict(answer)}, indent=2)
    else:
        print(answer.summary)
        print(f"  generation {answer.generation}; old primary commit {answer.primary_commit_index}, held here "
              f"{answer.standby_last_index}: {'exactly' if answer.exact else 'at least'} "
              f"{answer.entries_lost_at_least} entries, {answer.messages_lost_at_least} stored messages and "
              f"{answer.acks_lost_at_least} acknowledgments lost")
    return ExitCode.OK


async def site_member(addresses: list[str], cluster: str) -> tuple[str, Any]:
    """The member of `cluster` among `addresses` to read and ask: its leader, once it has
    committed its whole log (`settled_leader`); (address, its admin status)."""
    from strongroom.dr.transport import settled_leader
    from strongroom.errors import PersistenceUnavailable

    try:
        return await settled_leader(addresses, cluster)
    except PersistenceUnavailable as err:
        raise CliError(err.message) from None


async def _site_member(args: argparse.Namespace) -> tuple[str, Any]:
    from strongroom.cli.common import resolve_endpoints

    return await site_member(resolve_endpoints(args), args.cluster)


async def write_manifest(cluster: str, address: str, status: Any, out: str | None, from_index: int = 0) -> Any:
    """Read the lost tail from the member at `address` (`status`: its admin status) from
    `from_index` (default: the last index both sites share + 1) to its commit index, and write
    it to `out` (default ./lost-tail-CLUSTER-FROM-TO.jsonl); returns (the `Manifest`, the path)."""
    from strongroom.dr.manifest import manifest_of
    from strongroom.dr.transport import read_committed
    from strongroom.errors import StrongroomError

    start = from_index or status.dr_since_index + 1
    if start <= 1 and not from_index:
        raise CliError.usage(f"{status.member} does not know where the two sites' histories part (it is "
                             f"{status.dr_role} of generation {status.generation}); give --from INDEX")
    try:
        entries = await read_committed(address, start, status.commit_index)
    except StrongroomError as err:
        raise CliError(f"cannot read the tail from {status.member}: {err.message}") from None
    manifest = manifest_of(cluster, start, entries)
    path = out or f"lost-tail-{cluster}-{start}-{manifest.to_index}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        manifest.write(f)
    return manifest, path


async def _write_manifest(args: argparse.Namespace, address: str, status: Any, out: str | None) -> Any:
    return await write_manifest(args.cluster, address, status, out, getattr(args, "from_index", None) or 0)


def _print_manifest(manifest: Any, path: str) -> None:
    print(f"lost tail of {manifest.cluster}: entries {manifest.from_index}-{manifest.to_index} "
          f"({manifest.entries}), {manifest.messages} messages and {manifest.acks} acks; written to {path}")
    for name, tail in sorted(manifest.stores.items()):
        ranges = "; ".join(f"{p}: " + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in rs)
                           for p, rs in tail.ranges().items())
        print(f"  store {name}: {tail.messages} messages, {tail.acks} acks" + (f" ({ranges})" if ranges else ""))


async def _manifest(args: argparse.Namespace) -> int:
    address, status = await _site_member(args)
    manifest, path = await _write_manifest(args, address, status, args.out)
    if args.json:
        print_json({"file": path, **manifest.header()}, indent=2)
    else:
        _print_manifest(manifest, path)
    return ExitCode.OK


async def _demote(args: argparse.Namespace) -> int:
    from strongroom.dr.transport import demote_at
    from strongroom.errors import StrongroomError

    address, status = await _site_member(args)
    written: dict[str, Any] = {}
    if not args.no_manifest and status.dr_role == "fenced" and status.dr_since_index:
        manifest, path = await _write_manifest(args, address, status, args.manifest)
        written = {"manifest": path, **manifest.header()}
        if not args.json:
            _print_manifest(manifest, path)
    try:
        answer = await demote_at(address, args.cluster)
    except StrongroomError as err:
        return _refused(args, address, "demotion", err)
    if args.json:
        print_json({"address": address, **proto_dict(answer), **written}, indent=2)
    else:
        print(f"cluster {args.cluster} at this site: the standby of the primary of generation {answer.generation} "
              f"({', '.join(answer.primary)}); its members cut their logs back to index {answer.since_index} "
              f"({status.member} held {answer.last_index}); the DR service at this site ships the rest (`strongroom "
              f"up` runs one; elsewhere: strongroom-dr --etcd THIS_SITE_ETCD --cluster {args.cluster})")
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `dr status`, `dr activate`, `dr manifest` and `dr demote`."""
    common = where_options(servers=False)
    group = add_command_group(sub, "dr", common, "disaster recovery: standby sets and their DR services",
                              "The DR services that ship each cluster's committed log to its standby set.")
    p = group.add_parser("status", parents=[common],
                         help="what each DR service does; how far each standby set is behind its primary")
    p.add_argument("--dr", action="append", metavar="HOST:PORT,...",
                   help="DR service addresses (default: those of the local state file)")
    p.add_argument("--json", action="store_true", help="each DR service's raw status as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_status(args)))
    p = group.add_parser("activate", parents=[common], help="make the standby site the primary (the primary is lost)")
    p.add_argument("--cluster", required=True, help="the cluster whose standby site takes over")
    p.add_argument("--dr", action="append", metavar="HOST:PORT",
                   help="the DR service at the standby site (default: the cluster's in the local state file)")
    p.add_argument("--force", action="store_true",
                   help="even though the primary answers and has a leader: a planned switchover (the primary is "
                        "fenced and drained first)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the activation (default 120)")
    p.add_argument("--json", action="store_true", help="the activation's report as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_activate(args)))
    members = where_options(servers=True)
    p = group.add_parser("manifest", parents=[members],
                         help="the old primary's lost tail, from its log (at the fenced site)")
    p.add_argument("--cluster", required=True, help="the cluster")
    p.add_argument("--from", dest="from_index", type=int, default=0, metavar="INDEX",
                   help="the first index of the tail (default: the last index both sites share + 1)")
    p.add_argument("--out", help="the JSON-lines file (default: ./lost-tail-CLUSTER-FROM-TO.jsonl)")
    p.add_argument("--json", action="store_true", help="the manifest's sums as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_manifest(args)))
    p = group.add_parser("demote", parents=[members],
                         help="make a fenced old primary site the standby of the newer primary")
    p.add_argument("--cluster", required=True, help="the cluster")
    p.add_argument("--manifest", help="where the lost tail is written first (default: ./lost-tail-CLUSTER-FROM-TO.jsonl)")
    p.add_argument("--no-manifest", action="store_true", help="do not write the lost tail first")
    p.add_argument("--json", action="store_true", help="the demotion's outcome as JSON")
    p.set_defaults(func=lambda args: asyncio.run(_demote(args)))
