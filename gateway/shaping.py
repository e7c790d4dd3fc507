"""Proto <-> JSON: the one place where request values become protobuf and service messages become the
JSON both REST and MCP answer with (seed 001's memory shape, plus the record and structure shapes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from pydantic import BaseModel

from gateway.auth import Session
from hypermnesia.errors import InvalidArgument
from hypermnesia.v1 import common_pb2, curation_pb2, retrieval_pb2, structure_pb2

# Lifecycle fields a memory carries only when they hold something.
_TIME_FIELDS = ("created_at", "updated_at", "last_accessed_at", "archived_at")
_OPTIONAL_FIELDS = ("decay_class", "supersedes", "superseded_by", "source_ref", "repo", "thread_id")
_OPTIONAL_TIMES = ("expires_at",)

M = TypeVar("M", bound=Message)


def caller(session: Session) -> common_pb2.Caller:
    return common_pb2.Caller(principal=session.principal.id, grants=list(session.grants))


def timestamp(value: datetime) -> Timestamp:
    """A Timestamp from an aware datetime (naive ones are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def to_proto(message: M, request: BaseModel, **values: Any) -> M:
    """Fill `message` from the request's fields of the same name, then from `values` (what the
    gateway decides: the caller, the session's scopes, renamed fields). A field left None stays
    unset, which the service reads as its default; fields the message lacks are the gateway's own."""
    given = {name: getattr(request, name) for name in type(request).model_fields}
    for name, value in {**given, **values}.items():
        spec = message.DESCRIPTOR.fields_by_name.get(name)
        if value is None or spec is None:
            continue
        target = spec.message_type.full_name if spec.message_type is not None else ""
        if spec.message_type is not None and spec.message_type.GetOptions().map_entry:
            getattr(message, name).clear()
            getattr(message, name).update(value)
        elif spec.is_repeated:
            del getattr(message, name)[:]
            getattr(message, name).extend(value)
        elif target == "google.protobuf.Struct":
            getattr(message, name).CopyFrom(struct(value))
        elif target == "google.protobuf.Timestamp":
            getattr(message, name).CopyFrom(timestamp(value))
        elif isinstance(value, Message):
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def iso(stamp: Timestamp) -> str:
    return stamp.ToDatetime().isoformat() + "Z"


def struct(value: dict[str, Any] | None) -> Struct:
    message = Struct()
    if value:
        try:
            message.update(value)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"metadata is not plain JSON: {exc}") from exc
    return message


def memory_json(m: common_pb2.Memory) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "owner_id": m.owner_id,
        "scope": m.scope,
        "type": m.type,
        "kind": m.kind,
        "content": m.content,
        "description": m.description,
        "tags": list(m.tags),
        "metadata": MessageToDict(m.metadata),
        "importance": m.importance,
    }
    for name in _TIME_FIELDS:
        out[name] = iso(getattr(m, name)) if m.HasField(name) else None
    for name in _OPTIONAL_FIELDS:
        if getattr(m, name):
            out[name] = getattr(m, name)
    for name in _OPTIONAL_TIMES:
        if m.HasField(name):
            out[name] = iso(getattr(m, name))
    return out


def hit_json(h: retrieval_pb2.SearchHit, degraded: list[str]) -> dict[str, Any]:
    """A search hit: the memory, its scores, and what was missing from the answer when something was."""
    out = {
        **memory_json(h.memory),
        "similarity": round(h.similarity, 6),
        "score": round(h.score, 6),
        "lexical_match": h.lexical_match,
        "entity_overlap": round(h.entity_overlap, 6),
        "active_task": h.active_task,
        "topic_match": h.topic_match,
    }
    if degraded:
        # Never silently half-answer: a hit read on its own still says what was missing.
        out["degraded"] = degraded
    return out


def record_json(view: curation_pb2.RecordView) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": view.id,
        "seq": view.seq,
        "scope": view.scope,
        "type": view.type,
        "operation": view.operation,
        "target_id": view.target_id or None,
        "author": view.author,
        "source_ref": view.source_ref or None,
        "prev_source_ref": view.prev_source_ref or None,
        "thread_id": view.thread_id or None,
        "topic_id": view.topic_id or None,
        "created_at": iso(view.created_at),
        "payload": json.loads(view.payload) if view.payload else None,
        "purged": view.purged,
        "record_hash": view.record_hash,
    }
    if view.HasField("memory"):
        out["memory"] = memory_json(view.memory)
    return out


def record_list_json(out: curation_pb2.RecordList) -> dict[str, Any]:
    return {
        "memories": [memory_json(m) for m in out.memories],
        "records": [record_json(r) for r in out.records],
    }


def component_json(c: structure_pb2.Component) -> dict[str, Any]:
    return {
        "slug": c.slug,
        "name": c.name,
        "parent": c.parent or None,
        "responsibility": c.responsibility,
        "globs": list(c.globs),
        "priority": c.priority,
        "depends_on": list(c.depends_on),
    }


def constraint_json(c: structure_pb2.Constraint, *, with_reason: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": c.id,
        "component": c.component or None,
        "kind": c.kind,
        "severity": c.severity,
        "status": c.status,
        "text": c.text,
        "rationale": c.rationale,
    }
    if with_reason:
        out["applies_because"] = c.reason
    return out
