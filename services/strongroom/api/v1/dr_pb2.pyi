from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ActivateRequest(_message.Message):
    __slots__ = ("cluster", "force")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    force: bool
    def __init__(self, cluster: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class ActivateResponse(_message.Message):
    __slots__ = ("cluster", "generation", "primary_commit_index", "heard_seconds_ago", "standby_last_index", "entries_lost_at_least", "exact", "leader", "seconds_to_serve", "summary", "messages_lost_at_least", "acks_lost_at_least")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    HEARD_SECONDS_AGO_FIELD_NUMBER: _ClassVar[int]
    STANDBY_LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_LOST_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SECONDS_TO_SERVE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_LOST_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    ACKS_LOST_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    generation: int
    primary_commit_index: int
    heard_seconds_ago: float
    standby_last_index: int
    entries_lost_at_least: int
    exact: bool
    leader: str
    seconds_to_serve: float
    summary: str
    messages_lost_at_least: int
    acks_lost_at_least: int
    def __init__(self, cluster: _Optional[str] = ..., generation: _Optional[int] = ..., primary_commit_index: _Optional[int] = ..., heard_seconds_ago: _Optional[float] = ..., standby_last_index: _Optional[int] = ..., entries_lost_at_least: _Optional[int] = ..., exact: _Optional[bool] = ..., leader: _Optional[str] = ..., seconds_to_serve: _Optional[float] = ..., summary: _Optional[str] = ..., messages_lost_at_least: _Optional[int] = ..., acks_lost_at_least: _Optional[int] = ...) -> None: ...

class DrStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrStatus(_message.Message):
    __slots__ = ("cluster", "primary", "standby", "primary_commit_index", "standby_last_index", "entries_behind", "seconds_behind", "primary_member", "reconnects", "restarts", "state", "role", "generation", "peer_role", "bytes_shipped", "snapshots_shipped", "messages_behind", "primary_stored_messages", "standby_stored_messages", "batches_shipped", "acks_behind", "metrics_url")
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
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PEER_ROLE_FIELD_NUMBER: _ClassVar[int]
    BYTES_SHIPPED_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_SHIPPED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_BEHIND_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_STORED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    STANDBY_STORED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_SHIPPED_FIELD_NUMBER: _ClassVar[int]
    ACKS_BEHIND_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
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
    role: str
    generation: int
    peer_role: str
    bytes_shipped: int
    snapshots_shipped: int
    messages_behind: int
    primary_stored_messages: int
    standby_stored_messages: int
    batches_shipped: int
    acks_behind: int
    metrics_url: str
    def __init__(self, cluster: _Optional[str] = ..., primary: _Optional[_Iterable[str]] = ..., standby: _Optional[_Iterable[str]] = ..., primary_commit_index: _Optional[int] = ..., standby_last_index: _Optional[int] = ..., entries_behind: _Optional[int] = ..., seconds_behind: _Optional[float] = ..., primary_member: _Optional[str] = ..., reconnects: _Optional[int] = ..., restarts: _Optional[int] = ..., state: _Optional[str] = ..., role: _Optional[str] = ..., generation: _Optional[int] = ..., peer_role: _Optional[str] = ..., bytes_shipped: _Optional[int] = ..., snapshots_shipped: _Optional[int] = ..., messages_behind: _Optional[int] = ..., primary_stored_messages: _Optional[int] = ..., standby_stored_messages: _Optional[int] = ..., batches_shipped: _Optional[int] = ..., acks_behind: _Optional[int] = ..., metrics_url: _Optional[str] = ...) -> None: ...
