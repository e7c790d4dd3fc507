from google.protobuf import struct_pb2 as _struct_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SaveRequest(_message.Message):
    __slots__ = ("caller", "content", "description", "scope", "type", "tags", "metadata", "importance", "kind")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    content: str
    description: str
    scope: str
    type: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    metadata: _struct_pb2.Struct
    importance: float
    kind: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., content: _Optional[str] = ..., description: _Optional[str] = ..., scope: _Optional[str] = ..., type: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., importance: _Optional[float] = ..., kind: _Optional[str] = ...) -> None: ...

class SaveResponse(_message.Message):
    __slots__ = ("created", "memory", "replaced")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    memory: _common_pb2.Memory
    replaced: _common_pb2.Memory
    def __init__(self, created: _Optional[bool] = ..., memory: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ..., replaced: _Optional[_Union[_common_pb2.Memory, _Mapping]] = ...) -> None: ...
