"""`strongroom realm …`: apply, get, validate and list versions of the realm.

    strongroom realm validate realm.yaml        # offline, no service needed
    strongroom realm apply realm.yaml [--expected-version N]
    strongroom realm get [--version N] [--json] [--grid]
    strongroom realm history [--json]

The realm service is found from where the cluster is, as for every command: `-s/--server`
names either the realm service itself or members of a cluster (each address is asked, by
its gRPC health service, whether it is the realm service; for members of the local cluster the
state file says where theirs is), else `$STRONGROOM_ENDPOINTS`, else the local cluster's state
file. Older spellings still work: `--realm-address` (an alias of `-s`), $STRONGROOM_REALM, and
`--etcd` / $STRONGROOM_ETCD (etcd, where the realm service registers its address).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import realm_pb2, realm_pb2_grpc
from strongroom.cli.common import (
    CliError,
    ExitCode,
    add_command_group,
    add_subcommand,
    data_dir,
    explicit_servers,
    print_json,
    where_options,
)
from strongroom.errors import RealmInvalid
from strongroom.keys import REALM_SERVICE
from strongroom.realm.model import Destination, Endpoint, Realm, TtlClock, parse_realm
from strongroom.channels import open_sync_channel

__all__ = ["REALM_HEALTH_SERVICE", "add_parsers", "call_realm_service", "locate_realm_service", "print_grid",
           "realm_service_options", "utc_text"]

RPC_TIMEOUT_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 3.0
REALM_HEALTH_SERVICE = "strongroom.v1.RealmService"
REALM_ENV = "STRONGROOM_REALM"
ETCD_ENV = "STRONGROOM_ETCD"


# --- finding the service -----------------------------------------------------------------------


def _probe(address: str) -> str | None:
    """None if `address` is the realm service (its health service serves RealmService), else
    what it is instead."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped, unused-ignore]

    with open_sync_channel(address, []) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=REALM_HEALTH_SERVICE),
                               timeout=PROBE_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
                return f"{address} is not the realm service (a persistence member?)"
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            return f"{address} did not answer ({code.name}: {details})"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address} is a realm service that is not serving"
    return None


def _from_etcd(endpoints: str) -> str:
    from strongroom.etcd import EtcdClient

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
    text = raw.decode().strip() if raw is not None else ""
    # The service registers a bare host:port; accept a JSON object too, for forward compatibility.
    if text.startswith("{"):
        try:
            text = str(json.loads(text)["address"])
        except (ValueError, KeyError, TypeError):
            text = ""
    if not text:
        raise CliError(f"no realm service is registered in etcd at {endpoints} ({REALM_SERVICE})")
    return text


def _local_realm(args: argparse.Namespace, members: Sequence[str] | None = None) -> str | None:
    """The realm service of the local cluster's state file (only if it lists one of `members`
    when they are given), asking its etcd if the file names no address."""
    from strongroom.local.launcher import load_state, member_endpoints

    state = load_state(data_dir(args)) or {}
    if members is not None and not set(members) & set(member_endpoints(state)):
        return None
    realm = state.get("realm")
    if isinstance(realm, dict) and realm.get("address"):
        return str(realm["address"])
    etcd = state.get("etcd")
    if isinstance(etcd, dict) and etcd.get("endpoint"):
        return _from_etcd(str(etcd["endpoint"]))
    return None


def _from_members(servers: Sequence[str]) -> str | None:
    """The realm service as members among `servers` report it (their etcd registration of it)."""
    from strongroom.local.leader import member_status

    async def ask() -> str | None:
        for address in servers:
            status = await member_status(address)
            if status is not None and status.realm_service:
                return str(status.realm_service)
        return None

    return asyncio.run(ask())


def _among(servers: list[str], source: str, args: argparse.Namespace, etcd: str | None) -> str:
    """The realm service among `servers`, else the one of the cluster they are members of."""
    notes = []
    for address in servers:
        note = _probe(address)
        if note is None:
            return address
        notes.append(note)
    found = _local_realm(args, servers) or _from_members(servers)
    if found:
        return found
    if etcd:
        return _from_etcd(etcd)
    raise CliError(f"cannot find the realm service from {source}: {'; '.join(notes)}. Name the realm "
                   f"service's address with -s, or etcd with --etcd")


