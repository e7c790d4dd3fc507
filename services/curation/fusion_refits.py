"""Adaptive fusion's refits: the only moments what it knows of a scope key changes.

Searches observe (a search_log column) and read the latest stored estimate; they never change it,
so the same query on the same store ranks the same on every retrieval replica and after a restart.
A refit fits each scope key observed since the last one from its recent observations
(hypermnesia/fusion_estimate.py) and stores the estimates with the refit's time, reason and
extent (migration 0029); each refit that changes one is a row of `fusion_refits` and a log line,
so an operator can see when and why ranking moved (`hypermnesia fusion show`). It runs at explicit
moments only: curation's schedule (HM_FUSION_REFIT_HOURS), after an import (POST /records/import,
`hypermnesia import`), and on demand (`hypermnesia fusion refit`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from hypermnesia import row_security
from hypermnesia.fusion_estimate import DEFAULT, Estimate, EstimateParams, fit
from services.curation import fusion_refits_repo as repo

log = logging.getLogger(__name__)

SCHEDULE = "schedule"
IMPORT = "import"
COMMAND = "command"
# A restart does not refit: the schedule resumes from the last refit's time, and waits at least
# this long after start (or a whole period, if shorter) so the service's own warm-up goes first.
FIRST_DELAY_S = 60.0


@dataclass(frozen=True)
class KeyFit:
    scopes: list[str]
    previous: float | None  # the estimate it replaced (None: the key's first)
    estimate: Estimate


@dataclass(frozen=True)
class Refit:
    reason: str
    id: int | None = None  # None: no key had anything new, so nothing was written
    at: datetime | None = None
    keys: list[KeyFit] = field(default_factory=list)

    def summary(self) -> str:
        if self.id is None:
            return f"fusion refit ({self.reason}): no scope key has new observations; nothing changed"
        shown = "; ".join(
            f"[{', '.join(k.scopes)}] {'none' if k.previous is None else f'{k.previous:+.3f}'}"
            f" -> {k.estimate.value:+.3f} from {k.estimate.observations} observations"
            for k in self.keys[:3]
        )
        more = f"; and {len(self.keys) - 3} more" if len(self.keys) > 3 else ""
        return f"fusion refit {self.id} ({self.reason}): {len(self.keys)} scope keys: {shown}{more}"


async def refit(
    pool: asyncpg.Pool,
    reason: str,
    scopes: Sequence[str] | None = None,
    params: EstimateParams = DEFAULT,
) -> Refit:
    """Fit every scope key observed since the last refit of every key (only keys holding one of
    `scopes` when given) whose newest observation is newer than its estimate's, store them, log
    it. The service's own work: internal, whoever asked."""
    with row_security.internal():
        async with pool.acquire() as conn, conn.transaction():
            await repo.lock(conn)
            upto = await repo.newest_log_id(conn)
            since = await repo.last_full_refit(conn)
            fitted: list[tuple[str, list[str], Estimate, int]] = []
            keys: list[KeyFit] = []
            for row in await repo.observed(conn, since, scopes, params.window, upto):
                if row["fitted_upto"] is not None and row["newest"] <= row["fitted_upto"]:
                    continue  # its window holds nothing its estimate did not already rest on
                estimate = fit(row["ratios"], params)
                fitted.append((row["scope_key"], list(row["scopes"]), estimate, row["newest"]))
                keys.append(KeyFit(list(row["scopes"]), row["previous"], estimate))
            if not fitted:
                done = Refit(reason)
            else:
                refit_id, at = await repo.insert_refit(conn, reason, scopes, upto, fitted)
                done = Refit(reason, refit_id, at, keys)
    log.info("%s", done.summary())
    return done


async def after_import(pool: asyncpg.Pool, scopes: Iterable[str]) -> None:
    """The refit an import asks for, of the keys holding an imported scope. The import has
    committed: a failed refit is logged, and the next scheduled one fits these keys."""
    try:
        await refit(pool, IMPORT, sorted(set(scopes)))
    except Exception:
        log.exception("fusion refit after an import failed; the next scheduled refit will fit these scopes")


async def run_schedule(pool: asyncpg.Pool, hours: float) -> None:
    """Refit every `hours`, counted from the last refit stored (so restarts and several curation
    replicas keep one rhythm); the first a period after start when there has been none."""
    if hours <= 0:
        return
    period_s = hours * 3600
    with row_security.internal():
        async with pool.acquire() as conn:
            last = await repo.last_refit_at(conn)
    due_in = period_s if last is None else period_s - (datetime.now(UTC) - last).total_seconds()
    await asyncio.sleep(max(min(FIRST_DELAY_S, period_s), due_in))
    while True:
        try:
            await refit(pool, SCHEDULE)
        except Exception:  # the schedule outlives a bad run
            log.exception("scheduled fusion refit failed; will retry in %.2f h", hours)
        await asyncio.sleep(period_s)
