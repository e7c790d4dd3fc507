"""The raw log verified on a schedule (HM_VERIFY_HOURS; 0 = off): curation walks the whole hash
chain, as `hypermnesia verify` does, and exports the outcome, so an alert pages when the log no
longer verifies instead of waiting for someone to run the command."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from services.curation import metrics, rawlog

log = logging.getLogger(__name__)

# The first walk waits this long after start (or a whole period, if shorter): a restart should
# not compete with the service's own warm-up, yet a broken log should not wait a day to be seen.
FIRST_DELAY_S = 300.0


async def verify_once(pool: asyncpg.Pool) -> rawlog.VerifyResult | None:
    """One walk; its outcome goes to the metrics and the log. None when it could not run."""
    started = time.perf_counter()
    try:
        async with pool.acquire() as conn:
            result = await rawlog.verify(conn)
    except Exception:
        log.exception("scheduled raw-log verify could not run")
        metrics.RAWLOG_VERIFY_RUNS.labels("failed").inc()
        return None
    metrics.RAWLOG_VERIFY_SECONDS.observe(time.perf_counter() - started)
    if result.first_broken_seq is None:
        metrics.RAWLOG_VERIFY_RUNS.labels("ok").inc()
        metrics.RAWLOG_VERIFIED_RECORDS.set(result.checked)
        metrics.RAWLOG_LAST_OK.set(time.time())
        log.info("raw log verified: %d records, the chain holds", result.checked)
    else:
        metrics.RAWLOG_VERIFY_RUNS.labels("broken").inc()
        log.error(
            "raw log BROKEN at seq %d: %s (`hypermnesia verify` names it; `--checkpoint FILE` shows what changed since a checkpoint)",
            result.first_broken_seq,
            result.reason,
        )
    return result


async def run_schedule(pool: asyncpg.Pool, hours: float) -> None:
    if hours <= 0:
        return
    period_s = hours * 3600
    await asyncio.sleep(min(FIRST_DELAY_S, period_s))
    while True:
        await verify_once(pool)
        await asyncio.sleep(period_s)
