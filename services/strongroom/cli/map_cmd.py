"""`strongroom map …`: the replicated key-value maps of a store.

    strongroom map put STORE MAP KEY VALUE [--base64]
    strongroom map create STORE MAP KEY VALUE [--base64]              # exit 1 if the key exists
    strongroom map update STORE MAP KEY VALUE --expected-version N    # exit 1 if it is not at N
    strongroom map get STORE MAP KEY                                  # exit 1 if it does not exist
    strongroom map delete STORE MAP KEY
    strongroom map list STORE MAP [--prefix P] [--limit N]
    strongroom map cas STORE MAP KEY [VALUE] --expected-version N [--delete] [--base64]

Every command takes `--json` and finds the cluster like the other client commands
(`-s/--server`, env STRONGROOM_ENDPOINTS, else the local state file). Values are given as text
(UTF-8) or, with `--base64`, base64; they are printed as text when they are UTF-8, else as
base64 (the JSON output says which in `value_encoding`).

Exit status as every command's: 0 done; 1 the cluster refused (a `get` of a key that does not
exist, a `create` of one that does, an `update` or `cas` that found another version: the
current entry is printed); 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from strongroom.cli.common import (
    CLIENT_NAME,
    CliError,
    ExitCode,
    add_command_group,
    non_negative,
    print_json,
    resolve_endpoints,
    where_options,
)
from strongroom.client.messages import text_of

if TYPE_CHECKING:
    from strongroom.client import Map, MapEntry

__all__ = ["add_parsers", "entry_json"]


def entry_json(entry: MapEntry) -> dict[str, Any]:
    """One entry as a JSON object: key, value, value_encoding, version."""
    text, encoding = text_of(entry.value)
    return {"key": entry.key, "value": text, "value_encoding": encoding, "version": entry.version}


def _value(args: argparse.Namespace) -> bytes:
    if args.base64:
        try:
            return base64.b64decode(args.value, validate=True)
        except (binascii.Error, ValueError):
            raise CliError.usage(f"VALUE is not valid base64: {args.value!r}") from None
    return str(args.value).encode("utf-8")


def _head(args: argparse.Namespace) -> dict[str, Any]:
    return {"store": args.store, "map": args.map, "key": args.key}


def _shown(entry: MapEntry) -> str:
    text, encoding = text_of(entry.value)
    return f"{'(base64) ' if encoding == 'base64' else ''}{text}"


# --- handlers ------------------------------------------------------------------------------------


async def _write(m: Map, args: argparse.Namespace) -> int:
    value = _value(args)
    if args.map_command == "create":
        version = await m.create(args.key, value)
    elif args.map_command == "update":
        version = await m.update(args.key, value, expected_version=args.expected_version)
    else:
        version = await m.put(args.key, value)
    if args.json:
        print_json({**_head(args), "version": version})
    else:
        print(f"{args.map_command} {args.key}: version {version}")
    return ExitCode.OK


async def _get(m: Map, args: argparse.Namespace) -> int:
    from strongroom.errors import KeyNotFound

    try:
        entry = await m.get(args.key)
    except KeyNotFound:
        if not args.json:
            raise
        print_json({**_head(args), "found": False})
        return ExitCode.FAILED
    if args.json:
        print_json({**_head(args), "found": True, **entry_json(entry)})
    else:
        text, encoding = text_of(entry.value)
        # The value alone on stdout, so `$(strongroom map get …)` is the value.
        print(f"# {args.key}: version {entry.version}" + (", base64" if encoding == "base64" else ""),
              file=sys.stderr)
        print(text)
    return ExitCode.OK


async def _delete(m: Map, args: argparse.Namespace) -> int:
    deleted = await m.delete(args.key)
    if args.json:
        print_json({**_head(args), "deleted": deleted})
    else:
        print(f"deleted {args.key}" if deleted else f"{args.key} did not exist")
    return ExitCode.OK


async def _list(m: Map, args: argparse.Namespace) -> int:
    count = 0
    async for entry in m.items(prefix=args.prefix, page_size=min(args.limit or 0, 1000)):
        if args.json:
            print_json(entry_json(entry))
        else:
            print(f"{entry.key}\t{entry.version}\t{_shown(entry)}")
        count += 1
        if args.limit and count >= args.limit:
            break
    return ExitCode.OK


async def _cas(m: Map, args: argparse.Namespace) -> int:
    if args.delete == (args.value is not None):
        raise CliError.usage("cas needs either VALUE or --delete, not both")
    value = None if args.delete else _value(args)
    swapped, current = await m.compare_and_set(args.key, args.expected_version, value, delete=args.delete)
    if args.json:
        out: dict[str, Any] = {**_head(args), "swapped": swapped, "found": current is not None}
        if current is not None:
            out.update(entry_json(current))
        print_json(out)
    elif swapped:
        print(f"deleted {args.key}" if current is None else f"swapped {args.key}: version {current.version}")
    elif current is None:
        print(f"not swapped: {args.key} does not exist", file=sys.stderr)
    else:
        print(f"not swapped: {args.key} is at version {current.version}: {_shown(current)}", file=sys.stderr)
    return ExitCode.OK if swapped else ExitCode.FAILED


Handler = Callable[["Map", argparse.Namespace], Awaitable[int]]


def _runner(handler: Handler) -> Callable[[argparse.Namespace], int]:
    """A `func(args) -> exit code` that opens a client, runs the handler on the map and closes
    the client; failures go to the one error handler of `strongroom.cli.main.run`."""

    async def go(args: argparse.Namespace) -> int:
        from strongroom.client import Client

        client = Client(resolve_endpoints(args), client_name=CLIENT_NAME)
        try:
            return await handler(client.map(args.store, args.map), args)
        finally:
            await client.close()

    def run(args: argparse.Namespace) -> int:
        return asyncio.run(go(args))

    run.__name__ = handler.__name__
    return run


# --- parser --------------------------------------------------------------------------------------


def add_parsers(subparsers: Any) -> None:
    """Add `map` and its subcommands; each sets `func(args) -> exit code`."""
    common = where_options()
    sub = add_command_group(subparsers, "map", common, "put, get, delete, list and compare-and-set map entries",
                            "Replicated key-value maps inside a store.")

    def add(name: str, handler: Handler, help_text: str, key: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.add_argument("store", metavar="STORE")
        p.add_argument("map", metavar="MAP")
        if key:
            p.add_argument("key", metavar="KEY")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=_runner(handler))
        return p

    def expected(p: argparse.ArgumentParser, help_text: str) -> None:
        p.add_argument("--expected-version", type=non_negative, required=True, metavar="N", help=help_text)

    for name, help_text in (("put", "write a value under a key (returns once committed)"),
                            ("create", "write a key that does not exist yet (exit 1 if it does)"),
                            ("update", "write a key only if it is at --expected-version (exit 1 if not)")):
        p = add(name, _write, help_text)
        p.add_argument("value", metavar="VALUE")
        p.add_argument("--base64", action="store_true", help="VALUE is base64")
        if name == "update":
            expected(p, "the version the key must have (from get or the last write)")
    add("get", _get, "print a key's value (exit 1 if the key does not exist)")
    add("delete", _delete, "delete a key")
    p = add("list", _list, "entries in key order, one per line (KEY, VERSION, VALUE)", key=False)
    p.add_argument("--prefix", default="", metavar="P", help="only keys starting with P")
    p.add_argument("--limit", type=non_negative, default=0, metavar="N", help="at most N entries (0: all)")
    p = add("cas", _cas, "compare-and-set: write only if the key is at --expected-version "
                         "(exit 1 if it was not)")
    p.add_argument("value", metavar="VALUE", nargs="?", default=None)
    expected(p, "the version the key must have (0: the key must not exist)")
    p.add_argument("--delete", action="store_true", help="delete the key instead of writing VALUE")
    p.add_argument("--base64", action="store_true", help="VALUE is base64")
