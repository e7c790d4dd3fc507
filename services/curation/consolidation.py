"""Consolidation, a daily, weekly and monthly schedule (issue 18, item 5).

daily    working memory: promote what was accessed and is important enough to episodic, expire
         (archive) the rest; mark the conclusions of expired premises stale; the Dreamer proposes
         revisions/retirements of stale conclusions and flags contradictions.
weekly   cluster episodes (entity overlap + embedding similarity) into distilled facts.
monthly  project summaries of semantic memories; repeated procedures.

What the weekly and monthly jobs read is coverage.py's: on demand, everything not consolidated
yet whatever its age (within since/until when given); on the schedule, that backlog when there is
one, else the recent windows.

A run is one job over one scope, and only one runs at a time per job and scope, across replicas
too (a transaction-level advisory lock; a second run reports `skipped`). A run is idempotent:
promotion and expiry act on what is still pending, proposals are keyed by their evidence, and what
a run has consolidated is marked so that the next one does not read it again.
It runs on the server's schedule (HM_CONSOLIDATION_*_HOURS) and on demand (Consolidate RPC).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from hypermnesia import row_security, validation
from hypermnesia.errors import InvalidArgument
from hypermnesia.kinds import DECAY_CLASS_FOR_KIND
from hypermnesia.scopes import permits, require
from hypermnesia.v1 import intelligence_pb2
from services.curation import (
    consolidation_repo,
    coverage,
    graph_repo,
    lifecycle,
    metrics,
    payloads,
    proposals,
    proposals_repo,
    rawlog,
    repo,
)
from services.curation.coverage import Span, Step
from services.curation.dreamer import Dream, Dreamer
from services.curation.llm import MODE_EXTRACTIVE, MODE_LLM
from services.curation.proposals import Draft

log = logging.getLogger(__name__)

JOBS = ("daily", "weekly", "monthly")
SYSTEM_PRINCIPAL = "system:consolidation"
SKIPPED_LOCKED = "another run holds the lock"


@dataclass
class Report:
    job: str
    scope: str
    skipped: bool = False
    skipped_reason: str = ""
    mode: str = MODE_EXTRACTIVE
    promoted: int = 0
    expired: int = 0
    marked_stale: int = 0
    proposals_made: int = 0
    pending: int = 0
    duration_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    made_by_kind: dict[str, int] = field(default_factory=dict)
    coverage: str = ""  # weekly and monthly: "backlog" or "window" (coverage.Span)
    read: int = 0

    def to_message(self) -> intelligence_pb2.ConsolidateReport:
        return intelligence_pb2.ConsolidateReport(
            job=self.job,
            scope=self.scope,
            skipped=self.skipped,
            skipped_reason=self.skipped_reason,
            mode=self.mode,
            promoted=self.promoted,
            expired=self.expired,
            marked_stale=self.marked_stale,
            proposals_made=self.proposals_made,
            pending=self.pending,
            duration_ms=self.duration_ms,
            notes=self.notes,
            made_by_kind=self.made_by_kind,
            coverage=self.coverage,
            read=self.read,
        )


class Consolidator:
    def __init__(
        self, pool: asyncpg.Pool, dreamer: Dreamer, *, promote_importance: float, min_age_days: float
    ) -> None:
        self.pool = pool
        self.dreamer = dreamer
        self.promote_importance = promote_importance
        self.reader = coverage.Reader(pool, min_age_days=min_age_days)
        # Store-wide upkeep the daily job runs besides its scopes' work (the delivery log's
        # retention, services/curation/server.py), on the schedule and on demand alike.
        self.daily_upkeep: list[Callable[[], Awaitable[object]]] = []

    async def consolidate(
        self,
        principal: str,
        grants: Sequence[str],
        job: str,
        scope: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[Report]:
        """On demand: one scope, or every scope holding memories that the grants permit. The
        weekly and monthly jobs read everything not consolidated yet, within since/until."""
        if job not in JOBS:
            raise InvalidArgument(f"job {job!r} is unknown; use daily, weekly or monthly")
        if job == "daily" and (since is not None or until is not None):
            raise InvalidArgument(
                "since and until bound what the weekly and monthly jobs read; the daily job acts on "
                "what is pending now, so leave them out"
            )
        if since is not None and until is not None and since >= until:
            raise InvalidArgument(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")
        if scope:
            validation.check_scope(scope)
            require(grants, [scope])
            scopes = [scope]
        else:
            scopes = [
                s for s in await consolidation_repo.scopes_with_memories(self.pool) if permits(grants, s)
            ]
        span = Span(backlog=True, since=since, until=until)
        # The caller may start a permitted scope's job; the job itself is the service's own work,
        # as on the schedule: a proposal rests on all its evidence (readers are shown only the
        # part they may read), and staleness follows premises in any scope.
        with row_security.internal():
            reports = [await self.run(job, s, principal, span) for s in scopes]
            if job == "daily":
                await self._upkeep()
            return reports

    async def run(
        self, job: str, scope: str, author: str = SYSTEM_PRINCIPAL, span: Span | None = None
    ) -> Report:
        """One job over one scope; `span` None is the schedule's choice (coverage.py)."""
        report = Report(job=job, scope=scope)
        started = time.perf_counter()
        async with self.pool.acquire() as lock_conn, lock_conn.transaction():
            if not await consolidation_repo.try_lock(lock_conn, job, scope):
                report.skipped, report.skipped_reason = True, SKIPPED_LOCKED
                metrics.CONSOLIDATION_RUNS.labels(job, "skipped").inc()
                return report
            try:
                await self._run_job(job, scope, author, report, span)
            except Exception:
                metrics.CONSOLIDATION_RUNS.labels(job, "failed").inc()
                raise
        report.duration_ms = (time.perf_counter() - started) * 1000
        metrics.CONSOLIDATION_RUNS.labels(job, "ran").inc()
        metrics.CONSOLIDATION_SECONDS.labels(job).observe(report.duration_ms / 1000)
        async with self.pool.acquire() as conn:
            report.pending = await proposals_repo.count_pending(conn, scope)
            metrics.PROPOSALS_PENDING.set(await proposals_repo.count_pending(conn))
        log.info(
            "consolidation %s %s: promoted %d, expired %d, marked %d stale, read %d (%s), %d proposals (%s)",
            job, scope, report.promoted, report.expired, report.marked_stale, report.read,
            report.coverage or "pending", report.proposals_made, report.mode,
        )  # fmt: skip
        return report

    async def _run_job(self, job: str, scope: str, author: str, report: Report, span: Span | None) -> None:
        if job == "daily":
            await self._working_memory(scope, author, report)
            async with self.pool.acquire() as conn:
                drafts = await self.dreamer.stale(conn, scope)
                drafts += await self.dreamer.contradictions(conn, scope)
            await self._propose(drafts, author, report)
        else:
            now = datetime.now(UTC)
            if span is None:
                span = await self.reader.scheduled_span(job, scope, now)
            report.coverage = span.name
            for step in coverage.STEPS[job]:
                async for rows in self.reader.batches(step, scope, span, now):
                    report.read += len(rows)
                    async with self.pool.acquire() as conn:
                        drafts = await self._drafts(conn, step, scope, rows, span)
                    await self._propose(drafts, author, report, (step, rows))
        if self.dreamer.llm is None:
            report.notes.append("no LLM configured (HM_LLM_BASE_URL); extractive mode")

    async def _drafts(
        self, conn: asyncpg.Connection, step: Step, scope: str, rows: list[asyncpg.Record], span: Span
    ) -> list[Draft]:
        if step is coverage.FACTS:
            return await self.dreamer.facts(conn, scope, rows)
        if step is coverage.PROCEDURES:
            return await self.dreamer.procedures(conn, scope, rows)
        if not span.backlog:
            return self.dreamer.summary(scope, rows, "in the last 30 days")
        # A backlog spans months or years: one summary per calendar month of the memories' times.
        months: dict[str, list[asyncpg.Record]] = {}
        for row in rows:
            months.setdefault(f"in {row['created_at']:%B %Y}", []).append(row)
        return [d for period, group in months.items() for d in self.dreamer.summary(scope, group, period)]

    async def _propose(
        self,
        drafts: list[Draft],
        author: str,
        report: Report,
        covered: tuple[Step, list[asyncpg.Record]] | None = None,
    ) -> None:
        """Propose what is new among `drafts` and, in the same transaction, mark the rows they
        were drawn from as consolidated by their step."""
        dream = Dream(drafts=drafts)
        async with self.pool.acquire() as conn:
            fresh = await self.dreamer.new_only(conn, dream.drafts)
            worded = await self.dreamer.word(conn, fresh, dream)
        async with self.pool.acquire() as conn, conn.transaction():
            made = await proposals.propose(conn, worded, author)
            if covered is not None:
                await consolidation_repo.cover(conn, covered[0].name, covered[1])
        report.proposals_made += len(made)
        for row in made:
            report.made_by_kind[row["kind"]] = report.made_by_kind.get(row["kind"], 0) + 1
        report.notes += [note for note in dream.notes if note not in report.notes]
        if any(d.mode == MODE_LLM for d in worded):
            report.mode = MODE_LLM

    async def _working_memory(self, scope: str, author: str, report: Report) -> None:
        now = datetime.now(UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            stale_before = await consolidation_repo.count_stale(conn, scope)
            promote, expire = [], []
            for row in await consolidation_repo.expired_working(conn, scope):
                if row["access_count"] > 0 and row["importance"] >= self.promote_importance:
                    promote.append(row["id"])
                else:
                    expire.append(row["id"])
            changes = {
                "kind": "episodic",
                "decay_class": DECAY_CLASS_FOR_KIND["episodic"],
                "expires_at": None,
                "updated_at": now,
            }
            for memory_id in promote:
                await repo.update_memory(conn, memory_id, changes, None)
            await rawlog.append_many(
                conn,
                [
                    rawlog.Entry(
                        scope=scope,
                        kind="memory",
                        operation="update",
                        author=author,
                        target_id=memory_id,
                        payload=payloads.update(
                            memory_id, changes, reason="consolidation: promoted to episodic"
                        ),
                    )
                    for memory_id in promote
                ],
            )
            # Conclusions resting on an expired premise are stale, named for the expiry (the
            # archive below would name it "archived"; the first reason is the one kept).
            for premise in {
                *expire,
                *await consolidation_repo.expired_premises_with_fresh_conclusions(conn, scope),
            }:
                await graph_repo.mark_stale(conn, premise, "expired")
            if expire:
                await lifecycle.archive(conn, expire, author, now, reason="expired")
            report.promoted, report.expired = len(promote), len(expire)
            report.marked_stale = await consolidation_repo.count_stale(conn, scope) - stale_before

    async def scheduled(self, job: str) -> list[Report]:
        """One pass of the schedule: `job` over every scope, each reading its backlog when it has
        one, else its windows (coverage.py)."""
        reports = [
            await self.run(job, scope) for scope in await consolidation_repo.scopes_with_memories(self.pool)
        ]
        if job == "daily":
            await self._upkeep()
        return reports

    async def _upkeep(self) -> None:
        for task in self.daily_upkeep:
            await task()

    async def run_schedule(self, job: str, every_hours: float) -> None:
        """The server's periodic run of `job` over every scope; a failed run is logged and retried."""
        while True:
            await asyncio.sleep(every_hours * 3600)
            try:
                await self.scheduled(job)
            except Exception:
                # The schedule outlives a bad run: log it whole and try again next time.
                log.exception("consolidation %s failed; will retry in %.2f h", job, every_hours)
