from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MigrationSide(_message.Message):
    __slots__ = ("run_mode", "address", "partner_address", "version", "log_format", "driver", "store_fingerprints", "cluster", "member", "data_dir")
    RUN_MODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LOG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    STORE_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    run_mode: str
    address: str
    partner_address: str
    version: str
    log_format: int
    driver: str
    store_fingerprints: _containers.RepeatedScalarFieldContainer[str]
    cluster: str
    member: str
    data_dir: str
    def __init__(self, run_mode: _Optional[str] = ..., address: _Optional[str] = ..., partner_address: _Optional[str] = ..., version: _Optional[str] = ..., log_format: _Optional[int] = ..., driver: _Optional[str] = ..., store_fingerprints: _Optional[_Iterable[str]] = ..., cluster: _Optional[str] = ..., member: _Optional[str] = ..., data_dir: _Optional[str] = ...) -> None: ...

class MigrationHandshake(_message.Message):
    __slots__ = ("side", "problems")
    SIDE_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    side: MigrationSide
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, side: _Optional[_Union[MigrationSide, _Mapping]] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...

class MigrationHandshakeReply(_message.Message):
    __slots__ = ("side", "problems")
    SIDE_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    side: MigrationSide
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, side: _Optional[_Union[MigrationSide, _Mapping]] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...

class StoreRecord(_message.Message):
    __slots__ = ("family", "key", "value")
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    family: str
    key: bytes
    value: bytes
    def __init__(self, family: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class RecordChunk(_message.Message):
    __slots__ = ("database", "families", "records", "last")
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    database: str
    families: _containers.RepeatedScalarFieldContainer[str]
    records: _containers.RepeatedCompositeFieldContainer[StoreRecord]
    last: bool
    def __init__(self, database: _Optional[str] = ..., families: _Optional[_Iterable[str]] = ..., records: _Optional[_Iterable[_Union[StoreRecord, _Mapping]]] = ..., last: _Optional[bool] = ...) -> None: ...

class TransferReply(_message.Message):
    __slots__ = ("records", "bytes")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    records: int
    bytes: int
    def __init__(self, records: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class FamilyCount(_message.Message):
    __slots__ = ("database", "family", "records", "bytes", "elements")
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    database: str
    family: str
    records: int
    bytes: int
    elements: int
    def __init__(self, database: _Optional[str] = ..., family: _Optional[str] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., elements: _Optional[int] = ...) -> None: ...

class MigrationSummary(_message.Message):
    __slots__ = ("families",)
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    families: _containers.RepeatedCompositeFieldContainer[FamilyCount]
    def __init__(self, families: _Optional[_Iterable[_Union[FamilyCount, _Mapping]]] = ...) -> None: ...

class MigrationSummaryReply(_message.Message):
    __slots__ = ("summary", "match", "differences")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    summary: MigrationSummary
    match: bool
    differences: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, summary: _Optional[_Union[MigrationSummary, _Mapping]] = ..., match: _Optional[bool] = ..., differences: _Optional[_Iterable[str]] = ...) -> None: ...

class MigrationAbort(_message.Message):
    __slots__ = ("problems",)
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, problems: _Optional[_Iterable[str]] = ...) -> None: ...

class MigrationAbortReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
