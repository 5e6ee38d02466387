from strongroom.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PublishMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PUBLISH_MODE_STORE_DEFAULT: _ClassVar[PublishMode]
    PUBLISH_MODE_STORE_CONFIRM_SEND: _ClassVar[PublishMode]
    PUBLISH_MODE_STORE_SEND_NOCONFIRM: _ClassVar[PublishMode]

class AckMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_MODE_UNSPECIFIED: _ClassVar[AckMode]
    ACK_MODE_EXPLICIT: _ClassVar[AckMode]
    ACK_MODE_AUTO: _ClassVar[AckMode]
PUBLISH_MODE_STORE_DEFAULT: PublishMode
PUBLISH_MODE_STORE_CONFIRM_SEND: PublishMode
PUBLISH_MODE_STORE_SEND_NOCONFIRM: PublishMode
ACK_MODE_UNSPECIFIED: AckMode
ACK_MODE_EXPLICIT: AckMode
ACK_MODE_AUTO: AckMode

class PublishRequest(_message.Message):
    __slots__ = ("destination", "message", "mode", "correlation_id")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    destination: str
    message: _common_pb2.Message
    mode: PublishMode
    correlation_id: int
    def __init__(self, destination: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., mode: _Optional[_Union[PublishMode, str]] = ..., correlation_id: _Optional[int] = ...) -> None: ...

class PublishBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PublishRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PublishRequest, _Mapping]]] = ...) -> None: ...

class PublishResponseBatch(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PublishResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[PublishResponse, _Mapping]]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("correlation_id", "message_seq", "duplicate", "confirmed", "error_code", "error_reason", "error_message", "log_index", "no_interest", "error_metadata")
    class ErrorMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    NO_INTEREST_FIELD_NUMBER: _ClassVar[int]
    ERROR_METADATA_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    message_seq: int
    duplicate: bool
    confirmed: bool
    error_code: int
    error_reason: str
    error_message: str
    log_index: int
    no_interest: bool
    error_metadata: _containers.ScalarMap[str, str]
    def __init__(self, correlation_id: _Optional[int] = ..., message_seq: _Optional[int] = ..., duplicate: _Optional[bool] = ..., confirmed: _Optional[bool] = ..., error_code: _Optional[int] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ..., log_index: _Optional[int] = ..., no_interest: _Optional[bool] = ..., error_metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class OpenSubscription(_message.Message):
    __slots__ = ("destination", "durable", "kind", "ack_mode", "credit", "client_name", "matcher", "ack_sync_mode", "replay")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACK_MODE_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    ACK_SYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    destination: str
    durable: str
    kind: _common_pb2.DurableKind
    ack_mode: AckMode
    credit: int
    client_name: str
    matcher: _common_pb2.ContentMatcher
    ack_sync_mode: _common_pb2.AckSyncMode
    replay: ReplayFrom
    def __init__(self, destination: _Optional[str] = ..., durable: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., ack_mode: _Optional[_Union[AckMode, str]] = ..., credit: _Optional[int] = ..., client_name: _Optional[str] = ..., matcher: _Optional[_Union[_common_pb2.ContentMatcher, _Mapping]] = ..., ack_sync_mode: _Optional[_Union[_common_pb2.AckSyncMode, str]] = ..., replay: _Optional[_Union[ReplayFrom, _Mapping]] = ...) -> None: ...

class ReplayFrom(_message.Message):
    __slots__ = ("sequence", "time")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: float
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("open", "credit", "ack", "nak", "term")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NAK_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    open: OpenSubscription
    credit: int
    ack: AckBatch
    nak: NakBatch
    term: TermBatch
    def __init__(self, open: _Optional[_Union[OpenSubscription, _Mapping]] = ..., credit: _Optional[int] = ..., ack: _Optional[_Union[AckBatch, _Mapping]] = ..., nak: _Optional[_Union[NakBatch, _Mapping]] = ..., term: _Optional[_Union[TermBatch, _Mapping]] = ...) -> None: ...

class AckBatch(_message.Message):
    __slots__ = ("message_seqs",)
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, message_seqs: _Optional[_Iterable[int]] = ...) -> None: ...

class NakBatch(_message.Message):
    __slots__ = ("message_seqs", "delay_seconds")
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    delay_seconds: float
    def __init__(self, message_seqs: _Optional[_Iterable[int]] = ..., delay_seconds: _Optional[float] = ...) -> None: ...

