"""Forgetting's SQL (lifecycle.py): which memories are stale, archiving and restoring them."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import MEMORY_COLUMNS, live_sql

# Stale (not recalled since ${a}) and unimportant (importance <= ${b}), live, and not pinned.
_STALE = (
    f"{live_sql()} AND decay_class <> 'none' AND kind <> 'core'"
    " AND last_accessed_at < ${a} AND importance <= ${b}"
)
# Of these scopes ($1) and carrying these tags ($2), stale since $3 at importance $4 or less.
_CRITERIA = "scope = ANY($1::text[]) AND tags @> $2::text[] AND " + _STALE.format(a=3, b=4)
_SWEEP = _STALE.format(a=1, b=2)


async def count_stale(
    conn: asyncpg.Connection, scopes: list[str], tags: list[str], cutoff: datetime, floor: float
) -> int:
    return int(
        await conn.fetchval(f"SELECT count(*) FROM memories WHERE {_CRITERIA}", scopes, tags, cutoff, floor)
    )


async def lock_stale(
    conn: asyncpg.Connection, scopes: list[str], tags: list[str], cutoff: datetime, floor: float
) -> list[uuid.UUID]:
    """The ids count_stale counts, locked until the transaction ends (so they are what gets archived)."""
    rows = await conn.fetch(
        f"SELECT id FROM memories WHERE {_CRITERIA} ORDER BY last_accessed_at, id FOR UPDATE",
        scopes,
        tags,
        cutoff,
        floor,
    )
    return [r["id"] for r in rows]


async def stale(
    conn: asyncpg.Connection, scopes: list[str], tags: list[str], cutoff: datetime, floor: float, limit: int
) -> list[asyncpg.Record]:
    """The first `limit` of them, least recently recalled first."""
    return list(
        await conn.fetch(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {_CRITERIA} ORDER BY last_accessed_at, id LIMIT $5",
            scopes,
            tags,
            cutoff,
            floor,
            limit,
        )
    )


async def lock_sweep(conn: asyncpg.Connection, cutoff: datetime, floor: float) -> list[asyncpg.Record]:
    """(id, scope, description) of what the periodic sweep archives, in every scope, locked."""
    return list(
        await conn.fetch(
            f"SELECT id, scope, description FROM memories WHERE {_SWEEP} ORDER BY last_accessed_at FOR UPDATE",
            cutoff,
            floor,
        )
    )


async def archive(conn: asyncpg.Connection, ids: list[uuid.UUID], at: datetime) -> list[asyncpg.Record]:
    """Archive these memories; (id, scope) of each."""
    return list(
        await conn.fetch(
            "UPDATE memories SET archived_at = $2 WHERE id = ANY($1) RETURNING id, scope", ids, at
        )
    )


async def unarchive(conn: asyncpg.Connection, memory_id: uuid.UUID, at: datetime) -> None:
    """Restore, with the access time refreshed so the next sweep does not forget it again at once."""
    await conn.execute(
        "UPDATE memories SET archived_at = NULL, last_accessed_at = $2 WHERE id = $1", memory_id, at
    )
