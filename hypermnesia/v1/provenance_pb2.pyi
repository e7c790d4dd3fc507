from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProvenanceRequest(_message.Message):
    __slots__ = ("caller", "id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...

class ProvenanceRecord(_message.Message):
    __slots__ = ("seq", "id", "kind", "operation", "author", "scope", "created_at", "record_hash", "content_sha256", "verifies", "text_purged")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RECORD_HASH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    VERIFIES_FIELD_NUMBER: _ClassVar[int]
    TEXT_PURGED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    id: str
    kind: str
    operation: str
    author: str
    scope: str
    created_at: str
    record_hash: str
    content_sha256: str
    verifies: bool
    text_purged: bool
    def __init__(self, seq: _Optional[int] = ..., id: _Optional[str] = ..., kind: _Optional[str] = ..., operation: _Optional[str] = ..., author: _Optional[str] = ..., scope: _Optional[str] = ..., created_at: _Optional[str] = ..., record_hash: _Optional[str] = ..., content_sha256: _Optional[str] = ..., verifies: _Optional[bool] = ..., text_purged: _Optional[bool] = ...) -> None: ...

class RelatedMemory(_message.Message):
    __slots__ = ("id", "state", "by")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: str
    by: str
    def __init__(self, id: _Optional[str] = ..., state: _Optional[str] = ..., by: _Optional[str] = ...) -> None: ...

class ProposalProvenance(_message.Message):
    __slots__ = ("id", "kind", "status", "role", "decided_by", "decided_at", "reason", "records")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    status: str
    role: str
    decided_by: str
    decided_at: str
    reason: str
    records: _containers.RepeatedCompositeFieldContainer[ProvenanceRecord]
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ..., role: _Optional[str] = ..., decided_by: _Optional[str] = ..., decided_at: _Optional[str] = ..., reason: _Optional[str] = ..., records: _Optional[_Iterable[_Union[ProvenanceRecord, _Mapping]]] = ...) -> None: ...

class ProvenanceResponse(_message.Message):
    __slots__ = ("id", "scope", "state", "owner", "stale_because", "records", "mentioned_by", "all_verify", "supersedes", "superseded_by", "closed_by_its_records", "premises", "conclusions", "proposals", "written_by", "approved_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STALE_BECAUSE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MENTIONED_BY_FIELD_NUMBER: _ClassVar[int]
    ALL_VERIFY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    CLOSED_BY_ITS_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PREMISES_FIELD_NUMBER: _ClassVar[int]
    CONCLUSIONS_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_BY_FIELD_NUMBER: _ClassVar[int]
    APPROVED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    state: str
    owner: str
    stale_because: str
    records: _containers.RepeatedCompositeFieldContainer[ProvenanceRecord]
    mentioned_by: _containers.RepeatedCompositeFieldContainer[ProvenanceRecord]
    all_verify: bool
    supersedes: _containers.RepeatedScalarFieldContainer[str]
    superseded_by: _containers.RepeatedScalarFieldContainer[str]
    closed_by_its_records: _containers.RepeatedScalarFieldContainer[str]
    premises: _containers.RepeatedCompositeFieldContainer[RelatedMemory]
    conclusions: _containers.RepeatedCompositeFieldContainer[RelatedMemory]
    proposals: _containers.RepeatedCompositeFieldContainer[ProposalProvenance]
    written_by: _containers.RepeatedScalarFieldContainer[str]
    approved_by: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., state: _Optional[str] = ..., owner: _Optional[str] = ..., stale_because: _Optional[str] = ..., records: _Optional[_Iterable[_Union[ProvenanceRecord, _Mapping]]] = ..., mentioned_by: _Optional[_Iterable[_Union[ProvenanceRecord, _Mapping]]] = ..., all_verify: _Optional[bool] = ..., supersedes: _Optional[_Iterable[str]] = ..., superseded_by: _Optional[_Iterable[str]] = ..., closed_by_its_records: _Optional[_Iterable[str]] = ..., premises: _Optional[_Iterable[_Union[RelatedMemory, _Mapping]]] = ..., conclusions: _Optional[_Iterable[_Union[RelatedMemory, _Mapping]]] = ..., proposals: _Optional[_Iterable[_Union[ProposalProvenance, _Mapping]]] = ..., written_by: _Optional[_Iterable[str]] = ..., approved_by: _Optional[_Iterable[str]] = ...) -> None: ...
