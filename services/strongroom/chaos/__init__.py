"""Fault injection with a history checker (issue 6).

A workload of confirmed publishers and acknowledging consumers, and of senders and receivers
of units of work, runs against a real cluster (etcd and member processes on loopback) while a
fault is injected over and over; every operation goes to a JSONL history that `checker.check`
judges: lost, duplicated, phantom, reordered, acknowledged-then-redelivered, confirmed by a
fenced member; a unit of work partial, lost, delivered after an abort or after a confirmed
receiver commit.

- `history`  the event record
- `checker`  pure logic over a history
- `workload` publishers, consumers, probes
- `uowload`  senders and receivers of units of work
- `operations` what the clients share: an outcome from an exception, pacing
- `faults`   the faults and their rounds
- `cluster`  the processes under test and their hooks (proxies, fsync journal, tmpfs)
- `drsite`   a cluster with a disaster-recovery standby site (the `dr` fault)
- `losttail` what a DR activation lost: the old primary's log after the shared index
- `netproxy` per-link loopback proxies that know which process connects (a process of their own)
- `fsync`    the fsync journal and the crash image that keeps only fsynced bytes
- `runner`   scenarios and the `make chaos` table
"""

from strongroom.chaos.checker import CheckResult, check
from strongroom.chaos.history import Event, History, load_history

__all__ = ["CheckResult", "Event", "History", "check", "load_history"]
