from strongroom.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Operation(_message.Message):
    __slots__ = ("noop", "publish", "ack", "create_durable")
    NOOP_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CREATE_DURABLE_FIELD_NUMBER: _ClassVar[int]
    noop: Noop
    publish: PublishOp
    ack: AckOp
    create_durable: CreateDurableOp
    def __init__(self, noop: _Optional[_Union[Noop, _Mapping]] = ..., publish: _Optional[_Union[PublishOp, _Mapping]] = ..., ack: _Optional[_Union[AckOp, _Mapping]] = ..., create_durable: _Optional[_Union[CreateDurableOp, _Mapping]] = ...) -> None: ...

class Noop(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: str
    def __init__(self, leader: _Optional[str] = ...) -> None: ...

class PublishOp(_message.Message):
    __slots__ = ("store", "destination", "message", "queue")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    message: _common_pb2.Message
    queue: bool
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., queue: _Optional[bool] = ...) -> None: ...

class AckOp(_message.Message):
    __slots__ = ("store", "durable_key", "message_seqs")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    store: str
    durable_key: str
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, store: _Optional[str] = ..., durable_key: _Optional[str] = ..., message_seqs: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateDurableOp(_message.Message):
    __slots__ = ("store", "destination", "durable", "kind", "queue")
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    store: str
    destination: str
    durable: str
    kind: _common_pb2.DurableKind
    queue: bool
    def __init__(self, store: _Optional[str] = ..., destination: _Optional[str] = ..., durable: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., queue: _Optional[bool] = ...) -> None: ...

class LogEntry(_message.Message):
    __slots__ = ("index", "epoch", "ops")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    index: int
    epoch: int
    ops: _containers.RepeatedCompositeFieldContainer[Operation]
    def __init__(self, index: _Optional[int] = ..., epoch: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ...) -> None: ...

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
    __slots__ = ("epoch", "leader", "prev_index", "prev_epoch", "entries", "commit_index")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PREV_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    prev_index: int
    prev_epoch: int
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    commit_index: int
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., prev_index: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ..., commit_index: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("ok", "promised_epoch", "last_index", "conflict_index", "needs_snapshot")
    OK_FIELD_NUMBER: _ClassVar[int]
    PROMISED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NEEDS_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    promised_epoch: int
    last_index: int
    conflict_index: int
    needs_snapshot: bool
    def __init__(self, ok: _Optional[bool] = ..., promised_epoch: _Optional[int] = ..., last_index: _Optional[int] = ..., conflict_index: _Optional[int] = ..., needs_snapshot: _Optional[bool] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("epoch", "from_index", "max_entries")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    from_index: int
    max_entries: int
    def __init__(self, epoch: _Optional[int] = ..., from_index: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("entries", "last_index", "snapshot", "snapshot_index", "snapshot_epoch")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    last_index: int
    snapshot: bytes
    snapshot_index: int
    snapshot_epoch: int
    def __init__(self, entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ..., last_index: _Optional[int] = ..., snapshot: _Optional[bytes] = ..., snapshot_index: _Optional[int] = ..., snapshot_epoch: _Optional[int] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("epoch", "leader", "last_index", "last_epoch", "data", "done")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    last_index: int
    last_epoch: int
    data: bytes
    done: bool
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., last_index: _Optional[int] = ..., last_epoch: _Optional[int] = ..., data: _Optional[bytes] = ..., done: _Optional[bool] = ...) -> None: ...

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
    __slots__ = ("applied_index", "applied_epoch", "next_seq", "messages", "durables", "producers")
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DURABLES_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    applied_epoch: int
    next_seq: int
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    durables: _containers.RepeatedCompositeFieldContainer[DurableState]
    producers: _containers.RepeatedCompositeFieldContainer[ProducerState]
    def __init__(self, applied_index: _Optional[int] = ..., applied_epoch: _Optional[int] = ..., next_seq: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ..., durables: _Optional[_Iterable[_Union[DurableState, _Mapping]]] = ..., producers: _Optional[_Iterable[_Union[ProducerState, _Mapping]]] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("seq", "store", "destination", "message")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    store: str
    destination: str
    message: _common_pb2.Message
    def __init__(self, seq: _Optional[int] = ..., store: _Optional[str] = ..., destination: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ...) -> None: ...

class DurableState(_message.Message):
    __slots__ = ("key", "store", "destination", "name", "kind", "pending", "last_value_seq", "queue")
    KEY_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LAST_VALUE_SEQ_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    store: str
    destination: str
    name: str
    kind: _common_pb2.DurableKind
    pending: _containers.RepeatedScalarFieldContainer[int]
    last_value_seq: int
    queue: bool
    def __init__(self, key: _Optional[str] = ..., store: _Optional[str] = ..., destination: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.DurableKind, str]] = ..., pending: _Optional[_Iterable[int]] = ..., last_value_seq: _Optional[int] = ..., queue: _Optional[bool] = ...) -> None: ...

class ProducerState(_message.Message):
    __slots__ = ("producer_id", "sequences", "message_seqs")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SEQS_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    sequences: _containers.RepeatedScalarFieldContainer[int]
    message_seqs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, producer_id: _Optional[str] = ..., sequences: _Optional[_Iterable[int]] = ..., message_seqs: _Optional[_Iterable[int]] = ...) -> None: ...
