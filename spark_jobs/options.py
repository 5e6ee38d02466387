"""The options every job takes, the same under spark-submit and `strongroom metrics` (which
imports this module at start-up: nothing heavy here)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["add_options", "parse_time", "parser"]


def parse_time(text: str) -> datetime:
    """An as-of time: ISO 8601 (`2026-11-20T10:15`, `...Z`, `...+01:00`); without a zone, UTC."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time such as 2026-11-20T10:15:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def parser(job: str, description: str) -> argparse.ArgumentParser:
    """The options of a job run by spark-submit (the CLI adds the same to `strongroom metrics`)."""
    p = argparse.ArgumentParser(prog=f"spark-submit spark_jobs/{job}.py", description=description)
    add_options(p)
    return p


def add_options(p: argparse.ArgumentParser) -> None:
    """--events, --as-of, --out, --json."""
    p.add_argument("--events", type=Path, default=None, metavar="DIR",
                   help="the cluster's event-log directory (env STRONGROOM_EVENTS; default: events/ in the data dir)")
    p.add_argument("--as-of", type=_time_arg, default=None, metavar="T",
                   help="answer as of this time, ISO 8601, UTC unless a zone is given (default: the newest event)")
    p.add_argument("--out", type=Path, default=Path("strongroom-metrics"), metavar="DIR",
                   help="write tables, summary.json and charts to DIR/<job>/ (default ./strongroom-metrics)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")


def _time_arg(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


