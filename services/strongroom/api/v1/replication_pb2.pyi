from strongroom.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UowOpKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UOW_OP_KIND_UNSPECIFIED: _ClassVar[UowOpKind]
    UOW_OP_KIND_OPEN: _ClassVar[UowOpKind]
    UOW_OP_KIND_COMMIT: _ClassVar[UowOpKind]
    UOW_OP_KIND_SENDER_BACKOUT: _ClassVar[UowOpKind]
    UOW_OP_KIND_ABANDON: _ClassVar[UowOpKind]
    UOW_OP_KIND_SENDER_CANCEL: _ClassVar[UowOpKind]
    UOW_OP_KIND_DELIVER: _ClassVar[UowOpKind]
    UOW_OP_KIND_RECEIVER_COMMIT: _ClassVar[UowOpKind]
    UOW_OP_KIND_RECEIVER_BACKOUT: _ClassVar[UowOpKind]
    UOW_OP_KIND_RECEIVER_CANCEL: _ClassVar[UowOpKind]
    UOW_OP_KIND_RELEASE: _ClassVar[UowOpKind]
    UOW_OP_KIND_TIMEOUT: _ClassVar[UowOpKind]
    UOW_OP_KIND_DISCARD: _ClassVar[UowOpKind]
    UOW_OP_KIND_FORGET: _ClassVar[UowOpKind]
    UOW_OP_KIND_USER_STATUS: _ClassVar[UowOpKind]
    UOW_OP_KIND_SUBSCRIBE: _ClassVar[UowOpKind]
    UOW_OP_KIND_UNSUBSCRIBE: _ClassVar[UowOpKind]
    UOW_OP_KIND_EXPIRE_SUBSCRIPTIONS: _ClassVar[UowOpKind]
UOW_OP_KIND_UNSPECIFIED: UowOpKind
UOW_OP_KIND_OPEN: UowOpKind
UOW_OP_KIND_COMMIT: UowOpKind
UOW_OP_KIND_SENDER_BACKOUT: UowOpKind
UOW_OP_KIND_ABANDON: UowOpKind
UOW_OP_KIND_SENDER_CANCEL: UowOpKind
UOW_OP_KIND_DELIVER: UowOpKind
UOW_OP_KIND_RECEIVER_COMMIT: UowOpKind
UOW_OP_KIND_RECEIVER_BACKOUT: UowOpKind
UOW_OP_KIND_RECEIVER_CANCEL: UowOpKind
UOW_OP_KIND_RELEASE: UowOpKind
UOW_OP_KIND_TIMEOUT: UowOpKind
UOW_OP_KIND_DISCARD: UowOpKind
UOW_OP_KIND_FORGET: UowOpKind
UOW_OP_KIND_USER_STATUS: UowOpKind
UOW_OP_KIND_SUBSCRIBE: UowOpKind
UOW_OP_KIND_UNSUBSCRIBE: UowOpKind
UOW_OP_KIND_EXPIRE_SUBSCRIPTIONS: UowOpKind

class Operation(_message.Message):
    __slots__ = ("noop", "publish", "ack", "create_durable", "configure_store", "expire", "dead_letter", "replay", "map", "publish_batch", "suspend_durables", "delete_durable", "uow", "clock", "durable_use", "forget_producers", "delivery_counts")
    NOOP_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CREATE_DURABLE_FIELD_NUMBER: _ClassVar[int]
    CONFIGURE_STORE_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_BATCH_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_DURABLES_FIELD_NUMBER: _ClassVar[int]
    DELETE_DURABLE_FIELD_NUMBER: _ClassVar[int]
    UOW_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    DURABLE_USE_FIELD_NUMBER: _ClassVar[int]
    FORGET_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    noop: Noop
    publish: PublishOp
    ack: AckOp
    create_durable: CreateDurableOp
    configure_store: ConfigureStoreOp
    expire: ExpireOp
    dead_letter: DeadLetterOp
    replay: ReplayOp
    map: MapOp
    publish_batch: PublishBatchOp
    suspend_durables: SuspendDurablesOp
    delete_durable: DeleteDurableOp
    uow: UowOp
    clock: ClockOp
    durable_use: DurableUseOp
    forget_producers: ForgetProducersOp
    delivery_counts: DeliveryCountsOp
    def __init__(self, noop: _Optional[_Union[Noop, _Mapping]] = ..., publish: _Optional[_Union[PublishOp, _Mapping]] = ..., ack: _Optional[_Union[AckOp, _Mapping]] = ..., create_durable: _Optional[_Union[CreateDurableOp, _Mapping]] = ..., configure_store: _Optional[_Union[ConfigureStoreOp, _Mapping]] = ..., expire: _Optional[_Union[ExpireOp, _Mapping]] = ..., dead_letter: _Optional[_Union[DeadLetterOp, _Mapping]] = ..., replay: _Optional[_Union[ReplayOp, _Mapping]] = ..., map: _Optional[_Union[MapOp, _Mapping]] = ..., publish_batch: _Optional[_Union[PublishBatchOp, _Mapping]] = ..., suspend_durables: _Optional[_Union[SuspendDurablesOp, _Mapping]] = ..., delete_durable: _Optional[_Union[DeleteDurableOp, _Mapping]] = ..., uow: _Optional[_Union[UowOp, _Mapping]] = ..., clock: _Optional[_Union[ClockOp, _Mapping]] = ..., durable_use: _Optional[_Union[DurableUseOp, _Mapping]] = ..., forget_producers: _Optional[_Union[ForgetProducersOp, _Mapping]] = ..., delivery_counts: _Optional[_Union[DeliveryCountsOp, _Mapping]] = ...) -> None: ...

