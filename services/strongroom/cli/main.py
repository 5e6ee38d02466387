"""`strongroom`: run a local cluster, inspect it, publish, subscribe, maps, the realm, drills.

    strongroom up [--realm FILE] [--data-dir DIR] [--detach]
    strongroom down [--data-dir DIR]
    strongroom status [--json]
    strongroom cluster add-member|remove-member CLUSTER NAME [NAME ...] [--json]
    strongroom publish DEST [--count N] [--size B] [--body TEXT] [--no-confirm] [--json]
    strongroom subscribe DEST [--durable NAME] [--kind standard|shared|lastvalue] [--count N]
                         [--ack explicit|auto] [--timeout S] [--json]
    strongroom durable list [--store S] [--destination D] [--json]
    strongroom durable delete DESTINATION [NAME] [--endpoint | --publication] [--json]
    strongroom uow send DEST [--count N | --body TEXT ...] [--field NAME=VALUE ...] [--no-commit] [--json]
    strongroom uow receive DEST [--receiver NAME] [--wait S] [--commit | --backout | --cancel] [--json]
    strongroom uow status ID [--json]
    strongroom uow subscribe|unsubscribe TOPIC NAME [--json];  strongroom uow subscriptions [TOPIC] [--json]
    strongroom map put|create|update|get|delete|list|cas STORE MAP [KEY] [VALUE] [--json]
    strongroom store status|disconnect|connect|allow-new --cluster C [--reason TEXT] [--json]
    strongroom realm apply|get|validate|history ...
    strongroom auth issue USER [--ttl S] [--description TEXT] | revoke ID | list [--json]
    strongroom drill failover --platform local [--messages N] [--json]
    strongroom drill failover --platform kubernetes --namespace NS --release NAME [--cluster C]
                              [--force] [--messages N] [--json]
    strongroom drill dr --platform local [--messages N] [--ballast N] [--lose-tail] [--json]
    strongroom drill dr --platform kubernetes --release A --standby-release B [--namespace NS]
                        [--standby-namespace NS] [--context C] [--standby-context C] [--dry-run] [--json]
    strongroom bench [--runs N] [--messages N] [--quick] [--json]
    strongroom bench metrics [--sizes 1000000,10000000] [--json]
    strongroom metrics backlog|store [--events DIR] [--as-of T] [--out DIR] [--json]

Every command finds the cluster the same way (`strongroom.cli.common`): `-s/--server
HOST:PORT,...` (also `--endpoints`), else $STRONGROOM_ENDPOINTS, else the local launcher's state
file in `--data-dir`; the realm commands find the realm service from the same. Exit status:
0 done, 1 the cluster refused or failed (`error: REASON: message`), 2 a usage error; 141 when
the output pipe closed early (`| head`), quietly, as for a tool SIGPIPE ended.

Each command lives in a module of its own (`*_cmd.py`), which adds its parser; this module only
assembles them and runs one, with the one error handler.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from strongroom.cli import (
    bench_cmd,
    certs_cmd,
    cluster_cmd,
    dr_cmd,
    drill_cmd,
    durable_cmd,
    local_cmd,
    map_cmd,
    auth_cmd,
    metrics_cmd,
    publish_cmd,
    router_cmd,
    status_cmd,
    store_cmd,
    subscribe_cmd,
    trace_cmd,
    uow_cmd,
)
from strongroom.cli.common import add_where, data_dir, exit_code, say_error

__all__ = ["OUTPUT_CLOSED", "build_parser", "main", "run"]

INTERRUPTED = 130
OUTPUT_CLOSED = 128 + signal.SIGPIPE
"""Exit status when the output pipe closed early: what a shell reports for a tool SIGPIPE ended."""


class _CommandParser(argparse.ArgumentParser):
    """The parser of a subcommand: an argument it does not know is refused here, with this
    command's usage, instead of being handed up to the top-level parser (whose usage would
    not show the command's options)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="strongroom", description="Strongroom: a replicated, persistent message store.")
    add_where(parser, servers=True, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_CommandParser)
    for module in (local_cmd, status_cmd, publish_cmd, subscribe_cmd, durable_cmd, uow_cmd, drill_cmd, bench_cmd,
                   metrics_cmd, router_cmd, dr_cmd, store_cmd, trace_cmd, auth_cmd, certs_cmd, cluster_cmd):
        module.add_parsers(sub)
    try:
        from strongroom.cli.realm_cmd import add_parsers as add_realm_parsers
    except ImportError:  # the realm commands are optional; the rest of the CLI works without them
        pass
    else:
        add_realm_parsers(sub)
    map_cmd.add_parsers(sub)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command; returns the exit status (usage errors from parsing exit 2
    through argparse)."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if args.command not in ("up", "down"):  # `up` makes its own; `down` only signals pids
            from strongroom.client.endpoints import tls_from_environment
            from strongroom.security.tls import use_token

            tls_from_environment(data_dir(args))
            if getattr(args, "token", None):
                use_token(args.token)
        return int(func(args))
    except BrokenPipeError:
        return _output_closed()
    except KeyboardInterrupt:
        say_error("interrupted")
        return INTERRUPTED
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise
        return int(code)


def _output_closed() -> int:
    """The reader of our output went away (`strongroom realm get | head -2`): stop quietly, as a
    command-line tool killed by SIGPIPE does. What is still buffered for stdout goes nowhere,
    so Python's own flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return OUTPUT_CLOSED


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `strongroom`."""
    try:
        try:
            code = run(argv)
        finally:
            # Flushed here, where a closed pipe is still ours to handle (also after --help).
            sys.stdout.flush()
    except BrokenPipeError:
        code = _output_closed()
    sys.exit(code)


if __name__ == "__main__":
    main()
