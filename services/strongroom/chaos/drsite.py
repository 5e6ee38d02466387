"""A cluster with a disaster-recovery standby site, for the chaos `dr` scenario (docs/dr.md).

The primary site is the usual `ChaosCluster` (etcd, m1-m3); the standby site (`StandbySite`)
has its own real etcd, the realm's standby set s1-s3 and the real `strongroom-dr` reading the
primary's committed log. Both sites store the same realm: the standby members with their
addresses (a primary's new leader asks them for their DR role before its first write, so an old
primary restarted after an activation is fenced at once) and the primary's addresses as the
standby's `primary`. Every process is started here and stopped here by pid.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from strongroom.api.v1 import dr_pb2
from strongroom.chaos.cluster import CLUSTER, ChaosCluster, ClusterSpec, realm_text
from strongroom.chaos.losttail import LostTail, lost_tail
from strongroom.dr.transport import activate_at, dr_status_at, read_committed, settled_leader
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.process import ProcessGroup, dr_argv, kill, spawn, stop_processes
from strongroom.realm.store import store_realm

__all__ = ["DrCluster", "StandbySite"]

log = logging.getLogger("strongroom.chaos.drsite")


class StandbySite(ChaosCluster):
    """The standby site: its own etcd, members s1-s3 and the DR service."""

    def __init__(self, root: Path, spec: ClusterSpec) -> None:
        super().__init__(root, spec, prefix="s")
        self.dr: subprocess.Popen[bytes] | None = None
        self.dr_address = ""
        self.dr_paused = False
        self.activated = False

    async def start_site(self, realm: str) -> None:
        """Start etcd, store `realm`, start the standby members and the DR service; return once
        the standby leader holds everything the primary committed."""
        self.etcd = start_etcd(self.root / "etcd", log_path=self.root / "logs" / "etcd.log", own_group=True)
        await store_realm(self.etcd.endpoint, realm, "chaos-realm.yaml")
        for n in self.names:
            self.start_member(n)
        await self.leader(timeout=60)
        self.dr_address = f"127.0.0.1:{free_port()}"
        self.dr = spawn(dr_argv(self.etcd.endpoint, CLUSTER, ["--heartbeat", "0.2", "--report", "1",
                                                              "--listen", self.dr_address]),
                        self.root / "logs" / "dr.log", group=ProcessGroup.OWN,
                        banner=f"=== start dr at monotonic {time.monotonic():.3f}\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = await self.dr_status()
            if st is not None and st.primary_member and st.primary_commit_index > 0 and st.entries_behind == 0:
                return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the DR service did not catch up within 60s\n{self.log_tails()}")

    async def dr_status(self) -> dr_pb2.DrStatus | None:
        """The DR service's status (None if it does not answer)."""
        return await dr_status_at(self.dr_address, timeout=2)

    def pause_dr(self) -> None:
        """SIGSTOP the DR service: the standby falls behind the primary."""
        if self.dr is not None and self.dr.poll() is None:
            os.kill(self.dr.pid, signal.SIGSTOP)
            self.dr_paused = True

    def resume_dr(self) -> None:
        if self.dr is not None and self.dr.poll() is None:
            os.kill(self.dr.pid, signal.SIGCONT)
        self.dr_paused = False

    async def activate(self) -> dr_pb2.ActivateResponse:
        """`DrService.Activate` (not forced): this site becomes the primary of the next
        generation. A refusal comes out as its `StrongroomError`."""
        answer = await activate_at(self.dr_address, CLUSTER)
        self.activated = True
        return answer

    def stop(self) -> None:
        """Stop the DR service, then the members and etcd (by pid)."""
        if self.dr is not None:
            if self.dr_paused:
                self.resume_dr()
            stop_processes([self.dr], grace=3)
            self.dr = None
        super().stop()


class DrCluster(ChaosCluster):
    """The primary site (etcd, m1-m3) and its standby site (`StandbySite`)."""

    def __init__(self, root: Path, spec: ClusterSpec) -> None:
        super().__init__(root, spec)
        self.standby = StandbySite(root / "standby", spec)
        self.activation: dr_pb2.ActivateResponse | None = None

    def realm(self) -> str:
        """The realm both sites store: the standby set with its members' addresses, and the
        primary's addresses where the DR service reads."""
        members = "".join(f"        - name: {n}\n          address: {self.standby.direct(n)}\n"
                          for n in self.standby.names)
        section = (f"    standby:\n      members:\n{members}      primary: [{', '.join(self.endpoints())}]\n")
        return realm_text(self.spec, section)

    async def start(self) -> None:
        """The primary site as any chaos cluster, then the standby site caught up with it."""
        await super().start()
        await self.standby.start_site(self.realm())

    def serving(self) -> ChaosCluster:
        """The standby site once it was activated, else the primary site."""
        return self.standby if self.standby.activated else self

    def member_of(self, address: str) -> str:
        found = super().member_of(address)
        return found if found != "?" else self.standby.member_of(address)

    def lose_site(self) -> None:
        """The disaster: SIGKILL every primary member and the primary's etcd (their disks stay)."""
        for n in self.names:
            proc = self.procs.get(n)
            if proc is not None and proc.poll() is None:
                if n in self.paused:
                    self.resume(n)
                kill(proc)
        self.kill_etcd()

    async def fenced(self, timeout: float) -> tuple[bool, str]:
        """Wait until every primary member says its site is fenced (dr_role `fenced`, by a newer
        generation); (ok, what they said last)."""
        deadline = time.monotonic() + timeout
        view = ""
        while time.monotonic() < deadline:
            sts = await self.statuses()
            view = ", ".join(f"{n}: {st.dr_role} gen {st.generation} newer {st.newer_generation}"
                             for n, st in sorted(sts.items())) or "none answers"
            if len(sts) == len(self.names) and all(st.dr_role == "fenced" and st.newer_generation > 0
                                                   for st in sts.values()):
                return True, view
            await asyncio.sleep(0.3)
        return False, view

    async def read_lost_tail(self) -> tuple[LostTail, str]:
        """The old primary's log after the index the activated site holds, read from the (fenced)
        member that knows the most of it committed; and what each member holds (commit and last
        index: entries past every member's commit index are not in the tail read)."""
        assert self.activation is not None
        since = self.activation.standby_last_index
        sts = await self.statuses()
        if not sts:
            raise RuntimeError("no member of the old primary site answers")
        told = {n: st.dr_since_index for n, st in sts.items() if st.dr_since_index != since}
        if told:
            raise RuntimeError(f"the old site's members were told another shared index than {since}: {told}")
        # From the site's leader once it committed its whole log (a fenced leader commits what it
        # holds): the members' commit indexes right after a restart are stale.
        address, st = await settled_leader([self.direct(n) for n in self.names], CLUSTER)
        name = st.member
        sts = await self.statuses()
        entries = await read_committed(address, since + 1, st.commit_index)
        view = ", ".join(f"{n} commit {s.commit_index} last {s.last_index}" for n, s in sorted(sts.items()))
        log.info("lost tail read from %s: %d entries after %d (%s)", name, len(entries), since, view)
        return lost_tail(CLUSTER, since, entries), f"read from {name}; {view}"

    def stop(self) -> None:
        """Stop the standby site, then the primary's."""
        self.standby.stop()
        super().stop()

    def log_tails(self, chars: int = 3000) -> str:
        return super().log_tails(chars) + "\n" + self.standby.log_tails(chars)