class TermBatch(_message.Message):
    __slots__ = ("message_seqs",)
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, message_seqs: _Optional[_Iterable[int]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("message_seq", "message", "delivery_count", "destination", "published_at")
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    message_seq: int
    message: _common_pb2.Message
    delivery_count: int
    destination: str
    published_at: float
    def __init__(self, message_seq: _Optional[int] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., delivery_count: _Optional[int] = ..., destination: _Optional[str] = ..., published_at: _Optional[float] = ...) -> None: ...

class SubscriptionOpened(_message.Message):
    __slots__ = ("subscription_id", "durable", "kind", "ack_sync_mode", "key_field")
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACK_SYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    durable: str
    kind: _common_pb2.DurableKind
    ack_sync_mode: _common_pb2.AckSyncMode
    key_field: str
    def __init__(self, subscription_id: _Optional[str] = ..., durable: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., ack_sync_mode: _Optional[_Union[_common_pb2.AckSyncMode, str]] = ..., key_field: _Optional[str] = ...) -> None: ...

class SubscriptionClosed(_message.Message):
    __slots__ = ("reason", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("opened", "deliveries", "closed", "refusals")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    opened: SubscriptionOpened
    deliveries: DeliveryBatch
    closed: SubscriptionClosed
    refusals: SettleRefusals
    def __init__(self, opened: _Optional[_Union[SubscriptionOpened, _Mapping]] = ..., deliveries: _Optional[_Union[DeliveryBatch, _Mapping]] = ..., closed: _Optional[_Union[SubscriptionClosed, _Mapping]] = ..., refusals: _Optional[_Union[SettleRefusals, _Mapping]] = ...) -> None: ...

class SettleRefusals(_message.Message):
    __slots__ = ("refusals",)
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    refusals: _containers.RepeatedCompositeFieldContainer[SettleRefusal]
    def __init__(self, refusals: _Optional[_Iterable[_Union[SettleRefusal, _Mapping]]] = ...) -> None: ...

class SettleRefusal(_message.Message):
    __slots__ = ("message_seq", "operation", "reason", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_SEQ_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    message_seq: int
    operation: str
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, message_seq: _Optional[int] = ..., operation: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeliveryBatch(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("destination", "durable", "message_seqs", "subscription_id")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    destination: str
    durable: str
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    subscription_id: str
    def __init__(self, destination: _Optional[str] = ..., durable: _Optional[str] = ..., message_seqs: _Optional[_Iterable[int]] = ..., subscription_id: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("log_index",)
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    log_index: int
    def __init__(self, log_index: _Optional[int] = ...) -> None: ...

class MapPutRequest(_message.Message):
    __slots__ = ("store", "map", "key", "value")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    key: str
    value: bytes
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class MapGetRequest(_message.Message):
    __slots__ = ("store", "map", "key")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    key: str
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class MapDeleteRequest(_message.Message):
    __slots__ = ("store", "map", "key")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    key: str
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class MapListRequest(_message.Message):
    __slots__ = ("store", "map", "prefix", "start_after", "limit")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    prefix: str
    start_after: str
    limit: int
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., prefix: _Optional[str] = ..., start_after: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class MapCompareAndSetRequest(_message.Message):
    __slots__ = ("store", "map", "key", "expected_version", "value", "delete")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    store: str
    map: str
    key: str
    expected_version: int
    value: bytes
    delete: bool
    def __init__(self, store: _Optional[str] = ..., map: _Optional[str] = ..., key: _Optional[str] = ..., expected_version: _Optional[int] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ...) -> None: ...

class MapEntry(_message.Message):
    __slots__ = ("key", "value", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    version: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class MapWriteResponse(_message.Message):
    __slots__ = ("swapped", "found", "entry", "log_index")
    SWAPPED_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    swapped: bool
    found: bool
    entry: MapEntry
    log_index: int
    def __init__(self, swapped: _Optional[bool] = ..., found: _Optional[bool] = ..., entry: _Optional[_Union[MapEntry, _Mapping]] = ..., log_index: _Optional[int] = ...) -> None: ...

class MapGetResponse(_message.Message):
    __slots__ = ("found", "entry")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    found: bool
    entry: MapEntry
    def __init__(self, found: _Optional[bool] = ..., entry: _Optional[_Union[MapEntry, _Mapping]] = ...) -> None: ...

class MapListResponse(_message.Message):
    __slots__ = ("entries", "more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[MapEntry]
    more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[MapEntry, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...
