"""Forgetting: archive stale, unimportant memories (soft, dry run by default), archive one memory
by id, restore, and the periodic sweep. Core memories (decay class none) are pinned and never forgotten."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg

from hypermnesia import validation
from hypermnesia.errors import FailedPrecondition, InvalidArgument
from hypermnesia.scopes import require
from services.curation import lifecycle_repo, payloads, rawlog, repo

log = logging.getLogger(__name__)

SYSTEM_PRINCIPAL = "system:sweep"


@dataclass(frozen=True)
class ForgetInput:
    principal: str
    grants: tuple[str, ...]
    scopes: list[str]
    tags: list[str] = field(default_factory=list)
    older_than_days: float | None = None
    importance_floor: float | None = None
    apply: bool = False
    limit: int = 100


@dataclass(frozen=True)
class ForgetResult:
    matched: int
    archived: int
    memories: list[asyncpg.Record]
    truncated: bool
    applied: bool


class Forgetter:
    def __init__(self, pool: asyncpg.Pool, *, after_days: float, importance_floor: float) -> None:
        self.pool = pool
        self.after_days = after_days
        self.importance_floor = importance_floor

    async def forget(self, item: ForgetInput) -> ForgetResult:
        if not item.scopes:
            raise InvalidArgument("no scope to forget in; name a scope or grant the token one")
        for scope in item.scopes:
            validation.check_scope(scope)
        validation.check_tags(item.tags)
        require(item.grants, item.scopes)
        days = self.after_days if item.older_than_days is None else item.older_than_days
        floor = self.importance_floor if item.importance_floor is None else item.importance_floor
        validation.check_days(days, validation.MAX_FORGET_DAYS, "older_than_days")
        validation.check_importance(floor)
        validation.check_limit(item.limit, validation.MAX_FORGET_LIMIT)
        now = datetime.now(UTC)
        cutoff = now - timedelta(days=days)
        args = (item.scopes, item.tags, cutoff, floor)
        async with self.pool.acquire() as conn, conn.transaction():
            if item.apply:
                await rawlog.lock_head(conn)  # the head before memory rows, as every write does
                # Lock what we archive so `matched` is exactly what apply archives.
                ids = await lifecycle_repo.lock_stale(conn, *args)
                matched = len(ids)
            else:
                matched = await lifecycle_repo.count_stale(conn, *args)
            listed = await lifecycle_repo.stale(conn, *args, item.limit)
            if item.apply and ids:
                await archive(conn, ids, item.principal, now, reason="forget")
                listed = [await repo.fetch_memory(conn, r["id"]) for r in listed]
        return ForgetResult(
            matched, matched if item.apply else 0, list(listed), matched > len(listed), item.apply
        )

    async def archive_one(
        self, principal: str, grants: tuple[str, ...], memory_id_text: str
    ) -> asyncpg.Record:
        """Archive one memory the caller names (soft: restore brings it back). Unlike the sweep it
        spares nothing the caller chose: a core memory or an important one is archived too."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await repo.lock_for_write(conn, grants, memory_id_text)
            memory_id = row["id"]
            if row["archived_at"] is not None:
                raise FailedPrecondition(f"{memory_id_text} is archived already; restore it to bring it back")
            await archive(conn, [memory_id], principal, datetime.now(UTC), reason="by request")
            archived = await repo.fetch_memory(conn, memory_id)
        assert archived is not None
        return archived

    async def restore(self, principal: str, grants: tuple[str, ...], memory_id_text: str) -> asyncpg.Record:
        """Un-archive, refreshing the access time so the next sweep does not re-forget it at once."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await repo.lock_for_write(conn, grants, memory_id_text)
            memory_id = row["id"]
            if row["archived_at"] is None:
                raise FailedPrecondition(f"{memory_id_text} is not archived; there is nothing to restore")
            now = datetime.now(UTC)
            await lifecycle_repo.unarchive(conn, memory_id, now)
            await rawlog.append(
                conn,
                scope=row["scope"],
                kind="memory",
                operation="restore",
                author=principal,
                target_id=memory_id,
                payload=payloads.event("restore", memory_id, now),
            )
            restored = await repo.fetch_memory(conn, memory_id)
        assert restored is not None
        return restored

    async def sweep_once(self) -> list[asyncpg.Record]:
        """Archive, in every scope, what the thresholds select; logs each archived description."""
        now = datetime.now(UTC)
        cutoff = now - timedelta(days=self.after_days)
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            rows = await lifecycle_repo.lock_sweep(conn, cutoff, self.importance_floor)
            if rows:
                await archive(conn, [r["id"] for r in rows], SYSTEM_PRINCIPAL, now, reason="sweep")
        for row in rows:
            log.info("forget sweep archived %s in %s: %s", row["id"], row["scope"], row["description"][:120])
        return list(rows)

    async def run_sweeps(self, every_hours: float) -> None:
        """The periodic sweep (HM_FORGET_SWEEP_HOURS); a failed pass is logged and retried next time."""
        while True:
            await asyncio.sleep(every_hours * 3600)
            try:
                archived = await self.sweep_once()
                log.info("forget sweep: %d memories archived", len(archived))
            except (asyncpg.PostgresError, OSError):
                log.exception("forget sweep failed; will retry in %.2f h", every_hours)


async def archive(
    conn: asyncpg.Connection, ids: list[uuid.UUID], principal: str, at: datetime, reason: str
) -> None:
    """Archive memories (soft) and record one raw-log event per memory."""
    rows = await lifecycle_repo.archive(conn, ids, at)
    await rawlog.append_many(
        conn,
        [
            rawlog.Entry(
                scope=r["scope"],
                kind="memory",
                operation="archive",
                author=principal,
                target_id=r["id"],
                payload=payloads.event("archive", r["id"], at, reason=reason),
            )
            for r in rows
        ],
    )
