"""`strongroom metrics backlog|store|all`: the Spark jobs of `spark_jobs/` over a store event log,
in Spark local mode (a JVM in this process; Java 17 or later on PATH or in JAVA_HOME).

    strongroom metrics backlog [--events DIR] [--as-of T] [--out DIR] [--json]
    strongroom metrics store   [--events DIR] [--as-of T] [--out DIR] [--json]
    strongroom metrics all     [--events DIR] [--as-of T] [--out DIR] [--json]

`all` runs both jobs on one Spark session (Spark starts once) and writes what each writes alone.

Exit status 0 done; 2 when the events directory is missing, holds no events, or a file in it is
of another schema version or cut short (the message names the file; nothing is written to
--out); 1 when Spark itself fails (no Java, out of memory).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from strongroom.cli.common import CliError, ExitCode

__all__ = ["add_parsers", "cmd_metrics"]

_JOBS = {"backlog": ("backlog",), "store": ("store_metrics",), "all": ("backlog", "store_metrics")}
"""command -> the jobs it runs: each `spark_jobs.<job>.<job>`, written to `--out/<job>/`."""


def cmd_metrics(args: argparse.Namespace) -> int:
    """Run the command's jobs and print their tables (or summary JSON)."""
    try:
        from spark_jobs.events import BadEventLog
        from spark_jobs.output import Progress, default_events_dir, execute
        from spark_jobs.report import show_results
    except ImportError as exc:
        raise CliError(f"the Spark jobs need pyspark and matplotlib: pip install 'strongroom[metrics]' ({exc})") from None
    jobs = {name: getattr(importlib.import_module(f"spark_jobs.{name}"), name) for name in _JOBS[args.job]}
    events = args.events or default_events_dir()
    name = next(iter(jobs)) if len(jobs) == 1 else args.job
    try:
        results = execute(jobs, events, args.as_of, args.out, Progress(name, quiet=args.quiet))
    except BadEventLog as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    except Exception as exc:
        if type(exc).__module__.startswith(("py4j", "pyspark")):
            raise CliError(f"Spark failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        raise
    print(show_results(results, args.json))
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `metrics backlog`, `metrics store` and `metrics all`."""
    from spark_jobs.options import add_options

    p = sub.add_parser("metrics", help="backlog and store metrics from the store event log (Spark, local mode)")
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True, parser_class=type(p))
    for job, text in (("backlog", ("per store and durable: pending messages and bytes, oldest age, unacked, "
                                   "waiting for redelivery; as of a time and per minute")),
                      ("store", ("per store and durable per minute: publish and ack rates, ack latency, sizes, "
                                 "expired, discarded, dead-lettered, redelivered")),
                      ("all", "both jobs, backlog and store, on one Spark session (Spark starts once)")):
        j = jobs.add_parser(job, help=text, description=text)
        add_options(j)
        j.add_argument("--quiet", action="store_true", help="no progress line on stderr")
        j.set_defaults(func=cmd_metrics)