def locate_realm_service(args: argparse.Namespace) -> str:
    """The realm service's address: from `-s/--server` (or its alias `--realm-address`), else
    `--etcd`, else $STRONGROOM_REALM or $STRONGROOM_ENDPOINTS, else $STRONGROOM_ETCD, else the
    local cluster's state file."""
    etcd_flag = getattr(args, "etcd", None)
    etcd_env = os.environ.get(ETCD_ENV)
    if getattr(args, "endpoints", None):
        named = explicit_servers(args)
        assert named is not None
        return _among(*named, args, etcd_flag or etcd_env)
    if etcd_flag:
        return _from_etcd(etcd_flag)
    named = explicit_servers(args, REALM_ENV)
    if named is not None:
        servers, source = named
        # $STRONGROOM_REALM names the realm service itself, as it always did.
        return servers[0] if source == f"${REALM_ENV}" else _among(servers, source, args, etcd_env)
    if etcd_env:
        return _from_etcd(etcd_env)
    found = _local_realm(args)
    if found:
        return found
    raise CliError("cannot find the realm service: give -s/--server HOST:PORT (the realm service, or "
                   "members of a local cluster), set STRONGROOM_ENDPOINTS or STRONGROOM_ETCD, or start a "
                   "local one with `strongroom up`")


def call_realm_service(args: argparse.Namespace, method: str, request: Any, address: str | None = None) -> Any:
    """One call of the realm service (found by `locate_realm_service` unless `address` names it);
    its failure as the domain error."""
    from strongroom.client.retry import error_from_rpc

    address = address or locate_realm_service(args)
    with open_sync_channel(address, []) as channel:
        stub = realm_pb2_grpc.RealmServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            return getattr(stub, method)(request, timeout=RPC_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, address) from None


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


def utc_text(ts: float) -> str:
    """Unix seconds as the CLI prints a time: 2026-12-01T21:23:42Z."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _print_json(data: Any) -> None:
    print_json(data, indent=2, sort_keys=True)


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
        return ExitCode.FAILED
    if args.json:
        _print_json({"valid": True, "problems": [], "normalized": json.loads(realm.to_json())})
    else:
        print(f"{args.file}: valid ({len(realm.clusters)} clusters, {len(realm.stores)} stores, "
              f"{len(realm.destinations)} destinations)")
    return ExitCode.OK


def _local_sites(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(site, realm service address) of every site of the local state file, when it has sites
    (a realm with zones) and nothing names another realm service; else none."""
    from strongroom.local.launcher import load_state

    if getattr(args, "endpoints", None) or getattr(args, "etcd", None) or any(
            os.environ.get(v) for v in (REALM_ENV, ETCD_ENV, "STRONGROOM_ENDPOINTS")):
        return []
    sites = (load_state(data_dir(args)) or {}).get("sites") or {}
    return [(name, str(site["realm"]["address"])) for name, site in sites.items()
            if isinstance(site.get("realm"), dict) and site["realm"].get("address")]


def _cmd_apply(args: argparse.Namespace) -> int:
    text = _read_file(args.file)
    request = realm_pb2.ApplyRealmRequest(yaml=text, source_name=args.file,
                                          expected_version=args.expected_version)
    sites = _local_sites(args)
    try:
        if sites:
            # A local deployment of several sites: the realm is applied at each, as an operator
            # applies it in each region (the sites share nothing else).
            for name, address in sites:
                version = call_realm_service(args, "Apply", request, address)
                if not args.json:
                    print(f"site {name}: realm version {version.version} is current")
        else:
            version = call_realm_service(args, "Apply", request)
    except RealmInvalid as err:
        # Problems go to stderr like a compiler's, one per line, so editors can jump to them.
        # The client rebuilds the problems from the indented lines of the status message.
        for problem in err.problems:
            print(problem.strip(), file=sys.stderr)
        return ExitCode.FAILED
    if args.json:
        _print_json(_version_dict(version))
    else:
        print(f"realm version {version.version} is current (sha256 {version.digest[:12]}, "
              f"from {version.source_name})")
    return ExitCode.OK


