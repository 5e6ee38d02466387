"""What every `strongroom` command shares: the one error type and exit-code policy, where the
cluster is (`-s/--server`), argument types and output helpers.

Exit status: 0 done; 1 the cluster refused or failed (a `StrongroomError`, a `CliError`, an
unreachable member, a `get` of a missing key, ...); 2 a usage error (argparse's own, or a
`CliError.usage` found after parsing).

Where the cluster is, the same for every command: `-s/--server` (also spelled `--endpoints`),
else the `STRONGROOM_ENDPOINTS` environment variable, else every member of the local cluster's
state file in `--data-dir` (env `STRONGROOM_DATA_DIR`, default `./.strongroom`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any

from strongroom.errors import StrongroomError

__all__ = [
    "CLIENT_NAME",
    "CliError",
    "ExitCode",
    "add_subcommand",
    "add_command_group",
    "add_where",
    "address_problem",
    "data_dir",
    "exit_code",
    "explicit_servers",
    "non_negative",
    "parse_match",
    "positive",
    "print_json",
    "proto_dict",
    "resolve_endpoints",
    "say_error",
    "seconds",
    "where_options",
]

CLIENT_NAME = "strongroom-cli"
ENDPOINTS_ENV = "STRONGROOM_ENDPOINTS"


class ExitCode(IntEnum):
    """The exit status of every command."""

    OK = 0
    """Done."""
    FAILED = 1
    """The cluster refused or failed (or could not be reached)."""
    USAGE = 2
    """The command line was wrong."""


class CliError(Exception):
    """A command that cannot finish: printed as `error: message`, exits with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def usage(cls, message: str) -> CliError:
        """A usage error found after parsing (exit status 2, like argparse's own)."""
        return cls(message, ExitCode.USAGE)


def say_error(message: str) -> None:
    """One line on stderr."""
    print(message, file=sys.stderr, flush=True)


def exit_code(exc: BaseException) -> ExitCode | None:
    """Report an exception a command raised as `error: ...` on stderr and return its exit
    status; None for an exception that is not a command's failure (a bug: let it through)."""
    if isinstance(exc, CliError):
        say_error(f"error: {exc}")
        return exc.code
    if isinstance(exc, StrongroomError):
        say_error(f"error: {exc.reason}: {exc.message}")
        return ExitCode.FAILED
    if isinstance(exc, OSError | TimeoutError):
        say_error(f"error: {exc}")
        return ExitCode.FAILED
    return None


# --- arguments -----------------------------------------------------------------------------------


def _integer(value: str, least: int, what: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = least - 1
    if n < least:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
    return n


def positive(value: str) -> int:
    """An argument type: an integer of at least 1 (argparse says "argument --count: 'abc' is not
    a positive integer")."""
    return _integer(value, 1, "a positive integer")


def non_negative(value: str) -> int:
    """An argument type: an integer of at least 0."""
    return _integer(value, 0, "an integer of 0 or more")


def seconds(value: str) -> float:
    """An argument type: a number of seconds, more than 0."""
    try:
        s = float(value)
    except ValueError:
        s = 0.0
    if not 0 < s < float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds above 0")
    return s


SERVER_HELP = (f"where the cluster is: member addresses HOST:PORT,... (env {ENDPOINTS_ENV}; "
               f"default: every member of the local state file)")
DATA_DIR_HELP = "local cluster data dir (env STRONGROOM_DATA_DIR, default ./.strongroom)"


def add_where(parser: argparse.ArgumentParser, servers: bool, default: object, aliases: Sequence[str] = (),
              server_help: str = SERVER_HELP) -> None:
    """`-s/--server` (also `--endpoints` and `aliases`) and `--data-dir` on a parser."""
    parser.add_argument("--data-dir", type=Path, default=default, metavar="DIR", help=DATA_DIR_HELP)
    parser.add_argument("--token", default=default, metavar="TOKEN",
                        help="a bearer token to call with (env STRONGROOM_TOKEN; `strongroom auth issue`)")
    if servers:
        parser.add_argument("-s", "--server", "--endpoints", *aliases, dest="endpoints", default=default,
                            metavar="HOST:PORT,...", help=server_help)
        parser.add_argument("--at", dest="at_cluster", default=default, metavar="CLUSTER",
                            help="only this cluster's members of the local state file (a realm of several "
                                 "clusters, e.g. publish at one cluster of a routed store)")


def where_options(servers: bool = True, aliases: Sequence[str] = (),
                  server_help: str = SERVER_HELP) -> argparse.ArgumentParser:
    """A parent parser with `-s/--server` and `--data-dir`, so they work after the subcommand
    too (SUPPRESS keeps a value given before it)."""
    parent = argparse.ArgumentParser(add_help=False)
    add_where(parent, servers, argparse.SUPPRESS, aliases, server_help)
    return parent


def add_command_group(subparsers: Any, name: str, common: argparse.ArgumentParser, help_text: str,
                      description: str) -> Any:
    """A command with subcommands (`strongroom NAME COMMAND ...`, e.g. `map`, `uow`): its parser
    takes `common` (`where_options()`, which each subcommand should take too, so the options
    work before or after COMMAND); returns the subparsers to add each COMMAND to, whose name
    lands in `args.NAME_command`."""
    top: argparse.ArgumentParser = subparsers.add_parser(name, parents=[common], help=help_text,
                                                         description=description)
    return top.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)


