"""Curation's SQL for the Dreamer's proposals (table `proposals`, migration 0021)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

COLUMNS = (
    "id, scope, kind, status, content, description, rationale, evidence, supersedes, mode, evidence_key,"
    " created_at, decided_by, decided_at, decision_reason, result_id"
)


async def insert(conn: asyncpg.Connection, draft: dict[str, Any]) -> asyncpg.Record | None:
    """None when the scope already has a proposal with this evidence key (whatever its status):
    the Dreamer never proposes the same thing twice."""
    return await conn.fetchrow(
        "INSERT INTO proposals (id, scope, kind, content, description, rationale, evidence, supersedes, mode,"
        " evidence_key) VALUES ($1, $2, $3, $4, $5, $6, $7::uuid[], $8, $9, $10)"
        f" ON CONFLICT (scope, evidence_key) DO NOTHING RETURNING {COLUMNS}",
        draft["id"],
        draft["scope"],
        draft["kind"],
        draft["content"],
        draft["description"],
        draft["rationale"],
        list(draft["evidence"]),
        draft["supersedes"],
        draft["mode"],
        draft["evidence_key"],
    )


async def known_keys(conn: asyncpg.Connection, scope: str, keys: Sequence[str]) -> set[str]:
    rows = await conn.fetch(
        "SELECT evidence_key FROM proposals WHERE scope = $1 AND evidence_key = ANY($2::text[])",
        scope,
        list(keys),
    )
    return {r["evidence_key"] for r in rows}


async def fetch(conn: asyncpg.Connection, proposal_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {COLUMNS} FROM proposals WHERE id = $1", proposal_id)


async def lock(conn: asyncpg.Connection, proposal_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {COLUMNS} FROM proposals WHERE id = $1 FOR UPDATE", proposal_id)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def listing(
    conn: asyncpg.Connection, grants: Sequence[str], scopes: Sequence[str], status: str | None, limit: int
) -> list[asyncpg.Record]:
    """Proposals in `scopes` (every scope the grants permit when empty), oldest first."""
    args: list[Any] = []
    where = []
    if scopes:
        args.append(list(scopes))
        where.append(f"scope = ANY(${len(args)}::text[])")
    elif "*" not in grants:
        exact = [g for g in grants if not g.endswith("*")]
        prefixes = [_like_prefix(g[:-1]) for g in grants if g.endswith("*")]
        args += [exact, prefixes]
        where.append(f"(scope = ANY(${len(args) - 1}::text[]) OR scope LIKE ANY(${len(args)}::text[]))")
    if status:
        args.append(status)
        where.append(f"status = ${len(args)}")
    args.append(limit)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return list(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM proposals{clause} ORDER BY created_at, id LIMIT ${len(args)}", *args
        )
    )


async def decide(
    conn: asyncpg.Connection,
    proposal_id: uuid.UUID,
    status: str,
    by: str,
    at: datetime,
    reason: str | None,
    result_id: uuid.UUID | None,
) -> asyncpg.Record:
    return await conn.fetchrow(
        "UPDATE proposals SET status = $2, decided_by = $3, decided_at = $4, decision_reason = $5, result_id = $6"
        f" WHERE id = $1 RETURNING {COLUMNS}",
        proposal_id,
        status,
        by,
        at,
        reason,
        result_id,
    )


async def count_pending(conn: asyncpg.Connection | asyncpg.Pool, scope: str | None = None) -> int:
    if scope is None:
        return int(await conn.fetchval("SELECT count(*) FROM proposals WHERE status = 'pending'"))
    return int(
        await conn.fetchval("SELECT count(*) FROM proposals WHERE status = 'pending' AND scope = $1", scope)
    )
