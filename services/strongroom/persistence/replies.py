"""The admin API's replies made from a member's domain values: its status, its persistent store,
its durables and origin marks, as protos (the admin servicer and the migration instances answer
with them)."""

from __future__ import annotations

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import router_pb2
from strongroom.persistence.config import Role
from strongroom.persistence.status import ClusterStatus, DurableStatus, OriginMarkStatus
from strongroom.persistence.storestate import StoreCause, StoreState, StoreView

__all__ = ["add_durables", "add_origin_marks", "status_reply", "store_reply"]


_ROLES = {Role.FOLLOWER: apb.MEMBER_ROLE_FOLLOWER, Role.RECOVERING: apb.MEMBER_ROLE_RECOVERING,
          Role.LEADER: apb.MEMBER_ROLE_LEADER}


def status_reply(st: ClusterStatus) -> apb.ClusterStatus:
    """The admin API's ClusterStatus of a member's status."""
    reply = apb.ClusterStatus(
        cluster=st.cluster, member=st.member, role=st.role.value, member_role=_ROLES[st.role], leader=st.leader,
        leader_address=st.leader_address, epoch=st.epoch, commit_index=st.commit_index, last_index=st.last_index,
        applied_index=st.applied_index, snapshot_index=st.snapshot_index, storage=st.storage,
        realm_version=st.realm_version, synced=st.synced, indexes_on_disk=st.indexes_on_disk,
        memory_budget_bytes=st.memory_budget_bytes, memory_payload_bytes=st.memory_payload_bytes,
        apply_stopped=st.apply_stopped, realm_service=st.realm_service, uow_clock=st.uow_clock,
        standby=st.standby, primary_commit_index=st.primary_commit_index,
        seconds_behind_primary=st.seconds_behind_primary, messages_behind_primary=st.messages_behind_primary,
        dr_role=st.dr_role, generation=st.generation,
        newer_generation=st.newer_generation, dr_since_index=st.dr_since_index,
        events_published_index=st.events_published_index, store_damage=st.store_damage,
        metrics_url=st.metrics_url, dedup_producers=st.dedup_producers, voters=st.voters,
        membership_change=st.membership_change)
    for m in st.members:
        reply.members.add(name=m.name, address=m.address, match_index=m.match_index, reachable=m.reachable,
                          replication=m.replication, cannot_store=m.cannot_store,
                          cannot_store_since=m.cannot_store_since, voter=m.voter)
    for s in st.stores:
        store = reply.stores.add(
            name=s.name, replicated=s.replicated, messages=s.messages, bytes=s.bytes, cluster=s.cluster,
            storage=s.storage, publisher_mode=s.publisher_mode, max_messages=s.max_messages, max_bytes=s.max_bytes,
            limit_policy=s.limit_policy, maps=s.maps, routed=s.routed, max_message_bytes=s.max_message_bytes,
            map_count=s.map_count, swapped_messages=s.swapped_messages, uows=s.uows, uows_pending=s.uows_pending,
            uow_messages=s.uow_messages, uow_bytes=s.uow_bytes)
        add_durables(store.durables, s.durables)
        add_origin_marks(store.origin_marks, s.origin_marks)
    return reply


_STORE_STATES = {StoreState.AVAILABLE: apb.PERSISTENT_STORE_STATE_AVAILABLE,
                 StoreState.UNAVAILABLE: apb.PERSISTENT_STORE_STATE_UNAVAILABLE,
                 StoreState.NO_NEW_UOW: apb.PERSISTENT_STORE_STATE_NO_NEW_UOW}
_STORE_CAUSES = {StoreCause.NONE: apb.PERSISTENT_STORE_CAUSE_UNSPECIFIED,
                 StoreCause.OPERATOR: apb.PERSISTENT_STORE_CAUSE_OPERATOR,
                 StoreCause.CAPACITY: apb.PERSISTENT_STORE_CAUSE_CAPACITY,
                 StoreCause.DISK: apb.PERSISTENT_STORE_CAUSE_DISK}


def store_reply(view: StoreView) -> apb.PersistentStore:
    """The admin API's PersistentStore of a member's view of it."""
    record = view.record
    return apb.PersistentStore(
        cluster=view.cluster, state=_STORE_STATES[record.state], since=record.since, reason=record.reason,
        cause=_STORE_CAUSES[record.cause], changed_by=record.changed_by, messages=view.usage.messages,
        bytes=view.usage.bytes, capacity_messages=view.capacity.capacity_messages,
        capacity_bytes=view.capacity.capacity_bytes, over_capacity=view.over_capacity, member=view.member,
        enforced=view.enforced, cannot_store=[apb.MemberStorage(member=member, cannot_store=why, since=since)
                                              for member, why, since in view.cannot_store])


def add_durables(into: RepeatedCompositeFieldContainer[apb.DurableStatus], durables: list[DurableStatus]) -> None:
    """The admin API's DurableStatus of each durable's status, added to `into`."""
    for d in durables:
        into.add(name=d.name, destination=d.destination, kind=d.kind, pending_messages=d.pending_messages,
                 pending_bytes=d.pending_bytes, unacked=d.unacked, subscribers=d.subscribers, matcher=d.matcher,
                 key_field=d.key_field, ack_sync_mode=d.ack_sync_mode, content=d.content, refused=d.refused,
                 unreachable=bool(d.unreachable_reason), unreachable_reason=d.unreachable_reason, static=d.static,
                 store=d.store, last_used=d.last_used, attached=d.attached, expiry_seconds=d.expiry_seconds,
                 expires_in_seconds=d.expires_in, content_matcher=d.content_matcher)


def add_origin_marks(into: RepeatedCompositeFieldContainer[router_pb2.OriginMark],
                     marks: list[OriginMarkStatus]) -> None:
    """The API's OriginMark of each origin mark, added to `into`."""
    for m in marks:
        into.add(cluster=m.cluster, destination=m.destination, sequence=m.sequence, stored_at=m.stored_at)
