"""The records API's reads: one record, lineage, derivations, structured query, state projection."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import MEMORY_COLUMNS

_RECORD = (
    "SELECT r.id, r.seq, r.scope, r.kind, r.operation, r.target_id, r.author, r.source_ref,"
    " r.prev_source_ref, r.thread_id, r.topic_id, r.created_at, r.record_hash, t.payload"
    " FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
)
_MEM = ", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))


async def record(conn: asyncpg.Connection, record_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"{_RECORD} WHERE r.id = $1", record_id)


async def memories(conn: asyncpg.Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
    rows = await conn.fetch(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY($1)", ids)
    return {r["id"]: r for r in rows}


async def memory_of(conn: asyncpg.Connection, some_id: uuid.UUID) -> uuid.UUID | None:
    """The memory an id stands for: a memory id, or the record that created/changed a memory."""
    if await conn.fetchval("SELECT 1 FROM memories WHERE id = $1", some_id):
        return some_id
    return await conn.fetchval("SELECT target_id FROM records WHERE id = $1", some_id)  # type: ignore[no-any-return]


async def lineage(conn: asyncpg.Connection, memory_id: uuid.UUID) -> list[asyncpg.Record]:
    """The whole supersede chain through the memory, oldest first."""
    return await conn.fetch(
        f"""
        WITH RECURSIVE back(id, depth) AS (
            SELECT id, 0 FROM memories WHERE id = $1
            UNION ALL SELECT m.supersedes, b.depth + 1 FROM back b JOIN memories m ON m.id = b.id
            WHERE m.supersedes IS NOT NULL AND b.depth < 10000
        ) CYCLE id SET back_cycle USING back_path,
        root AS (SELECT id FROM back ORDER BY depth DESC LIMIT 1),
        fwd(id, depth) AS (
            SELECT id, 0 FROM root
            UNION ALL SELECT m.superseded_by, f.depth + 1 FROM fwd f JOIN memories m ON m.id = f.id
            WHERE m.superseded_by IS NOT NULL AND f.depth < 10000
        ) CYCLE id SET fwd_cycle USING fwd_path
        SELECT {_MEM} FROM fwd f JOIN memories m ON m.id = f.id WHERE NOT f.fwd_cycle ORDER BY f.depth
        """,
        memory_id,
    )


async def derivations(conn: asyncpg.Connection, some_id: uuid.UUID) -> tuple[list[asyncpg.Record], list[asyncpg.Record]]:
    """What curation built from a record: its memory, memories derived from it (tasks, successors),
    and every later record that acted on that memory."""
    mems = await conn.fetch(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 OR supersedes = $1"
        " OR metadata -> 'derived_from' ? $2 ORDER BY created_at, id",
        some_id, str(some_id),
    )
    recs = await conn.fetch(f"{_RECORD} WHERE r.target_id = $1 AND r.id <> $1 ORDER BY r.seq", some_id)
    return list(mems), list(recs)


async def query(
    conn: asyncpg.Connection,
    scopes: list[str],
    types: list[str],
    since: datetime | None,
    until: datetime | None,
    thread_id: str | None,
    limit: int,
) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"{_RECORD} WHERE r.scope = ANY($1) AND (cardinality($2::text[]) = 0 OR r.kind = ANY($2))"
        " AND ($3::timestamptz IS NULL OR r.created_at >= $3) AND ($4::timestamptz IS NULL OR r.created_at < $4)"
        " AND ($5::text IS NULL OR r.thread_id = $5)"
        " ORDER BY r.created_at, r.seq LIMIT $6",
        scopes, types, since, until, thread_id, limit,
    )


async def state(conn: asyncpg.Connection, scope: str, state_key: str, history: bool) -> list[asyncpg.Record]:
    """The current value of a state object (the head of its chain), or its history oldest first."""
    condition = "" if history else " AND superseded_by IS NULL"
    return await conn.fetch(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE scope = $1 AND state_key = $2{condition}"
        " ORDER BY valid_from, created_at",
        scope, state_key,
    )
