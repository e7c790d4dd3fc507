"""The WAL positions read-after-write compares (services/retrieval/replica.py)."""

from __future__ import annotations

import asyncpg

from hypermnesia.read_after_write import parse_lsn
from hypermnesia.wal import flushed_wal


async def replayed_lsn(replica: asyncpg.Pool) -> int:
    """How far the replica has applied the WAL. NULL means it is not a standby (a primary named
    as HM_DATABASE_READ_URL): everything committed is there, so no position is ever ahead."""
    text = await replica.fetchval("SELECT pg_last_wal_replay_lsn()::text")
    return (1 << 64) - 1 if text is None else parse_lsn(text)


async def primary_lsn(primary: asyncpg.Pool) -> int:
    """How far the primary's WAL is durable, all a replica can have received (the lag gauge)."""
    return await flushed_wal(primary)
