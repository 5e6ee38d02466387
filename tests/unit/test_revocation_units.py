"""The authority's certificate revocation list (security/revocation.py, certs.LocalCa.revoke):
what it lists, what is refused as a list, and a change taken without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from strongroom.security import revocation
from strongroom.security.certs import LocalCa
from strongroom.security.identity import Identity, Kind
from strongroom.security.revocation import Revocations, read_list, serial_of_pem


def _serial(ca: LocalCa, name: str) -> int:
    return serial_of_pem(ca.issue(Identity(Kind.USER, name)).cert)


def test_a_revocation_is_listed_signed_and_kept_with_the_earlier_ones(tmp_path: Path) -> None:
    ca = LocalCa(tmp_path / "ca")
    assert ca.revoked() == {} and ca.crl_path.exists()  # an empty list from the start (etcd needs the file)
    first, second, kept = _serial(ca, "lost-laptop"), _serial(ca, "copied-key"), _serial(ca, "fine")
    entry = ca.revoke(first)
    assert ca.revoke(first) == entry  # revoking again changes nothing
    ca.revoke(second)
    listed = read_list(ca.crl_path, ca.ca_path.read_bytes())
    assert set(listed) == {first, second} and kept not in listed
    assert listed[first] == entry


def test_a_list_not_signed_by_the_authority_or_not_a_list_is_refused(tmp_path: Path) -> None:
    ca, other = LocalCa(tmp_path / "ca"), LocalCa(tmp_path / "other")
    other.revoke(_serial(ca, "someone"))
    with pytest.raises(ValueError, match="not signed by the authority this process trusts"):
        read_list(other.crl_path, ca.ca_path.read_bytes())
    junk = tmp_path / "junk.pem"
    junk.write_text("not a list\n")
    with pytest.raises(ValueError, match="holds no certificate revocation list"):
        read_list(junk, ca.ca_path.read_bytes())
    assert read_list(tmp_path / "absent.pem", ca.ca_path.read_bytes()) == {}


def test_a_change_of_the_file_is_taken_and_a_broken_one_leaves_the_list_in_force(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(revocation, "LOOK_EVERY_SECONDS", 0.0)
    ca = LocalCa(tmp_path / "ca")
    lost, later = _serial(ca, "lost"), _serial(ca, "later")
    ca.crl_path.unlink()
    revocations = Revocations(ca.crl_path, ca.ca_path.read_bytes())  # no file: nothing revoked
    assert revocations.revoked(lost) is None
    ca.revoke(lost)
    found = revocations.revoked(lost)
    assert found is not None and f"serial {lost:x}" in found.sentence()
    good = ca.crl_path.read_bytes()
    ca.crl_path.write_bytes(good[: len(good) // 2])  # cut short while written
    assert revocations.revoked(lost) is not None and len(revocations) == 1
    with pytest.raises(ValueError):  # the authority does not sign over a list it cannot read
        ca.revoke(later)
    ca.crl_path.write_bytes(good)
    ca.revoke(later)  # written whole again, with both
    assert revocations.revoked(later) is not None and revocations.revoked(lost) is not None


def test_the_authority_issues_a_new_certificate_in_place_of_a_revoked_one(tmp_path: Path) -> None:
    ca = LocalCa(tmp_path / "ca")
    holder = Identity(Kind.MEMBER, "m1", "default")
    first = serial_of_pem(ca.issue(holder).cert)
    assert serial_of_pem(ca.issue(holder).cert) == first  # reused while valid
    ca.revoke(first)
    again = serial_of_pem(ca.issue(holder).cert)
    assert again != first and again not in ca.revoked()


def test_a_process_without_tls_or_without_a_list_checks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(revocation, "_current", revocation._UNSET)
    assert revocation.current({revocation.CRL_ENV: "/nowhere/crl.pem"}) is None  # no authority: no TLS
    assert revocation.refused(1234) is None


def test_a_process_reads_its_list_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = LocalCa(tmp_path / "ca")
    lost = _serial(ca, "lost")
    ca.revoke(lost)
    monkeypatch.setattr(revocation, "_current", revocation._UNSET)
    found = revocation.current({revocation.CRL_ENV: str(ca.crl_path), "STRONGROOM_TLS_CA": str(ca.ca_path)})
    assert found is not None and len(found) == 1
    refused = revocation.refused(lost)
    assert refused is not None and refused.reason == "certificate_revoked"
    assert revocation.refused(_serial(ca, "fine")) is None
