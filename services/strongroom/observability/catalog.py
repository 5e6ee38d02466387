"""Every metric Strongroom exports, named once: its name, type, labels and meaning.

The README's metrics catalog is written from this table (tests/unit/test_metrics_catalog.py fails
when they differ), and the builders (`member.py`, `services.py`) make each family through `family`,
which refuses a name the table does not list. Names and labels follow Prometheus's conventions:
a `strongroom_` prefix, base units in the name (`_seconds`, `_bytes`), counters ending in
`_total`. Every series carries `cluster` and the process's name (`member`, `router`, or the DR
service's `site`), so one Prometheus can watch many clusters without relabelling.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

__all__ = ["CATALOG", "MetricDoc", "family"]


@dataclass(frozen=True)
class MetricDoc:
    name: str
    """The family's name (a counter's without `_total`, as prometheus-client takes it)."""
    kind: str
    """counter, gauge or histogram."""
    labels: tuple[str, ...]
    help: str
    process: str = "member"
    """Which process exports it: member, router, dr or realm (every series of a member carries
    `cluster` and `member`; of a router replica, `cluster` and `router`; of a DR service,
    `cluster` and `site`; of the realm service, which serves every cluster, `address`)."""

    @property
    def exposed(self) -> str:
        """The name as a scrape shows it."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


_M = ("cluster", "member")
_STORE = (*_M, "store")
_DURABLE = (*_STORE, "destination", "durable")
_PEER = (*_M, "peer")
_ROUTER = ("cluster", "router")
_ROUTE = (*_ROUTER, "remote_cluster")
_DR = ("cluster", "site")
_REALM = ("address",)

