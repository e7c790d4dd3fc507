"""Retrieval's SQL beside search: list (an index without bodies by default), lineage along supersede
chains with the raw-log records of their versions, scope counts, recall health from search_log, and
the layers context assembly reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import chain_ids_sql, chain_sql, fresh_sql, live_sql, memory_columns
from services.retrieval.filters import STORED_SQL, Prefilter


@dataclass(frozen=True)
class Page:
    rows: list[asyncpg.Record]
    total: int


async def list_memories(pool: asyncpg.Pool, prefilter: Prefilter, limit: int, offset: int) -> Page:
    where, params = prefilter.sql(first_param=1)
    n = len(params)
    rows = await pool.fetch(
        f"SELECT {memory_columns('m')}, count(*) OVER () AS total FROM memories m WHERE {where}"
        f" ORDER BY m.updated_at DESC, m.id LIMIT ${n + 1} OFFSET ${n + 2}",
        *params,
        limit,
        offset,
    )
    if rows:
        return Page(rows, int(rows[0]["total"]))
    total = await pool.fetchval(f"SELECT count(*) FROM memories m WHERE {where}", *params)
    return Page([], int(total))


@dataclass(frozen=True)
class Chain:
    memories: list[asyncpg.Record]  # the chain's stored memories, oldest first
    ids: list[uuid.UUID]  # every id on it, oldest first, purged and deleted ones too
    records: list[asyncpg.Record]  # every raw-log record that is or targets one of them, in log order


async def lineage(pool: asyncpg.Pool, memory_id: uuid.UUID) -> Chain:
    """The supersede chain through memory_id and the raw-log records of its memories, read in one
    snapshot (so a write between the reads cannot show a version without its memory)."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        memories = await conn.fetch(chain_sql(memory_columns("m")), memory_id)
        ids = [r["id"] for r in await conn.fetch(chain_ids_sql(), memory_id)] if memories else []
        records = await conn.fetch(
            "SELECT r.id, r.seq, r.scope, r.operation, r.target_id, r.author, r.created_at, t.payload"
            " FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
            " WHERE r.id = ANY($1::uuid[]) OR r.target_id = ANY($1::uuid[]) ORDER BY r.seq",
            ids,
        )
    return Chain(list(memories), ids, list(records))


async def scope_counts(pool: asyncpg.Pool, scopes: list[str]) -> list[asyncpg.Record]:
    """Per scope: live memories (expired working memories are not), archived, superseded."""
    return await pool.fetch(
        "SELECT scope,"
        f" count(*) FILTER (WHERE {live_sql()}) AS live,"
        " count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived,"
        " count(*) FILTER (WHERE superseded_by IS NOT NULL) AS superseded"
        " FROM memories WHERE scope = ANY($1::text[]) GROUP BY scope ORDER BY scope",
        scopes,
    )


# The orders context assembly reads layers in (ContextAssembler).
ORDERS = {
    "important": "m.importance DESC, m.updated_at DESC",
    "recalled": "m.importance DESC, m.last_accessed_at DESC",
    "updated": "m.updated_at DESC",
}


def _graph_sql(include_stale: bool, stored_only: bool) -> str:
    """The conditions staleness and recall depth `explicit` add to a context read (over alias m)."""
    return (" AND " + fresh_sql("m") if not include_stale else "") + (
        " AND " + STORED_SQL if stored_only else ""
    )


async def live_of_kinds(
    pool: asyncpg.Pool,
    scopes: list[str],
    kinds: list[str],
    order: str,
    limit: int,
    include_stale: bool = False,
    stored_only: bool = False,
    at: datetime | None = None,
) -> list[asyncpg.Record]:
    """Live memories of these kinds in these scopes, in one of ORDERS; not stale unless
    `include_stale`, stored rows only (no derived conclusion) when `stored_only`; `at`: live and
    fresh at that instant instead (an as-of read, services/retrieval/as_of.py)."""
    if at is not None:
        where, params = Prefilter(
            scopes=scopes, kinds=kinds, as_of=at, include_stale=include_stale, stored_only=stored_only
        ).sql(first_param=1)
        return await pool.fetch(
            f"SELECT {memory_columns('m')} FROM memories m WHERE {where}"
            f" ORDER BY {ORDERS[order]} LIMIT ${len(params) + 1}",
            *params,
            limit,
        )
    return await pool.fetch(
        f"SELECT {memory_columns('m')} FROM memories m"
        f" WHERE m.scope = ANY($1::text[]) AND m.kind = ANY($2::text[]) AND {live_sql('m')}"
        f"{_graph_sql(include_stale, stored_only)}"
        f" ORDER BY {ORDERS[order]} LIMIT $3",
        scopes,
        kinds,
        limit,
    )


async def latest_turns(
    pool: asyncpg.Pool,
    scopes: list[str],
    thread_id: str,
    limit: int,
    include_stale: bool = False,
    stored_only: bool = False,
    at: datetime | None = None,
) -> list[asyncpg.Record]:
    """A thread's latest live memories, newest first (staleness, stored_only and `at` as
    live_of_kinds)."""
    if at is not None:
        where, params = Prefilter(
            scopes=scopes, as_of=at, include_stale=include_stale, stored_only=stored_only
        ).sql(first_param=1)
        n = len(params)
        return await pool.fetch(
            f"SELECT {memory_columns('m')} FROM memories m WHERE {where} AND m.thread_id = ${n + 1}"
            f" ORDER BY m.created_at DESC, m.id DESC LIMIT ${n + 2}",
            *params,
            thread_id,
            limit,
        )
    return await pool.fetch(
        f"SELECT {memory_columns('m')} FROM memories m"
        f" WHERE m.scope = ANY($1::text[]) AND m.thread_id = $2 AND {live_sql('m')}"
        f"{_graph_sql(include_stale, stored_only)}"
        " ORDER BY m.created_at DESC, m.id DESC LIMIT $3",
        scopes,
        thread_id,
        limit,
    )


async def search_health(pool: asyncpg.Pool, scopes: list[str], since: datetime) -> asyncpg.Record:
    return await pool.fetchrow(
        """
        SELECT count(*) AS searches,
               count(*) FILTER (WHERE hits = 0) AS empty_searches,
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
