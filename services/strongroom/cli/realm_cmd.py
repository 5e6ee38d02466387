"""`strongroom realm …`: apply, get, validate and list versions of the realm.

    strongroom realm validate realm.yaml        # offline, no service needed
    strongroom realm apply realm.yaml [--expected-version N]
    strongroom realm get [--version N] [--json] [--grid]
    strongroom realm history [--json]

The realm service is found, in order, from `--realm-address`, env STRONGROOM_REALM, the etcd key
`/strongroom/services/realm` (etcd from `--etcd` or env STRONGROOM_ETCD), and the local
launcher's state file `<data dir>/state.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import realm_pb2, realm_pb2_grpc
from strongroom.errors import RealmInvalid, StrongroomError
from strongroom.etcd import EtcdClient
from strongroom.grpcerrors import from_rpc_error
from strongroom.keys import REALM_SERVICE
from strongroom.realm.model import Realm, parse_realm

__all__ = ["add_realm_parser", "main", "resolve_realm_address"]

RPC_TIMEOUT_SECONDS = 10.0

EXIT_OK = 0
EXIT_FAILED = 1


class CliError(Exception):
    """A failure to report as one line on stderr with exit code 1."""


# --- finding the service -----------------------------------------------------------------------


def _data_dir(args: argparse.Namespace) -> Path:
    given = getattr(args, "data_dir", None)
    return Path(given or os.environ.get("STRONGROOM_DATA_DIR") or ".strongroom")


def _read_state(args: argparse.Namespace) -> dict[str, Any]:
    path = _data_dir(args) / "state.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _address_from_etcd(endpoints: str) -> str | None:
    async def lookup() -> bytes | None:
        etcd = EtcdClient(endpoints)
        try:
            kv = await etcd.get(REALM_SERVICE)
            return kv.value if kv is not None else None
        finally:
            await etcd.close()

    try:
        raw = asyncio.run(asyncio.wait_for(lookup(), RPC_TIMEOUT_SECONDS))
    except Exception as exc:  # noqa: BLE001 - any etcd failure reads as "cannot find it there"
        raise CliError(f"cannot read {REALM_SERVICE} from etcd at {endpoints}: {exc}") from None
    if raw is None:
        return None
    text = raw.decode().strip()
    # The service registers a bare host:port; accept a JSON object too, for forward compatibility.
    if text.startswith("{"):
        try:
            return str(json.loads(text)["address"])
        except (ValueError, KeyError, TypeError):
            return None
    return text or None


def resolve_realm_address(args: argparse.Namespace) -> str:
    """The realm service address from flags, environment, etcd or the local state file."""
    explicit = getattr(args, "realm_address", None) or os.environ.get("STRONGROOM_REALM")
    if explicit:
        return str(explicit)
    etcd = getattr(args, "etcd", None) or os.environ.get("STRONGROOM_ETCD")
    if etcd:
        found = _address_from_etcd(etcd)
        if found:
            return found
        raise CliError(f"no realm service is registered in etcd at {etcd} ({REALM_SERVICE})")
    state = _read_state(args)
    realm = state.get("realm")
    if isinstance(realm, dict) and realm.get("address"):
        return str(realm["address"])
    etcd_state = state.get("etcd")
    if isinstance(etcd_state, dict) and etcd_state.get("endpoint"):
        found = _address_from_etcd(str(etcd_state["endpoint"]))
        if found:
            return found
    raise CliError("cannot find the realm service: give --realm-address, set STRONGROOM_REALM or "
                   "STRONGROOM_ETCD, or start a local one with `strongroom up`")


def _call(args: argparse.Namespace, method: str, request: Any) -> Any:
    address = resolve_realm_address(args)
    with grpc.insecure_channel(address) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            return getattr(stub, method)(request, timeout=RPC_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            if err is not None:
                raise err from None
            code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise CliError(f"realm service at {address}: {code}: {details}") from None


# --- output ------------------------------------------------------------------------------------


def _version_dict(v: realm_pb2.RealmVersion, with_document: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": v.version,
        "applied_at": v.applied_at,
        "digest": v.digest,
        "source_name": v.source_name,
    }
    if with_document:
        out["yaml"] = v.yaml
        out["normalized"] = json.loads(v.normalized_json) if v.normalized_json else None
    return out


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def _problem_dicts(problems: list[str], source: str) -> list[dict[str, Any]]:
    # Imported here: the service module pulls in the gRPC server side, which `validate` needs
    # only for this pure helper.
    from strongroom.realm.service import parse_problem

    return [vars(parse_problem(p, source)) for p in problems]


# --- handlers ----------------------------------------------------------------------------------


def _cmd_validate(args: argparse.Namespace) -> int:
    text = _read_file(args.file)
    try:
        realm = parse_realm(text, args.file)
    except RealmInvalid as err:
        if args.json:
            _print_json({"valid": False, "problems": _problem_dicts(err.problems, args.file)})
        else:
            for problem in err.problems:
                print(problem)
        return EXIT_FAILED
    if args.json:
        _print_json({"valid": True, "problems": [], "normalized": json.loads(realm.to_json())})
    else:
        print(f"{args.file}: valid ({len(realm.clusters)} clusters, {len(realm.stores)} stores, "
              f"{len(realm.destinations)} destinations)")
    return EXIT_OK


def _cmd_apply(args: argparse.Namespace) -> int:
    text = _read_file(args.file)
    request = realm_pb2.ApplyRealmRequest(yaml=text, source_name=args.file,
                                          expected_version=args.expected_version)
    try:
        version = _call(args, "Apply", request)
    except RealmInvalid as err:
        # Problems go to stderr like a compiler's, one per line, so editors can jump to them.
        # The client rebuilds the problems from the indented lines of the status message.
        for problem in err.problems:
            print(problem.strip(), file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json(_version_dict(version))
    else:
        print(f"realm version {version.version} is current (sha256 {version.digest[:12]}, "
              f"from {version.source_name})")
    return EXIT_OK


def print_grid(realm: Realm) -> None:
    """The stores grid (every store setting, defaults filled in), then the destination and
    endpoint options."""
    print(f"{'STORE':<14} {'CLUSTER':<10} {'REPLICATED':<10} {'STORAGE':<10} {'PUBLISHER':<20} "
          f"{'MAX MSGS':>8} {'MAX BYTES':>10} {'POLICY':<14} {'MAPS':<5} {'ROUTED':<6} {'MSG MAX':>8}")
    for s in realm.stores:
        c = realm.cluster(s.cluster)
        storage = c.storage.value if c is not None else "?"
        print(f"{s.name:<14} {s.cluster:<10} {str(s.replicated).lower():<10} {storage:<10} "
              f"{s.publisher_mode.value:<20} {s.max_messages or '-':>8} {s.max_bytes or '-':>10} "
              f"{s.limit_policy.value:<14} {str(s.maps).lower():<5} {str(s.routed).lower():<6} "
              f"{s.max_message_bytes:>8}")
    for c in realm.clusters:
        print(f"cluster {c.name}: storage {c.storage.value}, indexes on disk {str(c.indexes_on_disk).lower()}, "
              f"memory budget {c.memory_budget_mb or '-'} MiB")
    print(f"{'DESTINATION':<16} {'KIND':<8} {'STORE':<12} {'ACK':<6} {'TTL S':>6} {'RETAIN S':>8} "
          f"{'REDELIVER':>9}  DEAD LETTER")
    for d in realm.destinations:
        print(f"{d.name:<16} {d.kind.value:<8} {d.store:<12} {d.ack_mode.value:<6} {d.ttl_seconds or '-':>6} "
              f"{d.retain_seconds or '-':>8} {d.redelivery_limit or '-':>9}  {d.dead_letter or '-'}")
    for e in realm.endpoints:
        t = realm.template(e.template)
        kind = f"{t.kind.value}" + (f" by {t.key_field}" if t and t.key_field else "") if t else "?"
        ack = t.ack_mode.value if t else "?"
        print(f"{e.name:<16} {'endpoint':<8} {e.store:<12} {ack:<6} {e.ttl_seconds or '-':>6} "
              f"{e.retain_seconds or '-':>8} {e.redelivery_limit or '-':>9}  {e.dead_letter or '-'}"
              f"  (template {e.template}: {kind})")


def _cmd_get(args: argparse.Namespace) -> int:
    version = _call(args, "Get", realm_pb2.GetRealmRequest(version=args.version))
    if args.grid:
        print_grid(parse_realm(version.yaml, version.source_name or "realm.yaml"))
        return EXIT_OK
    if args.json:
        _print_json(_version_dict(version))
    else:
        # The document alone on stdout, so `get > realm.yaml` round-trips.
        print(f"# realm version {version.version}, applied {_when(version.applied_at)} "
              f"from {version.source_name}", file=sys.stderr)
        sys.stdout.write(version.yaml if version.yaml.endswith("\n") else version.yaml + "\n")
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    response = _call(args, "History", realm_pb2.RealmHistoryRequest())
    if args.json:
        _print_json([_version_dict(v, with_document=False) for v in response.versions])
        return EXIT_OK
    print(f"{'VERSION':>7}  {'APPLIED (UTC)':<20}  {'SHA256':<12}  SOURCE")
    for v in response.versions:
        print(f"{v.version:>7}  {_when(v.applied_at):<20}  {v.digest[:12]:<12}  {v.source_name}")
    return EXIT_OK


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except StrongroomError as err:
            print(f"error: {err.message}", file=sys.stderr)
            return EXIT_FAILED

    run.__name__ = handler.__name__
    return run


# --- parser ------------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    # SUPPRESS keeps a subcommand from overwriting the same option given earlier (or set by the
    # top-level parser) with its default, so the options work before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--realm-address", default=argparse.SUPPRESS, metavar="HOST:PORT",
                        help="realm service address (default: env STRONGROOM_REALM, etcd, local state)")
    common.add_argument("--etcd", default=argparse.SUPPRESS, metavar="ENDPOINTS",
                        help="etcd endpoints to discover the realm service (env STRONGROOM_ETCD)")
    common.add_argument("--data-dir", default=argparse.SUPPRESS, metavar="DIR",
                        help="local state directory (env STRONGROOM_DATA_DIR, default ./.strongroom)")
    return common


def add_realm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `realm` and its subcommands; each sets `func(args) -> exit code`."""
    common = _common()
    realm: argparse.ArgumentParser = subparsers.add_parser(
        "realm", parents=[common], help="apply, inspect and validate the realm",
        description="Apply, inspect and validate the realm definition.")
    sub = realm.add_subparsers(dest="realm_command", metavar="COMMAND", required=True)

    def add(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text,
                                                    description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=_guarded(handler))
        return p

    p = add("apply", _cmd_apply, "validate and store a new realm version")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--expected-version", type=int, default=0, metavar="N",
                   help="apply only if version N is current (optimistic concurrency)")
    p = add("get", _cmd_get, "print the current realm document, or a given version")
    p.add_argument("--version", type=int, default=0, metavar="N", help="version to show (default: current)")
    p.add_argument("--grid", action="store_true",
                   help="the stores grid and destination options, defaults filled in, instead of the document")
    p = add("validate", _cmd_validate, "check a realm file offline; problems as file:line:col")
    p.add_argument("file", metavar="FILE")
    add("history", _cmd_history, "list every stored version, oldest first")
    return realm


def main(argv: list[str] | None = None) -> int:
    """Run `realm …` on its own (`python -m strongroom.cli.realm_cmd realm get`)."""
    parser = argparse.ArgumentParser(prog="strongroom")
    add_realm_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