CATALOG: tuple[MetricDoc, ...] = (
    # --- the member and its log ---
    MetricDoc("strongroom_member_info", "gauge", (*_M, "role", "storage", "driver"),
              "1, labelled with the member's role (leader, recovering, follower), storage mode and driver."),
    MetricDoc("strongroom_leader", "gauge", _M, "1 while this member leads its cluster, else 0."),
    MetricDoc("strongroom_epoch", "gauge", _M, "The leader epoch this member knows."),
    MetricDoc("strongroom_commit_index", "gauge", _M, "The highest log index this member knows committed."),
    MetricDoc("strongroom_applied_index", "gauge", _M, "The highest log index applied to this member's state."),
    MetricDoc("strongroom_last_index", "gauge", _M, "The highest log index this member stored."),
    MetricDoc("strongroom_snapshot_index", "gauge", _M, "The log index of this member's newest snapshot."),
    MetricDoc("strongroom_refused", "counter", (*_M, "where", "reason"),
              "Connections and calls refused for who the caller is: where grpc or link; reason tls_handshake "
              "(no certificate, another authority's, an expired one, plaintext; gRPC's refusals, also of this "
              "member's own outgoing handshakes), certificate_revoked (on the authority's revocation list), "
              "no_identity, wrong_identity, impersonation; with the realm's auth, not_granted and token_*."),
    MetricDoc("strongroom_synced", "gauge", _M,
              "1 when this member holds everything committed (0: catching up after an empty disk)."),
    MetricDoc("strongroom_store_damaged", "gauge", _M,
              "1 when this member found its store damaged (at start, or by its scrub while it ran) and moved "
              "it aside: it rebuilds from its peers."),
    MetricDoc("strongroom_scrubs", "counter", _M,
              "Scrubs since the member started that read its whole store back from its files and found it "
              "whole (persistent_store.scrub_interval_seconds; none in mode memory)."),
    MetricDoc("strongroom_scrub_failures", "counter", _M,
              "Scrubs that could not run (not damage: no room for the scrub's checkpoint, say); the member "
              "tries again at the next interval."),
    MetricDoc("strongroom_scrub_last_clean_timestamp_seconds", "gauge", _M,
              "Unix time the last clean scrub finished (0: none since the member started, or the scrub is "
              "off, or mode memory). Alert when it is above 0 and time() minus it exceeds twice the "
              "interval, and when strongroom_scrubs_total stays 0 for longer than twice the interval."),
    MetricDoc("strongroom_scrub_last_seconds", "gauge", _M, "How long the last clean scrub took."),
    MetricDoc("strongroom_disk_bytes", "gauge", _M, "Size of the member's database on disk (0 in mode memory)."),
    MetricDoc("strongroom_database_memory_bytes", "gauge", (*_M, "kind"),
              "What the member's database holds in memory: kind write_buffers (RocksDB memtables, within the "
              "realm's persistent_store.write_buffer_mb) or read_cache (its block cache, within read_cache_mb); "
              "none in mode memory or with SQLite."),
    MetricDoc("strongroom_dedup_producers", "gauge", _M,
              "Producer ids whose deduplication windows this member's replicated state holds (forgotten after "
              "the cluster's producer_idle_expiry_seconds without a publish)."),
    MetricDoc("strongroom_dedup_producers_forgotten", "counter", _M,
              "Deduplication windows of idle producers this member forgot (it applied the leader's decision)."),
    MetricDoc("strongroom_memory_payload_bytes", "gauge", _M,
              "Payload bytes held in memory (against the memory budget; the rest is swapped)."),
    MetricDoc("strongroom_follower_lag_entries", "gauge", _PEER,
              "Leader only: log entries a follower lacks (the leader's last index minus its match index)."),
    MetricDoc("strongroom_follower_reachable", "gauge", _PEER,
              "Leader only: 1 while a follower answers appends within a lease, else 0."),
    MetricDoc("strongroom_commit_seconds", "histogram", _M,
              "Leader: per group-commit round, from its log entry made to the entry committed by a majority."),
    MetricDoc("strongroom_group_commit_operations", "histogram", _M,
              "Leader: operations carried by one group-commit round (one log entry, one fsync)."),
    MetricDoc("strongroom_log_write_seconds", "histogram", _M,
              "Per write of log entries to this member's storage, its fsync included in disk-sync."),
    MetricDoc("strongroom_snapshots_sent", "counter", _PEER, "Snapshots this member sent a follower as leader."),
    MetricDoc("strongroom_snapshots_installed", "counter", _M, "Snapshots this member installed from a leader."),
    MetricDoc("strongroom_log_backtracks", "counter", _PEER,
              "Appends a follower refused for a log that did not match (the leader went back to find "
              "where they agree)."),
    MetricDoc("strongroom_catchups", "counter", _M,
              "Times this member finished catching up after starting without the cluster's state."),
    MetricDoc("strongroom_persistent_store_state", "gauge", (*_M, "state"),
              "1 for the persistent store's state (available, unavailable, no-new-uow), 0 for the others."),
    # --- stores and durables ---
    MetricDoc("strongroom_store_messages", "gauge", _STORE, "Messages a store holds."),
    MetricDoc("strongroom_store_bytes", "gauge", _STORE, "Bytes of the messages a store holds."),
    MetricDoc("strongroom_store_swapped_messages", "gauge", _STORE, "Messages of a store whose payload is swapped to disk."),
    MetricDoc("strongroom_store_uows_pending", "gauge", _STORE, "Units of work committed and not yet settled."),
    MetricDoc("strongroom_messages_stored", "counter", _STORE,
              "Messages this member stored by applying the log (published, forwarded here, dead letters' copies)."),
    MetricDoc("strongroom_messages_acked", "counter", _STORE,
              "Messages a durable's acknowledgment released (one per durable that acknowledged)."),
    MetricDoc("strongroom_messages_expired", "counter", _STORE, "Messages whose time-to-live or retention ended."),
    MetricDoc("strongroom_messages_discarded", "counter", _STORE, "Messages a limit with discard_oldest removed."),
    MetricDoc("strongroom_messages_dead_lettered", "counter", _STORE,
              "Messages taken out of a durable past its redelivery limit, or terminated by a subscriber."),
    MetricDoc("strongroom_durable_pending_messages", "gauge", _DURABLE,
              "Messages pending on a durable (not acknowledged yet); durable \"\" is a queue's own."),
    MetricDoc("strongroom_durable_pending_bytes", "gauge", _DURABLE, "Bytes of the messages pending on a durable."),
    MetricDoc("strongroom_durable_unacked_messages", "gauge", _DURABLE,
              "Leader: messages delivered to a durable's subscribers and not acknowledged yet."),
    MetricDoc("strongroom_durable_subscribers", "gauge", _DURABLE, "Leader: subscribers attached to a durable."),
    MetricDoc("strongroom_deliveries", "counter", _DURABLE,
              "Leader: messages sent to a durable's subscribers, redeliveries included."),
    MetricDoc("strongroom_redeliveries", "counter", _DURABLE,
              "Leader: deliveries of a message delivered before (after a subscriber left, a nak, a failover)."),
    MetricDoc("strongroom_forward_pending_messages", "gauge", (*_STORE, "destination", "remote_cluster"),
              "A routed store's messages waiting to be forwarded to a remote cluster."),
    # --- disaster recovery (a standby set's leader) ---
    MetricDoc("strongroom_dr_seconds_behind_primary", "gauge", _M,
              "A standby leader: seconds since it last held everything the primary had committed."),
    MetricDoc("strongroom_dr_messages_behind_primary", "gauge", _M,
              "A standby leader: messages the primary had stored that it has not."),
    # --- a router replica (label router: the replica's name) ---
    MetricDoc("strongroom_router_active", "gauge", _ROUTER,
              "1 while this router replica is its cluster's active one, else 0.", "router"),
    MetricDoc("strongroom_route_connected", "gauge", _ROUTE,
              "1 while the route to a neighbour cluster's router is connected, else 0.", "router"),
    MetricDoc("strongroom_route_forwarded_messages", "counter", _ROUTE,
              "Messages forwarded to a neighbour cluster and confirmed stored there.", "router"),
    MetricDoc("strongroom_router_refused", "counter", (*_ROUTER, "where", "reason"),
              "Connections refused by this router replica for who the caller is (as strongroom_refused).", "router"),
    MetricDoc("strongroom_route_received_messages", "counter", _ROUTE,
              "Messages a neighbour cluster forwarded here.", "router"),
    MetricDoc("strongroom_route_resent_messages", "counter", _ROUTE,
              "Messages sent to a neighbour again after a failure (the neighbour deduplicates them).", "router"),
    MetricDoc("strongroom_route_duplicate_messages", "counter", _ROUTE,
              "Of the messages re-sent, those the neighbour held already.", "router"),
    MetricDoc("strongroom_route_waiting_messages", "gauge", _ROUTE,
              "Messages waiting to be forwarded to a neighbour cluster.", "router"),
    MetricDoc("strongroom_route_oldest_waiting_seconds", "gauge", _ROUTE,
              "Age of the oldest message waiting for a neighbour (the forwarding lag; 0: none waits).", "router"),
    # --- a DR service (label site: the site of the set it serves, primary or standby) ---
    MetricDoc("strongroom_dr_shipping", "gauge", _DR,
              "1 while the DR service ships the primary's log to its standby set, else 0.", "dr"),
    MetricDoc("strongroom_dr_generation", "gauge", _DR, "The site's DR generation.", "dr"),
    MetricDoc("strongroom_dr_refused", "counter", (*_DR, "where", "reason"),
              "Connections refused by this DR service for who the caller is (as strongroom_refused).", "dr"),
    MetricDoc("strongroom_dr_entries_behind", "gauge", _DR,
              "Log entries the primary committed that the standby set does not hold yet.", "dr"),
    MetricDoc("strongroom_dr_messages_behind", "gauge", _DR,
              "Messages the primary stored that the standby set does not hold yet.", "dr"),
    MetricDoc("strongroom_dr_seconds_behind", "gauge", _DR,
              "Seconds since the standby set last held everything the primary had committed.", "dr"),
    MetricDoc("strongroom_dr_shipped_bytes", "counter", _DR, "Bytes of log entries shipped to the standby set.", "dr"),
    MetricDoc("strongroom_dr_shipped_batches", "counter", _DR, "Batches shipped to the standby set.", "dr"),
    MetricDoc("strongroom_dr_shipped_snapshots", "counter", _DR, "Snapshots shipped to the standby set.", "dr"),
    MetricDoc("strongroom_dr_reconnects", "counter", _DR,
              "Times the DR service resumed reading the primary's log at another member.", "dr"),
    # --- the realm service (label address: the one it registers) ---
    MetricDoc("strongroom_realm_version", "gauge", _REALM,
              "The realm version current in etcd, as the realm service last saw it (0: none yet).", "realm"),
    MetricDoc("strongroom_realm_refused", "counter", (*_REALM, "where", "reason"),
              "Connections refused by the realm service for who the caller is (as strongroom_refused).", "realm"),
    MetricDoc("strongroom_realm_applies", "counter", (*_REALM, "outcome"),
              "Realm applies answered: outcome accepted (stored, or the same document again), or the "
              "reason it was refused (REALM_INVALID, REALM_VERSION_CONFLICT, ...).", "realm"),
)

_BY_NAME = {doc.name: doc for doc in CATALOG}


def family(name: str) -> Metric:
    """An empty family of a catalogued metric, with its help and labels."""
    doc = _BY_NAME[name]
    if doc.kind == "counter":
        return CounterMetricFamily(name, doc.help, labels=doc.labels)
    if doc.kind == "histogram":
        return HistogramMetricFamily(name, doc.help, labels=doc.labels)
    return GaugeMetricFamily(name, doc.help, labels=doc.labels)
