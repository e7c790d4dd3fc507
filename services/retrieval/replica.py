"""Which pool a read runs on: the read replica (HM_DATABASE_READ_URL) when it is up and has
replayed the caller's last write, else the primary.

A streaming replica applies the primary's WAL a little later (about a millisecond here, more
across a network: deploy/README.md, "A read replica's lag and a search right after a save"). A save followed at once by a search from the same caller must
find what it saved, so the caller passes the WAL position of its last write (`min_lsn`,
hypermnesia/read_after_write.py): when the replica has not replayed that far, the read waits up
to HM_REPLICA_WAIT_MS, polling the replica's replay position, and then runs on the primary. The
last position seen is kept, so a read whose write is already replayed (most of them) and a read
with no `min_lsn` cost no extra round trip.

A replica that cannot be reached, or fails a read and then a probe, is taken out: reads run on
the primary (the log says so once, hm_replica_reads_on_primary_total counts them) until a probe,
once a second, finds it answering again. The same probe keeps the lag gauge and the replayed position fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from hypermnesia.pool import connect_replica_pool
from services.retrieval import metrics, replica_repo

log = logging.getLogger(__name__)

T = TypeVar("T")

# Why a read ran on the primary (the metric's label values).
BEHIND = "behind"  # the replica had not replayed the caller's write within the wait
REPLICA_DOWN = "replica_down"  # unreachable, or failing, and not yet answering a probe again
REPLICA_ERROR = "replica_error"  # this read failed there (e.g. cancelled by a conflict with recovery)
REASONS = (BEHIND, REPLICA_DOWN, REPLICA_ERROR)

# What says the replica is gone (refused, reset, shutting down, starting up) rather than the
# read being wrong: OSError and asyncio's TimeoutError for the connection, class 08 and
# 57P01-57P03 from the server, InterfaceError for a connection that died under the pool.
_GONE = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
)
# What only a database connection raises (the rest of _GONE may come from any part of a read).
_DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError)
# A standby cancels a query whose rows replay must change (40001), and refuses a write (25006).
_REFUSED = (asyncpg.SerializationError, asyncpg.ReadOnlySQLTransactionError)

CONNECT_TIMEOUT_S = 2.0  # a blackholed replica must not hold a read for the default 60 s


async def open_replica_pool(url: str, max_size: int) -> asyncpg.Pool:
    """The replica's pool: row-secure like the primary's, opened without connecting
    (hypermnesia/pool.py connect_replica_pool)."""
    return await connect_replica_pool(url, max_size=max_size, connect_timeout_s=CONNECT_TIMEOUT_S)


class ReadRouter:
    """Runs reads on the replica or the primary (see the module's docstring)."""

    def __init__(
        self,
        primary: asyncpg.Pool,
        replica: asyncpg.Pool | None,
        *,
        wait_ms: float = 200.0,
        poll_ms: float = 2.0,
        probe_every_s: float = 1.0,
        replica_name: str = "",
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.wait_s = wait_ms / 1000
        self.poll_s = poll_ms / 1000
        self.probe_every_s = probe_every_s
        self.replica_name = replica_name
        self.replayed = 0  # the highest replay position seen since the replica came up
        self.up = replica is not None
        self._probe: asyncio.Task[None] | None = None
        self._polling: asyncio.Future[None] | None = None  # the replay-position read in flight
        self.polls = 0  # replay-position reads made for waiting reads
        # Every series from the start, at 0 (also without a replica: the dashboard's panels and
        # rate() need a series to read).
        for reason in REASONS:
            metrics.READS_ON_PRIMARY.labels(reason)

    async def start(self) -> None:
        """Probe the replica once (so the first reads know its position) and keep probing."""
        if self.replica is None:
            return
        await self.probe()
        self._probe = asyncio.create_task(self._probe_loop(), name="replica-probe")

    async def read(self, min_lsn: int, run: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        """`run(pool)` on the replica when it is up and has replayed `min_lsn` (0: any position),
        waiting for it at most HM_REPLICA_WAIT_MS; else on the primary."""
        replica = self.replica
        if replica is None:
            return await run(self.primary)
        if not self.up:
            return await self._on_primary(REPLICA_DOWN, run)
        try:
            behind = min_lsn > self.replayed and not await self._caught_up(replica, min_lsn)
        except _GONE as exc:  # only the replica's own queries run while waiting
            await self._take_out(exc)
            return await self._on_primary(REPLICA_DOWN, run)
        if behind:
            return await self._on_primary(BEHIND, run)
        try:
            result = await run(replica)
        except _GONE as exc:
            # asyncpg's own errors are the replica's; a bare timeout or socket error may come from
            # elsewhere in the read (the embedder, say): it is the replica's only if the replica
            # then fails a probe too.
            if not isinstance(exc, _DATABASE_ERRORS) and await self._answers(replica):
                raise
            await self._take_out(exc)
            reason = REPLICA_DOWN
        except _REFUSED as exc:
            log.warning("a read failed on the replica, retried on the primary: %s", exc)
            reason = REPLICA_ERROR
        else:
            metrics.REPLICA_READS.inc()
            return result
        return await self._on_primary(reason, run)

    async def _on_primary(self, reason: str, run: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        metrics.READS_ON_PRIMARY.labels(reason).inc()
        return await run(self.primary)

    async def _caught_up(self, replica: asyncpg.Pool, min_lsn: int) -> bool:
        """Poll the replica's replay position until it reaches min_lsn or the wait is over."""
        started = time.monotonic()
        try:
            while True:
                await self._poll(replica)
                if self.replayed >= min_lsn:
                    return True
                if time.monotonic() - started >= self.wait_s:
                    return False
                await asyncio.sleep(self.poll_s)
        finally:
            metrics.REPLICA_WAIT_SECONDS.observe(time.monotonic() - started)

    async def _poll(self, replica: asyncpg.Pool) -> None:
        """One read of the replay position, shared by every read waiting at that moment: a burst
        of reads behind the replica sends one query per poll, not one each."""
        if self._polling is None:
            self._polling = asyncio.ensure_future(self._read_replayed(replica))
            self._polling.add_done_callback(self._poll_done)
        # Shielded: a waiting read that is cancelled must not cancel the others' poll.
        await asyncio.shield(self._polling)

    async def _read_replayed(self, replica: asyncpg.Pool) -> None:
        self.polls += 1
        self.replayed = max(self.replayed, await replica_repo.replayed_lsn(replica))

    def _poll_done(self, task: asyncio.Future[None]) -> None:
        self._polling = None
        if not task.cancelled():
            task.exception()  # retrieved here too: its waiters may all have been cancelled

    async def _answers(self, replica: asyncpg.Pool) -> bool:
        try:
            await asyncio.wait_for(replica_repo.replayed_lsn(replica), CONNECT_TIMEOUT_S)
        except (*_GONE, *_REFUSED, asyncpg.PostgresError):
            return False
        return True

    async def _take_out(self, exc: BaseException) -> None:
        if self.up:
            log.warning(
                "read replica %s failed (%s: %s); reading from the primary until it answers again",
                self.replica_name,
                exc.__class__.__name__,
                exc,
            )
        self.up = False
        # A restarted standby replays from its last restartpoint: positions seen before may not
        # hold any more. Its pooled connections are dead too; new ones are made when it is back.
        self.replayed = 0
        metrics.REPLICA_UP.set(0)
        if self.replica is not None:
            await self.replica.expire_connections()

    async def probe(self) -> None:
        """Read the replica's replay position (and the primary's, for the lag gauge); put the
        replica back in service when it answers, take it out when it does not."""
        assert self.replica is not None
        try:
            replayed = await replica_repo.replayed_lsn(self.replica)
        except (*_GONE, *_REFUSED, asyncpg.PostgresError) as exc:
            await self._take_out(exc)
            return
        self.replayed = max(self.replayed, replayed)
        if not self.up:
            log.info("read replica %s answers again; reads go back to it", self.replica_name)
            self.up = True
        metrics.REPLICA_UP.set(1)
        with contextlib.suppress(*_GONE, asyncpg.PostgresError):
            lag = await replica_repo.primary_lsn(self.primary) - replayed
            metrics.REPLICA_LAG_BYTES.set(max(0, lag))

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.probe_every_s)
            try:
                await self.probe()
            except Exception:  # the probe must outlive anything odd; reads fall back meanwhile
                log.exception("replica probe failed")

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        if self.replica is not None:
            await self.replica.close()
