"""all: the backlog and store_metrics jobs in one Spark application, one after the other over the
same event files: the JVM starts once, and each job's outputs are what it writes on its own.

    spark-submit spark_jobs/all.py --events DIR [--as-of T] [--out DIR] [--json]

Outputs go to `<out>/backlog/` and `<out>/store_metrics/`, both written once both jobs have their
answers (bad input: exit status 2 and neither is written). `--json` prints one object with each
job's summary under its name.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: the repository root is the package's home
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.backlog import backlog
from spark_jobs.output import run_job
from spark_jobs.store_metrics import store_metrics

__all__ = ["JOBS", "main"]

JOBS = {"backlog": backlog, "store_metrics": store_metrics}
"""The jobs in the order they run, by output directory name."""


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point (the same options as `strongroom metrics all`)."""
    return run_job("all", JOBS, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
