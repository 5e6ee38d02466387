"""Identities, the decision of who may call, and the local authority's certificates (in-process)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from strongroom.security import refusals
from strongroom.security.certs import LocalCa
from strongroom.security.identity import Identity, Kind, admits
from strongroom.security.tls import from_env


def test_an_identity_round_trips_through_its_uri_and_strangers_are_none() -> None:
    for ident in (Identity(Kind.MEMBER, "m1", "rio"), Identity(Kind.ROUTER, "r2", "tokyo"),
                  Identity(Kind.DR, "dr", "default"), Identity(Kind.USER, "alice")):
        assert Identity.parse(ident.uri()) == ident
    for uri in ("https://example.com/x", "strongroom://member/rio", "strongroom://wizard/rio/m1",
                "strongroom://user/", "strongroom://member//m1"):
        assert Identity.parse(uri) is None
    assert Identity.from_uris(["spiffe://x/y", "strongroom://member/rio/m3"]) == Identity(Kind.MEMBER, "m3", "rio")


def test_only_the_named_kinds_of_the_cluster_are_admitted_and_a_member_only_as_itself() -> None:
    m1 = Identity(Kind.MEMBER, "m1", "rio")
    assert admits(m1, "rio", [Kind.MEMBER]) is None
    assert admits(m1, "rio", [Kind.MEMBER], claimed="m1") is None
    refused = admits(m1, "rio", [Kind.MEMBER], claimed="m2")
    assert refused is not None and refused.reason == "impersonation"
    refused = admits(m1, "london", [Kind.MEMBER])
    assert refused is not None and refused.reason == "wrong_identity" and "member/rio/m1" in refused.message
    refused = admits(Identity(Kind.ROUTER, "r1", "rio"), "rio", [Kind.MEMBER])
    assert refused is not None and refused.reason == "wrong_identity"
    refused = admits(None, "rio", [Kind.DR, Kind.MEMBER])
    assert refused is not None and refused.reason == "no_identity" and "dr or member" in refused.message
    router = Identity(Kind.ROUTER, "r1", "london")
    assert admits(router, ["london", "tokyo"], [Kind.ROUTER]) is None
    assert admits(router, ["tokyo"], [Kind.ROUTER]) is not None
    # A user belongs to no cluster: admitted by kind alone where users may call (the committed log).
    assert admits(Identity(Kind.USER, "ops"), "rio", [Kind.DR, Kind.MEMBER, Kind.USER]) is None
    assert admits(Identity(Kind.USER, "ops"), "rio", [Kind.DR]) is not None
    # So does the realm service (named by its site): the chart's tools run in its pod.
    realm = Identity(Kind.REALM, "realm", "realm")
    assert admits(realm, "rio", [Kind.DR, Kind.MEMBER, Kind.USER, Kind.REALM]) is None
    refused = admits(realm, "rio", [Kind.MEMBER])
    assert refused is not None and refused.reason == "wrong_identity"
    # A DR service's certificate names no member: a claimed leader does not apply to it.
    assert admits(Identity(Kind.DR, "dr", "rio"), "rio", [Kind.DR, Kind.MEMBER], claimed="m1") is None


def test_the_authority_issues_certificates_naming_the_identity_and_reuses_them(tmp_path: Path) -> None:
    ca = LocalCa(tmp_path / "ca")
    assert oct(ca.key_path.stat().st_mode & 0o777) == "0o600"
    files = ca.issue(Identity(Kind.MEMBER, "m1", "rio"))
    assert oct(files.key_path.stat().st_mode & 0o777) == "0o600"
    cert = x509.load_pem_x509_certificate(files.cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "strongroom://member/rio/m1" in sans.get_values_for_type(x509.UniformResourceIdentifier)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.ca_path.read_bytes()))
    again = ca.issue(Identity(Kind.MEMBER, "m1", "rio"))
    assert again.cert_path.read_bytes() == files.cert_path.read_bytes()  # still valid: the same one
    # The same directory is the same authority: what it issued before still verifies.
    assert LocalCa(tmp_path / "ca").ca_path.read_bytes() == ca.ca_path.read_bytes()
    assert files.identity() == Identity(Kind.MEMBER, "m1", "rio")


def test_an_expired_certificate_is_refused_by_a_tls_server_of_the_authority(tmp_path: Path) -> None:
    ca = LocalCa(tmp_path / "ca")
    now = datetime.datetime.now(datetime.timezone.utc)
    old = ca.issue(Identity(Kind.USER, "late"), not_before=now - datetime.timedelta(days=9),
                   not_after=now - datetime.timedelta(days=1))
    cert = x509.load_pem_x509_certificate(old.cert_path.read_bytes())
    assert cert.not_valid_after_utc < now
    # A fresh one replaces an expired one on the next ordinary issue.
    fresh = ca.issue(Identity(Kind.USER, "late"))
    assert x509.load_pem_x509_certificate(fresh.cert_path.read_bytes()).not_valid_after_utc > now
    server = ca.issue(Identity(Kind.MEMBER, "m1", "rio")).server_context()
    assert server.verify_mode == ssl.CERT_REQUIRED and server.minimum_version == ssl.TLSVersion.TLSv1_3


def test_tls_settings_come_from_all_three_variables_or_none(tmp_path: Path) -> None:
    ca = LocalCa(tmp_path / "ca")
    files = ca.issue(Identity(Kind.USER, "u"))
    assert from_env({}) is None
    assert from_env(files.env()) is not None
    with pytest.raises(ValueError, match="STRONGROOM_TLS_KEY"):
        from_env({k: v for k, v in files.env().items() if k != "STRONGROOM_TLS_KEY"})
    with pytest.raises(OSError):
        from_env({**files.env(), "STRONGROOM_TLS_CERT": str(tmp_path / "missing.pem")})


def test_grpc_handshake_lines_are_recognised_as_refusals() -> None:
    line = (b"I1125 06:11:30.784956     372 ssl_transport_security.cc:2563] Handshake failed with error "
            b"SSL_ERROR_SSL: error:100000c0:SSL routines:OPENSSL_internal:PEER_DID_NOT_RETURN_A_CERTIFICATE")
    match = refusals.HANDSHAKE_LINE.search(line)
    assert match is not None and match.group(1) == b"SSL_ERROR_SSL"
    assert refusals.HANDSHAKE_LINE.search(b"I1125 member m1 listening on 127.0.0.1:1") is None
    before = refusals.snapshot().get(("link", "no_identity"), 0)
    refusals.count("link", "no_identity", "a test", "127.0.0.1:1")
    assert refusals.snapshot()[("link", "no_identity")] == before + 1


def test_refusals_are_all_counted_and_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """A flood of refused attempts (a client retrying with a wrong certificate, tokens tried)
    is counted in full, while the log takes one line per where and reason per interval, which
    says how many went unlogged before it."""
    key = ("grpc", "token_forged")
    before = refusals.snapshot().get(key, 0)
    t0 = 1_000_000.0  # a monotonic time of the test's own, far from any other test's lines
    with caplog.at_level("WARNING", logger="strongroom.security"):
        for i in range(500):
            refusals.count(*key, f"attempt {i}", "127.0.0.1:9", now=t0 + i * 0.01)  # 5 s of them
        refusals.count(*key, "after the interval", "127.0.0.1:9", now=t0 + refusals.LOG_EVERY_SECONDS)
        refusals.count("grpc", "token_unknown", "another reason", now=t0 + 1)  # its own line
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused (grpc, token_")]
    assert refusals.snapshot()[key] == before + 501
    assert lines[0] == "refused (grpc, token_forged) from 127.0.0.1:9: attempt 0"
    assert lines[1] == ("refused (grpc, token_forged) from 127.0.0.1:9: after the interval "
                        "(499 more refused so since the last line)")
    assert lines[2].startswith("refused (grpc, token_unknown)")
    assert len(lines) == 3


def test_grpc_handshake_refusals_pass_on_at_the_logs_rate_and_are_all_counted() -> None:
    line = (b"E1202 ssl_transport_security.cc:2563] Handshake failed with error SSL_ERROR_SSL: "
            b"PEER_DID_NOT_RETURN_A_CERTIFICATE")
    key = ("grpc", "tls_handshake")
    before = refusals.snapshot().get(key, 0)
    t0 = 2_000_000.0
    kept = refusals.pass_on([b"a member's line", line, line, line, b"another line"], t0)
    assert kept == [b"a member's line", line, b"another line"]
    (later,) = refusals.pass_on([line], t0 + refusals.LOG_EVERY_SECONDS)
    assert later == line + b" (2 more refused so since the last line)"
    assert refusals.snapshot()[key] == before + 4


def test_a_local_deployment_does_not_use_an_authority_whose_directory_is_gone(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark runs one deployment after another, each removed with its directory: the next
    one makes an authority of its own instead of reading the files of the one removed."""
    import shutil

    from strongroom.security import certs, tls

    monkeypatch.delenv(certs.AUTHORITY_ENV, raising=False)
    before_ca, before_tls = certs.active(), tls.current()
    try:
        certs.activate(None)
        first = certs.set_up_local(tmp_path / "one" / "tls")
        assert first is not None and (tmp_path / "one" / "tls" / "ca.pem").exists()
        shutil.rmtree(tmp_path / "one")
        second = certs.set_up_local(tmp_path / "two" / "tls")
        assert second is not None and second.ca_path == tmp_path / "two" / "tls" / "ca.pem"
        assert second.ca != first.ca
    finally:
        certs.activate(before_ca)
        tls.use(before_tls)


