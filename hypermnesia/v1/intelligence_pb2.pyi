import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GraphNode(_message.Message):
    __slots__ = ("memory", "stale", "stale_because", "hops")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    STALE_BECAUSE_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    memory: _common_pb2.Memory
    stale: bool
    stale_because: str
    hops: int
    def __init__(self, memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., stale: _Optional[bool] = ..., stale_because: _Optional[str] = ..., hops: _Optional[int] = ...) -> None: ...

class AddEvidenceRequest(_message.Message):
    __slots__ = ("caller", "derived_id", "premise_ids")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    DERIVED_ID_FIELD_NUMBER: _ClassVar[int]
    PREMISE_IDS_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    derived_id: str
    premise_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., derived_id: _Optional[str] = ..., premise_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class EvidenceRequest(_message.Message):
    __slots__ = ("caller", "id", "depth")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    depth: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ..., depth: _Optional[str] = ...) -> None: ...

class EvidenceResponse(_message.Message):
    __slots__ = ("memory", "premises", "derived")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PREMISES_FIELD_NUMBER: _ClassVar[int]
    DERIVED_FIELD_NUMBER: _ClassVar[int]
    memory: GraphNode
    premises: _containers.RepeatedCompositeFieldContainer[GraphNode]
    derived: _containers.RepeatedCompositeFieldContainer[GraphNode]
    def __init__(self, memory: _Optional[_Union[GraphNode, _Mapping]] = ..., premises: _Optional[_Iterable[_Union[GraphNode, _Mapping]]] = ..., derived: _Optional[_Iterable[_Union[GraphNode, _Mapping]]] = ...) -> None: ...

class CreateIdentityRequest(_message.Message):
    __slots__ = ("caller", "scope", "name")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scope: str
    name: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scope: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Identity(_message.Message):
    __slots__ = ("id", "scope", "name", "owner_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    name: str
    owner_id: str
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., name: _Optional[str] = ..., owner_id: _Optional[str] = ...) -> None: ...

class SetPerspectiveRequest(_message.Message):
    __slots__ = ("caller", "memory_id", "observer", "observed")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    memory_id: str
    observer: str
    observed: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., memory_id: _Optional[str] = ..., observer: _Optional[str] = ..., observed: _Optional[str] = ...) -> None: ...

class Perspective(_message.Message):
    __slots__ = ("memory_id", "observer", "observed")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    observer: str
    observed: str
    def __init__(self, memory_id: _Optional[str] = ..., observer: _Optional[str] = ..., observed: _Optional[str] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ("id", "scope", "kind", "status", "content", "description", "rationale", "evidence", "supersedes", "mode", "created_at", "decided_by", "decided_at", "decision_reason", "result_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    kind: str
    status: str
    content: str
    description: str
    rationale: str
    evidence: _containers.RepeatedScalarFieldContainer[str]
    supersedes: str
    mode: str
    created_at: _timestamp_pb2.Timestamp
    decided_by: str
    decided_at: _timestamp_pb2.Timestamp
    decision_reason: str
    result_id: str
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., rationale: _Optional[str] = ..., evidence: _Optional[_Iterable[str]] = ..., supersedes: _Optional[str] = ..., mode: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decided_by: _Optional[str] = ..., decided_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decision_reason: _Optional[str] = ..., result_id: _Optional[str] = ...) -> None: ...

class ListProposalsRequest(_message.Message):
    __slots__ = ("caller", "scopes", "status", "limit")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    status: str
    limit: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., status: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ProposalList(_message.Message):
    __slots__ = ("proposals",)
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    proposals: _containers.RepeatedCompositeFieldContainer[Proposal]
    def __init__(self, proposals: _Optional[_Iterable[_Union[Proposal, _Mapping]]] = ...) -> None: ...

class DecideProposalRequest(_message.Message):
    __slots__ = ("caller", "id", "decision", "reason")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    decision: str
    reason: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ..., decision: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DecideProposalResponse(_message.Message):
    __slots__ = ("proposal", "memory_id")
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    proposal: Proposal
    memory_id: str
    def __init__(self, proposal: _Optional[_Union[Proposal, _Mapping]] = ..., memory_id: _Optional[str] = ...) -> None: ...

class ConsolidateRequest(_message.Message):
    __slots__ = ("caller", "job", "scope", "since", "until")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    job: str
    scope: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., job: _Optional[str] = ..., scope: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ConsolidateReport(_message.Message):
    __slots__ = ("job", "scope", "skipped", "skipped_reason", "mode", "promoted", "expired", "marked_stale", "proposals_made", "pending", "duration_ms", "notes", "made_by_kind", "coverage", "read")
    class MadeByKindEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_REASON_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    MARKED_STALE_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_MADE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    MADE_BY_KIND_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    job: str
    scope: str
    skipped: bool
    skipped_reason: str
    mode: str
    promoted: int
    expired: int
    marked_stale: int
    proposals_made: int
    pending: int
    duration_ms: float
    notes: _containers.RepeatedScalarFieldContainer[str]
    made_by_kind: _containers.ScalarMap[str, int]
    coverage: str
    read: int
    def __init__(self, job: _Optional[str] = ..., scope: _Optional[str] = ..., skipped: _Optional[bool] = ..., skipped_reason: _Optional[str] = ..., mode: _Optional[str] = ..., promoted: _Optional[int] = ..., expired: _Optional[int] = ..., marked_stale: _Optional[int] = ..., proposals_made: _Optional[int] = ..., pending: _Optional[int] = ..., duration_ms: _Optional[float] = ..., notes: _Optional[_Iterable[str]] = ..., made_by_kind: _Optional[_Mapping[str, int]] = ..., coverage: _Optional[str] = ..., read: _Optional[int] = ...) -> None: ...

class ConsolidateResponse(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[ConsolidateReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[ConsolidateReport, _Mapping]]] = ...) -> None: ...

class AskRequest(_message.Message):
    __slots__ = ("caller", "question", "scopes", "depth", "k")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    question: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    depth: str
    k: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., question: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., depth: _Optional[str] = ..., k: _Optional[int] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("text", "citations")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    citations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, text: _Optional[str] = ..., citations: _Optional[_Iterable[str]] = ...) -> None: ...

class DroppedClaim(_message.Message):
    __slots__ = ("text", "citations", "reason")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    text: str
    citations: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, text: _Optional[str] = ..., citations: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class AskResponse(_message.Message):
    __slots__ = ("mode", "claims", "dropped", "depth", "depth_reason", "notes", "evidence", "abstained")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_REASON_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    ABSTAINED_FIELD_NUMBER: _ClassVar[int]
    mode: str
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedClaim]
    depth: str
    depth_reason: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    evidence: _containers.RepeatedCompositeFieldContainer[GraphNode]
    abstained: str
    def __init__(self, mode: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ..., dropped: _Optional[_Iterable[_Union[DroppedClaim, _Mapping]]] = ..., depth: _Optional[str] = ..., depth_reason: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., evidence: _Optional[_Iterable[_Union[GraphNode, _Mapping]]] = ..., abstained: _Optional[str] = ...) -> None: ...
