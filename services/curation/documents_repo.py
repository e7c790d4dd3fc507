"""Document ingestion's SQL (ingest.py): the `documents` table of ingested files, and their chunks."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import live_sql


async def known_files(conn: asyncpg.Connection, scope: str, repo: str) -> dict[str, asyncpg.Record]:
    """path -> (path, content_hash, chunk_ids, retired_at) of every file ingested for the repo."""
    rows = await conn.fetch(
        "SELECT path, content_hash, chunk_ids, retired_at FROM documents WHERE scope = $1 AND repo = $2",
        scope,
        repo,
    )
    return {r["path"]: r for r in rows}


async def heads(conn: asyncpg.Connection, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these chunks no newer chunk has superseded yet."""
    rows = await conn.fetch("SELECT id FROM memories WHERE id = ANY($1) AND superseded_by IS NULL", ids)
    return {r["id"] for r in rows}


async def record_file(
    conn: asyncpg.Connection,
    scope: str,
    repo: str,
    path: str,
    digest: str,
    chunk_ids: list[uuid.UUID],
    at: datetime,
) -> None:
    await conn.execute(
        "INSERT INTO documents (scope, repo, path, content_hash, chunk_ids, ingested_at)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, repo, path) DO UPDATE"
        " SET content_hash = $4, chunk_ids = $5, ingested_at = $6, retired_at = NULL",
        scope,
        repo,
        path,
        digest,
        chunk_ids,
        at,
    )


async def retire_chunks(
    conn: asyncpg.Connection, chunk_ids: list[uuid.UUID], at: datetime
) -> list[uuid.UUID]:
    """Archive and close the chunks that are still live; their ids."""
    rows = await conn.fetch(
        f"UPDATE memories SET archived_at = $2, valid_to = $2 WHERE id = ANY($1) AND {live_sql()} RETURNING id",
        chunk_ids,
        at,
    )
    return [r["id"] for r in rows]


async def retire_file(conn: asyncpg.Connection, scope: str, repo: str, path: str, at: datetime) -> None:
    await conn.execute(
        "UPDATE documents SET retired_at = $4 WHERE scope = $1 AND repo = $2 AND path = $3",
        scope,
        repo,
        path,
        at,
    )
