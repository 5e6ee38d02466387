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
DURABLE_KIND_UNSPECIFIED: DurableKind
DURABLE_KIND_STANDARD: DurableKind
DURABLE_KIND_SHARED: DurableKind
DURABLE_KIND_LASTVALUE: DurableKind

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
    __slots__ = ("body", "fields", "producer_id", "sequence")
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
    body: bytes
    fields: _containers.MessageMap[str, FieldValue]
    producer_id: str
    sequence: int
    def __init__(self, body: _Optional[bytes] = ..., fields: _Optional[_Mapping[str, FieldValue]] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...
