"""Curation's SQL for consolidation and the Dreamer: what each job reads, and the advisory lock
that lets one run at a time per job and scope across replicas."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from hypermnesia.memory_rows import live_sql
from services.curation.graph_repo import NODE_COLUMNS

# Bounds one read: a window's newest rows, or one batch of a backlog (a backlog is read batch by
# batch; the weekly clustering over a batch is one 2000 x 2000 similarity matrix).
MAX_ROWS = 2000


async def try_lock(conn: asyncpg.Connection, job: str, scope: str) -> bool:
    """Inside the caller's transaction: the run's lock, released at commit (or if the connection dies)."""
    return bool(
        await conn.fetchval(
            "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", f"hm:consolidate:{job}:{scope}"
        )
    )


async def scopes_with_memories(conn: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    return [r["scope"] for r in await conn.fetch("SELECT DISTINCT scope FROM memories ORDER BY scope")]


async def expired_working(conn: asyncpg.Connection, scope: str) -> list[asyncpg.Record]:
    """Working memories past their TTL and not yet dealt with (locked for the run)."""
    return list(
        await conn.fetch(
            "SELECT id, scope, importance, access_count FROM memories WHERE scope = $1 AND kind = 'working'"
            " AND archived_at IS NULL AND superseded_by IS NULL AND expires_at IS NOT NULL AND expires_at <= now()"
            " ORDER BY id FOR UPDATE",
            scope,
        )
    )


async def expired_premises_with_fresh_conclusions(conn: asyncpg.Connection, scope: str) -> list[uuid.UUID]:
    """Expired premises in the scope some conclusion still rests on without being marked stale."""
    rows = await conn.fetch(
        "SELECT DISTINCT e.premise_id FROM evidence_edges e"
        " JOIN memories p ON p.id = e.premise_id JOIN memories d ON d.id = e.derived_id"
        " WHERE p.scope = $1 AND p.expires_at IS NOT NULL AND p.expires_at <= now() AND d.stale_at IS NULL",
        scope,
    )
    return [r["premise_id"] for r in rows]


async def count_stale(conn: asyncpg.Connection, scope: str) -> int:
    """Stale memories of one scope (a report counts only what its scope's readers may see)."""
    return int(
        await conn.fetchval("SELECT count(*) FROM memories WHERE scope = $1 AND stale_at IS NOT NULL", scope)
    )


async def stale_conclusions(conn: asyncpg.Connection, scope: str) -> list[asyncpg.Record]:
    """Live (not archived, not superseded) conclusions of the scope marked stale."""
    return list(
        await conn.fetch(
            f"SELECT {NODE_COLUMNS} FROM memories WHERE scope = $1 AND stale_at IS NOT NULL AND {live_sql()}"
            f" ORDER BY stale_at, id LIMIT {MAX_ROWS}",
            scope,
        )
    )


async def live_memories(
    conn: asyncpg.Connection,
    scope: str,
    kinds: Sequence[str] | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> list[asyncpg.Record]:
    """Live, not-stale memories of the scope that are not themselves conclusions: the newest
    MAX_ROWS, oldest first."""
    args: list[object] = [scope]
    where = _readable_where("m", "$1")
    _bind(args, where, list(kinds) if kinds else None, "m.kind = ANY({}::text[])")
    _bind(args, where, created_after, "m.created_at >= {}")
    _bind(args, where, created_before, "m.created_at <= {}")
    rows = await conn.fetch(
        f"SELECT {', '.join('m.' + c.strip() for c in NODE_COLUMNS.split(','))} FROM memories m"
        f" WHERE {' AND '.join(where)} ORDER BY m.created_at DESC, m.id DESC LIMIT {MAX_ROWS}",
        *args,
    )
    return list(reversed(rows))


async def entity_sets(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, set[int]]:
    rows = await conn.fetch(
        "SELECT memory_id, entity_id FROM memory_entities WHERE memory_id = ANY($1::uuid[])", list(ids)
    )
    out: dict[uuid.UUID, set[int]] = {}
    for r in rows:
        out.setdefault(r["memory_id"], set()).add(r["entity_id"])
    return out


async def entity_names(conn: asyncpg.Connection, entity_ids: Sequence[int]) -> list[str]:
    rows = await conn.fetch("SELECT name FROM entities WHERE id = ANY($1) ORDER BY name", list(entity_ids))
    return [r["name"] for r in rows]


def _readable_where(alias: str, scope_arg: str) -> list[str]:
    """What every step reads: live, not-stale memories of the scope that are not documents and
    not themselves conclusions."""
    m = alias
    return [
        f"{m}.scope = {scope_arg} AND {live_sql(m)} AND {m}.stale_at IS NULL",
        f"{m}.kind <> 'document'",
        f"NOT EXISTS (SELECT 1 FROM evidence_edges e WHERE e.derived_id = {m}.id)",
    ]


def _bind(args: list[object], where: list[str], value: object, condition: str) -> None:
    """When value is given, one more parameter and the condition on it ({} stands for it)."""
    if value is not None:
        args.append(value)
        where.append(condition.format(f"${len(args)}"))


def _not_covered(alias: str, step_arg: str) -> str:
    return (
        f"NOT EXISTS (SELECT 1 FROM consolidation_covered c WHERE c.memory_id = {alias}.id"
        f" AND c.step = {step_arg} AND c.seen_updated_at >= {alias}.updated_at)"
    )


async def uncovered(
    conn: asyncpg.Connection,
    scope: str,
    step: str,
    kinds: Sequence[str] | None,
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int = MAX_ROWS,
) -> list[asyncpg.Record]:
    """The backlog of `step`, one batch: what it reads that it has not consolidated yet (never
    read, or edited since), with since <= created_at < until (the memory's own time), oldest
    first, after the (created_at, id) of the previous batch's last row."""
    args: list[object] = [scope, step]
    where = [*_readable_where("m", "$1"), _not_covered("m", "$2")]
    _bind(args, where, list(kinds) if kinds else None, "m.kind = ANY({}::text[])")
    _bind(args, where, since, "m.created_at >= {}")
    _bind(args, where, until, "m.created_at < {}")
    if after is not None:
        args += list(after)
        where.append(f"(m.created_at, m.id) > (${len(args) - 1}, ${len(args)})")
    args.append(limit)
    return list(
        await conn.fetch(
            f"SELECT {', '.join('m.' + c.strip() for c in NODE_COLUMNS.split(','))} FROM memories m"
            f" WHERE {' AND '.join(where)} ORDER BY m.created_at, m.id LIMIT ${len(args)}",
            *args,
        )
    )


async def has_uncovered(
    conn: asyncpg.Connection, scope: str, step: str, kinds: Sequence[str] | None, before: datetime
) -> bool:
    """Whether `step` has something older than `before` it has not consolidated (a backlog)."""
    args: list[object] = [scope, step, before]
    where = [*_readable_where("m", "$1"), _not_covered("m", "$2"), "m.created_at < $3"]
    if kinds:
        args.append(list(kinds))
        where.append(f"m.kind = ANY(${len(args)}::text[])")
    return bool(
        await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM memories m WHERE {' AND '.join(where)})", *args)
    )


async def cover(conn: asyncpg.Connection, step: str, rows: Sequence[asyncpg.Record]) -> None:
    """Mark `rows` (as read, with their updated_at) consolidated by `step`."""
    await conn.execute(
        "INSERT INTO consolidation_covered (memory_id, step, seen_updated_at)"
        " SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])"
        " ON CONFLICT (memory_id, step) DO UPDATE SET seen_updated_at = EXCLUDED.seen_updated_at,"
        " covered_at = now()",
        [r["id"] for r in rows],
        [step] * len(rows),
        [r["updated_at"] for r in rows],
    )
