from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IssueTokenRequest(_message.Message):
    __slots__ = ("user", "ttl_seconds", "description")
    USER_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    user: str
    ttl_seconds: float
    description: str
    def __init__(self, user: _Optional[str] = ..., ttl_seconds: _Optional[float] = ..., description: _Optional[str] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("id", "user", "issued_at", "expires_at", "description", "revoked_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    issued_at: float
    expires_at: float
    description: str
    revoked_at: float
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., issued_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., description: _Optional[str] = ..., revoked_at: _Optional[float] = ...) -> None: ...

class IssuedToken(_message.Message):
    __slots__ = ("token", "info")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    token: str
    info: TokenInfo
    def __init__(self, token: _Optional[str] = ..., info: _Optional[_Union[TokenInfo, _Mapping]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class ApplyRealmRequest(_message.Message):
    __slots__ = ("yaml", "source_name", "expected_version")
    YAML_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    yaml: str
    source_name: str
    expected_version: int
    def __init__(self, yaml: _Optional[str] = ..., source_name: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class GetRealmRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class RealmVersion(_message.Message):
    __slots__ = ("version", "yaml", "normalized_json", "applied_at", "digest", "source_name")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    YAML_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_JSON_FIELD_NUMBER: _ClassVar[int]
    APPLIED_AT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    version: int
    yaml: str
    normalized_json: str
    applied_at: float
    digest: str
    source_name: str
    def __init__(self, version: _Optional[int] = ..., yaml: _Optional[str] = ..., normalized_json: _Optional[str] = ..., applied_at: _Optional[float] = ..., digest: _Optional[str] = ..., source_name: _Optional[str] = ...) -> None: ...

class ValidateRealmRequest(_message.Message):
    __slots__ = ("yaml", "source_name")
    YAML_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    yaml: str
    source_name: str
    def __init__(self, yaml: _Optional[str] = ..., source_name: _Optional[str] = ...) -> None: ...

class RealmProblem(_message.Message):
    __slots__ = ("file", "line", "column", "path", "message")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    column: int
    path: str
    message: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., column: _Optional[int] = ..., path: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ValidateRealmResponse(_message.Message):
    __slots__ = ("valid", "problems", "normalized_json")
    VALID_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_JSON_FIELD_NUMBER: _ClassVar[int]
    valid: bool
    problems: _containers.RepeatedCompositeFieldContainer[RealmProblem]
    normalized_json: str
    def __init__(self, valid: _Optional[bool] = ..., problems: _Optional[_Iterable[_Union[RealmProblem, _Mapping]]] = ..., normalized_json: _Optional[str] = ...) -> None: ...

class WatchRealmRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RealmHistoryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RealmHistoryResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[RealmVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[RealmVersion, _Mapping]]] = ...) -> None: ...
