"""The connection pool (with the pgvector codec), reachability, and session advisory locks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from hypermnesia import row_security
from hypermnesia.errors import StartupError

__all__ = [
    "RowSecureConnection",
    "advisory_lock",
    "check_reachable",
    "check_service_role",
    "connect_pool",
    "connect_replica_pool",
    "redact",
]


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


class RowSecureConnection(asyncpg.Connection):
    """A connection that remembers the row security `_act_for_current` last set on it, so the
    common acquire (the same caller again, or internal work again) costs no round trip."""

    applied: row_security.State | None = row_security.INTERNAL_STATE

    def note_applied(self, state: row_security.State | None) -> None:
        self.applied = state


async def _act_for_current(conn: Any) -> None:
    """The pool's `setup`, run on every acquire in the acquiring task: the current caller's
    grants as the role hm_service (or the owner, for internal work), set for the session
    (set_config(..., false)) unless the connection already has them. Session settings outlive
    the acquire on purpose: the next acquire sets them again whenever they differ."""
    state = row_security.current_state()
    if conn.applied == state:
        return
    # Unknown until confirmed: an interrupted set may or may not have reached the server.
    conn.note_applied(None)
    await conn.execute(
        "SELECT set_config('role', $1, false), set_config('hm.read_grants', $2, false),"
        " set_config('hm.write_grants', $3, false)",
        *state,
    )
    conn.note_applied(state)


async def check_service_role(pool: asyncpg.Pool) -> None:
    """Refuse to start a service whose database user may not act as the role requests run as:
    its callers' requests would fail one by one instead. Acting as it takes SET ROLE, which from
    Postgres 16 a membership may lack (the 'SET' privilege; before 16 every member has it)."""
    role = row_security.SERVICE_ROLE
    async with pool.acquire() as conn:
        user, usable = await conn.fetchrow(
            "SELECT current_user, CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)"
            " THEN pg_has_role(current_user, $1,"
            " CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END)"
            " ELSE false END",
            role,
        )
    if not usable:
        raise StartupError(
            f"database user {user!r} may not act as role {role!r}, which requests run as under "
            f"row-level security; as a superuser run: CREATE ROLE {role} NOLOGIN; "
            f"GRANT {role} TO {user} (on Postgres 16 or later: ... TO {user} WITH SET TRUE); then restart"
        )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection returning to the pool needs beyond asyncpg's own rollback of an open
    transaction: nothing. asyncpg's default reset also runs RESET ALL, UNLISTEN, CLOSE ALL and
    unlocks every advisory lock, a round trip on every release (about 0.2 ms, on every search)
    for state this code never leaves behind: it changes settings only with SET LOCAL, holds
    session locks only through `advisory_lock`, and the one session state it keeps, the row
    security of `_act_for_current`, is set again on acquire whenever it differs."""


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
    """A pool with the pgvector codec whose connections act under the current caller's grants
    (`row_security`: internal work stays the owner); one sentence naming HM_DATABASE_URL when
    unreachable."""
    try:
        await _ensure_vector_extension(url)
        return await _row_secure_pool(url, min_size=min_size, max_size=max_size)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StartupError(
            f"cannot reach Postgres at {redact(url)} ({exc.__class__.__name__}: {exc}); "
            "check HM_DATABASE_URL, or unset it to use the embedded Postgres"
        ) from exc


async def connect_replica_pool(url: str, *, max_size: int, connect_timeout_s: float) -> asyncpg.Pool:
    """A pool on a read replica (a hot standby of a migrated store), row-secure as connect_pool's.
    It creates no extension (a standby refuses any write) and opens no connection yet (min_size
    0): a replica that is down at start-up leaves its reads on the primary instead of failing the
    start. The role it acts as replicates from the primary, whose start checked it. A short
    connect timeout: a blackholed replica must not hold a read for asyncpg's 60 s."""
    return await _row_secure_pool(url, min_size=0, max_size=max_size, timeout=connect_timeout_s)


async def _row_secure_pool(url: str, *, min_size: int, max_size: int, **options: float) -> asyncpg.Pool:
    """Every pool's connections: the pgvector codec, and each acquire acting under the current
    caller's grants (setup) while keeping the session's state between uses (reset)."""
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        setup=_act_for_current,
        reset=_keep_session,
        connection_class=RowSecureConnection,
        command_timeout=60,
        **options,
    )
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
