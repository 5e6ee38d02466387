"""Certificates revoked before they expire: the authority's certificate revocation list (CRL).

A certificate that leaked (a laptop lost, a key copied out of a pod) stays valid until it
expires unless its holders are told otherwise. The authority signs a list of the serial numbers
it revoked (RFC 5280's CRL, PEM; `strongroom certs revoke` writes the local authority's, an
operator's own authority or cert-manager's issuer publishes theirs), and every process that
serves is given its file (`STRONGROOM_TLS_CRL`; `strongroom up` sets it for every process it
starts). A connection or call whose certificate is on the list is refused before anything it
asks is done, counted and logged as a refusal (`certificate_revoked`):

- gRPC servers (members, routers, DR services, the realm service; `channels.new_server`) check
  the caller's certificate at every call, and a stream of responses (a subscription) before
  each response (`security.calls.RevocationInterceptor`); a stream the client writes on is
  checked as it opens only;
- the replication link checks both ends: the follower the leader's certificate at the
  connection and at every append, the leader the follower's at each connection
  (`persistence/link.py`).

etcd is given the same file (`--client-crl-file`, `--peer-crl-file`: `local/etcdproc.py`, the
chart) and reads it at each new connection, which is why an authority writes an empty list with
itself: etcd refuses every connection while the file is missing.

What gRPC clients in Python cannot do is check a server's certificate against the list (gRPC's
Python API has no hook for it): a revoked server certificate is refused wherever its holder
calls (every member is also a caller) and on the link, but a client that dials it is still
served. Replace such a certificate, or stop its process, at once.

The file is read again when it changes (looked at no more than once a second), so a revocation
takes effect without a restart, for the next connection and the next call of connections
already open. A file that cannot be used (not a CRL, not signed by the authority the process
trusts, unreadable) is not taken: the list in force stays, and the process logs it once per
change. No file at the path means nothing is revoked.
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from strongroom.security.identity import Refusal

log = logging.getLogger("strongroom.tls")

__all__ = ["CRL_ENV", "LOOK_EVERY_SECONDS", "Revocations", "Revoked", "current", "read_list", "refused",
           "serial_of_pem", "serial_of_ssl", "use"]

CRL_ENV = "STRONGROOM_TLS_CRL"
"""The PEM file of the authority's revocation list a serving process checks its callers against."""

AUTHORITY_PEM_ENV = "STRONGROOM_TLS_CA"
"""The authority's certificate (the first of security/tls.py's variables, named here so this
module imports nothing of TLS): the list must be signed by it."""

LOOK_EVERY_SECONDS = 1.0
"""How often, at most, the list's file is looked at for a change."""


@dataclass(frozen=True)
class Revoked:
    """A certificate on the list: its serial number and when the authority revoked it."""

    serial: int
    at: datetime.datetime

    def sentence(self) -> str:
        return (f"its certificate (serial {self.serial:x}) was revoked by the authority on "
                f"{self.at:%Y-%m-%d %H:%M:%S} UTC")


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


_SIGNING_KEYS = (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)


