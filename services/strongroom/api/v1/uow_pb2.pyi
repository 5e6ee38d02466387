from strongroom.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UowStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UOW_STATUS_UNSPECIFIED: _ClassVar[UowStatus]
    UOW_STATUS_RECEIVED: _ClassVar[UowStatus]
    UOW_STATUS_ACCEPTED: _ClassVar[UowStatus]
    UOW_STATUS_DELIVERED: _ClassVar[UowStatus]
    UOW_STATUS_PROCESSED: _ClassVar[UowStatus]
    UOW_STATUS_BACKEDOUT: _ClassVar[UowStatus]
    UOW_STATUS_TIMEOUT: _ClassVar[UowStatus]
    UOW_STATUS_CANCELLED: _ClassVar[UowStatus]
    UOW_STATUS_DISCARDED: _ClassVar[UowStatus]

class UowAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UOW_ACTION_UNSPECIFIED: _ClassVar[UowAction]
    UOW_ACTION_COMMIT: _ClassVar[UowAction]
    UOW_ACTION_BACKOUT: _ClassVar[UowAction]
    UOW_ACTION_CANCEL: _ClassVar[UowAction]

class UowSettlement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UOW_SETTLEMENT_UNSPECIFIED: _ClassVar[UowSettlement]
    UOW_SETTLEMENT_COMMIT: _ClassVar[UowSettlement]
    UOW_SETTLEMENT_BACKOUT: _ClassVar[UowSettlement]
    UOW_SETTLEMENT_CANCEL: _ClassVar[UowSettlement]
UOW_STATUS_UNSPECIFIED: UowStatus
UOW_STATUS_RECEIVED: UowStatus
UOW_STATUS_ACCEPTED: UowStatus
UOW_STATUS_DELIVERED: UowStatus
UOW_STATUS_PROCESSED: UowStatus
UOW_STATUS_BACKEDOUT: UowStatus
UOW_STATUS_TIMEOUT: UowStatus
UOW_STATUS_CANCELLED: UowStatus
UOW_STATUS_DISCARDED: UowStatus
UOW_ACTION_UNSPECIFIED: UowAction
UOW_ACTION_COMMIT: UowAction
UOW_ACTION_BACKOUT: UowAction
UOW_ACTION_CANCEL: UowAction
UOW_SETTLEMENT_UNSPECIFIED: UowSettlement
UOW_SETTLEMENT_COMMIT: UowSettlement
UOW_SETTLEMENT_BACKOUT: UowSettlement
UOW_SETTLEMENT_CANCEL: UowSettlement

class UowOptions(_message.Message):
    __slots__ = ("persistent", "persistent_status", "lifetime_seconds", "status_lifetime_multiple")
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_STATUS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATUS_LIFETIME_MULTIPLE_FIELD_NUMBER: _ClassVar[int]
    persistent: bool
    persistent_status: bool
    lifetime_seconds: float
    status_lifetime_multiple: int
    def __init__(self, persistent: _Optional[bool] = ..., persistent_status: _Optional[bool] = ..., lifetime_seconds: _Optional[float] = ..., status_lifetime_multiple: _Optional[int] = ...) -> None: ...

class UowSendRequest(_message.Message):
    __slots__ = ("destination", "uow_id", "open", "messages", "action", "options", "user_status", "correlation_id")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    destination: str
    uow_id: str
    open: bool
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    action: UowAction
    options: UowOptions
    user_status: bytes
    correlation_id: int
    def __init__(self, destination: _Optional[str] = ..., uow_id: _Optional[str] = ..., open: _Optional[bool] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., action: _Optional[_Union[UowAction, str]] = ..., options: _Optional[_Union[UowOptions, _Mapping]] = ..., user_status: _Optional[bytes] = ..., correlation_id: _Optional[int] = ...) -> None: ...

class UowSendBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[UowSendRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[UowSendRequest, _Mapping]]] = ...) -> None: ...

class UowSendResponseBatch(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[UowSendResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[UowSendResponse, _Mapping]]] = ...) -> None: ...

