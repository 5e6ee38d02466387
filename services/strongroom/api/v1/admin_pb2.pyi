from strongroom.api.v1 import common_pb2 as _common_pb2
from strongroom.api.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PersistentStoreState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERSISTENT_STORE_STATE_UNSPECIFIED: _ClassVar[PersistentStoreState]
    PERSISTENT_STORE_STATE_AVAILABLE: _ClassVar[PersistentStoreState]
    PERSISTENT_STORE_STATE_UNAVAILABLE: _ClassVar[PersistentStoreState]
    PERSISTENT_STORE_STATE_NO_NEW_UOW: _ClassVar[PersistentStoreState]

class PersistentStoreCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERSISTENT_STORE_CAUSE_UNSPECIFIED: _ClassVar[PersistentStoreCause]
    PERSISTENT_STORE_CAUSE_OPERATOR: _ClassVar[PersistentStoreCause]
    PERSISTENT_STORE_CAUSE_CAPACITY: _ClassVar[PersistentStoreCause]
    PERSISTENT_STORE_CAUSE_DISK: _ClassVar[PersistentStoreCause]

class MemberRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_ROLE_UNSPECIFIED: _ClassVar[MemberRole]
    MEMBER_ROLE_FOLLOWER: _ClassVar[MemberRole]
    MEMBER_ROLE_RECOVERING: _ClassVar[MemberRole]
    MEMBER_ROLE_LEADER: _ClassVar[MemberRole]
PERSISTENT_STORE_STATE_UNSPECIFIED: PersistentStoreState
PERSISTENT_STORE_STATE_AVAILABLE: PersistentStoreState
PERSISTENT_STORE_STATE_UNAVAILABLE: PersistentStoreState
PERSISTENT_STORE_STATE_NO_NEW_UOW: PersistentStoreState
PERSISTENT_STORE_CAUSE_UNSPECIFIED: PersistentStoreCause
PERSISTENT_STORE_CAUSE_OPERATOR: PersistentStoreCause
PERSISTENT_STORE_CAUSE_CAPACITY: PersistentStoreCause
PERSISTENT_STORE_CAUSE_DISK: PersistentStoreCause
MEMBER_ROLE_UNSPECIFIED: MemberRole
MEMBER_ROLE_FOLLOWER: MemberRole
MEMBER_ROLE_RECOVERING: MemberRole
MEMBER_ROLE_LEADER: MemberRole

class SetMessageTraceRequest(_message.Message):
    __slots__ = ("destination", "producer_id", "seconds", "off")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    OFF_FIELD_NUMBER: _ClassVar[int]
    destination: str
    producer_id: str
    seconds: float
    off: bool
    def __init__(self, destination: _Optional[str] = ..., producer_id: _Optional[str] = ..., seconds: _Optional[float] = ..., off: _Optional[bool] = ...) -> None: ...

class MessageTraceFilter(_message.Message):
    __slots__ = ("destination", "producer_id", "until")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    destination: str
    producer_id: str
    until: float
    def __init__(self, destination: _Optional[str] = ..., producer_id: _Optional[str] = ..., until: _Optional[float] = ...) -> None: ...

class MessageTraceSettings(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[MessageTraceFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[MessageTraceFilter, _Mapping]]] = ...) -> None: ...

class GetMessageTraceRequest(_message.Message):
    __slots__ = ("destination", "producer_id", "sequence", "store", "message_seq", "limit")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    destination: str
    producer_id: str
    sequence: int
    store: str
    message_seq: int
    limit: int
    def __init__(self, destination: _Optional[str] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., store: _Optional[str] = ..., message_seq: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class MessageTraceStep(_message.Message):
    __slots__ = ("time", "member", "step", "destination", "producer_id", "sequence", "store", "message_seq", "log_index", "detail", "traceparent")
    TIME_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    time: float
    member: str
    step: str
    destination: str
    producer_id: str
    sequence: int
    store: str
    message_seq: int
    log_index: int
    detail: str
    traceparent: str
    def __init__(self, time: _Optional[float] = ..., member: _Optional[str] = ..., step: _Optional[str] = ..., destination: _Optional[str] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., store: _Optional[str] = ..., message_seq: _Optional[int] = ..., log_index: _Optional[int] = ..., detail: _Optional[str] = ..., traceparent: _Optional[str] = ...) -> None: ...

class GetMessageTraceResponse(_message.Message):
    __slots__ = ("member", "steps")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    member: str
    steps: _containers.RepeatedCompositeFieldContainer[MessageTraceStep]
    def __init__(self, member: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[MessageTraceStep, _Mapping]]] = ...) -> None: ...

class GetPersistentStoreRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class ChangePersistentStoreRequest(_message.Message):
    __slots__ = ("cluster", "reason")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    reason: str
    def __init__(self, cluster: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class MemberStorage(_message.Message):
    __slots__ = ("member", "cannot_store", "since")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    CANNOT_STORE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    member: str
    cannot_store: str
    since: float
    def __init__(self, member: _Optional[str] = ..., cannot_store: _Optional[str] = ..., since: _Optional[float] = ...) -> None: ...

class PersistentStore(_message.Message):
    __slots__ = ("cluster", "state", "since", "reason", "cause", "changed_by", "messages", "bytes", "capacity_messages", "capacity_bytes", "over_capacity", "member", "enforced", "cannot_store")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    OVER_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_FIELD_NUMBER: _ClassVar[int]
    CANNOT_STORE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    state: PersistentStoreState
    since: float
    reason: str
    cause: PersistentStoreCause
    changed_by: str
    messages: int
    bytes: int
    capacity_messages: int
    capacity_bytes: int
    over_capacity: str
    member: str
    enforced: bool
    cannot_store: _containers.RepeatedCompositeFieldContainer[MemberStorage]
    def __init__(self, cluster: _Optional[str] = ..., state: _Optional[_Union[PersistentStoreState, str]] = ..., since: _Optional[float] = ..., reason: _Optional[str] = ..., cause: _Optional[_Union[PersistentStoreCause, str]] = ..., changed_by: _Optional[str] = ..., messages: _Optional[int] = ..., bytes: _Optional[int] = ..., capacity_messages: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., over_capacity: _Optional[str] = ..., member: _Optional[str] = ..., enforced: _Optional[bool] = ..., cannot_store: _Optional[_Iterable[_Union[MemberStorage, _Mapping]]] = ...) -> None: ...

class ListOriginMarksRequest(_message.Message):
    __slots__ = ("store", "destination")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class ListOriginMarksResponse(_message.Message):
    __slots__ = ("marks",)
    MARKS_FIELD_NUMBER: _ClassVar[int]
    marks: _containers.RepeatedCompositeFieldContainer[_router_pb2.OriginMark]
    def __init__(self, marks: _Optional[_Iterable[_Union[_router_pb2.OriginMark, _Mapping]]] = ...) -> None: ...

class ListDurablesRequest(_message.Message):
    __slots__ = ("store", "destination")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class ListDurablesResponse(_message.Message):
    __slots__ = ("durables", "clock")
    DURABLES_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    durables: _containers.RepeatedCompositeFieldContainer[DurableStatus]
    clock: float
    def __init__(self, durables: _Optional[_Iterable[_Union[DurableStatus, _Mapping]]] = ..., clock: _Optional[float] = ...) -> None: ...

class DeleteDurableRequest(_message.Message):
    __slots__ = ("destination", "durable", "content")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    destination: str
    durable: str
    content: bool
    def __init__(self, destination: _Optional[str] = ..., durable: _Optional[str] = ..., content: _Optional[bool] = ...) -> None: ...

class DeleteDurableResponse(_message.Message):
    __slots__ = ("store", "released_messages")
    STORE_FIELD_NUMBER: _ClassVar[int]
    RELEASED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    store: str
    released_messages: int
    def __init__(self, store: _Optional[str] = ..., released_messages: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("name", "address", "match_index", "reachable", "replication", "cannot_store", "cannot_store_since", "voter")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    CANNOT_STORE_FIELD_NUMBER: _ClassVar[int]
    CANNOT_STORE_SINCE_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    match_index: int
    reachable: bool
    replication: str
    cannot_store: str
    cannot_store_since: float
    voter: bool
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., match_index: _Optional[int] = ..., reachable: _Optional[bool] = ..., replication: _Optional[str] = ..., cannot_store: _Optional[str] = ..., cannot_store_since: _Optional[float] = ..., voter: _Optional[bool] = ...) -> None: ...

class DurableStatus(_message.Message):
    __slots__ = ("name", "destination", "kind", "pending_messages", "pending_bytes", "unacked", "subscribers", "matcher", "key_field", "ack_sync_mode", "content", "refused", "unreachable", "unreachable_reason", "static", "store", "last_used", "attached", "expiry_seconds", "expires_in_seconds", "content_matcher")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PENDING_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PENDING_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNACKED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_FIELD_NUMBER: _ClassVar[int]
    ACK_SYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    STATIC_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_MATCHER_FIELD_NUMBER: _ClassVar[int]
    name: str
    destination: str
    kind: _common_pb2.DurableKind
    pending_messages: int
    pending_bytes: int
    unacked: int
    subscribers: int
    matcher: str
    key_field: str
    ack_sync_mode: _common_pb2.AckSyncMode
    content: bool
    refused: int
    unreachable: bool
    unreachable_reason: str
    static: bool
    store: str
    last_used: float
    attached: bool
    expiry_seconds: float
    expires_in_seconds: float
    content_matcher: _common_pb2.ContentMatcher
    def __init__(self, name: _Optional[str] = ..., destination: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., pending_messages: _Optional[int] = ..., pending_bytes: _Optional[int] = ..., unacked: _Optional[int] = ..., subscribers: _Optional[int] = ..., matcher: _Optional[str] = ..., key_field: _Optional[str] = ..., ack_sync_mode: _Optional[_Union[_common_pb2.AckSyncMode, str]] = ..., content: _Optional[bool] = ..., refused: _Optional[int] = ..., unreachable: _Optional[bool] = ..., unreachable_reason: _Optional[str] = ..., static: _Optional[bool] = ..., store: _Optional[str] = ..., last_used: _Optional[float] = ..., attached: _Optional[bool] = ..., expiry_seconds: _Optional[float] = ..., expires_in_seconds: _Optional[float] = ..., content_matcher: _Optional[_Union[_common_pb2.ContentMatcher, _Mapping]] = ...) -> None: ...

class StoreStatus(_message.Message):
    __slots__ = ("name", "replicated", "messages", "bytes", "durables", "cluster", "storage", "publisher_mode", "max_messages", "max_bytes", "limit_policy", "maps", "routed", "max_message_bytes", "swapped_messages", "map_count", "uows", "uows_pending", "uow_messages", "uow_bytes", "origin_marks")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    DURABLES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAPS_FIELD_NUMBER: _ClassVar[int]
    ROUTED_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SWAPPED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAP_COUNT_FIELD_NUMBER: _ClassVar[int]
    UOWS_FIELD_NUMBER: _ClassVar[int]
    UOWS_PENDING_FIELD_NUMBER: _ClassVar[int]
    UOW_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    UOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MARKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    replicated: bool
    messages: int
    bytes: int
    durables: _containers.RepeatedCompositeFieldContainer[DurableStatus]
    cluster: str
    storage: str
    publisher_mode: str
    max_messages: int
    max_bytes: int
    limit_policy: _common_pb2.LimitPolicy
    maps: bool
    routed: bool
    max_message_bytes: int
    swapped_messages: int
    map_count: int
    uows: int
    uows_pending: int
    uow_messages: int
    uow_bytes: int
    origin_marks: _containers.RepeatedCompositeFieldContainer[_router_pb2.OriginMark]
    def __init__(self, name: _Optional[str] = ..., replicated: _Optional[bool] = ..., messages: _Optional[int] = ..., bytes: _Optional[int] = ..., durables: _Optional[_Iterable[_Union[DurableStatus, _Mapping]]] = ..., cluster: _Optional[str] = ..., storage: _Optional[str] = ..., publisher_mode: _Optional[str] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., limit_policy: _Optional[_Union[_common_pb2.LimitPolicy, str]] = ..., maps: _Optional[bool] = ..., routed: _Optional[bool] = ..., max_message_bytes: _Optional[int] = ..., swapped_messages: _Optional[int] = ..., map_count: _Optional[int] = ..., uows: _Optional[int] = ..., uows_pending: _Optional[int] = ..., uow_messages: _Optional[int] = ..., uow_bytes: _Optional[int] = ..., origin_marks: _Optional[_Iterable[_Union[_router_pb2.OriginMark, _Mapping]]] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("cluster", "member", "role", "leader", "leader_address", "epoch", "commit_index", "last_index", "applied_index", "snapshot_index", "storage", "members", "stores", "realm_version", "synced", "indexes_on_disk", "memory_budget_bytes", "memory_payload_bytes", "apply_stopped", "member_role", "realm_service", "uow_clock", "standby", "primary_commit_index", "seconds_behind_primary", "dr_role", "generation", "newer_generation", "dr_since_index", "messages_behind_primary", "persistent_store", "shared_store", "migration", "events_published_index", "store_damage", "metrics_url", "dedup_producers", "voters", "membership_change")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    REALM_VERSION_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    INDEXES_ON_DISK_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    APPLY_STOPPED_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ROLE_FIELD_NUMBER: _ClassVar[int]
    REALM_SERVICE_FIELD_NUMBER: _ClassVar[int]
    UOW_CLOCK_FIELD_NUMBER: _ClassVar[int]
    STANDBY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SECONDS_BEHIND_PRIMARY_FIELD_NUMBER: _ClassVar[int]
    DR_ROLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEWER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    DR_SINCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_BEHIND_PRIMARY_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_STORE_FIELD_NUMBER: _ClassVar[int]
    SHARED_STORE_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PUBLISHED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORE_DAMAGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    DEDUP_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_CHANGE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    member: str
    role: str
    leader: str
    leader_address: str
    epoch: int
    commit_index: int
    last_index: int
    applied_index: int
    snapshot_index: int
    storage: str
    members: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    stores: _containers.RepeatedCompositeFieldContainer[StoreStatus]
    realm_version: int
    synced: bool
    indexes_on_disk: bool
    memory_budget_bytes: int
    memory_payload_bytes: int
    apply_stopped: str
    member_role: MemberRole
    realm_service: str
    uow_clock: float
    standby: bool
    primary_commit_index: int
    seconds_behind_primary: float
    dr_role: str
    generation: int
    newer_generation: int
    dr_since_index: int
    messages_behind_primary: int
    persistent_store: PersistentStore
    shared_store: SharedStoreStatus
    migration: MigrationStatus
    events_published_index: int
    store_damage: str
    metrics_url: str
    dedup_producers: int
    voters: _containers.RepeatedScalarFieldContainer[str]
    membership_change: str
    def __init__(self, cluster: _Optional[str] = ..., member: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., leader_address: _Optional[str] = ..., epoch: _Optional[int] = ..., commit_index: _Optional[int] = ..., last_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., snapshot_index: _Optional[int] = ..., storage: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ..., stores: _Optional[_Iterable[_Union[StoreStatus, _Mapping]]] = ..., realm_version: _Optional[int] = ..., synced: _Optional[bool] = ..., indexes_on_disk: _Optional[bool] = ..., memory_budget_bytes: _Optional[int] = ..., memory_payload_bytes: _Optional[int] = ..., apply_stopped: _Optional[str] = ..., member_role: _Optional[_Union[MemberRole, str]] = ..., realm_service: _Optional[str] = ..., uow_clock: _Optional[float] = ..., standby: _Optional[bool] = ..., primary_commit_index: _Optional[int] = ..., seconds_behind_primary: _Optional[float] = ..., dr_role: _Optional[str] = ..., generation: _Optional[int] = ..., newer_generation: _Optional[int] = ..., dr_since_index: _Optional[int] = ..., messages_behind_primary: _Optional[int] = ..., persistent_store: _Optional[_Union[PersistentStore, _Mapping]] = ..., shared_store: _Optional[_Union[SharedStoreStatus, _Mapping]] = ..., migration: _Optional[_Union[MigrationStatus, _Mapping]] = ..., events_published_index: _Optional[int] = ..., store_damage: _Optional[str] = ..., metrics_url: _Optional[str] = ..., dedup_producers: _Optional[int] = ..., voters: _Optional[_Iterable[str]] = ..., membership_change: _Optional[str] = ...) -> None: ...

class MigrationStatus(_message.Message):
    __slots__ = ("run_mode", "partner_address", "state", "records", "bytes", "driver")
    RUN_MODE_FIELD_NUMBER: _ClassVar[int]
    PARTNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    run_mode: str
    partner_address: str
    state: str
    records: int
    bytes: int
    driver: str
    def __init__(self, run_mode: _Optional[str] = ..., partner_address: _Optional[str] = ..., state: _Optional[str] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., driver: _Optional[str] = ...) -> None: ...

class SharedStoreStatus(_message.Message):
    __slots__ = ("run_mode", "partner_address", "store_id", "log_format", "version", "security", "state", "control_interval_seconds")
    RUN_MODE_FIELD_NUMBER: _ClassVar[int]
    PARTNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SECURITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    run_mode: str
    partner_address: str
    store_id: str
    log_format: int
    version: str
    security: str
    state: str
    control_interval_seconds: float
    def __init__(self, run_mode: _Optional[str] = ..., partner_address: _Optional[str] = ..., store_id: _Optional[str] = ..., log_format: _Optional[int] = ..., version: _Optional[str] = ..., security: _Optional[str] = ..., state: _Optional[str] = ..., control_interval_seconds: _Optional[float] = ...) -> None: ...

class StepDownRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StepDownResponse(_message.Message):
    __slots__ = ("stepped_down",)
    STEPPED_DOWN_FIELD_NUMBER: _ClassVar[int]
    stepped_down: bool
    def __init__(self, stepped_down: _Optional[bool] = ...) -> None: ...

class DemoteRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class DemoteResponse(_message.Message):
    __slots__ = ("cluster", "generation", "since_index", "primary", "last_index")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SINCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    generation: int
    since_index: int
    primary: _containers.RepeatedScalarFieldContainer[str]
    last_index: int
    def __init__(self, cluster: _Optional[str] = ..., generation: _Optional[int] = ..., since_index: _Optional[int] = ..., primary: _Optional[_Iterable[str]] = ..., last_index: _Optional[int] = ...) -> None: ...
