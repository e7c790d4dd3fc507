from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchRequest(_message.Message):
    __slots__ = ("caller", "query", "scopes", "tags", "k", "min_similarity", "relative_cutoff", "fusion")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_CUTOFF_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    query: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    k: int
    min_similarity: float
    relative_cutoff: float
    fusion: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., query: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., min_similarity: _Optional[float] = ..., relative_cutoff: _Optional[float] = ..., fusion: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("hits", "degraded")
    HITS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    degraded: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ..., degraded: _Optional[_Iterable[str]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("caller", "id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...
