"""`strongroom drill failover`: kill the leader under confirmed publishing and check that
nothing confirmed is lost, duplicated or reordered (locally, or on a Kubernetes release).

`strongroom drill dr`: lose the whole primary site under confirmed publishing, activate the
standby site, account for every confirmed message (lost ones must be in the old primary's lost
tail), then demote the old site and fail back (`strongroom.drill_dr`, `strongroom.drill_dr_k8s`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from strongroom.cli.common import (
    CliError,
    ExitCode,
    non_negative,
    positive,
    say_error,
    where_options,
)

__all__ = ["PLATFORMS", "add_parsers", "cmd_drill_dr", "cmd_drill_failover", "dr_report_lines"]

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


def dr_report_lines(report: dict[str, Any]) -> list[str]:
    """The DR drill's report, for people."""
    act, tail, fb = report.get("activation") or {}, report.get("tail") or {}, report.get("failback") or {}
    lines = [(f"dr drill ({report.get('platform')}, {report.get('messages')} messages): "
              f"{'OK' if report.get('ok') else 'FAILED'}"),
             (f"  confirmed {report.get('confirmed')}, received {report.get('received')}, lost {report.get('lost')}, "
              f"duplicated {report.get('duplicated')}, unconfirmed received {report.get('unconfirmed_received', 0)}"),
             f"  disaster to the first publish accepted at the new primary: {report.get('seconds_to_first_publish')} s"]
    if act:
        lines.append(f"  activation: generation {act.get('generation')}, {act.get('seconds')} s; reported lost at "
                     f"least {act.get('entries_lost_at_least')} entries (old primary commit heard "
                     f"{act.get('primary_commit_index')}, held {act.get('standby_last_index')})")
    if tail:
        lines.append(f"  old primary's tail: entries {tail.get('from_index')}-{tail.get('to_index')} "
                     f"({tail.get('entries')}), {tail.get('messages')} messages, {tail.get('tail_confirmed')} of "
                     f"them confirmed; lost outside it {tail.get('lost_outside_tail')}; lost == tail's confirmed: "
                     f"{tail.get('lost_equals_tail')}")
    if "fenced" in report:
        lines.append(f"  old site fenced: {report['fenced']} (after {report.get('fenced_seconds')} s)")
    if fb:
        lines.append(f"  fail back: {'converged' if fb.get('converged') else 'NOT converged'} in {fb.get('seconds')} s;"
                     f" {fb.get('entries')} entries, {fb.get('bytes_shipped')} bytes and {fb.get('snapshots_shipped')} "
                     f"snapshots shipped; the state: {fb.get('state_messages')} messages, {fb.get('state_bytes')} "
                     f"bytes ({fb.get('member_disk_bytes')} bytes on a member's disk)")
    lines += [f"  failed: {f}" for f in report.get("failures", [])]
    if report.get("logs"):
        lines.append(f"  logs: {report['logs']}")
    return lines


def cmd_drill_dr(args: argparse.Namespace) -> int:
    """Run the DR drill and print its report; exit 1 if an invariant failed."""
    def progress(line: str) -> None:
        say_error(f"drill: {line}")

    if args.platform == "kubernetes":
        from strongroom.drill_dr_k8s import DrSites, dr_drill_kubernetes

        if not args.release or not args.standby_release:
            raise CliError.usage("--platform kubernetes needs --release NAME and --standby-release NAME (the "
                                 "pair's Helm releases)")
        sites = DrSites.of(args.namespace, args.release, args.standby_namespace or args.namespace,
                           args.standby_release, args.cluster, args.context, args.standby_context)
        if args.dry_run:
            for line in sites.plan(args.messages, args.failback_messages):
                print(line)
            return ExitCode.OK
        report = asyncio.run(dr_drill_kubernetes(sites, args.messages, args.failback_messages, progress=progress))
    else:
        from strongroom.drill_dr import dr_drill_local

        data_dir = getattr(args, "data_dir", None)
        report = asyncio.run(dr_drill_local(args.messages, args.ballast, args.lose_tail, args.failback_messages,
                                            Path(data_dir) if data_dir else None, progress))
    if args.json:
        print(json.dumps(report))
    else:
        for line in dr_report_lines(report):
            print(line)
    return ExitCode.OK if report["ok"] else ExitCode.FAILED


def add_parsers(sub: Any) -> None:
    """Add `drill failover` and `drill dr`."""
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
    d = drills.add_parser("dr", parents=[where_options(servers=False)],
                          help="lose the primary site under confirmed publishing, activate the standby, fail back")
    d.add_argument("--platform", choices=PLATFORMS, required=True,
                   help="local (two temporary sites of processes) or kubernetes (the pair's two Helm releases)")
    d.add_argument("--messages", type=positive, default=1000, metavar="N",
                   help="messages to publish with confirmation (default 1000); the primary site dies at N/2 "
                        "confirmed, the last quarter at least is published at the new primary")
    d.add_argument("--ballast", type=non_negative, default=1000, metavar="N",
                   help="local: messages of 1 KiB stored before the drill and never consumed: the state fail back "
                        "must not copy (default 1000)")
    d.add_argument("--lose-tail", action="store_true",
                   help="local: SIGKILL the DR service before publishing (started again after the disaster), so "
                        "every message confirmed at the old primary is in its lost tail")
    d.add_argument("--failback-messages", type=non_negative, default=50, metavar="N",
                   help="messages published at the new primary after the demotion (default 50)")
    d.add_argument("--namespace", default="default", metavar="NS", help="kubernetes: the primary release's namespace")
    d.add_argument("--release", default=None, metavar="NAME", help="kubernetes: the primary release (site A)")
    d.add_argument("--context", default=None, metavar="CTX", help="kubernetes: site A's kubectl context")
    d.add_argument("--standby-namespace", default=None, metavar="NS",
                   help="kubernetes: the standby release's namespace (default: --namespace)")
    d.add_argument("--standby-release", default=None, metavar="NAME",
                   help="kubernetes: the standby release (site B, dr.role standby)")
    d.add_argument("--standby-context", default=None, metavar="CTX", help="kubernetes: site B's kubectl context")
    d.add_argument("--cluster", default="default", metavar="C", help="kubernetes: the cluster (default: default)")
    d.add_argument("--dry-run", action="store_true",
                   help="kubernetes: print the kubectl commands the drill runs, in order, and run none")
    d.add_argument("--json", action="store_true", help="print the report as one JSON object")
    d.set_defaults(func=cmd_drill_dr)
