"""`strongroom certs`: the certificates of a local deployment's authority, and revoking one.

`strongroom up` keeps its authority in `<data dir>/tls` (or the directory
`$STRONGROOM_TLS_AUTHORITY` names) and gives every process it starts a certificate of it.
`certs list` shows them; `certs revoke` puts one on the authority's revocation list, which
every process of the deployment checks its callers against from then on, without a restart
(security/revocation.py). A process whose certificate was revoked gets a new one the next time
the deployment starts it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from strongroom.cli.common import (
    ExitCode,
    add_command_group,
    add_subcommand,
    data_dir,
    print_json,
    say_error,
    where_options,
)
from strongroom.security.certs import AUTHORITY_ENV, LocalCa
from strongroom.security.identity import Identity

__all__ = ["add_parsers"]


def _authority(args: argparse.Namespace) -> LocalCa | None:
    directory = Path(os.environ.get(AUTHORITY_ENV) or data_dir(args) / "tls")
    if not (directory / "ca.pem").is_file() or not (directory / "ca.key").is_file():
        say_error(f"no local authority in {directory} (ca.pem and ca.key): `strongroom up` makes one; "
                  f"an authority of your own revokes with its own tools")
        return None
    return LocalCa(directory)


def _holder(cert: x509.Certificate) -> str:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ""
    found = Identity.from_uris(names.get_values_for_type(x509.UniformResourceIdentifier))
    return str(found) if found else ""


def _cmd_list(args: argparse.Namespace) -> int:
    ca = _authority(args)
    if ca is None:
        return ExitCode.USAGE
    revoked = ca.revoked()
    rows = [{"identity": _holder(c), "serial": f"{c.serial_number:x}",
             "not_after": c.not_valid_after_utc.isoformat(),
             "revoked_at": revoked[c.serial_number].at.isoformat() if c.serial_number in revoked else ""}
            for c in ca.issued()]
    if args.json:
        print_json({"authority": str(ca.directory), "certificates": rows,
                    "revoked": [f"{serial:x}" for serial in sorted(revoked)]})
        return ExitCode.OK
    print(f"{'IDENTITY':<32}  {'SERIAL':<40}  {'ENDS (UTC)':<19}  REVOKED")
    for row in rows:
        print(f"{row['identity']:<32}  {row['serial']:<40}  {row['not_after'][:19]:<19}  {row['revoked_at'][:19]}")
    return ExitCode.OK


def _cmd_revoke(args: argparse.Namespace) -> int:
    ca = _authority(args)
    if ca is None:
        return ExitCode.USAGE
    target: str = args.certificate
    serial: int | None = None
    path = Path(target)
    identity = Identity.parse("strongroom://" + target)
    if identity is not None and not path.is_file():
        path = ca.issued_path(identity)
        if not path.is_file():
            say_error(f"the authority in {ca.directory} issued no certificate for {target} (`strongroom certs list`)")
            return ExitCode.USAGE
    if path.is_file():
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except ValueError as exc:
            say_error(f"{path} is not a PEM certificate: {exc}")
            return ExitCode.USAGE
        try:
            cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.ca_path.read_bytes()))
        except (ValueError, TypeError, InvalidSignature):
            say_error(f"{path} was not issued by the authority in {ca.directory}")
            return ExitCode.USAGE
        serial = cert.serial_number
    else:
        digits = target.lower().removeprefix("0x")
        if not digits or len(digits) > 40 or any(c not in "0123456789abcdef" for c in digits) or int(digits, 16) == 0:
            say_error(f"{target!r} is neither an identity the authority issued for (kind/cluster/name, user/name), "
                      f"a certificate file, nor a certificate's serial number (hex, at most 20 bytes)")
            return ExitCode.USAGE
        serial = int(digits, 16)
        if serial not in {c.serial_number for c in ca.issued()}:
            print(f"note: serial {serial:x} is not among the certificates kept in {ca.directory / 'issued'}; "
                  f"revoking it as given", file=sys.stderr)
    try:
        entry = ca.revoke(serial)
    except ValueError as exc:
        say_error(f"cannot revoke: the revocation list in force cannot be read ({exc})")
        return ExitCode.FAILED
    out: dict[str, Any] = {"serial": f"{serial:x}", "revoked_at": entry.at.isoformat(), "list": str(ca.crl_path)}
    if args.json:
        print_json(out)
    else:
        print(f"revoked certificate {out['serial']} (at {out['revoked_at']}); the deployment's processes refuse it "
              f"from their next look at {ca.crl_path} (within a second)")
    return ExitCode.OK


def add_parsers(subparsers: Any) -> None:
    """Add `certs` and its subcommands; each sets `func(args) -> exit code`."""
    common = where_options(servers=False)
    sub = add_command_group(subparsers, "certs", common, "list and revoke a local deployment's certificates",
                            "The certificates of the local authority `strongroom up` runs with.")

    def add(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        return add_subcommand(sub, common, name, handler, help_text)

    add("list", _cmd_list, "every certificate the authority issued, with its serial and whether it was revoked")
    p = add("revoke", _cmd_revoke, "put a certificate on the authority's revocation list")
    p.add_argument("certificate", metavar="CERTIFICATE",
                   help="whose: an identity (member/CLUSTER/NAME, user/NAME, ...), a certificate file, or a serial "
                        "number in hex")
