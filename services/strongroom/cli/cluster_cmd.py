"""`strongroom cluster`: change the members of a running cluster.

    strongroom cluster add-member CLUSTER NAME [NAME ...] [--timeout S] [--json]
    strongroom cluster remove-member CLUSTER NAME [NAME ...] [--timeout S] [--json]
    strongroom cluster sync-members REALM_FILE [-s REALM_SERVICE] [--wait all|removed|none] [--timeout S] [--json]

On a cluster `strongroom up` started (the data dir's state file): the realm is changed (the
cluster's member list), the new members' processes are started, and the command returns once
the cluster's leader has made the realm's members its voters, one member at a time, each new
member caught up before it counts; removed members' processes are stopped then (their data
directories stay). The realm keeps an odd member count, so growing 3 to 5 is one command with
two names. Publishing goes on throughout. Design: README, "Changing the members of a cluster".

`sync-members` works on any deployment (the Helm chart's upgrade hooks run it): it puts the
member lists of REALM_FILE into the realm in force (nothing else of the file) and waits: `all`
until each cluster's leader has the file's members as its voters, `removed` until no removed
member counts any more (before their processes are stopped), `none` not at all. Starting and
stopping the processes is left to whoever runs them (the StatefulSet).

Exit status: 0 done; 1 refused (the realm's error, a name already a member or not one) or not
done within --timeout (the change goes on; `strongroom status` shows where it is); 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from strongroom.cli.common import CliError, add_command_group, data_dir, print_json, where_options

__all__ = ["add_parsers"]

T = TypeVar("T")


def _carried_out(args: argparse.Namespace, work: Coroutine[Any, Any, T], **context: str) -> T | None:
    """What `work` (a change) returns; its refusal or time-out reported as the command reports
    it: a JSON object (`context`, the error and its message) with --json, and None; else a
    CliError."""
    from strongroom.local.leader import NoLeader
    from strongroom.local.members import MembershipError

    try:
        return asyncio.run(work)
    except (MembershipError, NoLeader) as exc:
        if args.json:
            print_json({**context, "error": type(exc).__name__, "message": str(exc)}, indent=2)
            return None
        raise CliError(str(exc)) from None


def _change(args: argparse.Namespace, add: bool) -> int:
    from strongroom.local.members import change_members

    progress = None if args.json else print
    change = _carried_out(args, change_members(data_dir(args), args.cluster, args.names if add else [],
                                               [] if add else args.names, args.timeout, progress),
                          cluster=args.cluster)
    if change is None:
        return 1
    if args.json:
        print_json(change.to_dict(), indent=2)
    else:
        did = f"added {', '.join(change.added)}" if add else f"removed {', '.join(change.removed)}"
        print(f"cluster {change.cluster}: {did} in {change.seconds:.1f} s (realm version {change.realm_version}); "
              f"voters: {', '.join(change.voters)}")
    return 0


def _sync(args: argparse.Namespace) -> int:
    from strongroom.cli.realm_cmd import locate_realm_service
    from strongroom.local.members import Wait, sync_members

    try:
        text = Path(args.file).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    progress = None if args.json else print
    done = _carried_out(args, sync_members(locate_realm_service(args), text, Wait(args.wait), args.timeout,
                                           progress))
    if done is None:
        return 1
    version, synced = done
    if args.json:
        print_json({"realm_version": version, "wait": args.wait, "clusters": [c.to_dict() for c in synced]}, indent=2)
    else:
        for one in synced:
            c = one.change
            did = "unchanged" if c.before == c.after else f"{', '.join(c.before)} -> {', '.join(c.after)}"
            counted = f"; voters: {', '.join(one.voters)}" if one.voters else ""
            print(f"cluster {c.cluster}: members {did}{counted}")
        print(f"realm version {version} is current")
    return 0


def add_parsers(sub: Any) -> None:
    """Add `cluster add-member` and `cluster remove-member`."""
    common = where_options(servers=False)
    group = add_command_group(sub, "cluster", common, "change the members of a running local cluster",
                              "Add or remove members of a cluster `strongroom up` started, while it serves.")
    for name, add in (("add-member", True), ("remove-member", False)):
        p = group.add_parser(name, parents=[common],
                             help="add members (started, caught up, then counted)" if add else
                             "remove members (no longer counted, then stopped)")
        p.add_argument("cluster", metavar="CLUSTER", help="the cluster")
        p.add_argument("names", metavar="NAME", nargs="+", help="member names")
        p.add_argument("--timeout", type=float, default=300.0,
                       help="seconds to wait for the leader to carry the change out (default 300)")
        p.add_argument("--json", action="store_true", help="what was done as JSON")
        p.set_defaults(func=lambda args, add=add: _change(args, add))
    try:
        from strongroom.cli.realm_cmd import realm_service_options
    except ImportError:  # without the realm commands there is no realm service to find
        return
    p = group.add_parser("sync-members", parents=[realm_service_options()],
                         help="put a realm file's member lists into the realm in force and wait for the leaders",
                         description="Put the member lists of REALM_FILE into the realm in force (nothing else "
                                     "of it) and wait for each cluster's leader to carry them out; the processes "
                                     "are started and stopped by whoever runs them (on Kubernetes the "
                                     "StatefulSet: the chart's upgrade hooks run this).")
    p.add_argument("file", metavar="REALM_FILE", help="the realm file whose member lists go in")
    p.add_argument("--wait", choices=["all", "removed", "none"], default="all",
                   help="all: until the voters are the file's members (default); removed: until no removed "
                        "member counts; none: do not wait")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for the leaders (default 600)")
    p.add_argument("--json", action="store_true", help="what was done as JSON")
    p.set_defaults(func=_sync)
