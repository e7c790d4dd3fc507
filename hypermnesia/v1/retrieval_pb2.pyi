import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchRequest(_message.Message):
    __slots__ = ("caller", "query", "scopes", "tags", "k", "min_similarity", "relative_cutoff", "fusion", "kinds", "types", "repo", "since", "until", "as_of", "mode", "include_archived", "rerank", "topic", "topic_only", "include_stale", "depth", "min_lsn", "reference_time", "group_by")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_CUTOFF_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ONLY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STALE_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TIME_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    query: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    k: int
    min_similarity: float
    relative_cutoff: float
    fusion: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    types: _containers.RepeatedScalarFieldContainer[str]
    repo: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    as_of: _timestamp_pb2.Timestamp
    mode: str
    include_archived: bool
    rerank: bool
    topic: str
    topic_only: bool
    include_stale: bool
    depth: str
    min_lsn: int
    reference_time: _timestamp_pb2.Timestamp
    group_by: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., query: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., min_similarity: _Optional[float] = ..., relative_cutoff: _Optional[float] = ..., fusion: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., repo: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mode: _Optional[str] = ..., include_archived: _Optional[bool] = ..., rerank: _Optional[bool] = ..., topic: _Optional[str] = ..., topic_only: _Optional[bool] = ..., include_stale: _Optional[bool] = ..., depth: _Optional[str] = ..., min_lsn: _Optional[int] = ..., reference_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., group_by: _Optional[str] = ...) -> None: ...

