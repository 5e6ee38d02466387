"""How a persistence member is started, and the roles it plays.

Every setting of a member is a field of `MemberConfig`: the command line of
`strongroom-persistence` and the environment variables it reads build one (`main.py`), tests and
tools build one directly. Nothing else configures a member.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

__all__ = ["GC_THRESHOLDS", "MemberConfig", "Role", "SWITCH_INTERVAL", "gc_thresholds"]

# Garbage collection. A member allocates a few dozen objects per message it handles and keeps
# many alive for long (every stored message's); with CPython's default thresholds (700, 10, 10)
# the three members and the client of the pipelined benchmark spent 112 ms of a 0.9 s window in
# collections, 76 ms of it in four full ones of up to 22 ms, each stalling every round in flight;
# with a first threshold of 10,000, 23 ms (README, Benchmarks). Cycles are still collected, in
# fewer, larger young collections.
GC_THRESHOLDS = (10_000, 10, 10)

# Threads that hand work to the event loop (gRPC's poller, RocksDB calls that release the GIL)
# get it back within 0.5 ms instead of CPython's default 5 ms.
SWITCH_INTERVAL = 0.0005


class Role(str, Enum):
    """What a member is doing in its cluster."""

    FOLLOWER = "follower"
    """Accepts appends from the leader of the highest epoch it promised."""
    RECOVERING = "recovering"
    """Elected: gathering promises, adopting the most advanced log, committing its no-op."""
    LEADER = "leader"
    """Serving clients."""


def gc_thresholds(setting: str | None) -> tuple[int, int, int]:
    """The collector's thresholds: `setting` ("a,b,c", from STRONGROOM_GC_THRESHOLDS) or
    GC_THRESHOLDS; ValueError for anything else."""
    if not setting:
        return GC_THRESHOLDS
    try:
        values = tuple(int(v) for v in setting.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0:
        raise ValueError(f"STRONGROOM_GC_THRESHOLDS must be three counts 'a,b,c', not {setting!r}")
    return values[0], values[1], values[2]


@dataclass(frozen=True)
class MemberConfig:
    """One member of one persistence cluster, as it is started."""

    cluster: str
    """The persistence cluster this member belongs to (a cluster of the realm)."""
    member: str
    """This member's name in its cluster's member list."""
    data_dir: Path
    """Where the member keeps its RocksDB files and its swap space."""
    etcd_endpoints: str
    """etcd endpoints, host:port[,host:port]."""
    address: str = ""
    """host:port peers and clients reach this member on. Empty until the server is bound:
    `create_server` fills it from `advertise`, else the `listen` host and the bound port."""
    link_address: str = ""
    """host:port the leader sends appends to (the replication link). Empty: none, appends come
    over gRPC. `create_server` fills it when `replication_listen` is not "none"."""
    listen: str = "127.0.0.1:0"
    """host:port to serve gRPC on (port 0: any free port)."""
    advertise: str = ""
    """host:port peers and clients use, when it is not the listen address (a pod's DNS name)."""
    replication_listen: str = ""
    """host:port of the replication link. Empty: the gRPC host and any free port; "none": no
    link, the leader replicates to this member over the gRPC AppendStream."""
    replication_advertise: str = ""
    """host:port the leader reaches the replication link on. Empty: the `advertise` host, else
    the link's listen host, with the link's port."""
    log_level: str = "INFO"
    """Python logging level of the member's log."""
    switch_interval: float = SWITCH_INTERVAL
    """sys.setswitchinterval (seconds); STRONGROOM_SWITCH_INTERVAL."""
    gc_thresholds: tuple[int, int, int] = field(default=GC_THRESHOLDS)
    """gc.set_threshold; STRONGROOM_GC_THRESHOLDS="700,10,10" restores CPython's default."""
    event_log_dir: str = ""
    """The store event log's root directory (`--event-log-dir`, STRONGROOM_EVENT_LOG_DIR): turns
    the event log on, or overrides the directory the realm's cluster names (`event_log`).
    Empty: as the realm says (off by default). Every member of a cluster must see the same
    directory."""

    pstore_report: str = ""
    """The file of the PSTORE report of the records this member creates and deletes, when the
    realm's `persistent_store.report` turns it on (`--pstore-report`; else
    STRONGROOM_PSTORE_REPORT; else PSTORE.REPORT in the data directory)."""

    metrics_listen: str = ""
    """host:port of the Prometheus endpoint (`--metrics-listen`, STRONGROOM_METRICS_LISTEN).
    Empty: the gRPC listen host, any free port; "none": no endpoint."""
    metrics_url: str = ""
    """Where the endpoint is scraped (http://host:port/metrics; the advertise host when one is
    given). Empty until the server is bound (`create_server` fills it), and with no endpoint."""
    stats_interval: float = 60.0
    """Seconds between two lines of the statistics log (`--stats-interval`,
    STRONGROOM_STATS_INTERVAL; 0: no statistics log)."""

    run_mode: str = ""
    """A shared store's instance (docs/store-operations.md): "standard" once it holds the store's
    lock (`standby_server.stand_by`), as it serves; "" for a member of any other cluster."""
    partner: str = ""
    """A shared store's instance: the other instance's host:port (clients learn it from every
    answer, metadata `strongroom-partner`); "" for other members."""
    control_interval: float = 0.0
    """A shared store's instance: the realm's control interval (seconds)."""

    @property
    def replication_link(self) -> bool:
        """Whether this member takes appends on a replication link."""
        return self.replication_listen != "none"

    def with_environment(self, environ: Mapping[str, str] = os.environ) -> MemberConfig:
        """This configuration with the settings environment variables give (ValueError for a
        malformed one)."""
        interval = environ.get("STRONGROOM_SWITCH_INTERVAL")
        try:
            switch = float(interval) if interval else self.switch_interval
        except ValueError:
            raise ValueError(f"STRONGROOM_SWITCH_INTERVAL must be seconds, not {interval!r}") from None
        thresholds = environ.get("STRONGROOM_GC_THRESHOLDS")
        stats = environ.get("STRONGROOM_STATS_INTERVAL")
        try:
            stats_interval = float(stats) if stats else self.stats_interval
        except ValueError:
            raise ValueError(f"STRONGROOM_STATS_INTERVAL must be seconds, not {stats!r}") from None
        if stats_interval < 0:
            raise ValueError(f"STRONGROOM_STATS_INTERVAL must be 0 (off) or more seconds, not {stats!r}")
        return replace(self, switch_interval=switch,
                       gc_thresholds=gc_thresholds(thresholds) if thresholds else self.gc_thresholds,
                       event_log_dir=self.event_log_dir or environ.get("STRONGROOM_EVENT_LOG_DIR", ""),
                       metrics_listen=self.metrics_listen or environ.get("STRONGROOM_METRICS_LISTEN", ""),
                       stats_interval=stats_interval)
