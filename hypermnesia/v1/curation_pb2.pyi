import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SaveRequest(_message.Message):
    __slots__ = ("caller", "content", "description", "scope", "type", "tags", "metadata", "importance", "kind", "supersedes", "decay_class", "set_description", "set_tags", "set_metadata")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    DECAY_CLASS_FIELD_NUMBER: _ClassVar[int]
    SET_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SET_TAGS_FIELD_NUMBER: _ClassVar[int]
    SET_METADATA_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    content: str
    description: str
    scope: str
    type: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    metadata: _struct_pb2.Struct
    importance: float
    kind: str
    supersedes: str
    decay_class: str
    set_description: bool
    set_tags: bool
    set_metadata: bool
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., scope: _Optional[str] = ..., type: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., importance: _Optional[float] = ..., kind: _Optional[str] = ..., supersedes: _Optional[str] = ..., decay_class: _Optional[str] = ..., set_description: _Optional[bool] = ..., set_tags: _Optional[bool] = ..., set_metadata: _Optional[bool] = ...) -> None: ...

class SaveResponse(_message.Message):
    __slots__ = ("created", "memory", "replaced", "similar", "redacted")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    memory: _common_pb2.Memory
    replaced: _common_pb2.Memory
    similar: _containers.RepeatedCompositeFieldContainer[SimilarMemory]
    redacted: _common_pb2.Redacted
    def __init__(self, created: _Optional[bool] = ..., memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., replaced: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., similar: _Optional[_Iterable[_Union[SimilarMemory, _Mapping]]] = ..., redacted: _Optional[_Union[_common_pb2.Redacted, _Mapping]] = ...) -> None: ...

class RecordInput(_message.Message):
    __slots__ = ("type", "scope", "content", "source_ref", "thread_id", "created_at", "metadata", "prev_source_ref", "topic_id", "description", "tags", "importance", "state_kind", "state_key", "supersedes", "repo", "kind", "speaker")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REF_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PREV_SOURCE_REF_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    STATE_KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_KEY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    type: str
    scope: str
    content: str
    source_ref: str
    thread_id: str
    created_at: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    prev_source_ref: str
    topic_id: str
    description: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    importance: float
    state_kind: str
    state_key: str
    supersedes: str
    repo: str
    kind: str
    speaker: str
    def __init__(self, type: _Optional[str] = ..., scope: _Optional[str] = ..., content: _Optional[str] = ..., source_ref: _Optional[str] = ..., thread_id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., prev_source_ref: _Optional[str] = ..., topic_id: _Optional[str] = ..., description: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., importance: _Optional[float] = ..., state_kind: _Optional[str] = ..., state_key: _Optional[str] = ..., supersedes: _Optional[str] = ..., repo: _Optional[str] = ..., kind: _Optional[str] = ..., speaker: _Optional[str] = ...) -> None: ...

class AppendRecordRequest(_message.Message):
    __slots__ = ("caller", "record")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    record: RecordInput
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., record: _Optional[_Union[RecordInput, _Mapping]] = ...) -> None: ...

class ImportRecordsRequest(_message.Message):
    __slots__ = ("caller", "records")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    records: _containers.RepeatedCompositeFieldContainer[RecordInput]
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., records: _Optional[_Iterable[_Union[RecordInput, _Mapping]]] = ...) -> None: ...

class ImportRecordsResponse(_message.Message):
    __slots__ = ("imported", "skipped", "ids", "redacted", "left_out")
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    imported: int
    skipped: int
    ids: _containers.RepeatedScalarFieldContainer[str]
    redacted: _common_pb2.Redacted
    left_out: int
    def __init__(self, imported: _Optional[int] = ..., skipped: _Optional[int] = ..., ids: _Optional[_Iterable[str]] = ..., redacted: _Optional[_Union[_common_pb2.Redacted, _Mapping]] = ..., left_out: _Optional[int] = ...) -> None: ...

