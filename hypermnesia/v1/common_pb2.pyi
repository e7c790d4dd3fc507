import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Caller(_message.Message):
    __slots__ = ("principal", "grants")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    grants: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, principal: _Optional[str] = ..., grants: _Optional[_Iterable[str]] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "owner_id", "scope", "type", "kind", "content", "description", "tags", "metadata", "importance", "created_at", "updated_at", "last_accessed_at", "archived_at", "expires_at", "decay_class", "access_count", "supersedes", "superseded_by", "source_ref", "repo", "thread_id", "stale", "stale_because", "redacted")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESSED_AT_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DECAY_CLASS_FIELD_NUMBER: _ClassVar[int]
    ACCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REF_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    STALE_BECAUSE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner_id: str
    scope: str
    type: str
    kind: str
    content: str
    description: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    metadata: _struct_pb2.Struct
    importance: float
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    last_accessed_at: _timestamp_pb2.Timestamp
    archived_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    decay_class: str
    access_count: int
    supersedes: str
    superseded_by: str
    source_ref: str
    repo: str
    thread_id: str
    stale: bool
    stale_because: str
    redacted: Redacted
    def __init__(self, id: _Optional[str] = ..., owner_id: _Optional[str] = ..., scope: _Optional[str] = ..., type: _Optional[str] = ..., kind: _Optional[str] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., importance: _Optional[float] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_accessed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., archived_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decay_class: _Optional[str] = ..., access_count: _Optional[int] = ..., supersedes: _Optional[str] = ..., superseded_by: _Optional[str] = ..., source_ref: _Optional[str] = ..., repo: _Optional[str] = ..., thread_id: _Optional[str] = ..., stale: _Optional[bool] = ..., stale_because: _Optional[str] = ..., redacted: _Optional[_Union[Redacted, _Mapping]] = ...) -> None: ...

class LiveSettingsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LiveSettings(_message.Message):
    __slots__ = ("values",)
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.ScalarMap[str, str]
    def __init__(self, values: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServiceStatus(_message.Message):
    __slots__ = ("checks", "version")
    class ChecksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.ScalarMap[str, str]
    version: str
    def __init__(self, checks: _Optional[_Mapping[str, str]] = ..., version: _Optional[str] = ...) -> None: ...

class Redacted(_message.Message):
    __slots__ = ("count", "kinds")
    class KindsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COUNT_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    count: int
    kinds: _containers.ScalarMap[str, int]
    def __init__(self, count: _Optional[int] = ..., kinds: _Optional[_Mapping[str, int]] = ...) -> None: ...
