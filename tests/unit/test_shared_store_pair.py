"""Standby on a shared store, in-process: the realm's shared_store and its file:line errors, the
handshake's comparison, the store's lock across processes, and the standby's control loop with a
partner that answers, stops answering, or is a standby too."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from strongroom.errors import NotOperational, RealmInvalid, error_for_reason
from strongroom.persistence.shared_standby import (
    HandshakeFailed,
    Identity,
    PartnerView,
    Standby,
    StoreLock,
    StoreLocked,
    identity,
    mismatches,
    take_as_standard,
    watch_ownership,
)
from strongroom.realm.model import parse_realm

REALM = """\
clusters:
  - name: solo
    storage: {storage}
    members:
{members}
    shared_store:
      instances: {instances}
      control_interval_seconds: 1.5
stores:
  - name: default
    cluster: solo
destinations:
  - name: "*"
    store: default
"""


def realm(storage: str = "disk-sync", members: str = "      - name: m1",
          instances: str = "[127.0.0.1:7101, 127.0.0.1:7102]") -> str:
    return REALM.format(storage=storage, members=members, instances=instances)


def problems(text: str) -> list[str]:
    with pytest.raises(RealmInvalid) as err:
        parse_realm(text, "r.yaml")
    return err.value.problems if hasattr(err.value, "problems") else str(err.value).splitlines()[1:]


def test_a_shared_store_realm_parses() -> None:
    cluster = parse_realm(realm()).cluster("solo")
    assert cluster is not None and cluster.shared_store is not None
    assert cluster.shared_store.instances == ["127.0.0.1:7101", "127.0.0.1:7102"]
    assert cluster.shared_store.control_interval_seconds == 1.5


@pytest.mark.parametrize(("text", "expected"), [
    (realm(instances="[127.0.0.1:7101]"), "r.yaml:7:7: clusters[0].shared_store.instances: names 1 instance"),
    (realm(instances="[127.0.0.1:7101, 127.0.0.1:7101]"), "r.yaml:7:7: clusters[0].shared_store.instances: names "
                                                          "127.0.0.1:7101 twice"),
    (realm(instances="[127.0.0.1:7101, nowhere]"), "r.yaml:7:7: clusters[0].shared_store.instances"),
    (realm(storage="memory"), "r.yaml:3:5: clusters[0].storage: cluster 'solo' has a shared store but its storage "
                              "is memory"),
    (realm(members="      - name: m1\n      - name: m2\n      - name: m3"),
     "r.yaml:8:5: clusters[0].shared_store: cluster 'solo' has 3 members; a shared store belongs to a single-member"),
    (realm(members="      - name: m1\n        address: 127.0.0.1:7101"),
     "r.yaml:6:9: clusters[0].members[0].address: member 'm1' of cluster 'solo' has a shared store"),
])
def test_shared_store_problems_name_file_line_and_column(text: str, expected: str) -> None:
    found = problems(text)
    assert any(p.startswith(expected) for p in found), found


def test_not_operational_is_retriable_and_rebuilt_from_its_reason() -> None:
    err = error_for_reason("NOT_OPERATIONAL", "taking over", {"partner": "a:1"})
    assert isinstance(err, NotOperational) and err.retriable and err.retried_by_client
    assert err.code == "UNAVAILABLE" and err.metadata == {"partner": "a:1"}


def test_the_handshake_names_every_difference() -> None:
    ours = Identity("solo", "m1", "abc", 6, "0.1.0", "plaintext")
    assert mismatches(ours, ours, "p:1") == []
    assert mismatches(ours, Identity("solo", "m1", "", 6, "0.1.0", "plaintext"), "p:1") == []  # no store yet
    found = mismatches(ours, Identity("other", "m2", "xyz", 5, "0.2.0", "tls"), "p:1")
    assert len(found) == 5
    assert found[1].startswith("not the same store: the partner at p:1 holds store xyz")


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
os.write(fd, b"the other process")
print("held", flush=True)
time.sleep(60)
"""


def test_the_handshake_names_the_transport_security_this_process_serves_with() -> None:
    """Members serve with mutual TLS (a certificate of their own) or plaintext (`--insecure`):
    the two instances of a shared store must agree, so each says which."""
    from strongroom.persistence.shared_standby import transport_security
    from strongroom.security import tls

    saved = tls.current()
    try:
        tls.use(None)
        plain = transport_security()
        tls.use(tls.Tls(Path("ca.pem"), Path("m.pem"), Path("m.key"), b"", b"", b""))
        secured = transport_security()
    finally:
        tls.use(saved)
    assert (plain, secured) == ("plaintext", "mutual-tls")
    ours = Identity("solo", "m1", "abc", 7, "0.1.0", secured)
    found = mismatches(ours, Identity("solo", "m1", "abc", 7, "0.1.0", plain), "p:1")
    assert len(found) == 1 and "'plaintext'" in found[0] and "'mutual-tls'" in found[0]


def test_the_store_lock_excludes_another_process_until_it_is_gone(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "store.lock")], stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == b"held"
        lock = StoreLock(tmp_path)
        assert not lock.try_acquire("us")
        assert lock.holder() == "the other process"
        with pytest.raises(StoreLocked, match="held by another instance .the other process."):
            take_as_standard(lock, "127.0.0.1:1")
        other.kill()
        other.wait()
        assert lock.try_acquire("us") and lock.held
        store_id = lock.ensure_store_id()
        assert store_id and lock.ensure_store_id() == store_id
        assert identity("solo", "m1", tmp_path).store_id == store_id
    finally:
        other.kill()
        other.wait()


