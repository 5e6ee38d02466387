"""`strongroom dr`: disaster recovery, from the standby site's DR services.

    strongroom dr status [--dr HOST:PORT,...] [--json]
    strongroom dr activate --cluster C [--dr HOST:PORT] [--force] [--json]

`dr status`: how far each cluster's standby set is behind its primary.

Asks each DR service (`DrService.Status`, the `strongroom-dr` at a standby site): the primary's
commit index as its committed-entry stream last said, the standby's last index, the entries and
seconds behind, the primary member being read, and how often the stream was opened again or
shipping started over. The DR services are the `--dr` addresses, else the ones the local state
file lists (`strongroom up` with a realm whose clusters have standby sets). Design: docs/dr.md.

`dr activate`: the primary site is lost; make the standby site the cluster's primary
(`DrService.Activate`, docs/dr.md) and print the tail loss: the old primary's last commit index
heard, the last index the new primary holds, and the entries between (a lower bound unless the
activation was a planned switchover). Refused while the primary answers and has a leader, unless
`--force` (then the primary is fenced and drained first: nothing is lost).

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

__all__ = ["add_parsers", "state_drs"]


def state_drs(args: argparse.Namespace, cluster: str | None = None) -> list[str]:
    """The DR service addresses of the local state file (of `cluster` only, when given)."""
    from strongroom.local.launcher import load_state

    state = load_state(data_dir(args)) or {}
    return [str(c["standby"]["dr"]["address"]) for name, c in state.get("clusters", {}).items()
            if c.get("standby", {}).get("dr", {}).get("address") and cluster in (None, name)]


async def _fetch(addresses: list[str], timeout: float = 3.0) -> list[tuple[str, Any, str]]:
    import grpc

    from strongroom.api.v1 import dr_pb2, dr_pb2_grpc

    async def one(address: str) -> tuple[str, Any, str]:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                status = await dr_pb2_grpc.DrServiceStub(channel).Status(dr_pb2.DrStatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                return address, None, f"{exc.code().name}: {exc.details()}"
            return address, status, ""
    return list(await asyncio.gather(*(one(a) for a in addresses)))


async def _status(args: argparse.Namespace) -> int:
    addresses = [a for raw in args.dr or [] for a in raw.split(",") if a] or state_drs(args)
    if not addresses:
        raise CliError("no DR service to ask: give --dr HOST:PORT, or start a realm with a standby set "
                       "(`strongroom up --realm examples/dr.yaml`)")
    replies = await _fetch(addresses)
    if args.json:
        print_json([{"address": a, **proto_dict(s)} if s is not None else {"address": a, "error": e}
                    for a, s, e in replies], indent=2)
    else:
        for address, st, error in replies:
            if st is None:
                print(f"dr {address}: unreachable ({error})")
                continue
            print(f"dr {st.cluster} at {address}: {st.state}; standby at {st.standby_last_index}, primary commit "
                  f"{st.primary_commit_index}: {st.entries_behind} entries, {st.seconds_behind:.1f} s behind")
            print(f"  reading {st.primary_member or '(none)'} of {', '.join(st.primary)}; standby set "
                  f"{', '.join(st.standby)}; {st.reconnects} reconnects, {st.restarts} restarts")
    return ExitCode.OK if all(s is not None for _, s, _ in replies) else ExitCode.FAILED


async def _activate(args: argparse.Namespace) -> int:
    import grpc

    from strongroom.api.v1 import dr_pb2, dr_pb2_grpc
    from strongroom.grpcerrors import from_rpc_error

    addresses = [a for raw in args.dr or [] for a in raw.split(",") if a] or state_drs(args, args.cluster)
    if not addresses:
        raise CliError.usage(f"cluster {args.cluster!r} has no standby set with a DR service here: give --dr HOST:PORT "
                       f"(the DR service at the cluster's standby site)")
    if len(addresses) > 1:
        raise CliError.usage(f"activate one cluster at one DR service, not {', '.join(addresses)}")
    async with grpc.aio.insecure_channel(addresses[0]) as channel:
        try:
            answer = await dr_pb2_grpc.DrServiceStub(channel).Activate(
                dr_pb2.ActivateRequest(cluster=args.cluster, force=args.force), timeout=args.timeout)
        except grpc.aio.AioRpcError as exc:
            err = from_rpc_error(exc)
            reason, message = (err.reason, err.message) if err else (exc.code().name, exc.details() or "")
            if args.json:
                print_json({"address": addresses[0], "error": reason, "message": message}, indent=2)
            else:
                print(f"activation of {args.cluster} refused ({reason}): {message}")
            return ExitCode.FAILED
    if args.json:
        print_json({"address": addresses[0], **proto_dict(answer)}, indent=2)
    else:
        print(answer.summary)
        print(f"  generation {answer.generation}; old primary commit {answer.primary_commit_index}, held here "
              f"{answer.standby_last_index}: {'exactly' if answer.exact else 'at least'} "
              f"{answer.entries_lost_at_least} entries lost")
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `dr status` and `dr activate`."""
    common = where_options(servers=False)
    group = add_command_group(sub, "dr", common, "disaster recovery: standby sets and their DR services",
                              "The DR services that ship each cluster's committed log to its standby set.")
    p = group.add_parser("status", parents=[common], help="how far each standby set is behind its primary")
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