def print_grid(realm: Realm) -> None:
    """The stores grid (every store setting, defaults filled in), then the destination and
    endpoint options."""
    print(f"{'STORE':<14} {'CLUSTER':<10} {'REPLICATED':<10} {'STORAGE':<10} {'PUBLISHER':<20} "
          f"{'MAX MSGS':>8} {'MAX BYTES':>10} {'POLICY':<14} {'MAPS':<5} {'ROUTED':<6} {'MSG MAX':>8}")
    for s in realm.stores:
        storages = {c.storage.value for c in realm.clusters if s.served_by(c.name)}
        storage = storages.pop() if len(storages) == 1 else "mixed" if storages else "?"
        where = s.cluster or ",".join(s.clusters)
        print(f"{s.name:<14} {where:<10} {str(s.replicated).lower():<10} {storage:<10} "
              f"{s.publisher_mode.value:<20} {s.max_messages or '-':>8} {s.max_bytes or '-':>10} "
              f"{s.limit_policy.value:<14} {str(s.maps).lower():<5} {str(s.routed).lower():<6} "
              f"{s.max_message_bytes:>8}")
    for c in realm.clusters:
        router = f", router {c.router.address}" if c.router is not None else ""
        print(f"cluster {c.name}: storage {c.storage.value}, indexes on disk {str(c.indexes_on_disk).lower()}, "
              f"memory budget {c.memory_budget_mb or '-'} MiB{router}")
    for z in realm.zones:
        routed = [s.name for s in realm.stores if z.name in s.zones]
        print(f"zone {z.name}: clusters {', '.join(z.clusters)}; routed stores {', '.join(routed) or '-'}")
    # TTL S: seconds on the pseudo-clock, or "N wall" (ttl_clock: wall); DURABLE EXP S: a
    # durable unused that long is deleted.
    print(f"{'DESTINATION':<16} {'KIND':<8} {'STORE':<12} {'ACK':<6} {'TTL S':>8} {'RETAIN S':>8} "
          f"{'REDELIVER':>9} {'DURABLE EXP S':>13}  DEAD LETTER")
    for d in realm.destinations:
        print(f"{d.name:<16} {d.kind.value:<8} {d.store:<12} {d.ack_mode.value:<6} {_ttl(d):>8} "
              f"{d.retain_seconds or '-':>8} {d.redelivery_limit or '-':>9} {d.durable_expiry_seconds or '-':>13}  "
              f"{d.dead_letter or '-'}")
    for e in realm.endpoints:
        t = realm.template(e.template)
        kind = f"{t.kind.value}" + (f" by {t.key_field}" if t and t.key_field else "") if t else "?"
        ack = t.ack_mode.value if t else "?"
        print(f"{e.name:<16} {'endpoint':<8} {e.store:<12} {ack:<6} {_ttl(e):>8} "
              f"{e.retain_seconds or '-':>8} {e.redelivery_limit or '-':>9} {e.durable_expiry_seconds or '-':>13}  "
              f"{e.dead_letter or '-'}  (template {e.template}: {kind})")


def _ttl(rule: Destination | Endpoint) -> str:
    """A rule's time-to-live in the grid: seconds on the pseudo-clock, or "N wall"."""
    if not rule.ttl_seconds:
        return "-"
    return f"{rule.ttl_seconds:g}" + (" wall" if rule.ttl_clock == TtlClock.WALL else "")


def _cmd_get(args: argparse.Namespace) -> int:
    version = call_realm_service(args, "Get", realm_pb2.GetRealmRequest(version=args.version))
    if args.grid:
        print_grid(parse_realm(version.yaml, version.source_name or "realm.yaml"))
        return ExitCode.OK
    if args.json:
        _print_json(_version_dict(version))
    else:
        # The document alone on stdout, so `get > realm.yaml` round-trips.
        print(f"# realm version {version.version}, applied {utc_text(version.applied_at)} "
              f"from {version.source_name}", file=sys.stderr)
        sys.stdout.write(version.yaml if version.yaml.endswith("\n") else version.yaml + "\n")
    return ExitCode.OK


def _cmd_history(args: argparse.Namespace) -> int:
    response = call_realm_service(args, "History", realm_pb2.RealmHistoryRequest())
    if args.json:
        _print_json([_version_dict(v, with_document=False) for v in response.versions])
        return ExitCode.OK
    print(f"{'VERSION':>7}  {'APPLIED (UTC)':<20}  {'SHA256':<12}  SOURCE")
    for v in response.versions:
        print(f"{v.version:>7}  {utc_text(v.applied_at):<20}  {v.digest[:12]:<12}  {v.source_name}")
    return ExitCode.OK


# --- parser ------------------------------------------------------------------------------------


def realm_service_options() -> argparse.ArgumentParser:
    """The options that say where the realm service is (`locate_realm_service` reads them)."""
    common = where_options(aliases=("--realm-address",), server_help=(
        "where the cluster is: the realm service's address, or member addresses of a local cluster "
        "(env STRONGROOM_ENDPOINTS; default: the local state file); --realm-address is an older spelling"))
    common.add_argument("--etcd", default=argparse.SUPPRESS, metavar="ENDPOINTS",
                        help="etcd endpoints, where the realm service registers its address (env STRONGROOM_ETCD)")
    return common


def add_parsers(subparsers: Any) -> None:
    """Add `realm` and its subcommands; each sets `func(args) -> exit code`."""
    common = realm_service_options()
    sub = add_command_group(subparsers, "realm", common, "apply, inspect and validate the realm",
                            "Apply, inspect and validate the realm definition.")

    def add(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        return add_subcommand(sub, common, name, handler, help_text)

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
