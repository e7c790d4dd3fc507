"""The records API's SQL: one record, lineage, derivations, structured query, state projection, the
replay's stream of payloads, and what an import looks up (existing refs, thread ordinals, state
heads, supersede targets)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import MEMORY_COLUMNS, chain_sql, memory_columns

_RECORD = (
    "SELECT r.id, r.seq, r.scope, r.kind, r.operation, r.target_id, r.author, r.source_ref,"
    " r.prev_source_ref, r.thread_id, r.topic_id, r.created_at, r.record_hash, t.payload"
    " FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
)


async def record(conn: asyncpg.Connection, record_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"{_RECORD} WHERE r.id = $1", record_id)


async def memories(conn: asyncpg.Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
    rows = await conn.fetch(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY($1)", ids)
    return {r["id"]: r for r in rows}


async def memory_of(conn: asyncpg.Connection, some_id: uuid.UUID) -> uuid.UUID | None:
    """The memory an id stands for: a memory id, or the record that created/changed a memory."""
    if await conn.fetchval("SELECT 1 FROM memories WHERE id = $1", some_id):
        return some_id
    return await conn.fetchval("SELECT target_id FROM records WHERE id = $1", some_id)


async def lineage(conn: asyncpg.Connection, memory_id: uuid.UUID) -> list[asyncpg.Record]:
    """The whole supersede chain through the memory, oldest first."""
    return list(await conn.fetch(chain_sql(memory_columns("m")), memory_id))


async def creating_record(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    """The record that created a memory: the one with its id, or (a memory saved through Save) the
    first record that targets it."""
    found = await record(conn, memory_id)
    if found is not None:
        return found
    first = await conn.fetchval("SELECT id FROM records WHERE target_id = $1 ORDER BY seq LIMIT 1", memory_id)
    return await record(conn, first) if first is not None else None


async def derivations(
    conn: asyncpg.Connection, some_id: uuid.UUID
) -> tuple[list[asyncpg.Record], list[asyncpg.Record]]:
    """What curation built from a record: its memory, memories derived from it (tasks, successors),
    and every later record that acted on that memory."""
    mems = await conn.fetch(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 OR supersedes = $1"
        " OR metadata -> 'derived_from' ? $2 ORDER BY created_at, id",
        some_id,
        str(some_id),
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
        scopes,
        types,
        since,
        until,
        thread_id,
        limit,
    )


async def state(conn: asyncpg.Connection, scope: str, state_key: str, history: bool) -> list[asyncpg.Record]:
    """The current value of a state object (the head of its chain), or its history oldest first."""
    condition = "" if history else " AND superseded_by IS NULL"
    return await conn.fetch(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE scope = $1 AND state_key = $2{condition}"
        " ORDER BY valid_from, created_at",
        scope,
        state_key,
    )


async def payloads_in_order(conn: asyncpg.Connection, scopes: list[str] | None) -> AsyncIterator[str | None]:
    """Every record's payload text (None once purged) of these scopes (all when None), in log
    order, streamed: run it inside a transaction."""
    where = " WHERE r.scope = ANY($1::text[])" if scopes else ""
    sql = f"SELECT t.payload FROM records r LEFT JOIN record_texts t ON t.record_id = r.id{where} ORDER BY r.seq"
    async for row in conn.cursor(sql, *([scopes] if scopes else []), prefetch=2000):
        yield row["payload"]


# ---- what an import looks up -----------------------------------------------------------------


async def existing_refs(
    conn: asyncpg.Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], uuid.UUID]:
    """(scope, source_ref) -> id of the record already holding it."""
    rows = await conn.fetch(
        "SELECT r.scope, r.source_ref, r.id FROM records r"
        " JOIN unnest($1::text[], $2::text[]) AS k(scope, ref) ON r.scope = k.scope AND r.source_ref = k.ref",
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
    return {(r["scope"], r["source_ref"]): r["id"] for r in rows}


async def next_ordinals(
    conn: asyncpg.Connection, threads: list[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """(scope, thread_id) -> the next turn number of that conversation thread."""
    rows = await conn.fetch(
        "SELECT k.scope, k.thread, COALESCE(max(m.ordinal) + 1, 0) AS next"
        " FROM unnest($1::text[], $2::text[]) AS k(scope, thread)"
        " LEFT JOIN memories m ON m.scope = k.scope AND m.thread_id = k.thread AND m.type = 'conversation'"
        " GROUP BY k.scope, k.thread",
        [k[0] for k in threads],
        [k[1] for k in threads],
    )
    return {(r["scope"], r["thread"]): int(r["next"]) for r in rows}


async def state_heads(
    conn: asyncpg.Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], uuid.UUID]:
    """(scope, state_key) -> the current memory (head of the chain) of that state object."""
    rows = await conn.fetch(
        "SELECT m.scope, m.state_key, m.id FROM memories m"
        " JOIN unnest($1::text[], $2::text[]) AS k(scope, key) ON m.scope = k.scope AND m.state_key = k.key"
        " WHERE m.superseded_by IS NULL",
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
    return {(r["scope"], r["state_key"]): r["id"] for r in rows}


async def memory_by_ref(conn: asyncpg.Connection, scope: str, ref: str) -> asyncpg.Record | None:
    """(id, scope, superseded_by) of the memory the scope's record with this source_ref created."""
    return await conn.fetchrow(
        "SELECT m.id, m.scope, m.superseded_by FROM records r JOIN memories m ON m.id = r.id"
        " WHERE r.scope = $1 AND r.source_ref = $2",
        scope,
        ref,
    )


async def memory_in_scope(
    conn: asyncpg.Connection, scope: str, memory_id: uuid.UUID
) -> asyncpg.Record | None:
    """(id, scope, superseded_by) of the memory, when it lives in this scope."""
    return await conn.fetchrow(
        "SELECT id, scope, superseded_by FROM memories WHERE id = $1 AND scope = $2", memory_id, scope
    )
