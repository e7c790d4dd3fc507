"""Curation's SQL over memories (the raw-log SQL lives in rawlog.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from hypermnesia.memory_rows import MEMORY_COLUMNS


async def nearest_active(
    conn: asyncpg.Connection, scope: str, vector: np.ndarray
) -> tuple[asyncpg.Record, float] | None:
    """The closest live memory in the scope and its cosine similarity (exact scan within the
    scope's rows, so dedupe never misses a duplicate the ANN index would skip)."""
    row = await conn.fetchrow(
        f"SELECT {MEMORY_COLUMNS}, 1 - (embedding <=> $2) AS similarity FROM memories"
        " WHERE scope = $1 AND archived_at IS NULL AND superseded_by IS NULL"
        " ORDER BY embedding <=> $2 LIMIT 1",
        scope,
        vector,
    )
    return (row, float(row["similarity"])) if row else None


async def insert_memory(conn: asyncpg.Connection, fields: Mapping[str, Any]) -> asyncpg.Record:
    row = await conn.fetchrow(
        "INSERT INTO memories (id, scope, owner_id, type, kind, description, content, tags, metadata,"
        " importance, decay_class, created_at, updated_at, last_accessed_at, expires_at, valid_from,"
        " source_ref, thread_id, repo, embedding)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9::jsonb,$10,$11,$12,$12,$12,$13,$12,$14,$15,$16,$17)"
        f" RETURNING {MEMORY_COLUMNS}",
        fields["id"], fields["scope"], fields["owner_id"], fields["type"], fields["kind"],
        fields["description"], fields["content"], list(fields["tags"]), json.dumps(fields["metadata"]),
        fields["importance"], fields["decay_class"], fields["created_at"], fields.get("expires_at"),
        fields.get("source_ref"), fields.get("thread_id"), fields.get("repo"), fields["embedding"],
    )
    assert row is not None
    return row


async def lock_memory(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 FOR UPDATE", memory_id)


async def overwrite_memory(
    conn: asyncpg.Connection, memory_id: uuid.UUID, fields: Mapping[str, Any], now: datetime
) -> asyncpg.Record:
    row = await conn.fetchrow(
        "UPDATE memories SET description = $2, content = $3, type = $4, tags = $5, metadata = $6::jsonb,"
        " importance = $7, embedding = $8, updated_at = $9 WHERE id = $1"
        f" RETURNING {MEMORY_COLUMNS}",
        memory_id, fields["description"], fields["content"], fields["type"], list(fields["tags"]),
        json.dumps(fields["metadata"]), fields["importance"], fields["embedding"], now,
    )
    assert row is not None
    return row
