"""Disaster-recovery drill (`strongroom drill dr --platform local`): lose the whole primary site
under confirmed publishing, activate the standby site, account for every confirmed message, then
demote the old site and fail back (docs/dr.md).

`dr_drill_local` runs two temporary sites of its own with the local launcher (`LocalCluster`, a
realm like examples/dr.yaml on free ports, started as `strongroom up` starts it): site A (etcd,
realm service, m1-m3 and its DR service, idle while the site is the primary) and site
`<cluster>-standby` (etcd, realm service, s1-s3 and the DR service that ships to them). It

1. publishes `ballast` messages of 1 KiB to a queue nobody consumes (the state fail back must
   not copy) and waits until the standby holds them;
2. publishes `messages` with confirmation to `drill.queue` (with `lose_tail`, the DR service is
   SIGKILLed first, so the standby lacks every one of them, and started again after the
   disaster); once half are confirmed, SIGKILLs every process of site A (members, realm
   service, DR service, etcd) by the pids of the launcher's state;
3. activates the standby site (`DrService.Activate`, the code of `strongroom dr activate`) and
   publishes the rest (the last quarter at least) there: the disaster-to-first-publish time is
   until the first of those is confirmed;
4. consumes `drill.queue` at the new primary and counts received, lost, duplicated;
5. restarts site A on its disks (etcd on its port and data, the realm service, the members and
   the DR service, through the launcher), waits until every member is fenced by generation 1, reads the lost tail from its log (`strongroom dr
   manifest`'s code) and checks that every confirmed message lost is in it, and that the
   confirmed messages in it are exactly the lost ones;
6. demotes site A (`strongroom dr demote`'s code), waits for its members to cut back to the
   shared index (site A's DR service, following its site's record, ships from the new primary
   from then on: nothing is started by hand), publishes `failback_messages` at the new primary
   and waits until site A's members applied everything and hold the new primary's grid; reports
   the bytes and snapshots that DR service shipped against the state's size.

The report's `ok` is false, with `failures` naming each broken invariant (`judge`), when a
message came twice, a confirmed message was lost outside the tail, the tail's confirmed
messages are not exactly the lost ones, site A did not come back fenced, or fail back did not
converge without a snapshot.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from strongroom.drill import (
    WINDOW,
    ConfirmTracker,
    DrillAborted,
    body_for,
    collect_deliveries,
    delivery_counts,
    index_of,
)
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.launcher import (
    ClusterStartError,
    LocalCluster,
    start_member,
    start_realm_service,
)
from strongroom.local.leader import fetch_statuses
from strongroom.realm.model import parse_realm

__all__ = [
    "BALLAST_DESTINATION",
    "DR_CLUSTER",
    "DR_DESTINATION",
    "cut_back",
    "dr_drill_local",
    "drill_realm",
    "judge",
    "manifest_indexes",
    "member_grid",
    "tail_check",
]

DR_CLUSTER = "main"
DR_DESTINATION = "drill.queue"
BALLAST_DESTINATION = "drill-ballast.queue"
FAILBACK_DESTINATION = "drill-failback.queue"
BALLAST_BYTES = 1024
PRIMARY_RETRY_SECONDS = 3.0  # how long the publisher rides out the lost site before failing
STEP_TIMEOUT = 60.0
ACTIVATE_TIMEOUT = 120.0
CONSUME_IDLE = 5.0  # at the new primary, the lost tail never comes: stop after this long without

Progress = Callable[[str], None]


def drill_realm(primary: list[str], standby: list[str], compact_after_entries: int = 20000) -> str:
    """The drill's realm: cluster `main` (disk-sync) with members m1.. at `primary` and a standby
    set s1.. at `standby` (addresses given, so a restarted old primary asks the standby site
    before its first write), one store, `*.queue` queues."""
    members = "".join(f'      - {{name: m{i}, address: "{a}"}}\n' for i, a in enumerate(primary, 1))
    stand = "".join(f'        - {{name: s{i}, address: "{a}"}}\n' for i, a in enumerate(standby, 1))
    listed = ", ".join(f'"{a}"' for a in primary)
    return (f"clusters:\n  - name: {DR_CLUSTER}\n    storage: disk-sync\n    lease_ttl_seconds: 2\n"
            f"    compact_after_entries: {compact_after_entries}\n    members:\n{members}"
            f"    standby:\n      members:\n{stand}      primary: [{listed}]\n"
            f"stores:\n  - name: drill\n    cluster: {DR_CLUSTER}\n"
            f"destinations:\n  - name: \"*.queue\"\n    kind: queue\n    store: drill\n"
            f"  - name: \"*\"\n    kind: topic\n    store: drill\n")


# --- the report's pure parts ---------------------------------------------------------------------


def manifest_indexes(rows: Iterable[dict[str, Any]], destination: str = DR_DESTINATION) -> set[int]:
    """The drill indexes of the messages a lost-tail manifest lists for `destination`."""
    out: set[int] = set()
    for row in rows:
        if row.get("op") != "publish" or row.get("destination") != destination:
            continue
        index = index_of(base64.b64decode(row.get("message", {}).get("body", "")))
        if index is not None:
            out.add(index)
    return out


def tail_check(confirmed: set[int], delivered: Iterable[int], tail: set[int]) -> dict[str, Any]:
    """Lost (confirmed, never delivered) against the tail the old primary's log holds after the
    shared index: every lost message must be in it, and the confirmed messages in it must be
    exactly the lost ones (the new primary has nothing of the tail)."""
    lost = confirmed - set(delivered)
    tail_confirmed = confirmed & tail
    out: dict[str, Any] = {"lost_in_tail": len(lost & tail), "lost_outside_tail": len(lost - tail),
                           "tail_messages": len(tail), "tail_confirmed": len(tail_confirmed),
                           "lost_equals_tail": lost == tail_confirmed}
    if lost - tail:
        out["lost_outside_tail_sample"] = sorted(lost - tail)[:20]
    if tail_confirmed - lost:
        out["tail_received_sample"] = sorted(tail_confirmed - lost)[:20]
    return out


def judge(report: dict[str, Any]) -> list[str]:
    """Every invariant the report breaks, one sentence each (none: the drill passed)."""
    failures: list[str] = []
    if report.get("problem"):
        failures.append(f"the drill did not finish: {report['problem']}")
    if report.get("duplicated", 0):
        failures.append(f"{report['duplicated']} messages came twice")
    tail = report.get("tail") or {}
    if tail.get("lost_outside_tail", 0):
        failures.append(f"{tail['lost_outside_tail']} confirmed messages lost outside the old primary's tail")
    if tail and not tail.get("lost_equals_tail", False):
        failures.append(f"the tail holds {tail.get('tail_confirmed')} confirmed messages, but {report.get('lost')} "
                        f"were lost")
    if report.get("seconds_to_first_publish") is None and "problem" not in report:
        failures.append("no publish was accepted at the new primary")
    if report.get("unconfirmed_at_new_primary", 0):
        failures.append(f"{report['unconfirmed_at_new_primary']} messages published at the new primary were not "
                        f"confirmed")
    if report.get("fenced") is False:
        failures.append("the old primary site did not come back fenced by the new generation")
    fb = report.get("failback") or {}
    if "failback" in report and not fb.get("converged"):
        failures.append("fail back did not converge: the old site does not hold the new primary's state")
    if fb.get("snapshots_shipped", 0):
        failures.append(f"fail back shipped {fb['snapshots_shipped']} snapshots (a full copy)")
    return failures


# --- helpers --------------------------------------------------------------------------------------


async def _wait(check: Callable[[], Awaitable[bool]], what: str, say: Progress, timeout: float = STEP_TIMEOUT) -> float:
    """Until `check()` holds; a line every 5 s; returns the seconds waited. DrillAborted after
    `timeout`."""
    start = time.monotonic()
    last = start
    while not await check():
        now = time.monotonic()
        if now - start > timeout:
            raise DrillAborted(f"{what}: not after {timeout:.0f} s")
        if now - last >= 5.0:
            last = now
            say(f"waiting until {what} ({now - start:.0f} s) ...")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def _statuses(addresses: list[str]) -> list[Any]:
    return [reply.status for reply in await fetch_statuses(addresses)]


def member_grid(status: Any) -> dict[str, Any]:
    """The replicated state a member reports: per store its messages, bytes and durables."""
    return {s.name: (s.messages, s.bytes, sorted((d.destination, d.name, d.pending_messages, d.pending_bytes)
                                                  for d in s.durables))
            for s in status.stores if s.replicated}


async def cut_back(reply: Any, since: int, generation: int) -> bool:
    """Whether a demoted member (`reply`: its `fetch_statuses` answer) cut its log back to `since`:
    it is the standby of `generation` and holds nothing after `since`, or (its site's DR service
    ships from the new primary as soon as the site is demoted) what it applied after `since` is
    of `generation`, not the old tail. The local drill and the Kubernetes drill's agent ask it."""
    from strongroom.api.v1 import replication_pb2 as rpb
    from strongroom.dr.record import generation_of
    from strongroom.dr.transport import read_committed

    s = reply.status
    if s is None or s.dr_role != "standby" or s.generation != generation:
        return False
    if s.last_index == since and s.applied_index == since:
        return True
    if s.applied_index <= since:
        return False
    ((_, raw),) = await read_committed(reply.endpoint, since + 1, since + 1)
    return generation_of(rpb.LogEntry.FromString(raw).epoch) == generation


