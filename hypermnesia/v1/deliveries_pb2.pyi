import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from hypermnesia.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeliveredItem(_message.Message):
    __slots__ = ("id", "has_score", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    HAS_SCORE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    has_score: bool
    score: float
    def __init__(self, id: _Optional[str] = ..., has_score: _Optional[bool] = ..., score: _Optional[float] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("principal", "session", "thread", "operation", "transport", "delivered_at", "request_json", "scopes", "items", "text_sha256", "text_bytes")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    TEXT_SHA256_FIELD_NUMBER: _ClassVar[int]
    TEXT_BYTES_FIELD_NUMBER: _ClassVar[int]
    principal: str
    session: str
    thread: str
    operation: str
    transport: str
    delivered_at: _timestamp_pb2.Timestamp
    request_json: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    items: _containers.RepeatedCompositeFieldContainer[DeliveredItem]
    text_sha256: str
    text_bytes: int
    def __init__(self, principal: _Optional[str] = ..., session: _Optional[str] = ..., thread: _Optional[str] = ..., operation: _Optional[str] = ..., transport: _Optional[str] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_json: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., items: _Optional[_Iterable[_Union[DeliveredItem, _Mapping]]] = ..., text_sha256: _Optional[str] = ..., text_bytes: _Optional[int] = ...) -> None: ...

class RecordDeliveriesRequest(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class RecordDeliveriesResponse(_message.Message):
    __slots__ = ("recorded",)
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    recorded: int
    def __init__(self, recorded: _Optional[int] = ...) -> None: ...

class ListDeliveriesRequest(_message.Message):
    __slots__ = ("caller", "session", "since", "principal", "limit")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    session: str
    since: _timestamp_pb2.Timestamp
    principal: str
    limit: int
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., session: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., principal: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class DeliveredMemory(_message.Message):
    __slots__ = ("id", "has_score", "score", "state", "hash", "scope", "description", "content", "superseded_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    HAS_SCORE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    has_score: bool
    score: float
    state: str
    hash: str
    scope: str
    description: str
    content: str
    superseded_by: str
    def __init__(self, id: _Optional[str] = ..., has_score: _Optional[bool] = ..., score: _Optional[float] = ..., state: _Optional[str] = ..., hash: _Optional[str] = ..., scope: _Optional[str] = ..., description: _Optional[str] = ..., content: _Optional[str] = ..., superseded_by: _Optional[str] = ...) -> None: ...

class DeliveryView(_message.Message):
    __slots__ = ("seq", "delivery", "prev_hash", "entry_hash", "memories")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    delivery: Delivery
    prev_hash: str
    entry_hash: str
    memories: _containers.RepeatedCompositeFieldContainer[DeliveredMemory]
    def __init__(self, seq: _Optional[int] = ..., delivery: _Optional[_Union[Delivery, _Mapping]] = ..., prev_hash: _Optional[str] = ..., entry_hash: _Optional[str] = ..., memories: _Optional[_Iterable[_Union[DeliveredMemory, _Mapping]]] = ...) -> None: ...

class DeliveryList(_message.Message):
    __slots__ = ("deliveries", "truncated")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[DeliveryView]
    truncated: bool
    def __init__(self, deliveries: _Optional[_Iterable[_Union[DeliveryView, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class VerifyDeliveriesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifyDeliveriesResponse(_message.Message):
    __slots__ = ("checked", "first_broken_seq", "reason", "floor_seq", "floor_hash")
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    FIRST_BROKEN_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FLOOR_SEQ_FIELD_NUMBER: _ClassVar[int]
    FLOOR_HASH_FIELD_NUMBER: _ClassVar[int]
    checked: int
    first_broken_seq: int
    reason: str
    floor_seq: int
    floor_hash: str
    def __init__(self, checked: _Optional[int] = ..., first_broken_seq: _Optional[int] = ..., reason: _Optional[str] = ..., floor_seq: _Optional[int] = ..., floor_hash: _Optional[str] = ...) -> None: ...
