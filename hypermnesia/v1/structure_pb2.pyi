import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadMapRequest(_message.Message):
    __slots__ = ("caller", "repo", "source", "source_name")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    repo: str
    source: str
    source_name: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., repo: _Optional[str] = ..., source: _Optional[str] = ..., source_name: _Optional[str] = ...) -> None: ...

class LoadMapResponse(_message.Message):
    __slots__ = ("repo", "components", "constraints", "relationships", "replaced", "source_sha256")
    REPO_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    RELATIONSHIPS_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SHA256_FIELD_NUMBER: _ClassVar[int]
    repo: str
    components: int
    constraints: int
    relationships: int
    replaced: bool
    source_sha256: str
    def __init__(self, repo: _Optional[str] = ..., components: _Optional[int] = ..., constraints: _Optional[int] = ..., relationships: _Optional[int] = ..., replaced: _Optional[bool] = ..., source_sha256: _Optional[str] = ...) -> None: ...

class Component(_message.Message):
    __slots__ = ("slug", "name", "parent", "responsibility", "globs", "priority", "depends_on")
    SLUG_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    RESPONSIBILITY_FIELD_NUMBER: _ClassVar[int]
    GLOBS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    slug: str
    name: str
    parent: str
    responsibility: str
    globs: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, slug: _Optional[str] = ..., name: _Optional[str] = ..., parent: _Optional[str] = ..., responsibility: _Optional[str] = ..., globs: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., depends_on: _Optional[_Iterable[str]] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("id", "component", "kind", "severity", "status", "text", "rationale", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    component: str
    kind: str
    severity: str
    status: str
    text: str
    rationale: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., component: _Optional[str] = ..., kind: _Optional[str] = ..., severity: _Optional[str] = ..., status: _Optional[str] = ..., text: _Optional[str] = ..., rationale: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Relationship(_message.Message):
    __slots__ = ("from_component", "to_component", "kind")
    FROM_COMPONENT_FIELD_NUMBER: _ClassVar[int]
    TO_COMPONENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    from_component: str
    to_component: str
    kind: str
    def __init__(self, from_component: _Optional[str] = ..., to_component: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class ProjectMapRequest(_message.Message):
    __slots__ = ("caller", "repo")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    repo: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., repo: _Optional[str] = ...) -> None: ...

class ProjectMapResponse(_message.Message):
    __slots__ = ("repo", "components", "invariants", "relationships", "source_name", "source_sha256", "loaded_at", "loaded_by")
    REPO_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    INVARIANTS_FIELD_NUMBER: _ClassVar[int]
    RELATIONSHIPS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SHA256_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    LOADED_BY_FIELD_NUMBER: _ClassVar[int]
    repo: str
    components: _containers.RepeatedCompositeFieldContainer[Component]
    invariants: _containers.RepeatedCompositeFieldContainer[Constraint]
    relationships: _containers.RepeatedCompositeFieldContainer[Relationship]
    source_name: str
    source_sha256: str
    loaded_at: _timestamp_pb2.Timestamp
    loaded_by: str
    def __init__(self, repo: _Optional[str] = ..., components: _Optional[_Iterable[_Union[Component, _Mapping]]] = ..., invariants: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., relationships: _Optional[_Iterable[_Union[Relationship, _Mapping]]] = ..., source_name: _Optional[str] = ..., source_sha256: _Optional[str] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., loaded_by: _Optional[str] = ...) -> None: ...

class ResolvePathRequest(_message.Message):
    __slots__ = ("caller", "repo", "path")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    repo: str
    path: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., repo: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ResolvePathResponse(_message.Message):
    __slots__ = ("repo", "path", "matched", "component", "matched_glob", "reason", "constraints", "note")
    REPO_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_GLOB_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    repo: str
    path: str
    matched: bool
    component: Component
    matched_glob: str
    reason: str
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    note: str
    def __init__(self, repo: _Optional[str] = ..., path: _Optional[str] = ..., matched: _Optional[bool] = ..., component: _Optional[_Union[Component, _Mapping]] = ..., matched_glob: _Optional[str] = ..., reason: _Optional[str] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., note: _Optional[str] = ...) -> None: ...
