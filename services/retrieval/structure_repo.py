"""Retrieval's SQL for the structural map (tiers 0/1). Every read of one answer happens in one
repeatable-read snapshot, so a map replaced mid-request is seen either whole or not at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

_CONSTRAINT_COLUMNS = "id, component_slug, kind, severity, status, rule_text, rationale"
# Only these severities are pushed at a caller who did not ask for that component.
_BINDING = "severity IN ('must', 'should')"


@asynccontextmanager
async def snapshot(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        yield conn


async def map_info(conn: asyncpg.Connection, repo: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT repo, source_name, source_sha256, loaded_by, loaded_at FROM structure_maps WHERE repo = $1",
        repo,
    )


async def components(conn: asyncpg.Connection, repo: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT slug, name, parent_slug, responsibility, globs, priority FROM components"
        " WHERE repo = $1 ORDER BY ordinal",
        repo,
    )


async def relationships(conn: asyncpg.Connection, repo: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT from_slug, to_slug, kind FROM component_relationships WHERE repo = $1 ORDER BY ordinal", repo
    )


async def global_invariants(conn: asyncpg.Connection, repo: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {_CONSTRAINT_COLUMNS} FROM constraints WHERE repo = $1 AND component_slug IS NULL"
        f" AND status = 'active' AND {_BINDING} ORDER BY ordinal",
        repo,
    )


async def applicable_constraints(
    conn: asyncpg.Connection, repo: str, component: str | None, neighbours: list[str]
) -> list[asyncpg.Record]:
    """Active constraints of `component` (any severity), the must/should ones of `neighbours`,
    and the global invariants, in file order."""
    return await conn.fetch(
        f"SELECT {_CONSTRAINT_COLUMNS} FROM constraints WHERE repo = $1 AND status = 'active' AND ("
        f"  component_slug = $2"
        f"  OR (component_slug = ANY($3::text[]) AND {_BINDING})"
        f"  OR (component_slug IS NULL AND {_BINDING})"
        ") ORDER BY ordinal",
        repo,
        component,
        neighbours,
    )
