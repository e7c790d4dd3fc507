"""What a search leaves behind, written off the hot path and in batches: access bumps (recency,
forgetting) and `search_log` rows (stats, the bench's stage timings).

Written per search, right after its answer, they were ten single-row updates and an insert, each
planned and committed, racing the next query's embedding for the cores (and at the old fillfactor
most bumps updated every index, both HNSW graphs included). Buffered, one transaction a second
does the same work: one UPDATE for every memory recalled since (counting repeats) and the log
rows in one pipelined batch, without waiting for the disk (a crash may lose the last second of
bookkeeping, never a memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter

import asyncpg

from hypermnesia import row_security
from services.retrieval import repo

log = logging.getLogger(__name__)


class Bookkeeper:
    def __init__(self, pool: asyncpg.Pool, *, every_s: float = 1.0, max_pending: int = 1000) -> None:
        self.pool = pool
        self.every_s = every_s
        self.max_pending = max_pending
        self._bumps: Counter[uuid.UUID] = Counter()
        self._rows: list[tuple] = []
        self._due = asyncio.Event()
        self._flushing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def record(self, accessed: list[uuid.UUID], log_row: dict | None) -> None:
        """Note a search's hits and log row (the search_log columns by name); written within
        `every_s` seconds."""
        self._bumps.update(accessed)
        if log_row is not None:
            self._rows.append(tuple(log_row[c] for c in repo.LOG_COLUMNS))
        if self._task is None:
            # Started by the first search: not with that search's caller's grants.
            with row_security.internal():
                self._task = asyncio.create_task(self._run(), name="search-bookkeeping")
        if len(self._rows) + len(self._bumps) >= self.max_pending:
            self._due.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), self.every_s)
            self._due.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending now (tests and shutdown call this; so does the loop)."""
        async with self._flushing:
            bumps, rows = self._bumps, self._rows
            self._bumps, self._rows = Counter(), []
            if not bumps and not rows:
                return
            try:
                # Every caller's hits, written together: the service's own work.
                with row_security.internal():
                    await repo.write_bookkeeping(self.pool, bumps, rows)
            except Exception:  # never let bookkeeping fail a search, nor stop the loop
                log.exception(
                    "search bookkeeping failed: %d bumps and %d log rows lost", len(bumps), len(rows)
                )

    async def close(self) -> None:
        """Flush and stop the loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
