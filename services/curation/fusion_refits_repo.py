"""The SQL of adaptive fusion's refits (migration 0029): the observations searches logged, the
estimates refits stored, and the refits' own log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from hypermnesia.fusion_estimate import Estimate

# One refit at a time, whichever process runs it (curation replicas, the command): a second one
# waits, then finds the keys already fit and writes nothing.
REFIT_LOCK_KEY = 0x484D_4652  # "HMFR"


async def lock(conn: asyncpg.Connection) -> None:
    """Held until the caller's transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", REFIT_LOCK_KEY)


async def newest_log_id(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM search_log"))


async def last_full_refit(conn: asyncpg.Connection) -> int:
    """How far into search_log the last refit of every key read (0: none yet): keys observed after
    it may have something new. A refit limited to some scopes does not count: it left the others."""
    return int(
        await conn.fetchval("SELECT coalesce(max(last_log_id), 0) FROM fusion_refits WHERE scopes IS NULL")
    )


async def last_refit_at(conn: asyncpg.Connection) -> datetime | None:
    return await conn.fetchval("SELECT max(at) FROM fusion_refits")


# Each scope key observed in search_log rows ($1, $4] (only keys holding one of $2's scopes when
# given), with its newest $3 observations up to row $4, oldest first, and its latest stored
# estimate. The key's scopes are its lines (hm_scope_key joins them with newlines).
_OBSERVED = """
WITH fresh AS (
    SELECT DISTINCT hm_scope_key(l.scopes) AS scope_key FROM search_log l
    WHERE l.id > $1 AND l.id <= $4 AND l.clarity_log_ratio IS NOT NULL
      AND ($2::text[] IS NULL OR l.scopes && $2::text[])
)
SELECT f.scope_key, string_to_array(f.scope_key, E'\\n') AS scopes, w.ratios, w.newest,
       fe.estimate AS previous, fe.last_log_id AS fitted_upto
FROM fresh f
CROSS JOIN LATERAL (
    SELECT array_agg(o.ratio ORDER BY o.id) AS ratios, max(o.id) AS newest
    FROM (SELECT l.id, l.clarity_log_ratio AS ratio FROM search_log l
          WHERE hm_scope_key(l.scopes) = f.scope_key AND l.clarity_log_ratio IS NOT NULL AND l.id <= $4
          ORDER BY l.id DESC LIMIT $3) o
) w
LEFT JOIN LATERAL (
    SELECT e.estimate, e.last_log_id FROM fusion_estimates e
    WHERE e.scope_key = f.scope_key ORDER BY e.refit_id DESC LIMIT 1
) fe ON true
ORDER BY f.scope_key
"""


async def observed(
    conn: asyncpg.Connection, since: int, scopes: Sequence[str] | None, window: int, upto: int
) -> list[asyncpg.Record]:
    """(scope_key, scopes, ratios oldest first, newest: the id of the newest, previous estimate,
    fitted_upto: the newest observation it rested on) of each key with observations after `since`."""
    return list(await conn.fetch(_OBSERVED, since, None if scopes is None else list(scopes), window, upto))


async def insert_refit(
    conn: asyncpg.Connection,
    reason: str,
    scopes: Sequence[str] | None,
    upto: int,
    fitted: Sequence[tuple[str, list[str], Estimate, int]],
) -> tuple[int, datetime]:
    """The refit's row and each key's new estimate ((scope_key, scopes, estimate, the newest
    observation it rests on)); returns the refit's id and time."""
    row = await conn.fetchrow(
        "INSERT INTO fusion_refits (reason, scopes, last_log_id, keys) VALUES ($1, $2, $3, $4) RETURNING id, at",
        reason,
        None if scopes is None else list(scopes),
        upto,
        len(fitted),
    )
    await conn.executemany(
        "INSERT INTO fusion_estimates (scope_key, refit_id, scopes, estimate, mean, observations, last_log_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [
            (key, row["id"], key_scopes, e.value, e.mean, e.observations, newest)
            for key, key_scopes, e, newest in fitted
        ],
    )
    return int(row["id"]), row["at"]


async def current(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Each key's current estimate with the refit that stored it, keys in order."""
    return list(
        await conn.fetch(
            "SELECT DISTINCT ON (e.scope_key) e.scopes, e.estimate, e.mean, e.observations, r.id AS refit_id,"
            " r.at, r.reason FROM fusion_estimates e JOIN fusion_refits r ON r.id = e.refit_id"
            " ORDER BY e.scope_key, e.refit_id DESC"
        )
    )


async def recent_refits(conn: asyncpg.Connection, limit: int) -> list[asyncpg.Record]:
    """The latest `limit` refits, newest first."""
    return list(
        await conn.fetch(
            "SELECT id, at, reason, scopes, last_log_id, keys FROM fusion_refits ORDER BY id DESC LIMIT $1",
            limit,
        )
    )
