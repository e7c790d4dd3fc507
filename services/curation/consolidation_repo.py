"""Curation's SQL for consolidation and the Dreamer: what each job reads, and the advisory lock
that lets one run at a time per job and scope across replicas."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import live_sql
from services.curation.graph_repo import NODE_COLUMNS

# Bounds a run's reads: consolidation looks at a scope's recent material, not its whole history.
MAX_ROWS = 2000


async def try_lock(conn: asyncpg.Connection, job: str, scope: str) -> bool:
    """Inside the caller's transaction: the run's lock, released at commit (or if the connection dies)."""
    return bool(
        await conn.fetchval(
            "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", f"hm:consolidate:{job}:{scope}"
        )
    )


async def scopes_with_memories(conn: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    return [r["scope"] for r in await conn.fetch("SELECT DISTINCT scope FROM memories ORDER BY scope")]


async def expired_working(conn: asyncpg.Connection, scope: str) -> list[asyncpg.Record]:
    """Working memories past their TTL and not yet dealt with (locked for the run)."""
    return list(
        await conn.fetch(
            "SELECT id, scope, importance, access_count FROM memories WHERE scope = $1 AND kind = 'working'"
            " AND archived_at IS NULL AND superseded_by IS NULL AND expires_at IS NOT NULL AND expires_at <= now()"
            " ORDER BY id FOR UPDATE",
            scope,
        )
    )


async def expired_premises_with_fresh_conclusions(conn: asyncpg.Connection, scope: str) -> list[uuid.UUID]:
    """Expired premises in the scope some conclusion still rests on without being marked stale."""
    rows = await conn.fetch(
        "SELECT DISTINCT e.premise_id FROM evidence_edges e"
        " JOIN memories p ON p.id = e.premise_id JOIN memories d ON d.id = e.derived_id"
        " WHERE p.scope = $1 AND p.expires_at IS NOT NULL AND p.expires_at <= now() AND d.stale_at IS NULL",
        scope,
    )
    return [r["premise_id"] for r in rows]


async def count_stale(conn: asyncpg.Connection, scope: str) -> int:
    """Stale memories of one scope (a report counts only what its scope's readers may see)."""
    return int(
        await conn.fetchval("SELECT count(*) FROM memories WHERE scope = $1 AND stale_at IS NOT NULL", scope)
    )


async def stale_conclusions(conn: asyncpg.Connection, scope: str) -> list[asyncpg.Record]:
    """Live (not archived, not superseded) conclusions of the scope marked stale."""
    return list(
        await conn.fetch(
            f"SELECT {NODE_COLUMNS} FROM memories WHERE scope = $1 AND stale_at IS NOT NULL AND {live_sql()}"
            f" ORDER BY stale_at, id LIMIT {MAX_ROWS}",
            scope,
        )
    )


async def live_memories(
    conn: asyncpg.Connection,
    scope: str,
    kinds: Sequence[str] | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> list[asyncpg.Record]:
    """Live, not-stale memories of the scope that are not themselves conclusions: the newest
    MAX_ROWS, oldest first."""
    args: list[object] = [scope]
    where = [f"m.scope = $1 AND {live_sql('m')} AND m.stale_at IS NULL", "m.kind <> 'document'"]
    if kinds:
        args.append(list(kinds))
        where.append(f"m.kind = ANY(${len(args)}::text[])")
    if created_after is not None:
        args.append(created_after)
        where.append(f"m.created_at >= ${len(args)}")
    if created_before is not None:
        args.append(created_before)
        where.append(f"m.created_at <= ${len(args)}")
    where.append("NOT EXISTS (SELECT 1 FROM evidence_edges e WHERE e.derived_id = m.id)")
    rows = await conn.fetch(
        f"SELECT {', '.join('m.' + c.strip() for c in NODE_COLUMNS.split(','))} FROM memories m"
        f" WHERE {' AND '.join(where)} ORDER BY m.created_at DESC, m.id DESC LIMIT {MAX_ROWS}",
        *args,
    )
    return list(reversed(rows))


async def entity_sets(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, set[int]]:
    rows = await conn.fetch(
        "SELECT memory_id, entity_id FROM memory_entities WHERE memory_id = ANY($1::uuid[])", list(ids)
    )
    out: dict[uuid.UUID, set[int]] = {}
    for r in rows:
        out.setdefault(r["memory_id"], set()).add(r["entity_id"])
    return out


async def entity_names(conn: asyncpg.Connection, entity_ids: Sequence[int]) -> list[str]:
    rows = await conn.fetch("SELECT name FROM entities WHERE id = ANY($1) ORDER BY name", list(entity_ids))
    return [r["name"] for r in rows]