def read_list(path: Path, authority_pem: bytes) -> dict[int, Revoked]:
    """The serials the CRL(s) in `path` revoke (several PEM blocks may follow each other), each
    checked to be signed by the authority in `authority_pem`; ValueError when one is not, or
    the file holds no CRL; {} when there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    authorities = x509.load_pem_x509_certificates(authority_pem)
    blocks = [b"-----BEGIN X509 CRL-----" + part for part in data.split(b"-----BEGIN X509 CRL-----")[1:]]
    if not blocks:
        raise ValueError(f"{path} holds no certificate revocation list (PEM 'X509 CRL')")
    out: dict[int, Revoked] = {}
    for block in blocks:
        crl = x509.load_pem_x509_crl(block)
        # Every authority of that name is tried: a renewed authority keeps its subject.
        keys = [a.public_key() for a in authorities if a.subject == crl.issuer]
        if not any(isinstance(key, _SIGNING_KEYS) and crl.is_signature_valid(key) for key in keys):
            raise ValueError(f"{path}: the revocation list of {crl.issuer.rfc4514_string()} is not signed by the "
                             f"authority this process trusts")
        for entry in crl:
            out[entry.serial_number] = Revoked(entry.serial_number, entry.revocation_date_utc)
    return out


class Revocations:
    """The revocation list in `path`, read again when the file changes (module docstring)."""

    def __init__(self, path: Path, authority_pem: bytes, authority_path: Path | None = None) -> None:
        self.path = Path(path)
        self._authority = authority_pem
        self._authority_path = authority_path
        """Where the authority was read from: read again at each look (a renewed authority)."""
        self._lock = threading.Lock()
        self._stamp = _stamp(self.path)
        self._revoked = read_list(self.path, authority_pem)  # ValueError at start: the process says so
        self._refused: set[tuple[int, int, int]] = set()
        self._next_look = time.monotonic() + LOOK_EVERY_SECONDS

    def revoked(self, serial: int) -> Revoked | None:
        """The revocation of the certificate with `serial`, None when it is not on the list."""
        if time.monotonic() >= self._next_look:
            self._look()
        return self._revoked.get(serial)

    def __len__(self) -> int:
        return len(self._revoked)

    def _look(self) -> None:
        with self._lock:  # gRPC's threads and the event loop may both ask
            self._next_look = time.monotonic() + LOOK_EVERY_SECONDS
            now = _stamp(self.path)
            if now == self._stamp or now in self._refused:
                return
            try:
                if self._authority_path is not None:
                    self._authority = self._authority_path.read_bytes()
                revoked = read_list(self.path, self._authority)
            except Exception as exc:  # noqa: BLE001 - whatever is wrong with it, the list in force stays
                self._refused.add(now)
                log.warning("the certificate revocation list %s changed but cannot be used (%s): the list in force "
                            "(%d revoked) stays", self.path, exc, len(self._revoked))
                return
            if _stamp(self.path) != now:
                return  # written again while read: the next look takes it
            self._stamp, self._revoked = now, revoked
        log.info("certificate revocation list %s: %d revoked", self.path, len(revoked))


_serials: dict[bytes, int] = {}
"""Peer certificates' serial numbers by their PEM (a caller presents the same one call after call)."""
_SERIALS_KEPT = 4096


def serial_of_pem(pem: bytes) -> int:
    """The serial number of the certificate in `pem` (ValueError when it is not one)."""
    serial = _serials.get(pem)
    if serial is None:
        serial = x509.load_pem_x509_certificate(pem).serial_number
        if len(_serials) >= _SERIALS_KEPT:
            _serials.clear()
        _serials[pem] = serial
    return serial


_UNSET = object()
_current: object = _UNSET


def use(revocations: Revocations | None) -> None:
    """Make `revocations` this process's list (None: none), whatever the environment says."""
    global _current
    _current = revocations


def current(environ: Mapping[str, str] | None = None) -> Revocations | None:
    """This process's list: what `use` set, else the file `STRONGROOM_TLS_CRL` names, checked
    against the authority `STRONGROOM_TLS_CA` names (read once; None without either: a serving
    process reads its TLS settings from the same environment, security/tls.py). ValueError or
    OSError when the files are there but cannot be used."""
    global _current
    if _current is _UNSET:
        env = os.environ if environ is None else environ
        path, authority = env.get(CRL_ENV, ""), env.get(AUTHORITY_PEM_ENV, "")
        _current = (Revocations(Path(path), Path(authority).read_bytes(), Path(authority))
                    if path and authority else None)
    return _current  # type: ignore[return-value]


def refused(serial: int | None) -> Refusal | None:
    """Why a peer presenting the certificate with `serial` is refused (None: it is not revoked,
    no list is in force, or the peer presented none)."""
    revocations = current()
    if revocations is None or serial is None:
        return None
    found = revocations.revoked(serial)
    return None if found is None else Refusal("certificate_revoked", found.sentence())


def serial_of_ssl(ssl_object: ssl.SSLObject | None) -> int | None:
    """The serial number of the certificate the other side of a TLS stream presented."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    return int(cert["serialNumber"], 16) if cert and "serialNumber" in cert else None
