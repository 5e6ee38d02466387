"""`strongroom store unload`, `store load` and `store compare-reports`: migration of a member's
persistent store to a new store (docs/store-operations.md, "Migration: unload and load").

    strongroom store unload --cluster C --member M --store-dir DIR --listen ADDR --partner ADDR
                            [--advertise ADDR] [--report [FILE]] [--wait SECONDS] [--json]
    strongroom store load   --cluster C --member M --store-dir NEWDIR --driver sqlite|rocksdb
                            --listen ADDR --partner ADDR [--advertise ADDR] [--report [FILE]]
                            [--wait SECONDS] [--json]
    strongroom store compare-reports FIRST SECOND [--json]

`unload` reads the stopped member's store in DIR without changing it (its driver is the one
that wrote it) and sends every raw record to the load instance at its partner address; `load`
writes them unchanged into a new, empty store of the driver given. Start them in either order:
each waits for the other (`--wait`: at most that long; default: as long as it takes), and
serves only administration requests meanwhile. After a handshake (one instance of each mode,
same version and log format, each at the address the other was given, the same cluster and
member, not the same store) the records go, then both compare their counts (the load's read
back from its new store) and stop. `--report` writes the PSTORE report of every record unloaded
or loaded (file: the option's value, else $STRONGROOM_PSTORE_REPORT, else
PSTORE.REPORT.<cluster>.<member>.UNLOAD or .LOAD here); `compare-reports` compares two of them
record by record.

Exit status: 0 the counts match (reports equal); 1 they differ; 2 a problem stopped the
migration (bad usage, a handshake that failed, a store in use, a load directory not empty).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from strongroom.cli.common import ExitCode, print_json

__all__ = ["add_parsers"]


def _run_instance(args: argparse.Namespace) -> int:
    from strongroom.persistence import migration as mig
    from strongroom.persistence.drivers import DRIVERS, written_by
    from strongroom.persistence.migration_server import run_load, run_unload
    from strongroom.persistence.pstore_report import ENV, ReportWriter, report_path
    from strongroom.persistence.shared_standby import software_version

    mode = mig.MigrationMode.UNLOAD if args.store_command == "unload" else mig.MigrationMode.LOAD
    store = Path(args.store_dir).resolve()
    out = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(f"{mode.value}: {line}", file=out, flush=True)

    if mode is mig.MigrationMode.UNLOAD:
        driver = written_by(store, store / mig.LIVE) if store.is_dir() else None
        if driver is None:
            print(f"strongroom store unload: {store} holds no persistent store: give the stopped member's data "
                  "directory (--store-dir)", file=sys.stderr)
            return ExitCode.USAGE
    else:
        driver = args.driver
        if driver not in DRIVERS:
            print(f"strongroom store load: unknown --driver {driver!r} (known: {', '.join(DRIVERS)})", file=sys.stderr)
            return ExitCode.USAGE
        store.mkdir(parents=True, exist_ok=True)
    own = args.advertise or args.listen
    report = None
    if args.report is not None or os.environ.get(ENV):
        suffix = "UNLOAD" if mode is mig.MigrationMode.UNLOAD else "LOAD"
        report = ReportWriter(report_path(args.report, suffix, args.cluster, args.member).resolve(), software_version(),
                              args.cluster, args.member)
        events = args.event_log_dir or os.environ.get("STRONGROOM_EVENT_LOG_DIR")
        if events:
            from strongroom.events.report_rows import ReportRows

            report.rows = ReportRows(Path(events), args.cluster, args.member)
    me = mig.side(mode, own, args.partner, driver, store, args.cluster, args.member)
    run = run_unload if mode is mig.MigrationMode.UNLOAD else run_load
    try:
        outcome = asyncio.run(run(me, args.listen, store, report, say, args.wait))
    finally:
        if report is not None:
            report.close()
    if args.json:
        print_json({"run_mode": mode.value, "cluster": args.cluster, "member": args.member, "store_dir": str(store),
                    "driver": driver, "partner": args.partner, "status": outcome.status,
                    "match": outcome.status == 0, "records": outcome.records, "bytes": outcome.bytes,
                    "elements": outcome.elements, "seconds": round(outcome.seconds, 3), "report": outcome.report,
                    "problems" if outcome.status == 2 else "differences": outcome.lines,
                    "families": outcome.counts}, indent=2)
        return outcome.status
    if outcome.status == 0:
        say(f"done: {outcome.records} records, {outcome.bytes} bytes, {outcome.elements} messages in "
            f"{outcome.seconds:.1f} s; the counts of both sides match")
    elif outcome.status == 1:
        say("the counts of the two sides differ:")
    else:
        say("stopped:")
    for line in outcome.lines:
        print(f"  {line}", file=out)
    if outcome.report:
        say(f"report: {outcome.report}")
    return outcome.status


def _compare(args: argparse.Namespace) -> int:
    from strongroom.persistence.pstore_report import compare_reports, read_report

    try:
        first, second = read_report(Path(args.first)), read_report(Path(args.second))
    except (OSError, ValueError) as err:
        print(f"strongroom store compare-reports: {err}", file=sys.stderr)
        return ExitCode.USAGE
    cmp = compare_reports(first, second)
    if args.json:
        print_json({"equal": cmp.equal, "records": {"first": cmp.records[0], "second": cmp.records[1]},
                    "only_first": [line.identifier for line in cmp.only_first],
                    "only_second": [line.identifier for line in cmp.only_second],
                    "different": [{"identifier": a.identifier, "first": list(a.record[1:]), "second": list(b.record[1:])}
                                  for a, b in cmp.different]}, indent=2)
        return ExitCode.OK if cmp.equal else ExitCode.FAILED
    print(f"{args.first}: {cmp.records[0]} records; {args.second}: {cmp.records[1]} records")
    for line in cmp.only_first[:20]:
        print(f"  only in {args.first}: {line.identifier} ({line.record_type}, {line.length} bytes)")
    for line in cmp.only_second[:20]:
        print(f"  only in {args.second}: {line.identifier} ({line.record_type}, {line.length} bytes)")
    for a, b in cmp.different[:20]:
        print(f"  {a.identifier}: {a.elements} elements, {a.length} bytes, {a.record_type} against "
              f"{b.elements}, {b.length}, {b.record_type}")
    shown = min(20, len(cmp.only_first)) + min(20, len(cmp.only_second)) + min(20, len(cmp.different))
    total = len(cmp.only_first) + len(cmp.only_second) + len(cmp.different)
    if total > shown:
        print(f"  ... and {total - shown} more differences")
    print("the reports are equal record by record" if cmp.equal else f"{total} records differ")
    return ExitCode.OK if cmp.equal else ExitCode.FAILED


def add_parsers(group: Any) -> None:
    """Add `store unload`, `store load` and `store compare-reports` to the `store` group."""
    helps = {"unload": "read a stopped member's store and send its raw records to a load instance",
             "load": "write the raw records of an unload instance into a new, empty store"}
    for name, text in helps.items():
        p = group.add_parser(name, help=text, description=text + " (docs/store-operations.md, \"Migration\")")
        p.add_argument("--cluster", required=True, help="the cluster whose member's store it is")
        p.add_argument("--member", required=True, help="the member whose store it is")
        p.add_argument("--store-dir", required=True,
                       help="the member's data directory" if name == "unload"
                       else "the new store's data directory (new or empty)")
        if name == "load":
            p.add_argument("--driver", required=True, help="the new store's driver: rocksdb or sqlite")
        p.add_argument("--listen", required=True, help="host:port this instance listens at")
        p.add_argument("--advertise", default="", help="host:port the partner was given for this instance, if not --listen")
        p.add_argument("--partner", required=True, help="host:port of the other instance")
        p.add_argument("--report", nargs="?", const="", default=None, metavar="FILE",
                       help="write the PSTORE report (FILE, else $STRONGROOM_PSTORE_REPORT, else "
                            "PSTORE.REPORT.<cluster>.<member>.UNLOAD/.LOAD here)")
        p.add_argument("--event-log-dir", default="", metavar="DIR",
                       help="also write the report's lines as rows of the cluster's store event log under DIR "
                            "(default: $STRONGROOM_EVENT_LOG_DIR; needs a report)")
        p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                       help="stop (status 2) when the partner has not come within this long (default: wait on)")
        p.add_argument("--json", action="store_true", help="the outcome as JSON (progress lines go to stderr)")
        p.set_defaults(func=_run_instance)
    p = group.add_parser("compare-reports", help="compare two PSTORE reports record by record")
    p.add_argument("first", help="a report (e.g. the unload's)")
    p.add_argument("second", help="another report (e.g. the load's)")
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p.set_defaults(func=_compare)
