"""`strongroom drill failover`: kill the leader under confirmed publishing and check that
nothing confirmed is lost, duplicated or reordered (locally, or on a Kubernetes release)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from strongroom.cli.common import CliError, ExitCode, positive, say_error, where_options

__all__ = ["PLATFORMS", "add_parsers", "cmd_drill_failover"]

PLATFORMS = ("local", "kubernetes")
REPORT_KEYS = ("confirmed", "received", "lost", "duplicated", "out_of_order", "leaderless_seconds",
               "publish_gap_seconds", "old_leader", "new_leader", "publish_errors", "problem", "logs")


def cmd_drill_failover(args: argparse.Namespace) -> int:
    """Run the drill and print its report; exit 1 if anything confirmed went missing."""
    from strongroom.drill import failover_drill_local

    def progress(line: str) -> None:
        say_error(f"drill: {line}")

    if args.platform == "kubernetes":
        from strongroom.drill_k8s import failover_drill_kubernetes

        if not args.release:
            raise CliError.usage("--platform kubernetes needs --release NAME (the Helm release)")
        report = asyncio.run(failover_drill_kubernetes(args.namespace, args.release, args.cluster,
                                                       args.messages, force=args.force, progress=progress))
    else:
        data_dir = getattr(args, "data_dir", None)
        report = asyncio.run(failover_drill_local(args.messages, Path(data_dir) if data_dir else None, progress))
    if args.json:
        print(json.dumps(report))
    else:
        print(f"failover drill ({args.platform}, {args.messages} messages): {'OK' if report['ok'] else 'FAILED'}")
        for key in REPORT_KEYS:
            if key in report:
                print(f"  {key.replace('_', ' ')}: {report[key]}")
    return ExitCode.OK if report["ok"] else ExitCode.FAILED


def add_parsers(sub: Any) -> None:
    """Add `drill failover`."""
    p = sub.add_parser("drill", help="failure drills")
    drills = p.add_subparsers(dest="drill", metavar="DRILL", required=True)
    d = drills.add_parser("failover", parents=[where_options(servers=False)],
                          help="kill -9 the leader under confirmed publishing; verify nothing is lost")
    d.add_argument("--platform", choices=PLATFORMS, required=True,
                   help="where to run it: local (a temporary cluster of processes) or kubernetes "
                        "(a Helm release, through kubectl)")
    d.add_argument("--namespace", default="default", metavar="NS",
                   help="kubernetes: the release's namespace (default: default)")
    d.add_argument("--release", default=None, metavar="NAME", help="kubernetes: the Helm release name")
    d.add_argument("--cluster", default="default", metavar="C",
                   help="kubernetes: the persistence cluster to drill (default: default)")
    d.add_argument("--force", action="store_true",
                   help="kubernetes: delete the leader's pod with no grace period (like kill -9)")
    d.add_argument("--messages", type=positive, default=1000, metavar="N",
                   help="messages to publish (default 1000); the leader dies at N/2 confirmed")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=cmd_drill_failover)
