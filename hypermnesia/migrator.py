"""The migrator: the ordered SQL files of hypermnesia/migrations, each applied once and recorded."""

from __future__ import annotations

import logging
from importlib import resources

import asyncpg

from hypermnesia.pool import advisory_lock

__all__ = ["SCHEMA_LOCK_KEY", "migrate", "migration_files"]

log = logging.getLogger(__name__)

# Serialises migrations and the embedding pin across processes that start together.
SCHEMA_LOCK_KEY = 0x484D_5343  # "HMSC"


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("hypermnesia") / "migrations"
    files = sorted((p.name, p.read_text()) for p in folder.iterdir() if p.name.endswith(".sql"))
    return files


# A migration that adds a stored column rewrites the table and rebuilds its indexes (HNSW
# included): minutes on a large store, far past the pool's per-command timeout.
_MIGRATION_TIMEOUT_S = 6 * 3600


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply the migrations not yet recorded, in order, each in its own transaction."""
    applied_now: list[str] = []
    async with pool.acquire() as conn, advisory_lock(conn, SCHEMA_LOCK_KEY):
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for name, sql in migration_files():
            if name in done:
                continue
            log.info("applying migration %s", name)
            async with conn.transaction():
                await conn.execute(sql, timeout=_MIGRATION_TIMEOUT_S)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", name)
            log.info("applied migration %s", name)
            applied_now.append(name)
        await _ensure_leakproof(conn)
    return applied_now


# Under row-level security (migration 0025) Postgres lets an index serve a caller's query only
# through LEAKPROOF functions: a leaky one may not see a row before the policy has passed it.
# Stock `@@` and `@>` are not marked so, which would make every caller's lexical leg (the GIN
# index on search_tsv) and tags filter scan memories. Both only compare their arguments (no
# error, no output that depends on a row's values), so marking them is sound; only a superuser
# may (embedded Postgres migrates as one; deploy/kubernetes/postgres.yaml does it at initdb).
INDEXED_OPERATOR_FUNCTIONS = (
    "pg_catalog.ts_match_vq(tsvector, tsquery)",
    "pg_catalog.arraycontains(anyarray, anyarray)",
)


async def _ensure_leakproof(conn: asyncpg.Connection) -> None:
    leaky = await conn.fetch(
        "SELECT p.oid::regprocedure::text AS fn FROM pg_proc p"
        " WHERE p.oid = ANY($1::text[]::regprocedure[]) AND NOT p.proleakproof",
        list(INDEXED_OPERATOR_FUNCTIONS),
    )
    if not leaky:
        return
    if await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
        for row in leaky:
            await conn.execute(f"ALTER FUNCTION {row['fn']} LEAKPROOF")
        return
    statements = "; ".join(f"ALTER FUNCTION {row['fn']} LEAKPROOF" for row in leaky)
    log.warning(
        "lexical search and tag filters will scan every memory instead of using their indexes: "
        "row-level security needs their operators marked LEAKPROOF, which only a superuser may do. "
        "As a superuser, in this database, run: %s",
        statements,
    )
