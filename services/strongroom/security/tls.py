"""The TLS settings of a process: the authority it trusts, its own certificate and key.

Read once from the environment (`STRONGROOM_TLS_CA`, `STRONGROOM_TLS_CERT`,
`STRONGROOM_TLS_KEY`: PEM files; what `strongroom up`, the Helm chart and the tests give every
process they start) or set by the process (`use`: the CLI from the state file, a test's client).
Without them a process runs in plaintext and says so at start (`describe`).

Every connection is mutual TLS: servers ask every caller for a certificate of the authority
(gRPC servers, the replication link, etcd), clients present theirs and check the server's name
against the address they dial. `strongroom.channels` opens every channel and binds every port
with these settings; nothing else calls gRPC's credential functions.

Certificates are renewed without a restart: the three files are looked at again at every
handshake a server takes (gRPC's certificate fetcher, the link's SNI callback) and whenever a
channel or link connection is opened (`current`); when they changed and hold a certificate with
its key, the new ones serve from that handshake on (connections already open keep theirs). A
set caught half-written (a certificate whose key is not there yet) is not taken: the previous
one serves on, and the process logs it once. Write the key first, then the certificate, or move
both into place.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from strongroom.security.identity import Identity

log = logging.getLogger("strongroom.tls")

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
    read_from: tuple[tuple[int, int, int], ...] = field(default=(), repr=False, compare=False)
    """The files' `stamp` before they were read."""

    @classmethod
    def load(cls, ca: str | Path, cert: str | Path, key: str | Path) -> Tls:
        """Read the three PEM files (OSError naming the one missing)."""
        paths = [Path(ca), Path(cert), Path(key)]
        stamp = _stamps(paths)
        data = [p.read_bytes() for p in paths]
        return cls(*paths, *data, read_from=stamp)  # type: ignore[arg-type]

    @property
    def files(self) -> tuple[Path, Path, Path]:
        """The authority's, the certificate's and the key's file."""
        return (self.ca_path, self.cert_path, self.key_path)

    def paths(self) -> dict[str, str]:
        """The three files, as a state file names them (`ca`, `cert`, `key`)."""
        return {"ca": str(self.ca_path), "cert": str(self.cert_path), "key": str(self.key_path)}

    def env(self) -> dict[str, str]:
        """The environment variables a child process reads these from."""
        return dict(zip(ENV, map(str, self.files), strict=True))

    def renewed(self) -> Tls | None:
        """These settings read again from their files if they hold a renewed certificate with its
        key; None when the files are what these were read from, or cannot be used now (half
        written, unreadable: logged once per change)."""
        now = _stamps(self.files)
        if now == self.read_from or now in _refused:
            return None
        try:
            new = Tls.load(*self.files)
            new._server_context()  # the certificate and its key belong together
        except (OSError, ValueError, ssl.SSLError) as exc:
            _refused.add(now)
            log.warning("the TLS files of %s changed but cannot be used (%s): the previous certificate serves on",
                        self.cert_path, exc)
            return None
        # Written again while being read: the next look takes them.
        return new if _stamps(self.files) == new.read_from else None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A gRPC client's: trust the authority, present the certificate."""
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """A gRPC server's: every caller must present a certificate of the authority; the files
        looked at again at every handshake (module docstring)."""
        serving = _Serving(self)

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            # Called by gRPC's core, from its own threads, before each handshake.
            new = serving.renew()
            return None if new is None else new._certificate_configuration()

        return grpc.dynamic_ssl_server_credentials(self._certificate_configuration(), fetch,
                                                   require_client_authentication=True)

    def _certificate_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(self.key, self.cert)], root_certificates=self.ca)

    def server_context(self) -> ssl.SSLContext:
        """The replication link's listening side: TLS 1.3, a certificate of the authority
        required; the files looked at again at every handshake (module docstring)."""
        serving = _Serving(self)
        first = self._server_context()
        latest = [first]

        def renew(ssl_object: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
            # Called at each handshake on `first`, whether the client named a server or not.
            new = serving.renew()
            if new is not None:
                latest[0] = new._server_context()
            if latest[0] is not first:
                ssl_object.context = latest[0]

        first.sni_callback = renew  # type: ignore[assignment]
        return first

    def _server_context(self) -> ssl.SSLContext:
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
_next_look = 0.0


def use(tls: Tls | None) -> None:
    """Make `tls` this process's settings (None: plaintext), whatever the environment says."""
    global _current
    _current = tls


def current() -> Tls | None:
    """This process's settings: what `use` set, else the environment's (read once), read again
    from their files when these hold a renewed certificate (module docstring)."""
    global _current, _next_look
    if _current is _UNSET:
        _current = from_env()
    if isinstance(_current, Tls) and time.monotonic() >= _next_look:
        # At most once a second: every call's permission check asks for these.
        _next_look = time.monotonic() + 1.0
        new = _current.renewed()
        if new is not None:
            log.info("calling with the renewed certificate %s from now on", new.cert_path)
            _current = new
    return _current  # type: ignore[return-value]


def _stamps(paths: Sequence[Path]) -> tuple[tuple[int, int, int], ...]:
    """What the files are now (inode, size, modification time; zeros for one missing): a
    renewal changes it."""
    out = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append((0, 0, 0))
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


_refused: set[tuple[tuple[int, int, int], ...]] = set()
"""The files' stamps of renewals that could not be used (each logged once)."""


class _Serving:
    """The settings a server serves now, renewed from their files (`Tls.renewed`) by whichever
    thread takes the next handshake."""

    def __init__(self, tls: Tls) -> None:
        self._tls = tls
        self._lock = threading.Lock()

    def renew(self) -> Tls | None:
        """The renewed settings, once, when the files changed; None otherwise."""
        with self._lock:
            new = self._tls.renewed()
            if new is None:
                return None
            self._tls = new
        log.info("serving the renewed certificate %s from the next handshake on", new.cert_path)
        return new


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
    the handshakes gRPC refuses (`refusals.watch_grpc_handshakes`). A revocation list named by the
    environment that cannot be used ends it the same way (`strongroom.security.revocation`)."""
    from strongroom.security import refusals, revocation

    try:
        tls = current()
        revoked = revocation.current()
    except Exception as exc:  # noqa: BLE001 - any unusable file: the process cannot start as asked
        logger.error("cannot use the TLS settings of the environment: %s", exc)
        raise SystemExit(2) from None
    if tls is None:
        logger.warning(describe(None))
    else:
        logger.info(describe(tls))
        if revoked is not None:
            logger.info("callers' certificates checked against the revocation list %s (%d revoked)", revoked.path,
                        len(revoked))
        refusals.watch_grpc_handshakes()
    return tls
