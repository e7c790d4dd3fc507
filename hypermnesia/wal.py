"""The WAL position a service reads for read-after-write (hypermnesia/read_after_write.py): what a
write reports to its caller, and what the replica's lag gauge compares. Apart from
read_after_write so that the gateway, which only passes positions on, imports no database driver."""

from __future__ import annotations

import logging

import asyncpg
import grpc

from hypermnesia.read_after_write import COMMIT_LSN_KEY, parse_lsn

__all__ = ["flushed_wal", "report_commit"]

log = logging.getLogger(__name__)


async def flushed_wal(pool: asyncpg.Pool) -> int:
    """The WAL's flush position now: all a replica can have received. Asked after a commit, it is
    at or past that commit's record, since commits wait for the flush (synchronous_commit on, the
    default). Not the insert position: that may include another session's record not flushed yet
    (the checkpointer's running-transactions note, an unlogged hint), which a replica cannot
    receive until it is, and waiting for it cost a read its whole HM_REPLICA_WAIT_MS about once in
    15 s (measured, tooling/bench/replica_lag.py)."""
    return parse_lsn(await pool.fetchval("SELECT pg_current_wal_flush_lsn()::text"))


async def report_commit(pool: asyncpg.Pool, context: grpc.aio.ServicerContext) -> None:
    """Tell a write's caller where the WAL ended after the write committed (COMMIT_LSN_KEY), so
    its next reads can wait for a read replica to get there. The write has committed: failing to
    read the position must not turn it into an error the client would retry (a second save); the
    caller's next reads then just do not wait."""
    try:
        lsn = await flushed_wal(pool)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.warning(
            "a write committed but its WAL position could not be read (%s): %s", type(exc).__name__, exc
        )
        return
    context.set_trailing_metadata(((COMMIT_LSN_KEY, str(lsn)),))