class UowSendResponse(_message.Message):
    __slots__ = ("correlation_id", "uow_id", "status", "messages", "duplicate", "log_index", "error_code", "error_reason", "error_message", "error_metadata")
    class ErrorMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_METADATA_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    uow_id: str
    status: UowStatus
    messages: int
    duplicate: bool
    log_index: int
    error_code: int
    error_reason: str
    error_message: str
    error_metadata: _containers.ScalarMap[str, str]
    def __init__(self, correlation_id: _Optional[int] = ..., uow_id: _Optional[str] = ..., status: _Optional[_Union[UowStatus, str]] = ..., messages: _Optional[int] = ..., duplicate: _Optional[bool] = ..., log_index: _Optional[int] = ..., error_code: _Optional[int] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ..., error_metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UowReceiveRequest(_message.Message):
    __slots__ = ("destination", "receiver", "wait_seconds")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    destination: str
    receiver: str
    wait_seconds: float
    def __init__(self, destination: _Optional[str] = ..., receiver: _Optional[str] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class UowMessage(_message.Message):
    __slots__ = ("index", "count", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    count: int
    message: _common_pb2.Message
    def __init__(self, index: _Optional[int] = ..., count: _Optional[int] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ...) -> None: ...

class UowReceiveResponse(_message.Message):
    __slots__ = ("received", "uow_id", "messages", "backout_count", "user_status", "destination")
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BACKOUT_COUNT_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    received: bool
    uow_id: str
    messages: _containers.RepeatedCompositeFieldContainer[UowMessage]
    backout_count: int
    user_status: bytes
    destination: str
    def __init__(self, received: _Optional[bool] = ..., uow_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[UowMessage, _Mapping]]] = ..., backout_count: _Optional[int] = ..., user_status: _Optional[bytes] = ..., destination: _Optional[str] = ...) -> None: ...

class UowSettleRequest(_message.Message):
    __slots__ = ("uow_id", "receiver", "settlement", "user_status")
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    uow_id: str
    receiver: str
    settlement: UowSettlement
    user_status: bytes
    def __init__(self, uow_id: _Optional[str] = ..., receiver: _Optional[str] = ..., settlement: _Optional[_Union[UowSettlement, str]] = ..., user_status: _Optional[bytes] = ...) -> None: ...

class UowSettleResponse(_message.Message):
    __slots__ = ("status", "backout_count", "dead_lettered_to", "log_index", "duplicate")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BACKOUT_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_TO_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    status: UowStatus
    backout_count: int
    dead_lettered_to: str
    log_index: int
    duplicate: bool
    def __init__(self, status: _Optional[_Union[UowStatus, str]] = ..., backout_count: _Optional[int] = ..., dead_lettered_to: _Optional[str] = ..., log_index: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class UowStatusRequest(_message.Message):
    __slots__ = ("uow_id",)
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    uow_id: str
    def __init__(self, uow_id: _Optional[str] = ...) -> None: ...

class UowStatusResponse(_message.Message):
    __slots__ = ("uow_id", "status", "destination", "store", "messages", "bytes", "backout_count", "user_status", "receiver", "options", "created_at", "completed_at", "expires_at", "clock", "dead_lettered_from", "publication", "subscribers")
    UOW_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BACKOUT_COUNT_FIELD_NUMBER: _ClassVar[int]
    USER_STATUS_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FROM_FIELD_NUMBER: _ClassVar[int]
    PUBLICATION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    uow_id: str
    status: UowStatus
    destination: str
    store: str
    messages: int
    bytes: int
    backout_count: int
    user_status: bytes
    receiver: str
    options: UowOptions
    created_at: float
    completed_at: float
    expires_at: float
    clock: float
    dead_lettered_from: str
    publication: bool
    subscribers: _containers.RepeatedCompositeFieldContainer[UowSubscriberStatus]
    def __init__(self, uow_id: _Optional[str] = ..., status: _Optional[_Union[UowStatus, str]] = ..., destination: _Optional[str] = ..., store: _Optional[str] = ..., messages: _Optional[int] = ..., bytes: _Optional[int] = ..., backout_count: _Optional[int] = ..., user_status: _Optional[bytes] = ..., receiver: _Optional[str] = ..., options: _Optional[_Union[UowOptions, _Mapping]] = ..., created_at: _Optional[float] = ..., completed_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., clock: _Optional[float] = ..., dead_lettered_from: _Optional[str] = ..., publication: _Optional[bool] = ..., subscribers: _Optional[_Iterable[_Union[UowSubscriberStatus, _Mapping]]] = ...) -> None: ...

class UowSubscriberStatus(_message.Message):
    __slots__ = ("subscriber", "status", "backout_count")
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BACKOUT_COUNT_FIELD_NUMBER: _ClassVar[int]
    subscriber: str
    status: UowStatus
    backout_count: int
    def __init__(self, subscriber: _Optional[str] = ..., status: _Optional[_Union[UowStatus, str]] = ..., backout_count: _Optional[int] = ...) -> None: ...

class UowSubscribeRequest(_message.Message):
    __slots__ = ("topic", "subscriber")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscriber: str
    def __init__(self, topic: _Optional[str] = ..., subscriber: _Optional[str] = ...) -> None: ...

class UowSubscription(_message.Message):
    __slots__ = ("topic", "store", "subscriber", "subscribed_at", "last_used", "expires_at", "pending")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    store: str
    subscriber: str
    subscribed_at: float
    last_used: float
    expires_at: float
    pending: int
    def __init__(self, topic: _Optional[str] = ..., store: _Optional[str] = ..., subscriber: _Optional[str] = ..., subscribed_at: _Optional[float] = ..., last_used: _Optional[float] = ..., expires_at: _Optional[float] = ..., pending: _Optional[int] = ...) -> None: ...

class UowSubscribeResponse(_message.Message):
    __slots__ = ("subscription", "created")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    subscription: UowSubscription
    created: bool
    def __init__(self, subscription: _Optional[_Union[UowSubscription, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class UowUnsubscribeRequest(_message.Message):
    __slots__ = ("topic", "subscriber")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscriber: str
    def __init__(self, topic: _Optional[str] = ..., subscriber: _Optional[str] = ...) -> None: ...

class UowUnsubscribeResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...

class UowListSubscriptionsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class UowListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions", "clock")
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[UowSubscription]
    clock: float
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[UowSubscription, _Mapping]]] = ..., clock: _Optional[float] = ...) -> None: ...
