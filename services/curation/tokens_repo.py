"""Curation's SQL for the bearer tokens kept in the store (table `tokens`, migration 0020)."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

_COLUMNS = "id, principal, scopes, description, created_at, revoked_at, last_used_at"


async def insert(
    conn: asyncpg.Connection | asyncpg.Pool,
    token_sha256: str,
    principal: str,
    scopes: list[str],
    description: str,
) -> asyncpg.Record:
    return await conn.fetchrow(
        "INSERT INTO tokens (id, token_sha256, principal, scopes, description) VALUES ($1, $2, $3, $4, $5)"
        f" RETURNING {_COLUMNS}",
        uuid.uuid4(),
        token_sha256,
        principal,
        scopes,
        description,
    )


async def active(conn: asyncpg.Connection | asyncpg.Pool, token_sha256: str) -> asyncpg.Record | None:
    """The live token with this hash, marking it used (at most once a minute, so a busy token
    does not rewrite its row on every request)."""
    return await conn.fetchrow(
        "UPDATE tokens SET last_used_at = now() WHERE token_sha256 = $1 AND revoked_at IS NULL"
        " AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')"
        f" RETURNING {_COLUMNS}",
        token_sha256,
    ) or await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM tokens WHERE token_sha256 = $1 AND revoked_at IS NULL", token_sha256
    )


async def listing(conn: asyncpg.Connection | asyncpg.Pool, include_revoked: bool) -> list[asyncpg.Record]:
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    return await conn.fetch(f"SELECT {_COLUMNS} FROM tokens{where} ORDER BY created_at, id")


async def revoke(
    conn: asyncpg.Connection | asyncpg.Pool, token_id: uuid.UUID, at: datetime
) -> asyncpg.Record | None:
    """Revoke by id; None when there is no such token. Revoking twice keeps the first time."""
    return await conn.fetchrow(
        f"UPDATE tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING {_COLUMNS}",
        token_id,
        at,
    )


async def count_active(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM tokens WHERE revoked_at IS NULL"))