def add_subcommand(sub: Any, common: argparse.ArgumentParser, name: str, handler: Any,
                   help_text: str) -> argparse.ArgumentParser:
    """A COMMAND of a group (`add_command_group`'s subparsers) that takes `common` and `--json`,
    and runs `handler(args) -> exit code`."""
    p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=handler)
    return p


def data_dir(args: argparse.Namespace) -> Path:
    """`--data-dir`, else $STRONGROOM_DATA_DIR, else ./.strongroom (absolute)."""
    from strongroom.local.launcher import default_data_dir

    given = getattr(args, "data_dir", None)
    return Path(given).absolute() if given else default_data_dir()


def _split(raw: str) -> list[str]:
    return [e.strip() for e in raw.split(",") if e.strip()]


_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def address_problem(address: str) -> str | None:
    """Why `address` is not HOST:PORT (a name or IPv4 address, or an [IPv6] address, and a
    port 1-65535), or None when it is."""
    m = _ADDRESS.match(address)
    if m is None:
        return "is not HOST:PORT"
    if not 1 <= int(m.group(1)) <= 65535:
        return "has a port outside 1-65535"
    return None


def explicit_servers(args: argparse.Namespace, *env: str) -> tuple[list[str], str] | None:
    """The servers named by `-s/--server`, else by the first of the environment variables `env`
    (then $STRONGROOM_ENDPOINTS) that is set, with where they came from; None when nothing names
    any. A named but empty list, or an item that is not HOST:PORT, is a usage error."""
    given = getattr(args, "endpoints", None)
    sources = [("-s/--server", given)] + [(f"${name}", os.environ.get(name)) for name in (*env, ENDPOINTS_ENV)]
    for source, raw in sources:
        if raw:
            servers = _split(raw)
            if not servers:
                raise CliError.usage(f"{source} names no address")
            for server in servers:
                if (problem := address_problem(server)) is not None:
                    raise CliError.usage(f"{source}: {server!r} {problem}")
            return servers, source
    return None


def resolve_endpoints(args: argparse.Namespace) -> list[str]:
    """The member addresses to reach: `-s/--server`, else $STRONGROOM_ENDPOINTS, else every
    member of the local state file."""
    from strongroom.client import endpoints_from_environment
    from strongroom.errors import InvalidArgument

    named = explicit_servers(args)
    if named is not None:
        return named[0]
    # Neither -s nor the variable: the local cluster's state file, as the client finds it.
    try:
        return endpoints_from_environment(data_dir(args), getattr(args, "at_cluster", None))
    except InvalidArgument as err:
        raise CliError(f"{err.message}; or pass -s/--server HOST:PORT,...") from None


def parse_match(conditions: Sequence[str], option: str = "--match") -> dict[str, object]:
    """`--match` (or `--field`) options as {field: value | PRESENT | ABSENT}: FIELD=VALUE (a
    JSON value types it: 5 an integer, 5.0 a float, true a boolean, anything else a string),
    FIELD:present, FIELD:absent. A malformed one is a usage error naming it."""
    from strongroom.client import ABSENT, PRESENT

    spec: dict[str, object] = {}
    for cond in conditions:
        if "=" in cond:
            name, raw = cond.split("=", 1)
            try:
                value: object = json.loads(raw)
            except ValueError:
                value = raw
            if not isinstance(value, str | int | float | bool):
                value = raw
        elif cond.endswith((":present", ":absent")):
            name, test = cond.rsplit(":", 1)
            value = PRESENT if test == "present" else ABSENT
        else:
            raise CliError.usage(f"{option} {cond!r}: use FIELD=VALUE, FIELD:present or FIELD:absent")
        if not name:
            raise CliError.usage(f"{option} {cond!r}: the field name is empty")
        spec[name] = value
    return spec


def print_json(data: Any, indent: int | None = None, sort_keys: bool = False) -> None:
    """One JSON document on stdout."""
    print(json.dumps(data, indent=indent, sort_keys=sort_keys), flush=True)


def proto_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as a JSON object (field names as in the proto)."""
    from google.protobuf import json_format

    try:
        result = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True,
                                           unquote_int64_if_possible=True)
    except TypeError:  # protobuf < 7: 64-bit integers stay quoted
        result = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True)
    return dict(result)