class ConfigureStoreOp(_message.Message):
    __slots__ = ("store", "max_messages", "max_bytes", "policy")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    store: str
    max_messages: int
    max_bytes: int
    policy: _common_pb2.LimitPolicy
    def __init__(self, store: _Optional[str] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., policy: _Optional[_Union[_common_pb2.LimitPolicy, str]] = ...) -> None: ...

class ExpireOp(_message.Message):
    __slots__ = ("message_seqs", "now", "clock")
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    now: float
    clock: float
    def __init__(self, message_seqs: _Optional[_Iterable[int]] = ..., now: _Optional[float] = ..., clock: _Optional[float] = ...) -> None: ...

class DeadLetterOp(_message.Message):
    __slots__ = ("durable_key", "message_seq", "deliveries", "target_store", "target_destination", "target_queue", "published_at", "reason")
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    TARGET_STORE_FIELD_NUMBER: _ClassVar[int]
    TARGET_DESTINATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_QUEUE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    durable_key: str
    message_seq: int
    deliveries: int
    target_store: str
    target_destination: str
    target_queue: bool
    published_at: float
    reason: str
    def __init__(self, durable_key: _Optional[str] = ..., message_seq: _Optional[int] = ..., deliveries: _Optional[int] = ..., target_store: _Optional[str] = ..., target_destination: _Optional[str] = ..., target_queue: _Optional[bool] = ..., published_at: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class ReplayOp(_message.Message):
    __slots__ = ("durable_key", "sequence", "time")
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    durable_key: str
    sequence: int
    time: float
    def __init__(self, durable_key: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class MapOp(_message.Message):
    __slots__ = ("store", "map", "key", "put", "delete", "compare", "expected_version")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    key: str
    put: bytes
    delete: bool
    compare: bool
    expected_version: int
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., key: _Optional[str] = ..., put: _Optional[bytes] = ..., delete: _Optional[bool] = ..., compare: _Optional[bool] = ..., expected_version: _Optional[int] = ...) -> None: ...

class Noop(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: str
    def __init__(self, leader: _Optional[str] = ...) -> None: ...

class PublishOp(_message.Message):
    __slots__ = ("store", "destination", "message", "queue", "content", "published_at", "expires_at", "retain_until", "expires_clock", "forwarded")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RETAIN_UNTIL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_CLOCK_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    message: _common_pb2.Message
    queue: bool
    content: bool
    published_at: float
    expires_at: float
    retain_until: float
    expires_clock: float
    forwarded: bool
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., queue: _Optional[bool] = ..., content: _Optional[bool] = ..., published_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., retain_until: _Optional[float] = ..., expires_clock: _Optional[float] = ..., forwarded: _Optional[bool] = ...) -> None: ...

class PublishBatchOp(_message.Message):
    __slots__ = ("publish", "messages")
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    publish: PublishOp
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    def __init__(self, publish: _Optional[_Union[PublishOp, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ...) -> None: ...

class AckOp(_message.Message):
    __slots__ = ("store", "durable_key", "message_seqs", "clock")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    store: str
    durable_key: str
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    clock: float
    def __init__(self, store: _Optional[str] = ..., durable_key: _Optional[str] = ..., message_seqs: _Optional[_Iterable[int]] = ..., clock: _Optional[float] = ...) -> None: ...

class CreateDurableOp(_message.Message):
    __slots__ = ("store", "destination", "durable", "kind", "queue", "matcher", "key_field", "content", "ack_sync_mode", "clock")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ACK_SYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    durable: str
    kind: _common_pb2.DurableKind
    queue: bool
    matcher: _common_pb2.ContentMatcher
    key_field: str
    content: bool
    ack_sync_mode: _common_pb2.AckSyncMode
    clock: float
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., durable: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., queue: _Optional[bool] = ..., matcher: _Optional[_Union[_common_pb2.ContentMatcher, _Mapping]] = ..., key_field: _Optional[str] = ..., content: _Optional[bool] = ..., ack_sync_mode: _Optional[_Union[_common_pb2.AckSyncMode, str]] = ..., clock: _Optional[float] = ...) -> None: ...

class SuspendDurablesOp(_message.Message):
    __slots__ = ("durable_keys", "suspended")
    DURABLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    durable_keys: _containers.RepeatedScalarFieldContainer[str]
    suspended: bool
    def __init__(self, durable_keys: _Optional[_Iterable[str]] = ..., suspended: _Optional[bool] = ...) -> None: ...

class DeleteDurableOp(_message.Message):
    __slots__ = ("durable_key", "expiry")
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_FIELD_NUMBER: _ClassVar[int]
    durable_key: str
    expiry: DurableExpiry
    def __init__(self, durable_key: _Optional[str] = ..., expiry: _Optional[_Union[DurableExpiry, _Mapping]] = ...) -> None: ...

class DurableExpiry(_message.Message):
    __slots__ = ("clock", "unused_for")
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    UNUSED_FOR_FIELD_NUMBER: _ClassVar[int]
    clock: float
    unused_for: float
    def __init__(self, clock: _Optional[float] = ..., unused_for: _Optional[float] = ...) -> None: ...

class DeliveryCountsOp(_message.Message):
    __slots__ = ("durable_key", "message_seqs", "counts")
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    durable_key: str
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, durable_key: _Optional[str] = ..., message_seqs: _Optional[_Iterable[int]] = ..., counts: _Optional[_Iterable[int]] = ...) -> None: ...

class ForgetProducersOp(_message.Message):
    __slots__ = ("producer_ids", "before_index", "clock", "idle_for")
    PRODUCER_IDS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    IDLE_FOR_FIELD_NUMBER: _ClassVar[int]
    producer_ids: _containers.RepeatedScalarFieldContainer[str]
    before_index: int
    clock: float
    idle_for: float
    def __init__(self, producer_ids: _Optional[_Iterable[str]] = ..., before_index: _Optional[int] = ..., clock: _Optional[float] = ..., idle_for: _Optional[float] = ...) -> None: ...

class DurableUseOp(_message.Message):
    __slots__ = ("durable_keys", "clock", "attached")
    DURABLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    durable_keys: _containers.RepeatedScalarFieldContainer[str]
    clock: float
    attached: bool
    def __init__(self, durable_keys: _Optional[_Iterable[str]] = ..., clock: _Optional[float] = ..., attached: _Optional[bool] = ...) -> None: ...

class ClockOp(_message.Message):
    __slots__ = ("clock",)
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    clock: float
    def __init__(self, clock: _Optional[float] = ...) -> None: ...

class UowDefinition(_message.Message):
    __slots__ = ("store", "destination", "persistent", "persistent_status", "lifetime", "status_lifetime_multiple", "backout_threshold", "dead_letter_store", "dead_letter_destination", "conversation_timeout", "publication")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_STATUS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_LIFETIME_MULTIPLE_FIELD_NUMBER: _ClassVar[int]
    BACKOUT_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_STORE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    PUBLICATION_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    persistent: bool
    persistent_status: bool
    lifetime: float
    status_lifetime_multiple: int
    backout_threshold: int
    dead_letter_store: str
    dead_letter_destination: str
    conversation_timeout: float
    publication: bool
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., persistent: _Optional[bool] = ..., persistent_status: _Optional[bool] = ..., lifetime: _Optional[float] = ..., status_lifetime_multiple: _Optional[int] = ..., backout_threshold: _Optional[int] = ..., dead_letter_store: _Optional[str] = ..., dead_letter_destination: _Optional[str] = ..., conversation_timeout: _Optional[float] = ..., publication: _Optional[bool] = ...) -> None: ...

