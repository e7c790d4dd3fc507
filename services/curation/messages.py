"""Translations between curation's protobuf messages and its domain objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.json_format import MessageToDict

from hypermnesia.memory_rows import memory_from_row
from hypermnesia.secrets import Redaction
from hypermnesia.times import field_time, timestamp
from hypermnesia.v1 import common_pb2, curation_pb2
from services.curation.records import ImportResult, RecordSpec


def redacted_message(report: Redaction) -> common_pb2.Redacted | None:
    """A write's report of the secrets it masked; None when there were none (the field stays unset)."""
    if not report.count:
        return None
    return common_pb2.Redacted(count=report.count, kinds=dict(report.kinds))


def import_response(result: ImportResult) -> curation_pb2.ImportRecordsResponse:
    return curation_pb2.ImportRecordsResponse(
        imported=result.imported,
        skipped=result.skipped,
        ids=result.ids,
        redacted=redacted_message(result.redacted),
        left_out=result.left_out,
    )


def record_spec(message: curation_pb2.RecordInput) -> RecordSpec:
    return RecordSpec(
        type=message.type,
        scope=message.scope,
        content=message.content,
        source_ref=message.source_ref or None,
        thread_id=message.thread_id or None,
        created_at=field_time(message, "created_at"),
        metadata=MessageToDict(message.metadata),
        prev_source_ref=message.prev_source_ref or None,
        topic_id=message.topic_id or None,
        description=message.description,
        tags=list(message.tags),
        importance=message.importance if message.HasField("importance") else None,
        state_kind=message.state_kind or None,
        state_key=message.state_key or None,
        supersedes=message.supersedes or None,
        repo=message.repo or None,
        kind=message.kind or None,
        speaker=message.speaker or None,
    )


def record_view(row: Mapping[str, Any], memory: Mapping[str, Any] | None) -> curation_pb2.RecordView:
    created = timestamp(row["created_at"])
    view = curation_pb2.RecordView(
        id=str(row["id"]),
        seq=int(row["seq"]),
        scope=row["scope"],
        type=row["kind"],
        operation=row["operation"],
        target_id=str(row["target_id"] or ""),
        author=row["author"],
        source_ref=row["source_ref"] or "",
        prev_source_ref=row["prev_source_ref"] or "",
        thread_id=row["thread_id"] or "",
        topic_id=row["topic_id"] or "",
        created_at=created,
        payload=row["payload"] or "",
        purged=row["payload"] is None,
        record_hash=row["record_hash"],
    )
    if memory is not None:
        view.memory.CopyFrom(memory_from_row(memory))
    return view
