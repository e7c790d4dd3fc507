"""Curation operations shared by the REST routes and the MCP tools: validate at the edge, call the
curation service, shape the answer as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from gateway.auth import Session
from gateway.backends import Backends
from gateway.operations import _caller, _metadata, memory_json, timestamp
from hypermnesia import validation
from hypermnesia.errors import InvalidArgument
from hypermnesia.v1 import curation_pb2

MAX_IMPORT = 5000
# An import embeds every record before it answers; give it time in proportion to its size.
IMPORT_SECONDS_PER_RECORD = 1.0

RECORD_FIELDS = (
    "type",
    "scope",
    "content",
    "source_ref",
    "thread_id",
    "created_at",
    "metadata",
    "prev_source_ref",
    "topic_id",
    "description",
    "tags",
    "importance",
    "state_kind",
    "state_key",
    "supersedes",
    "repo",
    "kind",
)


async def _call(backends: Backends, method: Any, request: Any, timeout_s: float | None = None) -> Any:
    """backends.call, with a longer deadline for the calls that embed many texts."""
    return await backends.call(method, request, timeout_s)


def _timestamp(value: datetime | str | None, field: str) -> Timestamp | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidArgument(f"{field} is not an ISO 8601 time such as 2024-05-01T12:00:00Z") from exc
    return timestamp(value)


def record_input(data: dict[str, Any], session: Session, where: str = "") -> curation_pb2.RecordInput:
    unknown = set(data) - set(RECORD_FIELDS)
    if unknown:
        raise InvalidArgument(
            f"{where}unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(RECORD_FIELDS)}"
        )
    try:
        message = curation_pb2.RecordInput(
            type=str(data.get("type") or ""),
            scope=str(data.get("scope") or session.project_scope),
            content=str(data.get("content") or ""),
            metadata=_metadata(data.get("metadata")),
            tags=list(data.get("tags") or []),
        )
        for name in (
            "source_ref",
            "thread_id",
            "prev_source_ref",
            "topic_id",
            "description",
            "state_kind",
            "state_key",
            "supersedes",
            "repo",
            "kind",
        ):
            if data.get(name) is not None:
                setattr(message, name, str(data[name]))
        stamp = _timestamp(data.get("created_at"), "created_at")
        if stamp is not None:
            message.created_at.CopyFrom(stamp)
        if data.get("importance") is not None:
            message.importance = validation.check_importance(float(data["importance"]))
    except InvalidArgument as exc:
        raise InvalidArgument(where + exc.message) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{where}invalid record: {exc}") from exc
    return message


async def import_records(
    backends: Backends, session: Session, records: list[dict[str, Any]]
) -> dict[str, Any]:
    if not records:
        raise InvalidArgument('no records given; send {"records": [...]} with at least one record')
    if len(records) > MAX_IMPORT:
        raise InvalidArgument(
            f"{len(records):,} records in one request; the limit is {MAX_IMPORT:,}. Split them"
        )
    request = curation_pb2.ImportRecordsRequest(
        caller=_caller(session),
        records=[record_input(r, session, f"records[{i}]: ") for i, r in enumerate(records)],
    )
    response = await _call(
        backends, backends.curation.ImportRecords, request, 30 + IMPORT_SECONDS_PER_RECORD * len(records)
    )
    return {"imported": response.imported, "skipped": response.skipped, "ids": list(response.ids)}


async def append_record(backends: Backends, session: Session, record: dict[str, Any]) -> dict[str, Any]:
    request = curation_pb2.AppendRecordRequest(caller=_caller(session), record=record_input(record, session))
    response = await _call(backends, backends.curation.AppendRecord, request, 60)
    return {"id": response.ids[0], "created": response.imported == 1}


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
        "created_at": view.created_at.ToDatetime().isoformat() + "Z",
        "payload": json.loads(view.payload) if view.payload else None,
        "purged": view.purged,
        "record_hash": view.record_hash,
    }
    if view.HasField("memory"):
        out["memory"] = memory_json(view.memory)
    return out


async def get_record(backends: Backends, session: Session, record_id: str) -> dict[str, Any]:
    view = await backends.call(
        backends.curation.GetRecord, curation_pb2.RecordRequest(caller=_caller(session), id=record_id)
    )
    return record_json(view)


async def lineage(backends: Backends, session: Session, record_id: str) -> dict[str, Any]:
    out = await backends.call(
        backends.curation.Lineage, curation_pb2.RecordRequest(caller=_caller(session), id=record_id)
    )
    return {
        "memories": [memory_json(m) for m in out.memories],
        "records": [record_json(r) for r in out.records],
    }


async def derivations(backends: Backends, session: Session, record_id: str) -> dict[str, Any]:
    out = await backends.call(
        backends.curation.Derivations, curation_pb2.RecordRequest(caller=_caller(session), id=record_id)
    )
    return {
        "memories": [memory_json(m) for m in out.memories],
        "records": [record_json(r) for r in out.records],
    }


async def query_records(
    backends: Backends,
    session: Session,
    *,
    scopes: list[str] | None = None,
    types: list[str] | None = None,
    since: str | None = None,
    until: str | None = None,
    thread_id: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    request = curation_pb2.QueryRecordsRequest(
        caller=_caller(session),
        scopes=scopes or [session.project_scope],
        types=types or [],
        thread_id=thread_id or "",
        limit=limit,
    )
    for name, value in (("since", since), ("until", until)):
        stamp = _timestamp(value, name)
        if stamp is not None:
            getattr(request, name).CopyFrom(stamp)
    out = await backends.call(backends.curation.QueryRecords, request)
    return {"records": [record_json(r) for r in out.records]}


async def state(
    backends: Backends, session: Session, kind: str, key: str, *, scope: str | None, history: bool
) -> dict[str, Any]:
    request = curation_pb2.StateRequest(
        caller=_caller(session), scope=scope or session.project_scope, kind=kind, key=key, history=history
    )
    out = await backends.call(backends.curation.StateObject, request)
    memories = [memory_json(m) for m in out.memories]
    return {"history": memories} if history else {"current": memories[-1]}


async def update(
    backends: Backends, session: Session, memory_id: str, changes: dict[str, Any]
) -> dict[str, Any]:
    request = curation_pb2.UpdateRequest(caller=_caller(session), id=memory_id)
    for name in ("content", "description", "type", "decay_class"):
        if changes.get(name) is not None:
            setattr(request, name, str(changes[name]))
    if changes.get("importance") is not None:
        request.importance = validation.check_importance(float(changes["importance"]))
    if changes.get("tags") is not None:
        request.tags.extend(validation.check_tags(list(changes["tags"])))
        request.set_tags = True
    if changes.get("metadata") is not None:
        request.metadata.CopyFrom(_metadata(changes["metadata"]))
        request.set_metadata = True
    return memory_json(await _call(backends, backends.curation.Update, request, 60))


async def delete(backends: Backends, session: Session, memory_id: str) -> dict[str, Any]:
    memory = await backends.call(
        backends.curation.Delete, curation_pb2.MemoryRequest(caller=_caller(session), id=memory_id)
    )
    return {"deleted": True, "memory": memory_json(memory)}


async def restore(backends: Backends, session: Session, memory_id: str) -> dict[str, Any]:
    memory = await backends.call(
        backends.curation.Restore, curation_pb2.MemoryRequest(caller=_caller(session), id=memory_id)
    )
    return {"restored": True, "memory": memory_json(memory)}


async def forget(
    backends: Backends,
    session: Session,
    *,
    scope: str | None = None,
    tags: list[str] | None = None,
    older_than_days: float | None = None,
    importance_floor: float | None = None,
    apply: bool = False,
    limit: int = 100,
) -> dict[str, Any]:
    request = curation_pb2.ForgetRequest(
        caller=_caller(session),
        scopes=[scope or session.project_scope],
        tags=tags or [],
        apply=apply,
        limit=limit,
    )
    if older_than_days is not None:
        request.older_than_days = older_than_days
    if importance_floor is not None:
        request.importance_floor = importance_floor
    out = await backends.call(backends.curation.Forget, request)
    return {
        "matched": out.matched,
        "archived": out.archived,
        "applied": out.applied,
        "truncated": out.truncated,
        "memories": [memory_json(m) for m in out.memories],
    }


async def supersede(backends: Backends, session: Session, memory_id: str, **save: Any) -> dict[str, Any]:
    scope = save.get("scope") or session.project_scope
    request = curation_pb2.SaveRequest(
        caller=_caller(session),
        content=save["content"],
        description=save.get("description") or "",
        scope=scope,
        type=save.get("type") or "",
        tags=save.get("tags") or [],
        metadata=_metadata(save.get("metadata")),
        kind=save.get("kind") or "",
        supersedes=memory_id,
    )
    if save.get("importance") is not None:
        request.importance = validation.check_importance(float(save["importance"]))
    response = await backends.call(backends.curation.Save, request)
    return {"created": response.created, "memory": memory_json(response.memory)}


async def decide_task(backends: Backends, session: Session, task_id: str, decision: str) -> dict[str, Any]:
    request = curation_pb2.TaskDecision(caller=_caller(session), id=task_id, decision=decision)
    return memory_json(await backends.call(backends.curation.ConfirmTask, request))


async def rebuild(
    backends: Backends, session: Session, *, scopes: list[str] | None, check: bool
) -> dict[str, Any]:
    request = curation_pb2.RebuildRequest(caller=_caller(session), scopes=scopes or [], check=check)
    out = await _call(backends, backends.curation.Rebuild, request, 3600)
    return {
        "replayed": out.replayed,
        "live": out.live,
        "inserted": out.inserted,
        "updated": out.updated,
        "deleted": out.deleted,
        "reembedded": out.reembedded,
        "differences": list(out.differences),
        "applied": out.applied,
    }
