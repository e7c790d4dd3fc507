from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InputType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INPUT_TYPE_UNSPECIFIED: _ClassVar[InputType]
    INPUT_TYPE_QUERY: _ClassVar[InputType]
    INPUT_TYPE_DOCUMENT: _ClassVar[InputType]
INPUT_TYPE_UNSPECIFIED: InputType
INPUT_TYPE_QUERY: InputType
INPUT_TYPE_DOCUMENT: InputType

class EmbedRequest(_message.Message):
    __slots__ = ("texts", "input_type")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: InputType
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[InputType, str]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("model_id", "dimension", "vectors", "token_counts", "truncated")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    vectors: bytes
    token_counts: _containers.RepeatedScalarFieldContainer[int]
    truncated: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., vectors: _Optional[bytes] = ..., token_counts: _Optional[_Iterable[int]] = ..., truncated: _Optional[_Iterable[bool]] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("texts",)
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("counts",)
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, counts: _Optional[_Iterable[int]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("query", "documents")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("model_id", "scores")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, model_id: _Optional[str] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("model_id", "dimension", "pooling", "max_tokens", "quantization", "provider", "rerank_model_id")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    RERANK_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    pooling: str
    max_tokens: int
    quantization: str
    provider: str
    rerank_model_id: str
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., pooling: _Optional[str] = ..., max_tokens: _Optional[int] = ..., quantization: _Optional[str] = ..., provider: _Optional[str] = ..., rerank_model_id: _Optional[str] = ...) -> None: ...
