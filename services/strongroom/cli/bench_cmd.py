"""`strongroom bench`: the benchmark against NATS JetStream, side by side (bench/ of a source
checkout)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from strongroom.cli.common import CliError, positive

__all__ = ["add_parsers", "cmd_bench"]


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark suite and print or store its results."""
    # The benchmark suite lives in bench/ at the root of the source tree, beside services/.
    root = Path(__file__).resolve().parents[3]
    if (root / "bench" / "runner.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        from bench.runner import run_cli
    except ImportError as exc:
        raise CliError(f"the benchmark suite (bench/) is not importable: {exc}; run from a source checkout "
                       f"with `pip install -e '.[bench]'`") from None
    try:
        return int(run_cli(args.runs, args.messages, args.quick, args.json, only=args.only))
    except ValueError as exc:
        raise CliError.usage(str(exc)) from None


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
