"""Scope graphs: a partial HNSW index on `memories.embedding` for each large scope.

One HNSW graph over every scope serves a one-scope search badly: the walk visits the other scopes'
rows and throws them away, nine for each one kept when a scope holds a tenth of the store (25 ms at
100,000 memories in ten scopes). A graph of the scope's own rows answers the same search in about
3 ms, and the planner picks it by itself for any search of that one scope (`scope = ANY('{s}')`
implies the index's `scope = 's'`). Searches over several scopes keep using the global graph.

Curation builds them (`ensure`, at start and then every minute, off the request path),
CONCURRENTLY so searches and writes go on, on one core (no parallel workers) so the other core
keeps serving them; each insert into such a scope then updates two graphs. Retrieval only asks
whether a valid one exists (`name`, `VALID_SQL`): a graph being built is invalid until it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time

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
# Dropping a graph left invalid waits at most this long for the table's lock (held by VACUUM or
# ANALYZE, say); past it the drop is left to the next pass rather than queued behind them.
_DROP_LOCK_TIMEOUT = "2s"

# Whether the index named $1 exists and is valid (a build in progress or interrupted is not).
VALID_SQL = "EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass($1) AND i.indisvalid)"

# Invalid scope graphs that no backend is building now: an interrupted build's leftovers. A build
# in progress is invalid too, and dropping it would wait for that build's lock for the whole build.
_INTERRUPTED = (
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE i.indrelid = 'memories'::regclass AND NOT i.indisvalid AND c.relname LIKE $1"
    " AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p"
    " WHERE p.index_relid = i.indexrelid AND p.datname = current_database())"
)


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
        for index in await conn.fetch(_INTERRUPTED, PREFIX + "%"):
            log.warning("dropping the invalid scope graph %s (an interrupted build)", index["relname"])
            await conn.execute(f"SET lock_timeout = '{_DROP_LOCK_TIMEOUT}'")
            try:
                await conn.execute(
                    f'DROP INDEX CONCURRENTLY IF EXISTS "{index["relname"]}"', timeout=_BUILD_TIMEOUT_S
                )
            except asyncpg.LockNotAvailableError:
                log.info("the table is busy; dropping %s is left to the next pass", index["relname"])
                return built
            finally:
                await _reset(conn, "lock_timeout")
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
            started = time.monotonic()
            literal = await conn.fetchval("SELECT quote_literal($1::text)", row["scope"])
            # Parallel workers would take both cores of a small machine from the searches.
            await conn.execute("SET max_parallel_maintenance_workers = 0")
            try:
                await conn.execute(
                    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index}" ON memories'
                    f" USING hnsw (embedding vector_cosine_ops) WHERE scope = {literal}",
                    timeout=_BUILD_TIMEOUT_S,
                )
            finally:
                await _reset(conn, "max_parallel_maintenance_workers")
            log.info("built the HNSW graph of scope %s in %.1f s", row["scope"], time.monotonic() - started)
            built.append(row["scope"])
    return built


async def _reset(conn: asyncpg.Connection, setting: str) -> None:
    """Put a session setting back before the pooled connection goes to its next user. A failure
    here is the connection's (a cancelled statement still in progress, a broken link): suppressed,
    so the exception already on its way (a cancel above all) is not replaced; such a connection
    is closed by advisory_lock on the way out."""
    with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        await conn.execute(f"RESET {setting}")


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