async def _publish_all(client: Any, destination: str, bodies: Iterable[bytes]) -> None:
    pub = client.publisher(destination, window=WINDOW)
    try:
        for body in bodies:
            await pub.send(body)
        await pub.flush()
    finally:
        await pub.close()


# --- the drill ------------------------------------------------------------------------------------


class _LocalDr:
    """The two sites of one local drill run and the steps that act on them."""

    def __init__(self, base: Path, say: Progress) -> None:
        self.base = base
        self.say = say
        self.cluster = LocalCluster(base, detach=False)

    @property
    def primary(self) -> list[str]:
        return self.cluster.endpoints(DR_CLUSTER)

    @property
    def standby(self) -> list[str]:
        return [p.address for p in self.cluster.standbys[DR_CLUSTER].values()]

    @property
    def dr_address(self) -> str:
        """The DR service at the standby site (the one activated)."""
        return self.cluster.drs[DR_CLUSTER].address

    @property
    def failback_dr_address(self) -> str:
        """The DR service at site A, which ships there once the site is demoted."""
        return self.cluster.primary_drs[DR_CLUSTER].address

    async def start(self, compact_after_entries: int) -> None:
        primary = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        standby = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        text = drill_realm(primary, standby, compact_after_entries)
        realm = parse_realm(text, "<dr drill realm>")
        await self.cluster.start(realm, text, "<dr drill realm>", progress=self.say)
        lagging = await self.cluster.wait_until_synced(30.0, self.say)
        if lagging:
            raise DrillAborted(f"not every member replicates: {'; '.join(lagging)}")

    async def shipping(self) -> None:
        """Until the standby holds all the primary committed so far. The target is the primary
        leader's own commit index, not the DR service's view of it: that view trails the primary's
        committed-entry stream, so "0 entries behind" can hold a moment before the last entries
        confirmed to a client have reached the DR service."""
        from strongroom.cli.dr_cmd import site_member
        from strongroom.dr.transport import dr_status_at

        _, status = await site_member(self.primary, DR_CLUSTER)
        target = int(status.commit_index)

        async def there() -> bool:
            st = await dr_status_at(self.dr_address)
            return st is not None and bool(st.primary_member) and st.standby_last_index >= target
        await _wait(there, "the standby set holds what the primary committed", self.say)

    def lose_primary_site(self) -> list[str]:
        """SIGKILL every process of site A (its members, realm service, DR service and etcd), by
        the pids the launcher's state lists, at once; then reap them. Their disks stay."""
        state = self.cluster.state()
        site = state["sites"][""]
        victims = [(f"member {m}", int(d["pid"])) for m, d in state["clusters"][DR_CLUSTER]["members"].items()]
        victims += [("DR service", int(state["clusters"][DR_CLUSTER]["dr"]["pid"])),
                    ("realm service", int(site["realm"]["pid"])), ("etcd", int(site["etcd"]["pid"]))]
        for _, pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in [*self.cluster.members[DR_CLUSTER].values(), self.cluster.primary_drs[DR_CLUSTER]]:
            proc.kill()  # reaps
        a = self.cluster.sites[""]
        if a.realm_service is not None:
            a.realm_service.kill()
        if a.etcd.process is not None:
            a.etcd.process.wait()
        return [f"{label} (pid {pid})" for label, pid in victims]

    def kill_dr(self) -> None:
        self.cluster.drs[DR_CLUSTER].kill()

    async def restart_dr(self) -> None:
        from strongroom.dr.transport import dr_status_at

        self.cluster.start_dr_service(DR_CLUSTER)

        async def up() -> bool:
            st = await dr_status_at(self.dr_address)
            return st is not None and st.standby_last_index > 0
        await _wait(up, "the DR service answers again", self.say)

    async def restore_primary_site(self) -> None:
        """Site A comes back on its disks: its etcd on the same port and data, its realm service,
        its members at their addresses, its DR service."""
        a = self.cluster.sites[""]
        port = int(a.etcd.endpoint.rpartition(":")[2])
        a.etcd = await asyncio.to_thread(start_etcd, a.etcd.data_dir, port, self.base / "logs" / "etcd.log", True)
        a.realm_service = start_realm_service(a.etcd.endpoint, self.base)
        assert self.cluster.realm is not None
        spec = self.cluster.realm.cluster(DR_CLUSTER)
        assert spec is not None
        for m in spec.members:
            self.cluster.members[DR_CLUSTER][m.name] = start_member(a.etcd.endpoint, DR_CLUSTER, m.name, self.base,
                                                                    m.address)
        self.cluster.save()
        self.cluster.start_dr_service(DR_CLUSTER, primary_site=True)

    def stop(self) -> None:
        self.cluster.stop(5.0)


