"""The records operations (the raw-record API over REST), one request model and one function per
operation: the raw log's append/import, reads of records, state objects, and rebuild."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, model_validator
from pydantic_core import PydanticCustomError

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import IsoTime, Request, field
from gateway.shaping import (
    appended_json,
    caller,
    imported_json,
    rebuild_json,
    record_json,
    record_list_json,
    records_json,
    state_json,
    to_proto,
)
from hypermnesia.v1 import curation_pb2
from hypermnesia.validation import (
    IMPORTANCE_RANGE,
    MAX_CONTENT_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_IMPORT_RECORDS,
    MAX_RECORD_QUERY_LIMIT,
    MAX_REF_CHARS,
    MAX_SCOPE_CHARS,
    MAX_TAGS,
)

__all__ = [
    "AppendRecord",
    "ImportRecords",
    "QueryRecords",
    "RebuildRecords",
    "RecordRef",
    "StateObject",
    "append_record",
    "derivations",
    "get_record",
    "import_records",
    "lineage",
    "query_records",
    "rebuild",
    "state",
]

_LOW, _HIGH = IMPORTANCE_RANGE
_REF = f"at most {MAX_REF_CHARS} characters"


class AppendRecord(Request):
    type: str = field("conversation | document | state_object | note (alias: memory).", "")
    scope: str | None = field(
        "The scope it belongs to; defaults to this session's project.", None, max_length=MAX_SCOPE_CHARS
    )
    content: str = field("The record's text.", "", max_length=MAX_CONTENT_CHARS)
    source_ref: str | None = field(
        f"The writer's id for it, unique per scope, so a re-sent record is a no-op ({_REF}).", None
    )
    thread_id: str | None = field(f"The conversation it belongs to ({_REF}).", None)
    created_at: IsoTime | None = field("When it happened (ISO 8601); default now.", None)
    metadata: dict[str, Any] | None = field("Any JSON object kept with it.", None)
    prev_source_ref: str | None = field("The source_ref of the record it followed.", None)
    topic_id: str | None = field(f"The topic it is filed under ({_REF}).", None)
    description: str | None = field("A one-line summary.", None, max_length=MAX_DESCRIPTION_CHARS)
    tags: list[str] | None = field("Labels for filtering.", None, max_items=MAX_TAGS)
    importance: float | None = field(f"{_LOW:g} to {_HIGH:g}.", None, ge=_LOW, le=_HIGH)
    state_kind: str | None = field("state_object: the kind of state (no '/').", None)
    state_key: str | None = field(
        "state_object: its key; the newest record per kind and key is current.", None
    )
    supersedes: str | None = field("The source_ref (same scope) or id of the record this one corrects.", None)
    repo: str | None = field("The repository it concerns.", None)
    kind: str | None = field("note only: the memory kind (default semantic).", None)
    speaker: str | None = field(
        f"conversation only: who said it, e.g. 'user', 'assistant' or a name ({_REF}); kept in metadata.",
        None,
    )

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        # A misspelt field would otherwise be dropped silently from a record that is kept forever.
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise PydanticCustomError(
                    "unknown_fields",
                    "unknown field(s) {unknown}; known: {known}",
                    {"unknown": ", ".join(map(str, unknown)), "known": ", ".join(cls.model_fields)},
                )
        return data


def _record_input(session: Session, record: AppendRecord) -> curation_pb2.RecordInput:
    return to_proto(curation_pb2.RecordInput(), record, scope=record.scope or session.project_scope)


async def append_record(backends: Backends, session: Session, request: AppendRecord) -> dict[str, Any]:
    """Append one raw record; a record with a source_ref already in its scope is not added again."""
    message = curation_pb2.AppendRecordRequest(caller=caller(session), record=_record_input(session, request))
    response = await backends.call(backends.curation.AppendRecord, message)
    return appended_json(response)


class ImportRecords(Request):
    records: list[AppendRecord] = field("The records, in order.", max_items=MAX_IMPORT_RECORDS)


async def import_records(backends: Backends, session: Session, request: ImportRecords) -> dict[str, Any]:
    """Import many raw records at once, idempotent on (scope, source_ref); answers one id per record."""
    message = curation_pb2.ImportRecordsRequest(
        caller=caller(session), records=[_record_input(session, r) for r in request.records]
    )
    response = await backends.call(backends.curation.ImportRecords, message)
    return imported_json(response)


class RecordRef(Request):
    record_id: str = field("The record's id (a UUID; the same as the memory made from it).")


async def get_record(backends: Backends, session: Session, request: RecordRef) -> dict[str, Any]:
    """One raw record with its payload, and the memory derived from it."""
    message = curation_pb2.RecordRequest(caller=caller(session), id=request.record_id)
    return record_json(await backends.call(backends.curation.GetRecord, message))


async def lineage(backends: Backends, session: Session, request: RecordRef) -> dict[str, Any]:
    """The records and memories a record's memory was corrected from and into."""
    message = curation_pb2.RecordRequest(caller=caller(session), id=request.record_id)
    return record_list_json(await backends.call(backends.curation.Lineage, message))


