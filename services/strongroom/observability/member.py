"""A persistence member's metrics: its status (the values `strongroom status --json` shows) and its
tallies, as Prometheus families (catalog.py names and explains each one); `MemberTelemetry`
runs a member's endpoint and statistics log.

`member_families` is pure: the exporter calls it on the member's event loop at each scrape with
the member's status at that moment.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from strongroom.aio import cancel_and_wait
from strongroom.observability.catalog import family
from strongroom.observability.exporter import MetricsServer, serve_metrics
from strongroom.observability.statslog import Sample, run_stats_log, sample_of
from strongroom.observability.tallies import Histogram, Tallies
from strongroom.observability.traceswitch import MessageTracing
from strongroom.persistence.config import MemberConfig, Role
from strongroom.persistence.scrub import ScrubFigures
from strongroom.persistence.status import ClusterStatus
from strongroom.persistence.storage import DiskStorage, Storage
from strongroom.persistence.storestate import StoreState, StoreView
from strongroom.realm.zones import ROUTE_DURABLE_PREFIX
from strongroom.observability.services import refused_family

if TYPE_CHECKING:
    from strongroom.persistence.node import PersistenceNode

__all__ = ["MemberTelemetry", "database_memory", "disk_bytes", "member_families"]


def _histogram(name: str, labels: list[str], hist: Histogram) -> Metric:
    fam = family(name)
    fam.add_metric(labels, hist.cumulative(), hist.sum)  # type: ignore[attr-defined]
    return fam


def member_families(st: ClusterStatus, store: StoreView | None, tallies: Tallies, disk_bytes: int,
                    driver: str, db_memory: dict[str, int] | None = None,
                    scrub: ScrubFigures = ScrubFigures()) -> list[Metric]:
    """Every member metric of the catalog, from this member's status, the persistent store as it
    answers for it (None: not known), its tallies, its database's size on disk, its storage
    driver, what its database holds in memory by kind (`Driver.memory_in_use`) and its scrubs."""
    m = [st.cluster, st.member]
    out: list[Metric] = []

    def gauge(name: str, value: float, *labels: str) -> None:
        fam = family(name)
        fam.add_metric([*m, *labels], value)
        out.append(fam)

    gauge("strongroom_member_info", 1, st.role.value, st.storage, driver)
    gauge("strongroom_leader", 1 if st.role == Role.LEADER else 0)
    gauge("strongroom_epoch", st.epoch)
    gauge("strongroom_commit_index", st.commit_index)
    gauge("strongroom_applied_index", st.applied_index)
    gauge("strongroom_last_index", st.last_index)
    gauge("strongroom_snapshot_index", st.snapshot_index)
    gauge("strongroom_synced", 1 if st.synced else 0)
    gauge("strongroom_store_damaged", 1 if st.store_damage else 0)
    for name, value in (("strongroom_scrubs", scrub.clean), ("strongroom_scrub_failures", scrub.failed)):
        fam = family(name)
        fam.add_metric(m, value)
        out.append(fam)
    gauge("strongroom_scrub_last_clean_timestamp_seconds", scrub.last_clean)
    gauge("strongroom_scrub_last_seconds", scrub.last_seconds)
    gauge("strongroom_disk_bytes", disk_bytes)
    held = family("strongroom_database_memory_bytes")
    for kind, size in sorted((db_memory or {}).items()):
        held.add_metric([*m, kind], size)
    out.append(held)
    gauge("strongroom_memory_payload_bytes", st.memory_payload_bytes)
    gauge("strongroom_dedup_producers", st.dedup_producers)
    if st.standby:
        gauge("strongroom_dr_seconds_behind_primary", st.seconds_behind_primary)
        gauge("strongroom_dr_messages_behind_primary", st.messages_behind_primary)

    lag, reachable = family("strongroom_follower_lag_entries"), family("strongroom_follower_reachable")
    if st.role == Role.LEADER:
        for peer in st.members:
            if peer.name != st.member:
                lag.add_metric([*m, peer.name], max(0, st.last_index - peer.match_index))
                reachable.add_metric([*m, peer.name], 1 if peer.reachable else 0)
    out += [lag, reachable]

    if store is not None:
        state = family("strongroom_persistent_store_state")
        for s in StoreState:
            state.add_metric([*m, s.value], 1 if store.record.state == s else 0)
        out.append(state)

    names = ("strongroom_store_messages", "strongroom_store_bytes", "strongroom_store_swapped_messages",
             "strongroom_store_uows_pending")
    stores = {name: family(name) for name in names}
    durables = {name: family(name) for name in ("strongroom_durable_pending_messages",
                                                "strongroom_durable_pending_bytes",
                                                "strongroom_durable_unacked_messages",
                                                "strongroom_durable_subscribers")}
    forward = family("strongroom_forward_pending_messages")
    for s in st.stores:
        labels = [*m, s.name]
        for name, value in zip(names, (s.messages, s.bytes, s.swapped_messages, s.uows_pending), strict=True):
            stores[name].add_metric(labels, value)
        for d in s.durables:
            if d.name.startswith(ROUTE_DURABLE_PREFIX):
                forward.add_metric([*labels, d.destination, d.name.removeprefix(ROUTE_DURABLE_PREFIX)],
                                   d.pending_messages)
                continue
            dl = [*labels, d.destination, d.name]
            durables["strongroom_durable_pending_messages"].add_metric(dl, d.pending_messages)
            durables["strongroom_durable_pending_bytes"].add_metric(dl, d.pending_bytes)
            durables["strongroom_durable_unacked_messages"].add_metric(dl, d.unacked)
            durables["strongroom_durable_subscribers"].add_metric(dl, d.subscribers)
    out += [*stores.values(), *durables.values(), forward]

    for name, counts in (("strongroom_messages_stored", tallies.stored), ("strongroom_messages_acked", tallies.acked),
                         ("strongroom_messages_expired", tallies.expired),
                         ("strongroom_messages_discarded", tallies.discarded),
                         ("strongroom_messages_dead_lettered", tallies.dead_lettered)):
        fam = family(name)
        for store_name in sorted(set(counts) | {s.name for s in st.stores}):
            fam.add_metric([*m, store_name], counts[store_name])
        out.append(fam)
    # Every durable delivered to has both series (a redelivery count of 0 is a value to watch).
    delivered = sorted(set(tallies.deliveries) | set(tallies.redeliveries))
    for name, by_durable in (("strongroom_deliveries", tallies.deliveries),
                             ("strongroom_redeliveries", tallies.redeliveries)):
        fam = family(name)
        for ident in delivered:
            fam.add_metric([*m, *ident], by_durable[ident])
        out.append(fam)
    for name, by_peer in (("strongroom_snapshots_sent", tallies.snapshots_sent),
                          ("strongroom_log_backtracks", tallies.backtracks)):
        fam = family(name)
        for peer, n in sorted(by_peer.items()):
            fam.add_metric([*m, peer], n)
        out.append(fam)
    for name, value in (("strongroom_snapshots_installed", tallies.snapshots_installed),
                        ("strongroom_catchups", tallies.catchups),
                        ("strongroom_dedup_producers_forgotten", tallies.producers_forgotten)):
        fam = family(name)
        fam.add_metric(m, value)
        out.append(fam)
    out += [_histogram("strongroom_commit_seconds", m, tallies.commit_seconds),
            _histogram("strongroom_group_commit_operations", m, tallies.round_operations),
            _histogram("strongroom_log_write_seconds", m, tallies.log_write_seconds)]
    out.append(refused_family("strongroom_refused", m, ("grpc", "link")))
    return out


def disk_bytes(storage: Storage) -> int:
    """Size of a member's database on disk (0: memory storage, or the database not open now)."""
    if not isinstance(storage, DiskStorage):
        return 0
    try:
        return storage.db.size_on_disk()
    except Exception:  # noqa: BLE001 - closed after a failed write: reopened at the next one
        return 0