class RecordRequest(_message.Message):
    __slots__ = ("caller", "id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...

class RecordView(_message.Message):
    __slots__ = ("id", "seq", "scope", "type", "operation", "target_id", "author", "source_ref", "prev_source_ref", "thread_id", "topic_id", "created_at", "payload", "purged", "memory", "record_hash")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REF_FIELD_NUMBER: _ClassVar[int]
    PREV_SOURCE_REF_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    RECORD_HASH_FIELD_NUMBER: _ClassVar[int]
    id: str
    seq: int
    scope: str
    type: str
    operation: str
    target_id: str
    author: str
    source_ref: str
    prev_source_ref: str
    thread_id: str
    topic_id: str
    created_at: _timestamp_pb2.Timestamp
    payload: str
    purged: bool
    memory: _common_pb2.Memory
    record_hash: str
    def __init__(self, id: _Optional[str] = ..., seq: _Optional[int] = ..., scope: _Optional[str] = ..., type: _Optional[str] = ..., operation: _Optional[str] = ..., target_id: _Optional[str] = ..., author: _Optional[str] = ..., source_ref: _Optional[str] = ..., prev_source_ref: _Optional[str] = ..., thread_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload: _Optional[str] = ..., purged: _Optional[bool] = ..., memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., record_hash: _Optional[str] = ...) -> None: ...

class RecordList(_message.Message):
    __slots__ = ("records", "memories")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[RecordView]
    memories: _containers.RepeatedCompositeFieldContainer[_common_pb2.Memory]
    def __init__(self, records: _Optional[_Iterable[_Union[RecordView, _Mapping]]] = ..., memories: _Optional[_Iterable[_Union[_common_pb2.Memory, _Mapping]]] = ...) -> None: ...

class QueryRecordsRequest(_message.Message):
    __slots__ = ("caller", "scopes", "types", "since", "until", "thread_id", "limit")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    types: _containers.RepeatedScalarFieldContainer[str]
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    thread_id: str
    limit: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., thread_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class StateRequest(_message.Message):
    __slots__ = ("caller", "scope", "kind", "key", "history")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scope: str
    kind: str
    key: str
    history: bool
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scope: _Optional[str] = ..., kind: _Optional[str] = ..., key: _Optional[str] = ..., history: _Optional[bool] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("caller", "id", "content", "description", "type", "tags", "set_tags", "metadata", "set_metadata", "importance", "decay_class")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SET_TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SET_METADATA_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    DECAY_CLASS_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    content: str
    description: str
    type: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    set_tags: bool
    metadata: _struct_pb2.Struct
    set_metadata: bool
    importance: float
    decay_class: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., type: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., set_tags: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., set_metadata: _Optional[bool] = ..., importance: _Optional[float] = ..., decay_class: _Optional[str] = ...) -> None: ...

class MemoryRequest(_message.Message):
    __slots__ = ("caller", "id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("caller", "scopes", "tags", "older_than_days", "importance_floor", "apply", "limit")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_DAYS_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FLOOR_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    older_than_days: float
    importance_floor: float
    apply: bool
    limit: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., older_than_days: _Optional[float] = ..., importance_floor: _Optional[float] = ..., apply: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ("matched", "archived", "memories", "truncated", "applied")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    matched: int
    archived: int
    memories: _containers.RepeatedCompositeFieldContainer[_common_pb2.Memory]
    truncated: bool
    applied: bool
    def __init__(self, matched: _Optional[int] = ..., archived: _Optional[int] = ..., memories: _Optional[_Iterable[_Union[_common_pb2.Memory, _Mapping]]] = ..., truncated: _Optional[bool] = ..., applied: _Optional[bool] = ...) -> None: ...

class RebuildRequest(_message.Message):
    __slots__ = ("caller", "scopes", "check")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    check: bool
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., check: _Optional[bool] = ...) -> None: ...

class RebuildResponse(_message.Message):
    __slots__ = ("replayed", "live", "inserted", "updated", "deleted", "reembedded", "differences", "applied")
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    REEMBEDDED_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    replayed: int
    live: int
    inserted: int
    updated: int
    deleted: int
    reembedded: int
    differences: _containers.RepeatedScalarFieldContainer[str]
    applied: bool
    def __init__(self, replayed: _Optional[int] = ..., live: _Optional[int] = ..., inserted: _Optional[int] = ..., updated: _Optional[int] = ..., deleted: _Optional[int] = ..., reembedded: _Optional[int] = ..., differences: _Optional[_Iterable[str]] = ..., applied: _Optional[bool] = ...) -> None: ...

class IngestFile(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("caller", "scope", "repo", "files")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scope: str
    repo: str
    files: _containers.RepeatedCompositeFieldContainer[IngestFile]
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scope: _Optional[str] = ..., repo: _Optional[str] = ..., files: _Optional[_Iterable[_Union[IngestFile, _Mapping]]] = ...) -> None: ...

class IngestResponse(_message.Message):
    __slots__ = ("files", "unchanged", "changed", "added", "retired", "chunks_written", "skipped", "redacted")
    FILES_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    files: int
    unchanged: int
    changed: int
    added: int
    retired: int
    chunks_written: int
    skipped: _containers.RepeatedScalarFieldContainer[str]
    redacted: _common_pb2.Redacted
    def __init__(self, files: _Optional[int] = ..., unchanged: _Optional[int] = ..., changed: _Optional[int] = ..., added: _Optional[int] = ..., retired: _Optional[int] = ..., chunks_written: _Optional[int] = ..., skipped: _Optional[_Iterable[str]] = ..., redacted: _Optional[_Union[_common_pb2.Redacted, _Mapping]] = ...) -> None: ...

class TaskDecision(_message.Message):
    __slots__ = ("caller", "id", "decision")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    decision: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ..., decision: _Optional[str] = ...) -> None: ...

class SimilarMemory(_message.Message):
    __slots__ = ("id", "content", "differences")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    differences: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., differences: _Optional[_Iterable[str]] = ...) -> None: ...
