"""`strongroom up` and `strongroom down`: the local cluster (etcd, the realm service and every
member as processes on loopback, recorded in `<data dir>/state.json`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from strongroom.cli.common import data_dir, where_options

__all__ = ["add_parsers", "cmd_down", "cmd_up"]


def cmd_up(args: argparse.Namespace) -> int:
    """Start the local cluster (foreground, or `--detach`)."""
    from strongroom.local.up import up

    if args.event_log_dir is not None:
        # The members started here inherit the environment (`MemberConfig.event_log_dir`).
        os.environ["STRONGROOM_EVENT_LOG_DIR"] = str(args.event_log_dir.resolve())
    return up(args.realm, data_dir(args), args.detach, args.insecure)


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the local cluster of the data dir."""
    from strongroom.local.launcher import down

    return down(data_dir(args))


def add_parsers(sub: Any) -> None:
    """Add `up` and `down`."""
    local = where_options(servers=False)
    p = sub.add_parser("up", parents=[local], help="start a local cluster (etcd, realm service, members)")
    p.add_argument("--realm", type=Path, default=None, metavar="FILE",
                   help="realm YAML to run (default: the built-in realm, one cluster of 3 members)")
    p.add_argument("--detach", action="store_true",
                   help="return once every cluster has a committed leader; stop later with `down`")
    p.add_argument("--event-log-dir", type=Path, default=None, metavar="DIR",
                   help="turn the store event log on for every cluster, into DIR (each cluster in "
                        "DIR/cluster=<name>; default: as the realm says, else off; STRONGROOM_EVENT_LOG_DIR)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext everywhere, no certificates (for experiments only; default: mutual TLS "
                        "with an authority generated in DATA_DIR/tls)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", parents=[local], help="stop the local cluster of the data dir")
    p.set_defaults(func=cmd_down)