class SearchStats(_message.Message):
    __slots__ = ("candidates", "dense_candidates", "lexical_candidates", "embed_ms", "candidates_ms", "total_ms", "fusion")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DENSE_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    EMBED_MS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    candidates: int
    dense_candidates: int
    lexical_candidates: int
    embed_ms: float
    candidates_ms: float
    total_ms: float
    fusion: str
    def __init__(self, candidates: _Optional[int] = ..., dense_candidates: _Optional[int] = ..., lexical_candidates: _Optional[int] = ..., embed_ms: _Optional[float] = ..., candidates_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., fusion: _Optional[str] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("memory", "similarity", "score", "lexical_match", "entity_overlap", "active_task", "topic_match", "premise_of", "hops", "time_match", "length_weight", "group")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_MATCH_FIELD_NUMBER: _ClassVar[int]
    ENTITY_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TASK_FIELD_NUMBER: _ClassVar[int]
    TOPIC_MATCH_FIELD_NUMBER: _ClassVar[int]
    PREMISE_OF_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    TIME_MATCH_FIELD_NUMBER: _ClassVar[int]
    LENGTH_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    memory: _common_pb2.Memory
    similarity: float
    score: float
    lexical_match: bool
    entity_overlap: float
    active_task: bool
    topic_match: bool
    premise_of: str
    hops: int
    time_match: TimeMatch
    length_weight: float
    group: int
    def __init__(self, memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., similarity: _Optional[float] = ..., score: _Optional[float] = ..., lexical_match: _Optional[bool] = ..., entity_overlap: _Optional[float] = ..., active_task: _Optional[bool] = ..., topic_match: _Optional[bool] = ..., premise_of: _Optional[str] = ..., hops: _Optional[int] = ..., time_match: _Optional[_Union[TimeMatch, _Mapping]] = ..., length_weight: _Optional[float] = ..., group: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("hits", "degraded", "stats", "depth", "depth_reason", "purged")
    HITS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_REASON_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    degraded: _containers.RepeatedScalarFieldContainer[str]
    stats: SearchStats
    depth: str
    depth_reason: str
    purged: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ..., degraded: _Optional[_Iterable[str]] = ..., stats: _Optional[_Union[SearchStats, _Mapping]] = ..., depth: _Optional[str] = ..., depth_reason: _Optional[str] = ..., purged: _Optional[_Iterable[str]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("caller", "id", "min_lsn")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    min_lsn: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ..., min_lsn: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("caller", "scopes", "tags", "limit", "offset", "include_archived", "full", "kinds", "types", "as_of", "include_stale", "min_lsn")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STALE_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    offset: int
    include_archived: bool
    full: bool
    kinds: _containers.RepeatedScalarFieldContainer[str]
    types: _containers.RepeatedScalarFieldContainer[str]
    as_of: _timestamp_pb2.Timestamp
    include_stale: bool
    min_lsn: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., include_archived: _Optional[bool] = ..., full: _Optional[bool] = ..., kinds: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., include_stale: _Optional[bool] = ..., min_lsn: _Optional[int] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("memories", "total")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[_common_pb2.Memory]
    total: int
    def __init__(self, memories: _Optional[_Iterable[_Union[_common_pb2.Memory, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class LineageResponse(_message.Message):
    __slots__ = ("memories", "versions")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[_common_pb2.Memory]
    versions: _containers.RepeatedCompositeFieldContainer[MemoryVersion]
    def __init__(self, memories: _Optional[_Iterable[_Union[_common_pb2.Memory, _Mapping]]] = ..., versions: _Optional[_Iterable[_Union[MemoryVersion, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("caller", "scopes", "days", "min_lsn")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    days: int
    min_lsn: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., days: _Optional[int] = ..., min_lsn: _Optional[int] = ...) -> None: ...

class ScopeCount(_message.Message):
    __slots__ = ("scope", "live", "archived", "superseded")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    scope: str
    live: int
    archived: int
    superseded: int
    def __init__(self, scope: _Optional[str] = ..., live: _Optional[int] = ..., archived: _Optional[int] = ..., superseded: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("scopes", "days", "searches", "empty_rate", "avg_hits", "avg_top_score", "p50_ms", "p95_ms", "p99_ms", "degraded_rate", "recent_misses", "empty_searches")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    EMPTY_RATE_FIELD_NUMBER: _ClassVar[int]
    AVG_HITS_FIELD_NUMBER: _ClassVar[int]
    AVG_TOP_SCORE_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P95_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_RATE_FIELD_NUMBER: _ClassVar[int]
    RECENT_MISSES_FIELD_NUMBER: _ClassVar[int]
    EMPTY_SEARCHES_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedCompositeFieldContainer[ScopeCount]
    days: int
    searches: int
    empty_rate: float
    avg_hits: float
    avg_top_score: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    degraded_rate: float
    recent_misses: _containers.RepeatedScalarFieldContainer[str]
    empty_searches: int
    def __init__(self, scopes: _Optional[_Iterable[_Union[ScopeCount, _Mapping]]] = ..., days: _Optional[int] = ..., searches: _Optional[int] = ..., empty_rate: _Optional[float] = ..., avg_hits: _Optional[float] = ..., avg_top_score: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p95_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., degraded_rate: _Optional[float] = ..., recent_misses: _Optional[_Iterable[str]] = ..., empty_searches: _Optional[int] = ...) -> None: ...

class ContextRequest(_message.Message):
    __slots__ = ("caller", "scopes", "query", "path", "repo", "mode", "thread_id", "budgets", "include_stale", "depth", "min_lsn", "as_of")
    class BudgetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STALE_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    query: str
    path: str
    repo: str
    mode: str
    thread_id: str
    budgets: _containers.ScalarMap[str, int]
    include_stale: bool
    depth: str
    min_lsn: int
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., query: _Optional[str] = ..., path: _Optional[str] = ..., repo: _Optional[str] = ..., mode: _Optional[str] = ..., thread_id: _Optional[str] = ..., budgets: _Optional[_Mapping[str, int]] = ..., include_stale: _Optional[bool] = ..., depth: _Optional[str] = ..., min_lsn: _Optional[int] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ContextLayer(_message.Message):
    __slots__ = ("name", "text", "tokens", "budget", "cited_ids", "dropped")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CITED_IDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    tokens: int
    budget: int
    cited_ids: _containers.RepeatedScalarFieldContainer[str]
    dropped: int
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ..., tokens: _Optional[int] = ..., budget: _Optional[int] = ..., cited_ids: _Optional[_Iterable[str]] = ..., dropped: _Optional[int] = ...) -> None: ...

class ContextResponse(_message.Message):
    __slots__ = ("layers", "total_tokens", "mode", "mode_reason", "degraded", "depth", "depth_reason", "purged")
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MODE_REASON_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_REASON_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    layers: _containers.RepeatedCompositeFieldContainer[ContextLayer]
    total_tokens: int
    mode: str
    mode_reason: str
    degraded: _containers.RepeatedScalarFieldContainer[str]
    depth: str
    depth_reason: str
    purged: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layers: _Optional[_Iterable[_Union[ContextLayer, _Mapping]]] = ..., total_tokens: _Optional[int] = ..., mode: _Optional[str] = ..., mode_reason: _Optional[str] = ..., degraded: _Optional[_Iterable[str]] = ..., depth: _Optional[str] = ..., depth_reason: _Optional[str] = ..., purged: _Optional[_Iterable[str]] = ...) -> None: ...

class MemoryVersion(_message.Message):
    __slots__ = ("memory_id", "record_id", "seq", "operation", "reason", "at", "author", "text", "content", "description", "changed")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    record_id: str
    seq: int
    operation: str
    reason: str
    at: _timestamp_pb2.Timestamp
    author: str
    text: str
    content: str
    description: str
    changed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, memory_id: _Optional[str] = ..., record_id: _Optional[str] = ..., seq: _Optional[int] = ..., operation: _Optional[str] = ..., reason: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., author: _Optional[str] = ..., text: _Optional[str] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., changed: _Optional[_Iterable[str]] = ...) -> None: ...

class TimeMatch(_message.Message):
    __slots__ = ("phrase", "start", "end", "event_source", "event_phrase", "boost")
    PHRASE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    EVENT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_PHRASE_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    phrase: str
    start: _timestamp_pb2.Timestamp
    end: _timestamp_pb2.Timestamp
    event_source: str
    event_phrase: str
    boost: float
    def __init__(self, phrase: _Optional[str] = ..., start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event_source: _Optional[str] = ..., event_phrase: _Optional[str] = ..., boost: _Optional[float] = ...) -> None: ...
