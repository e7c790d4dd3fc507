"""The connection pool (with the pgvector codec), reachability, and session advisory locks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgvector.asyncpg import register_vector

from hypermnesia.errors import StartupError

__all__ = ["advisory_lock", "check_reachable", "connect_pool", "redact"]


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