def database_memory(storage: Storage) -> dict[str, int]:
    """What a member's database holds in memory by kind (empty: memory storage, a driver that
    cannot tell, or the database not open now)."""
    if not isinstance(storage, DiskStorage):
        return {}
    try:
        return storage.db.memory_in_use()
    except Exception:  # noqa: BLE001 - closed after a failed write: reopened at the next one
        return {}


class MemberTelemetry:
    """A member's Prometheus endpoint and statistics log, for the life of its server.

    `bind` comes first (the endpoint's address goes into the configuration the member registers
    and reports in its status), `attach` once the member's node exists, `stop` last. A scrape
    before `attach` answers only the process's own metrics."""

    def __init__(self, config: MemberConfig) -> None:
        self.config = config
        self._node: PersistenceNode | None = None
        self._server: MetricsServer | None = None
        self._stats: asyncio.Task[None] | None = None
        self.tracing: MessageTracing | None = None
        """The member's message tracing (`prepare`), for the admin servicer."""
        self._tracing_task: asyncio.Task[None] | None = None

    def bind(self) -> MemberConfig:
        """Start the endpoint (unless `metrics_listen` is "none"); the configuration with its URL."""
        config = self.config
        advertised = config.advertise.rsplit(":", 1)[0] if config.advertise else ""
        self._server, url = serve_metrics(config.metrics_listen, config.listen, self._families, advertised)
        self.config = replace(config, metrics_url=url)
        return self.config

    @property
    def listen(self) -> str:
        """Where the endpoint listens now, host:port ("none": no endpoint)."""
        server = self._server
        return f"{server.host}:{server.port}" if server is not None else "none"

    def prepare(self, node: PersistenceNode) -> MessageTracing:
        """The node's message tracing (before its servicers are made: the admin servicer
        changes and reads it)."""
        self.tracing = MessageTracing(node.etcd, self.config.cluster, self.config.member, node.replica.tallies)
        return self.tracing

    def attach(self, node: PersistenceNode) -> None:
        """Serve the node's metrics; start the statistics log and follow the message trace's
        filters."""
        self._node = node
        if self.tracing is not None:
            self._tracing_task = asyncio.get_running_loop().create_task(self.tracing.follow(), name="message-trace")
        if self.config.stats_interval > 0:
            self._stats = asyncio.get_running_loop().create_task(
                run_stats_log(self.config.stats_interval, self._sample), name="stats-log")

    def _sample(self) -> Sample:
        node = self._node
        assert node is not None
        return sample_of(node.status(), node.replica.tallies, disk_bytes(node.replica.storage))

    def _families(self) -> list[Metric]:
        node = self._node
        if node is None:
            return []
        try:
            store: StoreView | None = node.pstore.view()
        except Exception:  # noqa: BLE001 - not known before the member's first realm
            store = None
        replica = node.replica
        return member_families(node.status(), store, replica.tallies, disk_bytes(replica.storage), replica.driver,
                               database_memory(replica.storage), replica.scrub.figures())

    async def stop(self) -> None:
        for task in (self._stats, self._tracing_task):
            if task is not None:
                await cancel_and_wait(task)
        self._stats = self._tracing_task = None
        if self._server is not None:
            self._server.stop()
            self._server = None