class Partner:
    """The partner as the standby's probe sees it (None: it does not answer)."""

    def __init__(self, view: PartnerView | None) -> None:
        self.view = view
        self.asked = 0

    async def probe(self, address: str, timeout: float) -> PartnerView | None:
        self.asked += 1
        return self.view


def standby(tmp_path: Path, partner: Partner) -> Standby:
    return Standby("solo", "m1", tmp_path, "127.0.0.1:2", "127.0.0.1:1", 0.01, partner.probe, StoreLock(tmp_path))


async def test_the_standby_watches_an_answering_standard_and_takes_over_once_it_is_silent(tmp_path: Path) -> None:
    partner = Partner(PartnerView("standard", identity("solo", "m1", tmp_path)))
    sb = standby(tmp_path, partner)
    run = asyncio.create_task(sb.run())
    await asyncio.sleep(0.1)
    assert not run.done() and sb.standard_answers and "watching" in sb.state and not sb.lock.held
    partner.view = None
    await asyncio.wait_for(run, 5)
    assert sb.lock.held and "taking the store over" in sb.state


async def test_a_standby_beside_a_standby_takes_the_store(tmp_path: Path) -> None:
    sb = standby(tmp_path, Partner(PartnerView("standby", identity("solo", "m1", tmp_path))))
    await asyncio.wait_for(sb.run(), 5)
    assert sb.lock.held


async def test_a_silent_standard_that_holds_the_lock_is_waited_for(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "store.lock")], stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == b"held"
        sb = standby(tmp_path, Partner(None))
        run = asyncio.create_task(sb.run())
        await asyncio.sleep(0.2)
        assert not run.done() and not sb.lock.held
        assert "the store's lock is held (the other process): waiting" in sb.state
        other.kill()
        other.wait()
        await asyncio.wait_for(run, 5)
        assert sb.lock.held
    finally:
        other.kill()
        other.wait()


async def test_a_partner_on_another_store_fails_the_handshake(tmp_path: Path) -> None:
    sb = standby(tmp_path, Partner(PartnerView("standard", Identity("solo", "m1", "elsewhere", 6,
                                                                    identity("solo", "m1", tmp_path).version,
                                                                    "plaintext"))))
    with pytest.raises(HandshakeFailed, match="not the same store"):
        await asyncio.wait_for(sb.run(), 5)
    assert not sb.lock.held


async def test_a_standard_whose_lock_file_names_another_holder_is_stopped(tmp_path: Path) -> None:
    """The second guard: a standard that lost its lock without knowing (an NFS lease expired
    while it was frozen) finds another holder in the lock file and is stopped."""
    lock = StoreLock(tmp_path)
    assert lock.try_acquire("pid 1 at a:1")
    lost: list[str] = []
    watch = asyncio.create_task(watch_ownership(lock, 0.01, lost.append))
    await asyncio.sleep(0.05)
    assert not watch.done() and lost == [] and lock.still_ours()
    # What the other instance writes once it holds the lock (here through a second descriptor,
    # which in this process would drop our fcntl lock: the guard looks at the file, not the lock).
    (tmp_path / "store.lock").write_text("pid 2 at b:1 since 0\n")
    await asyncio.wait_for(watch, 2)
    assert lost == ["pid 2 at b:1 since 0"]


def test_status_lists_both_instances_and_the_standard_as_the_member(capsys: pytest.CaptureFixture[str]) -> None:
    from strongroom.api.v1 import admin_pb2
    from strongroom.cli.status_cmd import _print_status
    from strongroom.local.leader import MemberReply

    standard = admin_pb2.ClusterStatus(cluster="solo", member="m1", role="leader", leader="m1", leader_address="a:1",
                                       epoch=5, synced=True)
    standard.shared_store.MergeFrom(admin_pb2.SharedStoreStatus(run_mode="standard", partner_address="a:2",
                                                                store_id="abc", control_interval_seconds=2))
    standby = admin_pb2.ClusterStatus(cluster="solo", member="m1", role="follower", synced=True)
    standby.shared_store.MergeFrom(admin_pb2.SharedStoreStatus(run_mode="standby", partner_address="a:1",
                                                               state="watching the standard at a:1 every 2 s",
                                                               control_interval_seconds=2))
    _print_status([MemberReply("a:1", standard), MemberReply("a:2", standby)])
    out = capsys.readouterr().out
    assert "shared store instance a:1: standard (partner a:2, store abc, control interval 2 s)" in out
    assert "shared store instance a:2: standby: watching the standard at a:1 every 2 s" in out
    member_rows = [line for line in out.splitlines() if line.lstrip(" *").startswith("m1 ")]
    assert len(member_rows) == 1 and "a:1" in member_rows[0] and "leader" in member_rows[0]


def test_the_example_realm_is_valid() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "shared-store.yaml"
    cluster = parse_realm(path.read_text(), str(path)).cluster("solo")
    assert cluster is not None and cluster.shared_store is not None and len(cluster.members) == 1
