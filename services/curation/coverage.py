"""What a weekly or monthly consolidation run reads (issue 27): the schedule's windows, or the
backlog, which is everything no run has consolidated yet, whatever its age.

Each step marks what it has read (consolidation_covered, migration 0030: the memory, the step and
the memory's updated_at then) in the transaction that writes the proposals it drew from it; a
memory never read, or edited since, is not consolidated yet. Ages are the memories' own times
(created_at: an imported record keeps its original date), never when they arrived.

- On demand (the Consolidate RPC, `hypermnesia consolidate`): the backlog, within since/until when
  they are given.
- On the schedule: the backlog when the job has one older than BACKLOG_DAYS (history moved in, or
  written while the schedule was off), else the windows, which re-read the recent past so that a
  new episode meets last week's: facts, episodes 7 to 30 days old; the summary, semantic memories
  of the last 30 days; procedures, the newest MAX_ROWS memories.

The weekly job's settling time holds either way: an episode younger than
HM_CONSOLIDATION_MIN_AGE_DAYS is left for a later run. A backlog is read in batches of MAX_ROWS,
oldest first, and each batch's proposals and marks commit together: an interrupted run loses
nothing, and the next one goes on where it stopped. Cost: finding the backlog walks the scope's
live memory rows by index and probes the marks' primary key once per row; only the rows not yet
consolidated (at most MAX_ROWS a batch) are fetched, and only they have their vectors read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from services.curation import consolidation_repo
from services.curation.consolidation_repo import MAX_ROWS

__all__ = ["BACKLOG_DAYS", "STEPS", "WINDOW_DAYS", "Reader", "Span", "Step"]

# How far back the windows reach (the weekly facts' and the monthly summary's).
WINDOW_DAYS = 30.0
# A scheduled run reads the backlog when a step has something older than this not consolidated:
# in the steady state every memory passes through a window before it is this old.
BACKLOG_DAYS = WINDOW_DAYS


@dataclass(frozen=True)
class Step:
    """One of the Dreamer's steps over what a run reads; `name` keys its marks."""

    name: str
    kinds: tuple[str, ...] | None  # None: every kind a step may read (not documents)
    windowed: bool  # its window reaches back WINDOW_DAYS; else it is the newest MAX_ROWS
    settles: bool  # leaves memories younger than the settling time for a later run


FACTS = Step("facts", ("episodic",), windowed=True, settles=True)
SUMMARY = Step("summary", ("semantic",), windowed=True, settles=False)
PROCEDURES = Step("procedures", None, windowed=False, settles=False)
STEPS: dict[str, tuple[Step, ...]] = {"weekly": (FACTS,), "monthly": (SUMMARY, PROCEDURES)}


@dataclass(frozen=True)
class Span:
    """What a run reads: the backlog within since <= created_at < until (None: unbounded), or
    the windows (backlog False)."""

    backlog: bool
    since: datetime | None = None
    until: datetime | None = None

    @property
    def name(self) -> str:
        return "backlog" if self.backlog else "window"


class Reader:
    def __init__(self, pool: asyncpg.Pool, *, min_age_days: float) -> None:
        self.pool = pool
        self.min_age_days = min_age_days

    async def scheduled_span(self, job: str, scope: str, now: datetime) -> Span:
        """The backlog when one of the job's steps has one, else the windows."""
        before = now - timedelta(days=max(BACKLOG_DAYS, self.min_age_days))
        async with self.pool.acquire() as conn:
            for step in STEPS[job]:
                if await consolidation_repo.has_uncovered(conn, scope, step.name, step.kinds, before):
                    return Span(backlog=True)
        return Span(backlog=False)

    async def batches(
        self, step: Step, scope: str, span: Span, now: datetime
    ) -> AsyncIterator[list[asyncpg.Record]]:
        """What `step` reads, in batches (oldest first); the caller marks each batch it used."""
        settled = now - timedelta(days=self.min_age_days) if step.settles else None
        if not span.backlog:
            async with self.pool.acquire() as conn:
                rows = await consolidation_repo.live_memories(
                    conn,
                    scope,
                    step.kinds,
                    now - timedelta(days=WINDOW_DAYS) if step.windowed else None,
                    settled,
                )
            if rows:
                yield rows
            return
        until = span.until
        if settled is not None and (until is None or settled < until):
            until = settled
        after = None
        while True:
            async with self.pool.acquire() as conn:
                rows = await consolidation_repo.uncovered(
                    conn, scope, step.name, step.kinds, span.since, until, after
                )
            if rows:
                yield rows
            if len(rows) < MAX_ROWS:
                return
            after = (rows[-1]["created_at"], rows[-1]["id"])
