"""`strongroom metrics backlog|store`: the Spark jobs of `spark_jobs/` over a store event log, in
Spark local mode (a JVM in this process; Java 17 or later on PATH or in JAVA_HOME).

    strongroom metrics backlog [--events DIR] [--as-of T] [--out DIR] [--json]
    strongroom metrics store   [--events DIR] [--as-of T] [--out DIR] [--json]

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

_JOB_NAMES = {"backlog": ("spark_jobs.backlog", "backlog", "backlog"),
              "store": ("spark_jobs.store_metrics", "store_metrics", "store_metrics")}
"""command -> (module, function, output directory name)."""


def cmd_metrics(args: argparse.Namespace) -> int:
    """Run one job and print its table (or summary JSON)."""
    try:
        from spark_jobs.events import BadEventLog
        from spark_jobs.output import Progress, default_events_dir, execute
        from spark_jobs.report import show_result
    except ImportError as exc:
        raise CliError(f"the Spark jobs need pyspark and matplotlib: pip install 'strongroom[metrics]' ({exc})") from None
    module, function, name = _JOB_NAMES[args.job]
    job = getattr(importlib.import_module(module), function)
    events = args.events or default_events_dir()
    try:
        result = execute(job, name, events, args.as_of, args.out, Progress(name, quiet=args.quiet))
    except BadEventLog as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    except Exception as exc:
        if type(exc).__module__.startswith(("py4j", "pyspark")):
            raise CliError(f"Spark failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        raise
    print(show_result(result, args.json))
    return ExitCode.OK


def add_parsers(sub: Any) -> None:
    """Add `metrics backlog` and `metrics store`."""
    from spark_jobs.options import add_options

    p = sub.add_parser("metrics", help="backlog and store metrics from the store event log (Spark, local mode)")
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True, parser_class=type(p))
    for job, text in (("backlog", ("per store and durable: pending messages and bytes, oldest age, unacked, "
                                   "waiting for redelivery; as of a time and per minute")),
                      ("store", ("per store and durable per minute: publish and ack rates, ack latency, sizes, "
                                 "expired, discarded, dead-lettered, redelivered"))):
        j = jobs.add_parser(job, help=text, description=text)
        add_options(j)
        j.add_argument("--quiet", action="store_true", help="no progress line on stderr")
        j.set_defaults(func=cmd_metrics)
