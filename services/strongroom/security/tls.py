"""The TLS settings of a process: the authority it trusts, its own certificate and key.

Read once from the environment (`STRONGROOM_TLS_CA`, `STRONGROOM_TLS_CERT`,
`STRONGROOM_TLS_KEY`: PEM files; what `strongroom up`, the Helm chart and the tests give every
process they start) or set by the process (`use`: the CLI from the state file, a test's client).
Without them a process runs in plaintext and says so at start (`describe`).

Every connection is mutual TLS: servers ask every caller for a certificate of the authority
(gRPC servers, the replication link, etcd), clients present theirs and check the server's name
against the address they dial. `strongroom.channels` opens every channel and binds every port
with these settings; nothing else calls gRPC's credential functions.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from strongroom.security.identity import Identity

__all__ = ["ENV", "TOKEN_ENV", "Tls", "announce", "current", "current_token", "describe", "from_env",
           "peer_identity", "peer_of_ssl", "use", "use_token"]

ENV = ("STRONGROOM_TLS_CA", "STRONGROOM_TLS_CERT", "STRONGROOM_TLS_KEY")
TOKEN_ENV = "STRONGROOM_TOKEN"
"""The bearer token a client process calls with (read by the client's and the CLI's set-up,
`strongroom.client.tls_from_environment`; never by a server process)."""


@dataclass(frozen=True)
class Tls:
    """One process's TLS material, read from its files."""

    ca_path: Path
    cert_path: Path
    key_path: Path
    ca: bytes = field(repr=False)
    cert: bytes = field(repr=False)
    key: bytes = field(repr=False)

    @classmethod
    def load(cls, ca: str | Path, cert: str | Path, key: str | Path) -> Tls:
        """Read the three PEM files (OSError naming the one missing)."""
        paths = [Path(ca), Path(cert), Path(key)]
        data = [p.read_bytes() for p in paths]
        return cls(*paths, *data)  # type: ignore[arg-type]

    def paths(self) -> dict[str, str]:
        """The three files, as a state file names them (`ca`, `cert`, `key`)."""
        return {"ca": str(self.ca_path), "cert": str(self.cert_path), "key": str(self.key_path)}

    def env(self) -> dict[str, str]:
        """The environment variables a child process reads these from."""
        return dict(zip(ENV, (str(self.ca_path), str(self.cert_path), str(self.key_path)), strict=True))

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A gRPC client's: trust the authority, present the certificate."""
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """A gRPC server's: every caller must present a certificate of the authority."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def server_context(self) -> ssl.SSLContext:
        """The replication link's listening side: TLS 1.3, a certificate of the authority required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._fill(context)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """The replication link's dialling side: the server's certificate checked against the
        authority and the host dialled."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._fill(context)
        return context

    def _fill(self, context: ssl.SSLContext) -> None:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_verify_locations(cadata=self.ca.decode())
        context.load_cert_chain(self.cert_path, self.key_path)

    def identity(self) -> Identity | None:
        """The identity this process's own certificate names."""
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(self.cert)
        try:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return None
        return Identity.from_uris(names.get_values_for_type(x509.UniformResourceIdentifier))


def from_env(environ: Mapping[str, str] | None = None) -> Tls | None:
    """The TLS settings the environment names, None when it names none; ValueError when it
    names only some of the three files, OSError when one cannot be read."""
    environ = os.environ if environ is None else environ
    values = [environ.get(name, "") for name in ENV]
    if not any(values):
        return None
    missing = [name for name, value in zip(ENV, values, strict=True) if not value]
    if missing:
        raise ValueError(f"TLS needs all of {', '.join(ENV)}; missing {', '.join(missing)}")
    return Tls.load(*values)


_UNSET = object()
_current: object = _UNSET


def use(tls: Tls | None) -> None:
    """Make `tls` this process's settings (None: plaintext), whatever the environment says."""
    global _current
    _current = tls


def current() -> Tls | None:
    """This process's settings: what `use` set, else the environment's (read once)."""
    global _current
    if _current is _UNSET:
        _current = from_env()
    return _current  # type: ignore[return-value]


_token = ""


def use_token(token: str) -> None:
    """Make `token` the bearer token this process's channels call with ("" : none). Only
    client processes set one; a channel without TLS cannot carry it (gRPC sends call
    credentials over secure channels only)."""
    global _token
    _token = token.strip()


def current_token() -> str:
    """The bearer token this process calls with ("" : none)."""
    return _token


def describe(tls: Tls | None) -> str:
    """One line for a process's log at start."""
    if tls is None:
        return "TLS is OFF: every connection of this process is plaintext and unauthenticated"
    who = tls.identity()
    return f"TLS on (mutual; authority {tls.ca_path}, identity {who or 'none'})"


def peer_identity(context: grpc.aio.ServicerContext) -> Identity | None:
    """The identity the caller's certificate names (None without TLS or without one)."""
    auth = context.auth_context()
    return Identity.from_uris(v.decode() for v in auth.get("peer_uri", ()))


def peer_of_ssl(ssl_object: ssl.SSLObject | None) -> Identity | None:
    """The identity in the certificate the other side of a TLS stream presented."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    return Identity.from_uris(value for kind, value in cert.get("subjectAltName", ()) if kind == "URI")



def announce(logger: logging.Logger) -> Tls | None:
    """What a server process does with its TLS settings at start: read them (a broken set ends
    the process with status 2 and the reason), log them (loudly when off) and, when on, count
    the handshakes gRPC refuses (`refusals.watch_grpc_handshakes`)."""
    from strongroom.security import refusals

    try:
        tls = current()
    except (OSError, ValueError) as exc:
        logger.error("cannot use the TLS settings of the environment: %s", exc)
        raise SystemExit(2) from None
    if tls is None:
        logger.warning(describe(None))
    else:
        logger.info(describe(tls))
        refusals.watch_grpc_handshakes()
    return tls
