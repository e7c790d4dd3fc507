import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VizGraphRequest(_message.Message):
    __slots__ = ("caller", "scopes", "since", "until", "limit", "kinds")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    scopes: _containers.RepeatedScalarFieldContainer[str]
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    limit: int
    kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ..., kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class VizNode(_message.Message):
    __slots__ = ("id", "kind", "type", "scope", "x", "y", "z", "importance", "decay", "label", "created_at", "archived_at", "superseded_by", "stale")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    Z_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    DECAY_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_AT_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    type: str
    scope: str
    x: float
    y: float
    z: float
    importance: float
    decay: float
    label: str
    created_at: _timestamp_pb2.Timestamp
    archived_at: _timestamp_pb2.Timestamp
    superseded_by: str
    stale: bool
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., type: _Optional[str] = ..., scope: _Optional[str] = ..., x: _Optional[float] = ..., y: _Optional[float] = ..., z: _Optional[float] = ..., importance: _Optional[float] = ..., decay: _Optional[float] = ..., label: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., archived_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., superseded_by: _Optional[str] = ..., stale: _Optional[bool] = ...) -> None: ...

class VizEdge(_message.Message):
    __slots__ = ("source", "target", "relation", "weight")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    relation: str
    weight: float
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., relation: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class VizGraphResponse(_message.Message):
    __slots__ = ("nodes", "edges", "total", "truncated", "projection")
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[VizNode]
    edges: _containers.RepeatedCompositeFieldContainer[VizEdge]
    total: int
    truncated: bool
    projection: str
    def __init__(self, nodes: _Optional[_Iterable[_Union[VizNode, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[VizEdge, _Mapping]]] = ..., total: _Optional[int] = ..., truncated: _Optional[bool] = ..., projection: _Optional[str] = ...) -> None: ...
