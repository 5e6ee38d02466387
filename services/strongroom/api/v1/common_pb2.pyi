from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DurableKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABLE_KIND_UNSPECIFIED: _ClassVar[DurableKind]
    DURABLE_KIND_STANDARD: _ClassVar[DurableKind]
    DURABLE_KIND_SHARED: _ClassVar[DurableKind]
    DURABLE_KIND_LASTVALUE: _ClassVar[DurableKind]

class FieldTest(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FIELD_TEST_UNSPECIFIED: _ClassVar[FieldTest]
    FIELD_TEST_PRESENT: _ClassVar[FieldTest]
    FIELD_TEST_ABSENT: _ClassVar[FieldTest]

class AckSyncMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_SYNC_MODE_UNSPECIFIED: _ClassVar[AckSyncMode]
    ACK_SYNC_MODE_SYNC: _ClassVar[AckSyncMode]
    ACK_SYNC_MODE_ASYNC: _ClassVar[AckSyncMode]

class LimitPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_POLICY_UNSPECIFIED: _ClassVar[LimitPolicy]
    LIMIT_POLICY_REJECT: _ClassVar[LimitPolicy]
    LIMIT_POLICY_DISCARD_OLDEST: _ClassVar[LimitPolicy]
DURABLE_KIND_UNSPECIFIED: DurableKind
DURABLE_KIND_STANDARD: DurableKind
DURABLE_KIND_SHARED: DurableKind
DURABLE_KIND_LASTVALUE: DurableKind
FIELD_TEST_UNSPECIFIED: FieldTest
FIELD_TEST_PRESENT: FieldTest
FIELD_TEST_ABSENT: FieldTest
ACK_SYNC_MODE_UNSPECIFIED: AckSyncMode
ACK_SYNC_MODE_SYNC: AckSyncMode
ACK_SYNC_MODE_ASYNC: AckSyncMode
LIMIT_POLICY_UNSPECIFIED: LimitPolicy
LIMIT_POLICY_REJECT: LimitPolicy
LIMIT_POLICY_DISCARD_OLDEST: LimitPolicy

class FieldValue(_message.Message):
    __slots__ = ("string_value", "int_value", "float_value", "bytes_value", "bool_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    int_value: int
    float_value: float
    bytes_value: bytes
    bool_value: bool
    def __init__(self, string_value: _Optional[str] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., bytes_value: _Optional[bytes] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("body", "fields", "producer_id", "sequence", "origin", "traceparent")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FieldValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[FieldValue, _Mapping]] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    fields: _containers.MessageMap[str, FieldValue]
    producer_id: str
    sequence: int
    origin: Origin
    traceparent: str
    def __init__(self, body: _Optional[bytes] = ..., fields: _Optional[_Mapping[str, FieldValue]] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., origin: _Optional[_Union[Origin, _Mapping]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class Origin(_message.Message):
    __slots__ = ("cluster", "store", "sequence", "previous")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    store: str
    sequence: int
    previous: int
    def __init__(self, cluster: _Optional[str] = ..., store: _Optional[str] = ..., sequence: _Optional[int] = ..., previous: _Optional[int] = ...) -> None: ...

class FieldMatch(_message.Message):
    __slots__ = ("equals", "test")
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    TEST_FIELD_NUMBER: _ClassVar[int]
    equals: FieldValue
    test: FieldTest
    def __init__(self, equals: _Optional[_Union[FieldValue, _Mapping]] = ..., test: _Optional[_Union[FieldTest, str]] = ...) -> None: ...

class ContentMatcher(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FieldMatch
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[FieldMatch, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, FieldMatch]
    def __init__(self, fields: _Optional[_Mapping[str, FieldMatch]] = ...) -> None: ...
