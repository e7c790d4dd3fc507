"""The migrator: the ordered SQL files of hypermnesia/migrations, each applied once and recorded
with the sha256 of its bytes.

A landed migration is history: a database migrated before a file changed would never receive the
change, so a recorded hash that differs from the file's stops every process at start
(MigrationChanged) and a fix goes into a new file. Rows recorded before the hashes were (no
sha256) take the current file's: the edits made to landed files before then are carried forward
by migration 0028.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources

import asyncpg

from hypermnesia.errors import StartupError
from hypermnesia.pool import advisory_lock

__all__ = ["SCHEMA_LOCK_KEY", "Migration", "MigrationChanged", "migrate", "migration_files", "migrations"]

log = logging.getLogger(__name__)

# Serialises migrations and the embedding pin across processes that start together.
SCHEMA_LOCK_KEY = 0x484D_5343  # "HMSC"


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str
    sha256: str  # of the file's bytes, as `sha256sum` prints it


def migrations() -> list[Migration]:
    """The migration files, in the order they apply."""
    folder = resources.files("hypermnesia") / "migrations"
    found = []
    for path in folder.iterdir():
        if path.name.endswith(".sql"):
            raw = path.read_bytes()
            found.append(Migration(path.name, raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()))
    return sorted(found, key=lambda m: m.name)


def migration_files() -> list[tuple[str, str]]:
    """(name, sql) of each migration file, in order."""
    return [(m.name, m.sql) for m in migrations()]


class MigrationChanged(StartupError):
    """A migration file differs from the one applied to this database."""


def _check_unchanged(recorded: dict[str, str | None], files: list[Migration]) -> None:
    """Raise MigrationChanged naming every applied file whose content differs from its record."""
    changed = [m for m in files if recorded.get(m.name) not in (None, m.sha256)]
    if not changed:
        return
    lines = "; ".join(
        f"{m.name} was applied with sha256 {recorded[m.name]} but the file now has {m.sha256}"
        for m in changed
    )
    raise MigrationChanged(
        f"the schema migrations changed after this database applied them ({lines}), so this database "
        "would never receive the change. Restore each file exactly as it was in the release that applied "
        "it, and put the change in a new migration file; if you installed a release as it is, go back "
        "to the previous one and report it"
    )


# A migration that adds a stored column rewrites the table and rebuilds its indexes (HNSW
# included): minutes on a large store, far past the pool's per-command timeout.
_MIGRATION_TIMEOUT_S = 6 * 3600


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply the migrations not yet recorded, in order, each in its own transaction; refuse
    (MigrationChanged, nothing applied) when an applied file has changed since."""
    applied_now: list[str] = []
    files = migrations()
    async with pool.acquire() as conn, advisory_lock(conn, SCHEMA_LOCK_KEY):
        await _ensure_bookkeeping(conn)
        rows = await conn.fetch("SELECT version, sha256 FROM schema_migrations")
        recorded: dict[str, str | None] = {r["version"]: r["sha256"] for r in rows}
        _check_unchanged(recorded, files)
        unhashed = [(m.name, m.sha256) for m in files if m.name in recorded and recorded[m.name] is None]
        if unhashed:
            await conn.executemany("UPDATE schema_migrations SET sha256 = $2 WHERE version = $1", unhashed)
            log.info("recorded the sha256 of %d migrations applied before hashes were kept", len(unhashed))
        for migration in files:
            if migration.name in recorded:
                continue
            log.info("applying migration %s", migration.name)
            async with conn.transaction():
                await conn.execute(migration.sql, timeout=_MIGRATION_TIMEOUT_S)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, sha256) VALUES ($1, $2)",
                    migration.name,
                    migration.sha256,
                )
            log.info("applied migration %s", migration.name)
            applied_now.append(migration.name)
        await _ensure_leakproof(conn)
    return applied_now


async def _ensure_bookkeeping(conn: asyncpg.Connection) -> None:
    """The migrator's own table; stores made before the hashes get the column (checked first, so
    a start takes no table lock when it is there)."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now(), sha256 text)"
    )
    has_hash = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = 'schema_migrations' AND column_name = 'sha256')"
    )
    if not has_hash:
        await conn.execute("ALTER TABLE schema_migrations ADD COLUMN sha256 text")


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