async def test_a_channel_opened_with_the_process_certificate_is_outdated_once_it_is_renewed(tmp_path: Path) -> None:
    from strongroom.channels import open_channel, outdated
    from strongroom.security import tls

    ca = LocalCa(tmp_path / "ca")
    first = ca.issue(Identity(Kind.USER, "alice"), directory=tmp_path / "alice")
    before = tls.current()
    try:
        tls.use(first)
        own = open_channel("127.0.0.1:1")
        given = open_channel("127.0.0.1:1", tls=first)
        plain = open_channel("127.0.0.1:1", tls=None)
        assert not outdated(own) and not outdated(given) and not outdated(plain)
        now = datetime.datetime.now(datetime.UTC)
        renewed = ca.issue(Identity(Kind.USER, "alice"), directory=tmp_path / "alice",
                           not_before=now - datetime.timedelta(minutes=1), not_after=now + datetime.timedelta(days=9))
        tls.use(renewed)
        assert outdated(own), "a cached channel would reconnect with the certificate it was opened with"
        assert not outdated(given) and not outdated(plain), "settings of its own are the caller's to renew"
        assert not outdated(open_channel("127.0.0.1:1"))
        for channel in (own, given, plain):
            await channel.close()
    finally:
        tls.use(before)


async def test_a_retired_channel_closes_only_once_its_open_calls_have_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A channel replaced after a renewal: its open stream runs on to its end (none is cut), then
    the channel closes. Over a real gRPC server in this process; `active_calls` reads grpc.aio's
    own record of a channel's calls, which this test holds it to."""
    import grpc

    from strongroom import channels

    monkeypatch.setattr(channels, "RETIRE_POLL", 0.05)
    release = asyncio.Event()

    async def stream(request: bytes, context: object) -> object:
        yield b"first"
        await release.wait()
        yield b"last"

    handler = grpc.method_handlers_generic_handler("t.T", {"S": grpc.unary_stream_rpc_method_handler(stream)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        call = channel.unary_stream("/t.T/S")(b"")
        assert await call.read() == b"first"
        assert channels.active_calls(channel) == [call]
        channels.retire(channel)
        await asyncio.sleep(0.3)
        release.set()
        assert await call.read() == b"last", "the stream was cut by the retirement"
        assert await call.read() is grpc.aio.EOF
        for _ in range(100):
            if not channels.active_calls(channel):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        with pytest.raises(grpc.aio.UsageError):
            await channel.unary_unary("/t.T/S")(b"")  # closed now
    finally:
        await server.stop(None)
