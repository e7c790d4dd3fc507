"""Where the WAL is durable: what a write tells its caller for read-after-write
(hypermnesia/read_after_write.py)."""

from __future__ import annotations

import asyncpg

from hypermnesia.read_after_write import parse_lsn


async def flushed_wal(pool: asyncpg.Pool) -> int:
    """The WAL's flush position now. Asked after a commit, it is at or past that commit's record,
    since curation commits wait for the flush (synchronous_commit on, the default). Not the insert
    position: that may include another session's record not flushed yet (the checkpointer's
    running-transactions note, an unlogged hint), which a replica cannot receive until it is, and
    waiting for it cost a read its whole HM_REPLICA_WAIT_MS about once in 15 s (measured,
    tooling/bench/replica_lag.py)."""
    return parse_lsn(await pool.fetchval("SELECT pg_current_wal_flush_lsn()::text"))