async def derivations(backends: Backends, session: Session, request: RecordRef) -> dict[str, Any]:
    """What was derived from a record (entities, candidate tasks, ...)."""
    message = curation_pb2.RecordRequest(caller=caller(session), id=request.record_id)
    return record_list_json(await backends.call(backends.curation.Derivations, message))


class QueryRecords(Request):
    scopes: list[str] | None = field(
        "The scopes to read (repeat `scope` in a query string); default this session's project.",
        None,
        validation_alias=AliasChoices("scopes", "scope"),
    )
    types: list[str] | None = field(
        "Record types (conversation, document, state_object, note, memory); default all.",
        None,
        validation_alias=AliasChoices("types", "type"),
    )
    since: IsoTime | None = field("Created at or after this time (ISO 8601).", None)
    until: IsoTime | None = field("Created before this time (ISO 8601).", None)
    thread_id: str | None = field("Only this conversation's records.", None)
    limit: int = field("At most this many records.", 100, nonzero=True, le=MAX_RECORD_QUERY_LIMIT)


async def query_records(backends: Backends, session: Session, request: QueryRecords) -> dict[str, Any]:
    """Raw records by scope, type, time and thread, oldest first."""
    message = to_proto(
        curation_pb2.QueryRecordsRequest(),
        request,
        caller=caller(session),
        scopes=request.scopes or [session.project_scope],
    )
    out = await backends.call(backends.curation.QueryRecords, message)
    return records_json(out)


class StateObject(Request):
    kind: str = field("The kind of state, e.g. 'deploy'.")
    key: str = field("Its key, e.g. 'target'.")
    scope: str | None = field(
        "Its scope; defaults to this session's project.", None, max_length=MAX_SCOPE_CHARS
    )
    history: bool = field("The whole history, oldest first, instead of the current value.", False)


async def state(backends: Backends, session: Session, request: StateObject) -> dict[str, Any]:
    """A state object's current value (the newest record of its kind and key), or its history."""
    message = to_proto(
        curation_pb2.StateRequest(),
        request,
        caller=caller(session),
        scope=request.scope or session.project_scope,
    )
    out = await backends.call(backends.curation.StateObject, message)
    return state_json(out, history=request.history)


class RebuildRecords(Request):
    scopes: list[str] | None = field(
        "Rebuild these scopes only; none means every scope, which needs the '*' grant.", None
    )
    check: bool = field("Only report what a rebuild would change.", False)


async def rebuild(backends: Backends, session: Session, request: RebuildRecords) -> dict[str, Any]:
    """Re-derive the curated memories from the raw log (or, with check, report the differences)."""
    message = to_proto(curation_pb2.RebuildRequest(), request, caller=caller(session))
    out = await backends.call(backends.curation.Rebuild, message)
    return rebuild_json(out)
