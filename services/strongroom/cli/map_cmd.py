"""`strongroom map …`: the replicated key-value maps of a store.

    strongroom map put STORE MAP KEY VALUE [--base64]
    strongroom map get STORE MAP KEY
    strongroom map delete STORE MAP KEY
    strongroom map list STORE MAP [--prefix P] [--limit N]
    strongroom map cas STORE MAP KEY [VALUE] --expected-version N [--delete] [--base64]

Every command takes `--json` and reaches the cluster like the other client commands
(`--endpoints`, env STRONGROOM_ENDPOINTS, else the local state file). Values are given as text
(UTF-8) or, with `--base64`, base64; they are printed as text when they are UTF-8, else as
base64 (the JSON output says which in `value_encoding`).

Exit codes: 0 success; 1 failure, a `get` of a key that does not exist or a `cas` that did not
swap (the current entry is printed); 2 a domain error reported by the cluster
(`error: REASON: message`) or bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from strongroom.errors import StrongroomError

__all__ = ["add_map_parser", "entry_json", "value_text"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def value_text(value: bytes) -> tuple[str, str]:
    """A value for printing: (text, "utf-8") when it decodes, else (base64, "base64")."""
    try:
        return value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(value).decode(), "base64"


def entry_json(key: str, value: bytes, version: int) -> dict[str, Any]:
    """One entry as a JSON object: key, value, value_encoding, version."""
    text, encoding = value_text(value)
    return {"key": key, "value": text, "value_encoding": encoding, "version": version}


def _value(args: argparse.Namespace) -> bytes:
    if args.base64:
        try:
            return base64.b64decode(args.value, validate=True)
        except (binascii.Error, ValueError):
            raise _UsageError(f"VALUE is not valid base64: {args.value!r}") from None
    return str(args.value).encode("utf-8")


class _UsageError(Exception):
    """Bad arguments found after parsing (exit code 2, like argparse's)."""


def _print_json(data: Any) -> None:
    print(json.dumps(data), flush=True)


# --- handlers ------------------------------------------------------------------------------------


async def _put(m: Any, args: argparse.Namespace) -> int:
    version = await m.put(args.key, _value(args))
    if args.json:
        _print_json({"store": args.store, "map": args.map, "key": args.key, "version": version})
    else:
        print(f"put {args.key}: version {version}")
    return EXIT_OK


async def _get(m: Any, args: argparse.Namespace) -> int:
    found = await m.get(args.key)
    if args.json:
        out: dict[str, Any] = {"store": args.store, "map": args.map, "key": args.key, "found": found is not None}
        if found is not None:
            out.update(entry_json(args.key, *found))
        _print_json(out)
    elif found is not None:
        text, encoding = value_text(found[0])
        # The value alone on stdout, so `$(strongroom map get …)` is the value.
        print(f"# {args.key}: version {found[1]}" + (", base64" if encoding == "base64" else ""), file=sys.stderr)
        print(text)
    else:
        print(f"error: key {args.key!r} not found in map {args.map!r} of store {args.store!r}", file=sys.stderr)
    return EXIT_OK if found is not None else EXIT_FAILED


async def _delete(m: Any, args: argparse.Namespace) -> int:
    deleted = await m.delete(args.key)
    if args.json:
        _print_json({"store": args.store, "map": args.map, "key": args.key, "deleted": deleted})
    else:
        print(f"deleted {args.key}" if deleted else f"{args.key} did not exist")
    return EXIT_OK


async def _list(m: Any, args: argparse.Namespace) -> int:
    count = 0
    async for key, value, version in m.items(prefix=args.prefix, page_size=min(args.limit or 0, 1000)):
        if args.json:
            _print_json(entry_json(key, value, version))
        else:
            text, encoding = value_text(value)
            print(f"{key}\t{version}\t{'(base64) ' if encoding == 'base64' else ''}{text}")
        count += 1
        if args.limit and count >= args.limit:
            break
    return EXIT_OK


async def _cas(m: Any, args: argparse.Namespace) -> int:
    if args.delete == (args.value is not None):
        raise _UsageError("cas needs either VALUE or --delete, not both")
    value = None if args.delete else _value(args)
    swapped, current = await m.compare_and_set(args.key, args.expected_version, value, delete=args.delete)
    if args.json:
        out: dict[str, Any] = {"store": args.store, "map": args.map, "key": args.key, "swapped": swapped,
                               "found": current is not None}
        if current is not None:
            out.update(entry_json(args.key, *current))
        _print_json(out)
    elif swapped:
        print(f"deleted {args.key}" if current is None else f"swapped {args.key}: version {current[1]}")
    elif current is None:
        print(f"not swapped: {args.key} does not exist", file=sys.stderr)
    else:
        text, encoding = value_text(current[0])
        print(f"not swapped: {args.key} is at version {current[1]}: "
              f"{'(base64) ' if encoding == 'base64' else ''}{text}", file=sys.stderr)
    return EXIT_OK if swapped else EXIT_FAILED


Handler = Callable[[Any, argparse.Namespace], Awaitable[int]]


def _runner(handler: Handler) -> Callable[[argparse.Namespace], int]:
    """A `func(args) -> exit code` that opens a client, runs the handler and reports errors
    the way the other client commands do."""

    async def go(args: argparse.Namespace) -> int:
        from strongroom.cli.main import resolve_endpoints
        from strongroom.client import Client

        client = Client(resolve_endpoints(args), client_name="strongroom-cli")
        try:
            return await handler(client.map(args.store, args.map), args)
        finally:
            await client.close()

    def run(args: argparse.Namespace) -> int:
        from strongroom.cli.main import CliError
        from strongroom.grpcerrors import from_rpc_error

        try:
            return asyncio.run(go(args))
        except _UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except StrongroomError as err:
            print(f"error: {err.reason}: {err.message}", file=sys.stderr)
            return EXIT_ERROR
        except grpc.RpcError as exc:
            domain = from_rpc_error(exc)
            if domain is not None:
                print(f"error: {domain.reason}: {domain.message}", file=sys.stderr)
                return EXIT_ERROR
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED

    run.__name__ = handler.__name__
    return run


# --- parser --------------------------------------------------------------------------------------


def add_map_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `map` and its subcommands; each sets `func(args) -> exit code`."""
    # Imported here: strongroom.cli.main imports this module while it builds its parser.
    from strongroom.cli.main import _common_options, _non_negative

    common = _common_options(endpoints=True)
    top: argparse.ArgumentParser = subparsers.add_parser(
        "map", parents=[common], help="put, get, delete, list and compare-and-set map entries",
        description="Replicated key-value maps inside a store.")
    sub = top.add_subparsers(dest="map_command", metavar="COMMAND", required=True)

    def add(name: str, handler: Handler, help_text: str, key: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.add_argument("store", metavar="STORE")
        p.add_argument("map", metavar="MAP")
        if key:
            p.add_argument("key", metavar="KEY")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=_runner(handler))
        return p

    p = add("put", _put, "write a value under a key (returns once committed)")
    p.add_argument("value", metavar="VALUE")
    p.add_argument("--base64", action="store_true", help="VALUE is base64")
    add("get", _get, "print a key's value (exit 1 if the key does not exist)")
    add("delete", _delete, "delete a key")
    p = add("list", _list, "entries in key order, one per line (KEY, VERSION, VALUE)", key=False)
    p.add_argument("--prefix", default="", metavar="P", help="only keys starting with P")
    p.add_argument("--limit", type=_non_negative, default=0, metavar="N", help="at most N entries (0: all)")
    p = add("cas", _cas, "compare-and-set: write only if the key is at --expected-version "
                         "(exit 1 if it was not)")
    p.add_argument("value", metavar="VALUE", nargs="?", default=None)
    p.add_argument("--expected-version", type=_non_negative, required=True, metavar="N",
                   help="the version the key must have (0: the key must not exist)")
    p.add_argument("--delete", action="store_true", help="delete the key instead of writing VALUE")
    p.add_argument("--base64", action="store_true", help="VALUE is base64")
    return top
