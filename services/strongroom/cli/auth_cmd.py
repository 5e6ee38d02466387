"""`strongroom auth …`: bearer tokens for the realm's users, issued and revoked by the realm service.

    strongroom auth issue USER [--ttl SECONDS] [--description TEXT] [--json]
    strongroom auth revoke ID [--json]
    strongroom auth list [--json]

The token's text is printed once, by `issue`; the site's etcd keeps only a digest of it. A
client sends it as `authorization: Bearer <token>` metadata (`--token` or $STRONGROOM_TOKEN for
the commands of this CLI, `Client(token=...)` in Python). Tokens are a site's: a deployment of
several sites (each its own etcd) issues a token at each site its user calls. The realm
service is found as for `strongroom realm`.
"""

from __future__ import annotations

import argparse
from typing import Any

from strongroom.api.v1 import realm_pb2
from strongroom.cli.common import (
    ExitCode,
    add_command_group,
    add_subcommand,
    print_json,
    seconds,
    where_options,
)
from strongroom.cli.realm_cmd import call_realm_service, utc_text

__all__ = ["add_parsers"]


def _when(ts: float) -> str:
    return utc_text(ts) if ts else "-"


def _info_dict(info: realm_pb2.TokenInfo) -> dict[str, Any]:
    return {"id": info.id, "user": info.user, "issued_at": info.issued_at, "expires_at": info.expires_at,
            "description": info.description, "revoked_at": info.revoked_at}


def _cmd_issue(args: argparse.Namespace) -> int:
    issued = call_realm_service(args, "IssueToken", realm_pb2.IssueTokenRequest(
        user=args.user, ttl_seconds=args.ttl, description=args.description))
    if args.json:
        print_json({"token": issued.token, **_info_dict(issued.info)}, indent=2, sort_keys=True)
    else:
        print(issued.token)
        ends = f"ends {_when(issued.info.expires_at)}" if issued.info.expires_at else "never ends"
        print(f"# token {issued.info.id} for user {issued.info.user}, {ends}; shown only now", flush=True)
    return ExitCode.OK


def _cmd_revoke(args: argparse.Namespace) -> int:
    info = call_realm_service(args, "RevokeToken", realm_pb2.RevokeTokenRequest(id=args.id))
    if args.json:
        print_json(_info_dict(info), indent=2, sort_keys=True)
    else:
        print(f"token {info.id} of user {info.user} revoked {_when(info.revoked_at)}")
    return ExitCode.OK


def _cmd_list(args: argparse.Namespace) -> int:
    listed = call_realm_service(args, "ListTokens", realm_pb2.ListTokensRequest())
    if args.json:
        print_json([_info_dict(t) for t in listed.tokens], indent=2, sort_keys=True)
        return ExitCode.OK
    print(f"{'ID':<16}  {'USER':<16}  {'ISSUED (UTC)':<20}  {'ENDS':<20}  {'REVOKED':<20}  DESCRIPTION")
    for t in listed.tokens:
        print(f"{t.id:<16}  {t.user:<16}  {_when(t.issued_at):<20}  {_when(t.expires_at):<20}  "
              f"{_when(t.revoked_at):<20}  {t.description}")
    return ExitCode.OK


def add_parsers(subparsers: Any) -> None:
    """Add `auth` and its subcommands; each sets `func(args) -> exit code`."""
    common = where_options(server_help=(
        "where the cluster is: the realm service's address, or member addresses of a local cluster "
        "(env STRONGROOM_ENDPOINTS; default: the local state file)"))
    common.add_argument("--etcd", default=argparse.SUPPRESS, metavar="ENDPOINTS",
                        help="etcd endpoints, where the realm service registers its address (env STRONGROOM_ETCD)")
    sub = add_command_group(subparsers, "auth", common, "issue, revoke and list bearer tokens",
                            "Bearer tokens of the realm's users (the realm service keeps a digest of each).")

    def add(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        return add_subcommand(sub, common, name, handler, help_text)

    p = add("issue", _cmd_issue, "issue a token for a user of the realm (printed once)")
    p.add_argument("user", metavar="USER")
    p.add_argument("--ttl", type=seconds, default=0.0, metavar="SECONDS", help="seconds until it ends (default: never)")
    p.add_argument("--description", default="", metavar="TEXT", help="what the token is for")
    p = add("revoke", _cmd_revoke, "revoke a token: calls with it are refused from now on")
    p.add_argument("id", metavar="ID", help="the token's id (or its text)")
    add("list", _cmd_list, "every token issued at this site, revoked ones included")