async def dr_drill_local(messages: int, ballast: int = 1000, lose_tail: bool = False, failback_messages: int = 50,
                         data_dir: Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the local DR drill (see the module docstring); returns the report.

    The two sites live in a new directory under `data_dir` (default: the system temp dir),
    removed when the drill passes and kept, with its logs, when not."""
    say: Progress = progress or (lambda _line: None)
    if data_dir is not None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="strongroom-dr-drill-", dir=data_dir))
    sites = _LocalDr(base, say)
    report: dict[str, Any] = {
        "platform": "local", "cluster": DR_CLUSTER, "messages": messages, "ballast": ballast, "lose_tail": lose_tail,
        "confirmed": 0, "received": 0, "lost": 0, "duplicated": 0, "seconds_to_first_publish": None, "ok": False,
    }
    clients: list[Any] = []
    try:
        # Up to every message in its own entry, twice over: the log is not compacted during the
        # drill, so the manifest can read the whole tail and fail back needs no snapshot.
        await sites.start(max(20000, 4 * (messages + ballast + failback_messages)))
        await _run(sites, report, clients, messages, ballast, lose_tail, failback_messages, say)
    except Exception as exc:  # noqa: BLE001 - a drill always reports, with the logs kept
        report["problem"] = f"{type(exc).__name__}: {exc}"
        expected = isinstance(exc, ClusterStartError | DrillAborted)
        say(f"drill failed: {report['problem']}" + ("" if expected else f"\n{traceback.format_exc()}"))
    finally:
        for client in clients:
            try:
                await asyncio.wait_for(client.close(), 10)
            except Exception:  # noqa: BLE001, S110 - tearing down; the processes go next anyway
                pass
        await asyncio.to_thread(sites.stop)
    report["failures"] = judge(report)
    report["ok"] = not report["failures"]
    if report["ok"]:
        shutil.rmtree(base, ignore_errors=True)
        (report.get("tail") or {}).pop("file", None)  # removed with the rest
    else:
        report["logs"] = str(base / "logs")
    return report


async def _run(sites: _LocalDr, report: dict[str, Any], clients: list[Any], messages: int, ballast: int,
               lose_tail: bool, failback_messages: int, say: Progress) -> None:
    from strongroom.cli.dr_cmd import site_member, write_manifest
    from strongroom.dr.transport import activate_at, demote_at, dr_status_at
    from strongroom.client import Client
    from strongroom.client.retry import RetryPolicy

    old = Client(sites.primary, client_name="strongroom-dr-drill",
                 retry=RetryPolicy(timeout=PRIMARY_RETRY_SECONDS, unreachable_timeout=PRIMARY_RETRY_SECONDS))
    clients.append(old)
    if ballast:
        say(f"publishing {ballast} messages of {BALLAST_BYTES} bytes to {BALLAST_DESTINATION} (the state fail back "
            f"must not copy)")
        await _publish_all(old, BALLAST_DESTINATION,
                           (f"ballast-{i:09d}".encode().ljust(BALLAST_BYTES, b".") for i in range(ballast)))
    await sites.shipping()

    # Confirmed publishing at site A; the whole site dies once half are confirmed.
    tracker = ConfirmTracker(messages)
    confirmed, timing, pending = tracker.confirmed, tracker.timing, tracker.pending
    say(f"publishing {messages} messages to {DR_DESTINATION} with confirmation; site A dies at "
        f"{tracker.kill_at} confirmed")
    old_pub = old.publisher(DR_DESTINATION, window=WINDOW)
    next_index = messages
    if lose_tail:
        say("SIGKILL the DR service: the standby receives none of these messages")
        sites.kill_dr()
    for i in range(messages):
        if tracker.half.is_set() or i >= tracker.hold_at:
            await asyncio.wait_for(tracker.half.wait(), STEP_TIMEOUT)
            next_index = i
            break
        fut = await old_pub.send(body_for(i))
        pending.add(fut)
        fut.add_done_callback(functools.partial(tracker.on_done, i))
    if next_index == messages:
        await asyncio.wait_for(tracker.half.wait(), STEP_TIMEOUT)
    at_kill = len(confirmed)
    killed = sites.lose_primary_site()
    timing["kill"] = time.monotonic()
    timing["next_index"] = next_index
    say(f"{at_kill} confirmed: DISASTER, SIGKILL {', '.join(killed)}")
    report["disaster"] = {"killed": killed, "confirmed_before": at_kill, "sent_at_site_a": next_index}
    # Site A's unconfirmed messages fail in the background (their publisher gives up after
    # PRIMARY_RETRY_SECONDS); recovery goes on at once.

    # Activation at site B.
    if lose_tail:
        await sites.restart_dr()
    started = time.monotonic()
    answer = await activate_at(sites.dr_address, DR_CLUSTER, timeout=ACTIVATE_TIMEOUT)
    report["activation"] = {
        "generation": answer.generation, "exact": answer.exact, "primary_commit_index": answer.primary_commit_index,
        "heard_seconds_ago": round(answer.heard_seconds_ago, 3), "standby_last_index": answer.standby_last_index,
        "entries_lost_at_least": answer.entries_lost_at_least, "leader": answer.leader,
        "seconds_to_serve": round(answer.seconds_to_serve, 3), "seconds": round(time.monotonic() - started, 3),
        "summary": answer.summary}
    say(f"activated: {answer.summary}")

    # The rest is published at the new primary; the first confirmation there times the outage.
    new = Client(sites.standby, client_name="strongroom-dr-drill", retry=RetryPolicy(timeout=STEP_TIMEOUT))
    clients.append(new)
    rest = list(range(next_index, messages))
    pub = new.publisher(DR_DESTINATION, window=WINDOW)
    try:
        if not rest:  # nothing held back: one message of no index times it
            await (await pub.send(b"drill-first-at-new-primary"))
            timing["first_confirm"] = time.monotonic()
        for i in rest:
            fut = await pub.send(body_for(i))
            pending.add(fut)
            fut.add_done_callback(functools.partial(tracker.on_done, i))
        if pending:  # the new primary's, and site A's last ones (failing)
            await asyncio.wait(set(pending), timeout=STEP_TIMEOUT)
    finally:
        for f in list(pending):
            f.cancel()
        await pub.close()
        await old_pub.close()
    await asyncio.sleep(0)
    report["disaster"]["unconfirmed_at_site_a"] = next_index - sum(1 for i in confirmed if i < next_index)
    report["unconfirmed_at_new_primary"] = len(rest) - sum(1 for i in confirmed if i >= next_index)
    if "first_confirm" in timing:
        report["seconds_to_first_publish"] = round(timing["first_confirm"] - timing["kill"], 3)
    report["confirmed"] = len(confirmed)
    say(f"{len(rest)} published at the new primary, first accepted {report['seconds_to_first_publish']} s after "
        f"the disaster; consuming {DR_DESTINATION} there")

    deliveries, order = await collect_deliveries(new, DR_DESTINATION, confirmed, idle_timeout=CONSUME_IDLE)
    report.update(delivery_counts(confirmed, deliveries, order))
    say(f"received {report['received']} of {report['confirmed']} confirmed: lost {report['lost']}, duplicated "
        f"{report['duplicated']}, unconfirmed received {report['unconfirmed_received']}")

    # Site A comes back on its disks: fenced before its first write; its log has the tail.
    sites.say("restarting site A on its disks (etcd, realm service, m1-m3, its DR service)")
    await sites.restore_primary_site()
    report["fenced"] = False

    async def fenced() -> bool:
        states = await _statuses(sites.primary)
        return all(s is not None and s.dr_role == "fenced" and s.newer_generation == answer.generation
                   for s in states)
    report["fenced_seconds"] = round(await _wait(fenced, "every member of site A is fenced", say), 3)
    report["fenced"] = True
    # From site A's leader once it committed its whole log (`site_member` waits for it).
    address, status = await site_member(sites.primary, DR_CLUSTER)
    manifest, path = await write_manifest(DR_CLUSTER, address, status, str(sites.base / "lost-tail.jsonl"))
    tail = manifest_indexes(manifest.rows)
    report["tail"] = {"from_index": manifest.from_index, "to_index": manifest.to_index, "entries": manifest.entries,
                      "messages": manifest.messages, "acks": manifest.acks, "file": path,
                      **tail_check(confirmed, deliveries.keys(), tail)}
    report["activation"]["entries_lost"] = manifest.entries
    say(f"site A fenced after {report['fenced_seconds']} s; its lost tail: entries {manifest.from_index}-"
        f"{manifest.to_index}, {manifest.messages} messages ({report['tail']['tail_confirmed']} confirmed); "
        f"lost {report['lost']}, outside the tail {report['tail']['lost_outside_tail']}")

    # Demote site A and fail back: its DR service ships only what the new primary added.
    demoted = await demote_at(address, DR_CLUSTER)
    since = int(demoted.since_index)

    async def all_cut_back() -> bool:
        return all([await cut_back(reply, since, answer.generation) for reply in await fetch_statuses(sites.primary)])
    await _wait(all_cut_back, f"site A's members cut their logs back to index {since}", say)
    say(f"site A demoted (cut back to index {since}); its DR service at {sites.failback_dr_address}; publishing "
        f"{failback_messages} more at the new primary")
    started = time.monotonic()
    await _publish_all(new, FAILBACK_DESTINATION, (f"failback-{i}".encode() for i in range(failback_messages)))
    new_address, new_status = await site_member(sites.standby, DR_CLUSTER)
    target = new_status.commit_index
    report["failback"] = {"since_index": since, "generation": demoted.generation, "target_index": target,
                          "entries": target - since, "converged": False}

    async def applied() -> bool:
        states = await _statuses(sites.primary)
        return all(s is not None and s.applied_index >= target for s in states)
    await _wait(applied, f"site A's members applied index {target}", say)
    new_address, new_status = await site_member(sites.standby, DR_CLUSTER)
    states = await _statuses(sites.primary)
    fb = report["failback"]
    fb["seconds"] = round(time.monotonic() - started, 3)
    fb["converged"] = all(s is not None and member_grid(s) == member_grid(new_status) for s in states)
    shipped = await dr_status_at(sites.failback_dr_address)
    if shipped is not None:
        fb["bytes_shipped"] = int(shipped.bytes_shipped)
        fb["snapshots_shipped"] = int(shipped.snapshots_shipped)
    stores = [s for s in new_status.stores if s.replicated]
    fb["state_bytes"] = sum(int(s.bytes) for s in stores)
    fb["state_messages"] = sum(int(s.messages) for s in stores)
    leader = next((n for n, p in sites.cluster.standbys[DR_CLUSTER].items() if p.address == new_address), None)
    if leader is not None:
        from strongroom.persistence.drivers.base import directory_size

        fb["member_disk_bytes"] = directory_size(Path(sites.cluster.standbys[DR_CLUSTER][leader].data_dir))
    say(f"fail back {'converged' if fb['converged'] else 'did NOT converge'} after {fb['seconds']} s: "
        f"{fb.get('bytes_shipped')} bytes and {fb.get('snapshots_shipped')} snapshots shipped for {fb['entries']} "
        f"entries; the state holds {fb['state_messages']} messages, {fb['state_bytes']} bytes "
        f"({fb.get('member_disk_bytes')} bytes on a member's disk)")
