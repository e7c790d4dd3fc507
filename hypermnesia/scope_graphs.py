"""Scope graphs: a partial HNSW index on `memories.embedding` for each large scope.

One HNSW graph over every scope serves a one-scope search badly: the walk visits the other scopes'
rows and throws them away, nine for each one kept when a scope holds a tenth of the store (25 ms at
100,000 memories in ten scopes). A graph of the scope's own rows answers the same search in about
3 ms, and the planner picks it by itself for any search of that one scope (`scope = ANY('{s}')`
implies the index's `scope = 's'`). Searches over several scopes keep using the global graph.

Curation builds them (`ensure`, at start and then every minute), CONCURRENTLY so writes go on; each
insert into such a scope then updates two graphs. Retrieval only asks whether one exists (`name`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import asyncpg

from hypermnesia.pool import advisory_lock

log = logging.getLogger(__name__)

PREFIX = "memories_embedding_scope_"
# Only one curation replica builds at a time.
_LOCK_KEY = 0x686D5F73636F7065  # "hm_scope"
# A scope holding this share of the store or more gains nothing over the global graph.
_MAX_SHARE = 0.8
# An HNSW build over a million rows takes a while on a small machine: past the pool's 60 s.
_BUILD_TIMEOUT_S = 6 * 3600


def name(scope: str) -> str:
    """The index name for a scope's graph (scopes may hold characters an identifier may not)."""
    return PREFIX + hashlib.sha256(scope.encode()).hexdigest()[:20]


async def ensure(pool: asyncpg.Pool, min_rows: int) -> list[str]:
    """Build the graphs that are missing for scopes of at least min_rows memories (and drop any
    left invalid by an interrupted build, so it is built again); returns the scopes built."""
    built: list[str] = []
    async with pool.acquire() as conn, advisory_lock(conn, _LOCK_KEY, wait=False) as held:
        if not held:
            return built
        for index in await conn.fetch(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'memories'::regclass AND NOT i.indisvalid AND c.relname LIKE $1",
            PREFIX + "%",
        ):
            log.warning("dropping the invalid scope graph %s (an interrupted build)", index["relname"])
            await conn.execute(
                f'DROP INDEX CONCURRENTLY IF EXISTS "{index["relname"]}"', timeout=_BUILD_TIMEOUT_S
            )
        wanted = await conn.fetch(
            "SELECT scope, docs FROM lexical_scope WHERE docs >= $1"
            " AND docs < $2 * (SELECT sum(docs) FROM lexical_scope) ORDER BY docs DESC",
            min_rows,
            _MAX_SHARE,
        )
        for row in wanted:
            index = name(row["scope"])
            if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", index):
                continue
            log.info("building the HNSW graph of scope %s (%d memories)", row["scope"], row["docs"])
            literal = await conn.fetchval("SELECT quote_literal($1::text)", row["scope"])
            await conn.execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index}" ON memories'
                f" USING hnsw (embedding vector_cosine_ops) WHERE scope = {literal}",
                timeout=_BUILD_TIMEOUT_S,
            )
            built.append(row["scope"])
    return built


async def maintain(pool: asyncpg.Pool, min_rows: int, every_s: float = 60.0) -> None:
    """`ensure` now and every `every_s` seconds; a failed pass is logged and retried."""
    while True:
        try:
            await ensure(pool, min_rows)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("building scope graphs failed; will retry in %.0f s", every_s)
        await asyncio.sleep(every_s)
