"""Reads beside search: list (an index without bodies by default), lineage along supersede
chains, and recall health from search_log."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import MEMORY_COLUMNS
from services.retrieval.filters import Prefilter

_M_COLUMNS = ", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))
MAX_LIST_LIMIT = 500
MAX_CHAIN = 1000


@dataclass(frozen=True)
class Page:
    rows: list[asyncpg.Record]
    total: int


async def list_memories(pool: asyncpg.Pool, prefilter: Prefilter, limit: int, offset: int) -> Page:
    where, params = prefilter.sql(first_param=1)
    n = len(params)
    rows = await pool.fetch(
        f"SELECT {_M_COLUMNS}, count(*) OVER () AS total FROM memories m WHERE {where}"
        f" ORDER BY m.updated_at DESC, m.id LIMIT ${n + 1} OFFSET ${n + 2}",
        *params,
        limit,
        offset,
    )
    if rows:
        return Page(rows, int(rows[0]["total"]))
    total = await pool.fetchval(f"SELECT count(*) FROM memories m WHERE {where}", *params)
    return Page([], int(total))


async def lineage(pool: asyncpg.Pool, memory_id: uuid.UUID) -> list[asyncpg.Record]:
    """Every memory on the supersede chain through memory_id, oldest first."""
    return await pool.fetch(
        f"""
        WITH RECURSIVE back AS (
            SELECT id, supersedes, 0 AS step FROM memories WHERE id = $1
            UNION ALL
            SELECT m.id, m.supersedes, b.step - 1 FROM memories m JOIN back b ON m.id = b.supersedes
            WHERE b.step > -{MAX_CHAIN}
        ), forward AS (
            SELECT id, superseded_by, 0 AS step FROM memories WHERE id = $1
            UNION ALL
            SELECT m.id, m.superseded_by, f.step + 1 FROM memories m JOIN forward f ON m.id = f.superseded_by
            WHERE f.step < {MAX_CHAIN}
        ), chain AS (
            SELECT id, step FROM back UNION SELECT id, step FROM forward
        )
        SELECT {_M_COLUMNS} FROM chain c JOIN memories m ON m.id = c.id ORDER BY c.step
        """,
        memory_id,
    )


async def scope_counts(pool: asyncpg.Pool, scopes: list[str]) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT scope,"
        " count(*) FILTER (WHERE archived_at IS NULL AND superseded_by IS NULL) AS live,"
        " count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived,"
        " count(*) FILTER (WHERE superseded_by IS NOT NULL) AS superseded"
        " FROM memories WHERE scope = ANY($1::text[]) GROUP BY scope ORDER BY scope",
        scopes,
    )


async def search_health(pool: asyncpg.Pool, scopes: list[str], since: datetime) -> asyncpg.Record:
    return await pool.fetchrow(
        """
        SELECT count(*) AS searches,
               coalesce(avg((hits = 0)::int), 0) AS empty_rate,
               coalesce(avg(hits), 0) AS avg_hits,
               coalesce(avg(top_score), 0) AS avg_top_score,
               coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms), 0) AS p50,
               coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms), 0) AS p95,
               coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms), 0) AS p99,
               coalesce(avg((cardinality(degraded) > 0)::int), 0) AS degraded_rate,
               array(SELECT query FROM search_log s2 WHERE s2.at >= $2 AND s2.hits = 0
                     AND s2.scopes && $1::text[] ORDER BY s2.at DESC LIMIT 10) AS misses
        FROM search_log WHERE at >= $2 AND scopes && $1::text[]
        """,
        scopes,
        since,
    )
