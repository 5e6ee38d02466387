from strongroom.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Interest(_message.Message):
    __slots__ = ("store", "destination", "matcher", "content")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    matcher: _common_pb2.ContentMatcher
    content: bool
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., matcher: _Optional[_Union[_common_pb2.ContentMatcher, _Mapping]] = ..., content: _Optional[bool] = ...) -> None: ...

class ClusterInterest(_message.Message):
    __slots__ = ("cluster", "version", "interests", "observed_at")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INTERESTS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    version: int
    interests: _containers.RepeatedCompositeFieldContainer[Interest]
    observed_at: float
    def __init__(self, cluster: _Optional[str] = ..., version: _Optional[int] = ..., interests: _Optional[_Iterable[_Union[Interest, _Mapping]]] = ..., observed_at: _Optional[float] = ...) -> None: ...

class InterestExchange(_message.Message):
    __slots__ = ("from_cluster", "clusters")
    FROM_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    from_cluster: str
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterInterest]
    def __init__(self, from_cluster: _Optional[str] = ..., clusters: _Optional[_Iterable[_Union[ClusterInterest, _Mapping]]] = ...) -> None: ...

class ForwardBatch(_message.Message):
    __slots__ = ("batch_id", "from_cluster", "destination", "messages")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    from_cluster: str
    destination: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    def __init__(self, batch_id: _Optional[int] = ..., from_cluster: _Optional[str] = ..., destination: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ...) -> None: ...

class OriginMark(_message.Message):
    __slots__ = ("cluster", "destination", "sequence", "stored_at")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    destination: str
    sequence: int
    stored_at: float
    def __init__(self, cluster: _Optional[str] = ..., destination: _Optional[str] = ..., sequence: _Optional[int] = ..., stored_at: _Optional[float] = ...) -> None: ...

class ForwardAck(_message.Message):
    __slots__ = ("batch_id", "stored", "marks", "error_code", "error_reason", "error_message")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    stored: int
    marks: _containers.RepeatedCompositeFieldContainer[OriginMark]
    error_code: int
    error_reason: str
    error_message: str
    def __init__(self, batch_id: _Optional[int] = ..., stored: _Optional[int] = ..., marks: _Optional[_Iterable[_Union[OriginMark, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class RouterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RoutePeer(_message.Message):
    __slots__ = ("cluster", "address", "connected", "last_error", "last_contact", "forwarded_messages", "waiting_messages", "oldest_waiting_seconds", "received_messages", "remote_marks", "stores", "resent_messages", "duplicate_messages")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAITING_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_WAITING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_MARKS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    RESENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    address: str
    connected: bool
    last_error: str
    last_contact: float
    forwarded_messages: int
    waiting_messages: int
    oldest_waiting_seconds: float
    received_messages: int
    remote_marks: _containers.RepeatedCompositeFieldContainer[OriginMark]
    stores: _containers.RepeatedScalarFieldContainer[str]
    resent_messages: int
    duplicate_messages: int
    def __init__(self, cluster: _Optional[str] = ..., address: _Optional[str] = ..., connected: _Optional[bool] = ..., last_error: _Optional[str] = ..., last_contact: _Optional[float] = ..., forwarded_messages: _Optional[int] = ..., waiting_messages: _Optional[int] = ..., oldest_waiting_seconds: _Optional[float] = ..., received_messages: _Optional[int] = ..., remote_marks: _Optional[_Iterable[_Union[OriginMark, _Mapping]]] = ..., stores: _Optional[_Iterable[str]] = ..., resent_messages: _Optional[int] = ..., duplicate_messages: _Optional[int] = ...) -> None: ...

class RouterStatus(_message.Message):
    __slots__ = ("cluster", "replica", "active", "active_replica", "peers", "interest", "metrics_url")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_REPLICA_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    INTEREST_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    replica: str
    active: bool
    active_replica: str
    peers: _containers.RepeatedCompositeFieldContainer[RoutePeer]
    interest: _containers.RepeatedCompositeFieldContainer[ClusterInterest]
    metrics_url: str
    def __init__(self, cluster: _Optional[str] = ..., replica: _Optional[str] = ..., active: _Optional[bool] = ..., active_replica: _Optional[str] = ..., peers: _Optional[_Iterable[_Union[RoutePeer, _Mapping]]] = ..., interest: _Optional[_Iterable[_Union[ClusterInterest, _Mapping]]] = ..., metrics_url: _Optional[str] = ...) -> None: ...