class UowSubscriptionState(_message.Message):
    __slots__ = ("store", "topic", "subscriber", "expiration", "subscribed_at", "last_used")
    STORE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    store: str
    topic: str
    subscriber: str
    expiration: float
    subscribed_at: float
    last_used: float
    def __init__(self, store: _Optional[str] = ..., topic: _Optional[str] = ..., subscriber: _Optional[str] = ..., expiration: _Optional[float] = ..., subscribed_at: _Optional[float] = ..., last_used: _Optional[float] = ...) -> None: ...

class UowReader(_message.Message):
    __slots__ = ("subscriber", "status", "backouts", "delivered_at")
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BACKOUTS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    subscriber: str
    status: int
    backouts: int
    delivered_at: float
    def __init__(self, subscriber: _Optional[str] = ..., status: _Optional[int] = ..., backouts: _Optional[int] = ..., delivered_at: _Optional[float] = ...) -> None: ...

class UowOp(_message.Message):
    __slots__ = ("clock", "kind", "uow_ids", "definition", "messages", "message_count", "message_bytes", "receiver", "user_status", "subscriptions")
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    UOW_IDS_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    clock: float
    kind: UowOpKind
    uow_ids: _containers.RepeatedScalarFieldContainer[str]
    definition: UowDefinition
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    message_count: int
    message_bytes: int
    receiver: str
    user_status: bytes
    subscriptions: _containers.RepeatedCompositeFieldContainer[UowSubscriptionState]
    def __init__(self, clock: _Optional[float] = ..., kind: _Optional[_Union[UowOpKind, str]] = ..., uow_ids: _Optional[_Iterable[str]] = ..., definition: _Optional[_Union[UowDefinition, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., message_count: _Optional[int] = ..., message_bytes: _Optional[int] = ..., receiver: _Optional[str] = ..., user_status: _Optional[bytes] = ..., subscriptions: _Optional[_Iterable[_Union[UowSubscriptionState, _Mapping]]] = ...) -> None: ...

class UowState(_message.Message):
    __slots__ = ("id", "definition", "status", "messages", "message_count", "message_bytes", "backouts", "user_status", "has_user_status", "receiver", "created_at", "completed_at", "delivered_at", "order", "dead_lettered_from", "readers")
    ID_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BACKOUTS_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    HAS_USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FROM_FIELD_NUMBER: _ClassVar[int]
    READERS_FIELD_NUMBER: _ClassVar[int]
    id: str
    definition: UowDefinition
    status: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    message_count: int
    message_bytes: int
    backouts: int
    user_status: bytes
    has_user_status: bool
    receiver: str
    created_at: float
    completed_at: float
    delivered_at: float
    order: int
    dead_lettered_from: str
    readers: _containers.RepeatedCompositeFieldContainer[UowReader]
    def __init__(self, id: _Optional[str] = ..., definition: _Optional[_Union[UowDefinition, _Mapping]] = ..., status: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., message_count: _Optional[int] = ..., message_bytes: _Optional[int] = ..., backouts: _Optional[int] = ..., user_status: _Optional[bytes] = ..., has_user_status: _Optional[bool] = ..., receiver: _Optional[str] = ..., created_at: _Optional[float] = ..., completed_at: _Optional[float] = ..., delivered_at: _Optional[float] = ..., order: _Optional[int] = ..., dead_lettered_from: _Optional[str] = ..., readers: _Optional[_Iterable[_Union[UowReader, _Mapping]]] = ...) -> None: ...

class UowGone(_message.Message):
    __slots__ = ("id", "until")
    ID_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    id: str
    until: float
    def __init__(self, id: _Optional[str] = ..., until: _Optional[float] = ...) -> None: ...

class LogEntry(_message.Message):
    __slots__ = ("index", "epoch", "ops", "time")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    index: int
    epoch: int
    ops: _containers.RepeatedCompositeFieldContainer[Operation]
    time: float
    def __init__(self, index: _Optional[int] = ..., epoch: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., time: _Optional[float] = ...) -> None: ...

class PromiseRequest(_message.Message):
    __slots__ = ("epoch", "leader")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ...) -> None: ...

class PromiseResponse(_message.Message):
    __slots__ = ("ok", "promised_epoch", "last_index", "last_epoch", "commit_index", "synced", "member")
    OK_FIELD_NUMBER: _ClassVar[int]
    PROMISED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    promised_epoch: int
    last_index: int
    last_epoch: int
    commit_index: int
    synced: bool
    member: str
    def __init__(self, ok: _Optional[bool] = ..., promised_epoch: _Optional[int] = ..., last_index: _Optional[int] = ..., last_epoch: _Optional[int] = ..., commit_index: _Optional[int] = ..., synced: _Optional[bool] = ..., member: _Optional[str] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("epoch", "leader", "prev_index", "prev_epoch", "entries", "commit_index", "events_published")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PREV_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    prev_index: int
    prev_epoch: int
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    commit_index: int
    events_published: int
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., prev_index: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ..., commit_index: _Optional[int] = ..., events_published: _Optional[int] = ...) -> None: ...

class AppendRequestRaw(_message.Message):
    __slots__ = ("epoch", "leader", "prev_index", "prev_epoch", "entries", "commit_index", "events_published")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PREV_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    prev_index: int
    prev_epoch: int
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    commit_index: int
    events_published: int
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., prev_index: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., entries: _Optional[_Iterable[bytes]] = ..., commit_index: _Optional[int] = ..., events_published: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("ok", "promised_epoch", "last_index", "conflict_index", "needs_snapshot", "cannot_store")
    OK_FIELD_NUMBER: _ClassVar[int]
    PROMISED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NEEDS_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CANNOT_STORE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    promised_epoch: int
    last_index: int
    conflict_index: int
    needs_snapshot: bool
    cannot_store: str
    def __init__(self, ok: _Optional[bool] = ..., promised_epoch: _Optional[int] = ..., last_index: _Optional[int] = ..., conflict_index: _Optional[int] = ..., needs_snapshot: _Optional[bool] = ..., cannot_store: _Optional[str] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("epoch", "from_index", "max_entries", "raw", "streamed_snapshot")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    STREAMED_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    from_index: int
    max_entries: int
    raw: bool
    streamed_snapshot: bool
    def __init__(self, epoch: _Optional[int] = ..., from_index: _Optional[int] = ..., max_entries: _Optional[int] = ..., raw: _Optional[bool] = ..., streamed_snapshot: _Optional[bool] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("entries", "last_index", "snapshot", "snapshot_index", "snapshot_epoch", "raw_entries", "snapshot_streamed")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RAW_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_STREAMED_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    last_index: int
    snapshot: bytes
    snapshot_index: int
    snapshot_epoch: int
    raw_entries: _containers.RepeatedScalarFieldContainer[bytes]
    snapshot_streamed: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ..., last_index: _Optional[int] = ..., snapshot: _Optional[bytes] = ..., snapshot_index: _Optional[int] = ..., snapshot_epoch: _Optional[int] = ..., raw_entries: _Optional[_Iterable[bytes]] = ..., snapshot_streamed: _Optional[bool] = ...) -> None: ...

class StreamCommittedRequest(_message.Message):
    __slots__ = ("from_index", "max_entries", "heartbeat_ms")
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    max_entries: int
    heartbeat_ms: int
    def __init__(self, from_index: _Optional[int] = ..., max_entries: _Optional[int] = ..., heartbeat_ms: _Optional[int] = ...) -> None: ...

class CommittedEntries(_message.Message):
    __slots__ = ("first_index", "entries", "commit_index", "snapshot", "snapshot_index", "snapshot_epoch", "member", "prev_epoch", "leader_silence_seconds", "applied_index", "stored_messages", "acked_messages")
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_SILENCE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    first_index: int
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    commit_index: int
    snapshot: bytes
    snapshot_index: int
    snapshot_epoch: int
    member: str
    prev_epoch: int
    leader_silence_seconds: float
    applied_index: int
    stored_messages: int
    acked_messages: int
    def __init__(self, first_index: _Optional[int] = ..., entries: _Optional[_Iterable[bytes]] = ..., commit_index: _Optional[int] = ..., snapshot: _Optional[bytes] = ..., snapshot_index: _Optional[int] = ..., snapshot_epoch: _Optional[int] = ..., member: _Optional[str] = ..., prev_epoch: _Optional[int] = ..., leader_silence_seconds: _Optional[float] = ..., applied_index: _Optional[int] = ..., stored_messages: _Optional[int] = ..., acked_messages: _Optional[int] = ...) -> None: ...

class ShipEntriesRequest(_message.Message):
    __slots__ = ("first_index", "entries", "primary_commit_index", "snapshot", "snapshot_index", "snapshot_epoch", "prev_epoch", "primary_stored_messages")
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_STORED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    first_index: int
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    primary_commit_index: int
    snapshot: bytes
    snapshot_index: int
    snapshot_epoch: int
    prev_epoch: int
    primary_stored_messages: int
    def __init__(self, first_index: _Optional[int] = ..., entries: _Optional[_Iterable[bytes]] = ..., primary_commit_index: _Optional[int] = ..., snapshot: _Optional[bytes] = ..., snapshot_index: _Optional[int] = ..., snapshot_epoch: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., primary_stored_messages: _Optional[int] = ...) -> None: ...

class GenerationInfo(_message.Message):
    __slots__ = ("cluster", "role", "generation", "addresses", "member", "newer_generation", "since_index")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    NEWER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SINCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    role: str
    generation: int
    addresses: _containers.RepeatedScalarFieldContainer[str]
    member: str
    newer_generation: int
    since_index: int
    def __init__(self, cluster: _Optional[str] = ..., role: _Optional[str] = ..., generation: _Optional[int] = ..., addresses: _Optional[_Iterable[str]] = ..., member: _Optional[str] = ..., newer_generation: _Optional[int] = ..., since_index: _Optional[int] = ...) -> None: ...

class ShipEntriesResponse(_message.Message):
    __slots__ = ("accepted", "last_index", "applied_index", "stored_messages", "acked_messages")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    last_index: int
    applied_index: int
    stored_messages: int
    acked_messages: int
    def __init__(self, accepted: _Optional[bool] = ..., last_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., stored_messages: _Optional[int] = ..., acked_messages: _Optional[int] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("epoch", "leader", "last_index", "last_epoch", "data", "done", "part_end")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    PART_END_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    last_index: int
    last_epoch: int
    data: bytes
    done: bool
    part_end: bool
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., last_index: _Optional[int] = ..., last_epoch: _Optional[int] = ..., data: _Optional[bytes] = ..., done: _Optional[bool] = ..., part_end: _Optional[bool] = ...) -> None: ...

class InstallSnapshotResponse(_message.Message):
    __slots__ = ("ok", "promised_epoch", "last_index")
    OK_FIELD_NUMBER: _ClassVar[int]
    PROMISED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    promised_epoch: int
    last_index: int
    def __init__(self, ok: _Optional[bool] = ..., promised_epoch: _Optional[int] = ..., last_index: _Optional[int] = ...) -> None: ...

class StateSnapshot(_message.Message):
    __slots__ = ("applied_index", "applied_epoch", "next_seq", "messages", "durables", "producers", "stores", "maps", "clock", "uows", "uow_order", "uows_gone", "uow_subscriptions", "origin_marks", "acked_messages")
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DURABLES_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    MAPS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    UOWS_FIELD_NUMBER: _ClassVar[int]
    UOW_ORDER_FIELD_NUMBER: _ClassVar[int]
    UOWS_GONE_FIELD_NUMBER: _ClassVar[int]
    UOW_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MARKS_FIELD_NUMBER: _ClassVar[int]
    ACKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    applied_epoch: int
    next_seq: int
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    durables: _containers.RepeatedCompositeFieldContainer[DurableState]
    producers: _containers.RepeatedCompositeFieldContainer[ProducerState]
    stores: _containers.RepeatedCompositeFieldContainer[ConfigureStoreOp]
    maps: _containers.RepeatedCompositeFieldContainer[MapState]
    clock: float
    uows: _containers.RepeatedCompositeFieldContainer[UowState]
    uow_order: int
    uows_gone: _containers.RepeatedCompositeFieldContainer[UowGone]
    uow_subscriptions: _containers.RepeatedCompositeFieldContainer[UowSubscriptionState]
    origin_marks: _containers.RepeatedCompositeFieldContainer[OriginMarkState]
    acked_messages: int
    def __init__(self, applied_index: _Optional[int] = ..., applied_epoch: _Optional[int] = ..., next_seq: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ..., durables: _Optional[_Iterable[_Union[DurableState, _Mapping]]] = ..., producers: _Optional[_Iterable[_Union[ProducerState, _Mapping]]] = ..., stores: _Optional[_Iterable[_Union[ConfigureStoreOp, _Mapping]]] = ..., maps: _Optional[_Iterable[_Union[MapState, _Mapping]]] = ..., clock: _Optional[float] = ..., uows: _Optional[_Iterable[_Union[UowState, _Mapping]]] = ..., uow_order: _Optional[int] = ..., uows_gone: _Optional[_Iterable[_Union[UowGone, _Mapping]]] = ..., uow_subscriptions: _Optional[_Iterable[_Union[UowSubscriptionState, _Mapping]]] = ..., origin_marks: _Optional[_Iterable[_Union[OriginMarkState, _Mapping]]] = ..., acked_messages: _Optional[int] = ...) -> None: ...

class OriginMarkState(_message.Message):
    __slots__ = ("cluster", "destination", "store", "sequence", "stored_at")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    destination: str
    store: str
    sequence: int
    stored_at: float
    def __init__(self, cluster: _Optional[str] = ..., destination: _Optional[str] = ..., store: _Optional[str] = ..., sequence: _Optional[int] = ..., stored_at: _Optional[float] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("seq", "store", "destination", "message", "content", "published_at", "expires_at", "retain_until", "queue", "expires_clock", "refs")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RETAIN_UNTIL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_CLOCK_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    store: str
    destination: str
    message: _common_pb2.Message
    content: bool
    published_at: float
    expires_at: float
    retain_until: float
    queue: bool
    expires_clock: float
    refs: int
    def __init__(self, seq: _Optional[int] = ..., store: _Optional[str] = ..., destination: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., content: _Optional[bool] = ..., published_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., retain_until: _Optional[float] = ..., queue: _Optional[bool] = ..., expires_clock: _Optional[float] = ..., refs: _Optional[int] = ...) -> None: ...

class DurableState(_message.Message):
    __slots__ = ("key", "store", "destination", "name", "kind", "pending", "last_value_seq", "queue", "matcher", "key_field", "content", "ack_sync_mode", "last_values", "suspended", "last_used", "attached", "delivery_counts", "pending_bytes", "continued")
    class LastValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class DeliveryCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LAST_VALUE_SEQ_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ACK_SYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    LAST_VALUES_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_FIELD_NUMBER: _ClassVar[int]
    key: str
    store: str
    destination: str
    name: str
    kind: _common_pb2.DurableKind
    pending: _containers.RepeatedScalarFieldContainer[int]
    last_value_seq: int
    queue: bool
    matcher: _common_pb2.ContentMatcher
    key_field: str
    content: bool
    ack_sync_mode: _common_pb2.AckSyncMode
    last_values: _containers.ScalarMap[str, int]
    suspended: bool
    last_used: float
    attached: bool
    delivery_counts: _containers.ScalarMap[int, int]
    pending_bytes: int
    continued: bool
    def __init__(self, key: _Optional[str] = ..., store: _Optional[str] = ..., destination: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., pending: _Optional[_Iterable[int]] = ..., last_value_seq: _Optional[int] = ..., queue: _Optional[bool] = ..., matcher: _Optional[_Union[_common_pb2.ContentMatcher, _Mapping]] = ..., key_field: _Optional[str] = ..., content: _Optional[bool] = ..., ack_sync_mode: _Optional[_Union[_common_pb2.AckSyncMode, str]] = ..., last_values: _Optional[_Mapping[str, int]] = ..., suspended: _Optional[bool] = ..., last_used: _Optional[float] = ..., attached: _Optional[bool] = ..., delivery_counts: _Optional[_Mapping[int, int]] = ..., pending_bytes: _Optional[int] = ..., continued: _Optional[bool] = ...) -> None: ...

class MapEntryState(_message.Message):
    __slots__ = ("key", "value", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    version: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class MapState(_message.Message):
    __slots__ = ("store", "map", "entries")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    entries: _containers.RepeatedCompositeFieldContainer[MapEntryState]
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[MapEntryState, _Mapping]]] = ...) -> None: ...

class ProducerState(_message.Message):
    __slots__ = ("producer_id", "sequences", "message_seqs", "last_index", "last_used")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    sequences: _containers.RepeatedScalarFieldContainer[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    last_index: int
    last_used: float
    def __init__(self, producer_id: _Optional[str] = ..., sequences: _Optional[_Iterable[int]] = ..., message_seqs: _Optional[_Iterable[int]] = ..., last_index: _Optional[int] = ..., last_used: _Optional[float] = ...) -> None: ...
