"""`strongroom bench`: the benchmark against NATS JetStream, side by side; `strongroom bench
metrics`: the Spark jobs beside DuckDB over the same event logs; `strongroom bench backlog`: a
member's restart and a fresh member's catch-up on a large backlog (bench/ of a source checkout)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from strongroom.cli.common import CliError, positive

__all__ = ["add_parsers", "cmd_bench"]


def _bench_module(name: str) -> Any:
    """A module of bench/ at the root of the source tree, beside services/."""
    root = Path(__file__).resolve().parents[3]
    if (root / "bench" / "runner.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        return importlib.import_module(f"bench.{name}")
    except ImportError as exc:
        raise CliError(f"the benchmark suite (bench/) is not importable: {exc}; run from a source checkout "
                       f"with `pip install -e '.[dev,bench]'`") from None


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark suite and print or store its results."""
    if getattr(args, "what", None) in ("metrics", "backlog"):
        return int(args.func(args))
    try:
        return int(_bench_module("runner").run_cli(args.runs, args.messages, args.quick, args.json, only=args.only))
    except ValueError as exc:
        raise CliError.usage(str(exc)) from None


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive counts")
    return sizes


def _modes(text: str) -> list[bool]:
    try:
        return list(_bench_module("backlog").modes_of(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_bench_metrics(args: argparse.Namespace) -> int:
    """The Spark jobs and DuckDB over synthetic event logs of each size."""
    return int(_bench_module("metrics").run_cli(args.sizes, args.json))


def cmd_bench_backlog(args: argparse.Namespace) -> int:
    """Restart and catch-up on a backlog of each size and setting (bench/backlog.py)."""
    return int(_bench_module("backlog").run_cli(args.sizes, args.modes, args.json,
                                                baseline_seconds=args.baseline_seconds))


def add_parsers(sub: Any) -> None:
    """Add `bench`."""
    p = sub.add_parser("bench", help="benchmark against NATS JetStream, side by side (bench/)")
    p.add_argument("--runs", type=positive, default=None, metavar="N",
                   help="rounds, each running every configuration once (default 5; 1 with --quick)")
    p.add_argument("--messages", type=positive, default=None, metavar="N",
                   help="pipelined messages per run (default 40000); confirm gets N/20, fanout N/4")
    p.add_argument("--quick", action="store_true", help="one round with small counts (smoke test)")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")
    p.add_argument("--only", default=None, metavar="CONFIGS",
                   help="run only these configurations, comma-separated (e.g. disk-sync,disk-sync-events: "
                        "the store event log off and on, side by side)")
    p.set_defaults(func=cmd_bench)
    what = p.add_subparsers(dest="what", metavar="WHAT", required=False, parser_class=type(p))
    m = what.add_parser("metrics", help="the Spark jobs beside DuckDB over event logs of 1 M and 10 M events")
    m.add_argument("--sizes", type=_sizes, default=[1_000_000, 10_000_000], metavar="N,N",
                   help="event counts of the logs (default 1000000,10000000)")
    m.add_argument("--json", action="store_true", help="print the result document as JSON")
    m.set_defaults(func=cmd_bench_metrics)
    b = what.add_parser("backlog", help="a member's restart and a fresh member's catch-up on a large backlog, "
                                        "with indexes on disk off and on")
    b.add_argument("--sizes", type=_sizes, default=[100_000, 2_200_000], metavar="N,N",
                   help="pending 1 KiB messages of each point (default 100000,2200000: over 2 GiB of state)")
    b.add_argument("--modes", type=_modes, default=[False, True], metavar="false,true",
                   help="the indexes_on_disk settings to run (default both)")
    b.add_argument("--baseline-seconds", type=float, default=15.0, metavar="S",
                   help="confirmed publishing before the fresh member starts (default 15)")
    b.add_argument("--json", action="store_true", help="print the result document as JSON")
    b.set_defaults(func=cmd_bench_backlog)
