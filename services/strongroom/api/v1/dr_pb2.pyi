from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DrStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrStatus(_message.Message):
    __slots__ = ("cluster", "primary", "standby", "primary_commit_index", "standby_last_index", "entries_behind", "seconds_behind", "primary_member", "reconnects", "restarts", "state")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    STANDBY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    STANDBY_LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_BEHIND_FIELD_NUMBER: _ClassVar[int]
    SECONDS_BEHIND_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_MEMBER_FIELD_NUMBER: _ClassVar[int]
    RECONNECTS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    primary: _containers.RepeatedScalarFieldContainer[str]
    standby: _containers.RepeatedScalarFieldContainer[str]
    primary_commit_index: int
    standby_last_index: int
    entries_behind: int
    seconds_behind: float
    primary_member: str
    reconnects: int
    restarts: int
    state: str
    def __init__(self, cluster: _Optional[str] = ..., primary: _Optional[_Iterable[str]] = ..., standby: _Optional[_Iterable[str]] = ..., primary_commit_index: _Optional[int] = ..., standby_last_index: _Optional[int] = ..., entries_behind: _Optional[int] = ..., seconds_behind: _Optional[float] = ..., primary_member: _Optional[str] = ..., reconnects: _Optional[int] = ..., restarts: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...
