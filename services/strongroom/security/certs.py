"""A local certificate authority: what `strongroom up`, the tests, the chaos suite and the
benchmarks run their processes' TLS with (issued with `cryptography`).

The authority lives in one directory: `ca.pem` (the certificate every process trusts) and
`ca.key` (its private key, mode 0600, read only by the process that issues). Each process it
starts gets a certificate of its own naming its identity (`strongroom.security.identity`) and,
for a server, the loopback names a local client dials (`127.0.0.1`, `::1`, `localhost`), in
`issued/<identity>.pem` with its key beside it. Keys are ECDSA P-256: a handshake costs a
fraction of an RSA one and every TLS stack of a gRPC client language reads them.

An authority found in the directory is reused (a restarted local deployment keeps its trust);
a certificate found is reused while it has more than a day left.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from strongroom.security import tls
from strongroom.security.identity import Identity, Kind
from strongroom.security.revocation import Revoked, read_list
from strongroom.security.tls import Tls

__all__ = ["AUTHORITY_ENV", "CA_VALID_DAYS", "CERT_VALID_DAYS", "OPERATOR", "LocalCa", "active", "activate", "set_up_local"]

CA_VALID_DAYS = 3650
CERT_VALID_DAYS = 397
"""A leaf's validity: the longest the public web allows, long enough for a local deployment."""
LOOPBACK = ("127.0.0.1", "::1", "localhost")
CRL_VALID_DAYS = 30
"""The revocation list's next update, as it states it (Strongroom's processes take a list for
as long as it is the newest in its file: an authority that stops writing one does not lock
everyone out)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    # A temporary file of its own: two commands writing at once each replace the file whole.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The authority's directory, for one writer of its revocation list at a time."""
    with open(directory / ".crl.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class LocalCa:
    """A certificate authority kept in a directory; issues each process's certificate."""

    def __init__(self, directory: Path, name: str = "Strongroom local CA") -> None:
        self.directory = Path(directory)
        self.ca_path = self.directory / "ca.pem"
        self.key_path = self.directory / "ca.key"
        self.crl_path = self.directory / "crl.pem"
        """The authority's revocation list (an empty one written with the authority)."""
        if not (self.ca_path.exists() and self.key_path.exists()):
            self._create(name)
        self._cert = x509.load_pem_x509_certificate(self.ca_path.read_bytes())
        loaded = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        self._key = loaded
        if not self.crl_path.exists():
            # An empty list from the start: etcd, given its file, refuses every connection while
            # the file is missing.
            with _locked(self.directory):
                if not self.crl_path.exists():
                    self._sign_list([])

    def _create(self, name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CA_VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        _write(self.key_path, _key_pem(key), private=True)
        _write(self.ca_path, cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, identity: Identity, hosts: tuple[str, ...] = LOOPBACK, *,
              not_before: datetime.datetime | None = None, not_after: datetime.datetime | None = None,
              directory: Path | None = None) -> Tls:
        """A certificate for `identity` (server and client use) valid for `hosts`, with its key:
        the TLS settings of a process that holds it.

        An existing one for the same identity is reused while valid for another day, unless
        `not_before` or `not_after` asks for a particular validity (tests of expired ones)."""
        out = Path(directory or self.directory / "issued")
        out.mkdir(parents=True, exist_ok=True)
        cert_path = self.issued_path(identity, out)
        key_path = cert_path.with_suffix(".key")
        if not_before is None and not_after is None and cert_path.exists() and key_path.exists():
            current = x509.load_pem_x509_certificate(cert_path.read_bytes())
            if (current.not_valid_after_utc - _now() > datetime.timedelta(days=1)
                    and current.issuer == self._cert.subject and current.serial_number not in self.revoked()):
                return Tls.load(self.ca_path, cert_path, key_path)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity.uri())]
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(identity))]))
                .issuer_name(self._cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(not_before or now - datetime.timedelta(minutes=5))
                .not_valid_after(not_after or now + datetime.timedelta(days=CERT_VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                             content_commitment=False, data_encipherment=False,
                                             key_agreement=True, key_cert_sign=False, crl_sign=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                               critical=False)
                .sign(self._key, hashes.SHA256()))
        _write(key_path, _key_pem(key), private=True)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return Tls.load(self.ca_path, cert_path, key_path)

    def issued_path(self, identity: Identity, directory: Path | None = None) -> Path:
        """Where the certificate issued for `identity` is kept (its key beside it, `.key`)."""
        return Path(directory or self.directory / "issued") / f"{str(identity).replace('/', '-')}.pem"

    def issued(self) -> list[x509.Certificate]:
        """The certificates this authority issued that are kept in its directory, by name."""
        return [x509.load_pem_x509_certificate(path.read_bytes())
                for path in sorted((self.directory / "issued").glob("*.pem"))]

    def revoked(self) -> dict[int, Revoked]:
        """The certificates this authority revoked, by serial number."""
        return read_list(self.crl_path, self.ca_path.read_bytes())

    def revoke(self, serial: int) -> Revoked:
        """Put the certificate with `serial` on the authority's revocation list (`crl.pem`
        beside `ca.pem`: what every process it starts checks its peers against,
        `strongroom.security.revocation`), signed again with every earlier entry; the entry
        (the earlier one when it was revoked already)."""
        with _locked(self.directory):  # two revocations at once: both kept
            listed = self.revoked()
            if serial in listed:
                return listed[serial]
            entry = Revoked(serial, _now().replace(microsecond=0))
            self._sign_list([*listed.values(), entry])
        return entry

    def _next_number(self, at_least: int) -> int:
        """The next list's number: above the one in force (RFC 5280: they increase)."""
        try:
            crl = x509.load_pem_x509_crl(self.crl_path.read_bytes())
            number = crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number
        except (OSError, ValueError, x509.ExtensionNotFound):
            return at_least
        return max(at_least, number + 1)

    def _sign_list(self, entries: list[Revoked]) -> None:
        now = _now().replace(microsecond=0)
        builder = (x509.CertificateRevocationListBuilder().issuer_name(self._cert.subject)
                   .last_update(now).next_update(now + datetime.timedelta(days=CRL_VALID_DAYS))
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                                  critical=False)
                   .add_extension(x509.CRLNumber(self._next_number(int(now.timestamp()))), critical=False))
        for entry in entries:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(entry.serial).revocation_date(entry.at).build())
        _write(self.crl_path, builder.sign(self._key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


_ACTIVE: LocalCa | None = None
"""The authority this process issues its children's certificates from (None: they run without
TLS). Set once by whatever starts a deployment: `strongroom up`, the test session, the chaos
suite, the benchmarks."""


def activate(ca: LocalCa | None) -> None:
    """Issue the certificates of every process started from now on from `ca` (None: plaintext)."""
    global _ACTIVE
    _ACTIVE = ca


def active() -> LocalCa | None:
    """The authority `activate` set, if any."""
    return _ACTIVE


AUTHORITY_ENV = "STRONGROOM_TLS_AUTHORITY"
"""The directory of the authority (ca.pem, ca.key) a local deployment issues from, instead of
its own in `<data_dir>/tls`."""

OPERATOR = Identity(Kind.USER, "admin")
"""Who the CLI and the launcher are on a local deployment."""


def set_up_local(directory: Path, enabled: bool = True) -> Tls | None:
    """TLS for a local deployment whose authority lives in `directory` (unless one is active
    already: the benchmark's; or `$STRONGROOM_TLS_AUTHORITY` names the directory of another:
    the test session's, an operator's own), made this process's: every process started
    from now on gets a certificate of it, and this process calls them as `OPERATOR`. Returns
    the operator's settings (what the state file names), None when `enabled` is False: then
    everything started from here runs in plaintext."""
    if not enabled:
        activate(None)
        tls.use(None)
        return None
    ca = active()
    if ca is not None and not ca.ca_path.exists():
        ca = None  # its directory went with the deployment that made it (a benchmark's previous run)
    ca = ca or LocalCa(Path(os.environ.get(AUTHORITY_ENV) or directory))
    activate(ca)
    mine = tls.current()
    if mine is not None and mine.ca == ca.ca_path.read_bytes():
        return mine
    settings = ca.issue(OPERATOR)
    tls.use(settings)
    return settings
