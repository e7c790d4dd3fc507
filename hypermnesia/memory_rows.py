"""The one mapping between a `memories` row and the `Memory` message (both services use it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from hypermnesia.v1 import common_pb2

# Columns every read selects (never the embedding or the tsvector).
MEMORY_COLUMNS = (
    "id, owner_id, scope, type, kind, content, description, tags, metadata, importance, "
    "created_at, updated_at, last_accessed_at, archived_at, expires_at, decay_class, access_count, "
    "supersedes, superseded_by, source_ref, repo, thread_id"
)


def _ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def struct_from(value: Mapping[str, Any] | str | None) -> struct_pb2.Struct:
    data = json.loads(value) if isinstance(value, str) else (value or {})
    message = struct_pb2.Struct()
    message.update(data)
    return message


def memory_from_row(row: Mapping[str, Any]) -> common_pb2.Memory:
    return common_pb2.Memory(
        id=str(row["id"]),
        owner_id=row["owner_id"],
        scope=row["scope"],
        type=row["type"],
        kind=row["kind"],
        content=row["content"],
        description=row["description"],
        tags=list(row["tags"]),
        metadata=struct_from(row["metadata"]),
        importance=float(row["importance"]),
        created_at=_ts(row["created_at"]),
        updated_at=_ts(row["updated_at"]),
        last_accessed_at=_ts(row["last_accessed_at"]),
        archived_at=_ts(row["archived_at"]),
        expires_at=_ts(row["expires_at"]),
        decay_class=row["decay_class"],
        access_count=int(row["access_count"]),
        supersedes=str(row["supersedes"] or ""),
        superseded_by=str(row["superseded_by"] or ""),
        source_ref=row["source_ref"] or "",
        repo=row["repo"] or "",
        thread_id=row["thread_id"] or "",
    )
