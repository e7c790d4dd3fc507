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
    __slots__ = ("caller", "query", "scopes", "tags", "k", "min_similarity", "relative_cutoff", "fusion", "kinds", "types", "repo", "since", "until", "as_of", "mode", "include_archived", "rerank")
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
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., query: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., min_similarity: _Optional[float] = ..., relative_cutoff: _Optional[float] = ..., fusion: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., repo: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mode: _Optional[str] = ..., include_archived: _Optional[bool] = ..., rerank: _Optional[bool] = ...) -> None: ...

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
    __slots__ = ("memory", "similarity", "score", "lexical_match")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_MATCH_FIELD_NUMBER: _ClassVar[int]
    memory: _common_pb2.Memory
    similarity: float
    score: float
    lexical_match: bool
    def __init__(self, memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., similarity: _Optional[float] = ..., score: _Optional[float] = ..., lexical_match: _Optional[bool] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("hits", "degraded", "stats")
    HITS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    degraded: _containers.RepeatedScalarFieldContainer[str]
    stats: SearchStats
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ..., degraded: _Optional[_Iterable[str]] = ..., stats: _Optional[_Union[SearchStats, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("caller", "id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...
