"""Read-after-write across a read replica: WAL positions (LSNs) as the services pass them.

Curation answers every write with the position of the WAL after its commit, in the trailing
metadata key COMMIT_LSN_KEY (a write RPC may return a bare Memory, which has no room for it); the
gateway remembers the highest one per principal and sends it as `min_lsn` on that principal's
reads; retrieval serves such a read from its replica only once the replica has replayed that far
(services/retrieval/replica.py). Positions travel as integers: Postgres writes them `X/Y`, two
32-bit halves in hex.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import asyncpg
import grpc

__all__ = ["COMMIT_LSN_KEY", "commit_lsn", "flushed_wal", "format_lsn", "parse_lsn", "report_commit"]

log = logging.getLogger(__name__)

COMMIT_LSN_KEY = "hm-commit-lsn"


def parse_lsn(text: str) -> int:
    """`16/B374D848` -> its 64-bit position."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def commit_lsn(metadata: Iterable[tuple[str, str | bytes]] | None) -> int:
    """The commit position a write's trailing metadata carries; 0 when it carries none."""
    for key, value in metadata or ():
        if key == COMMIT_LSN_KEY:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


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
