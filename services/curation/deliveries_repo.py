"""The delivery log's SQL (migration 0036): its rows, its chain head and floor, and the current state
of the memories a delivery named."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

_INSERT = (
    "INSERT INTO deliveries (seq, principal, session, thread, operation, transport, delivered_at,"
    " request, scopes, items, text_sha256, text_bytes, prev_hash, entry_hash)"
    " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)"
)
COLUMNS = (
    "seq",
    "principal",
    "session",
    "thread",
    "operation",
    "transport",
    "delivered_at",
    "request",
    "scopes",
    "items",
    "text_sha256",
    "text_bytes",
    "prev_hash",
    "entry_hash",
)


async def lock_head(conn: asyncpg.Connection) -> asyncpg.Record:
    """The chain's head and floor, locked until commit: appends and retention take turns."""
    row: asyncpg.Record = await conn.fetchrow("SELECT * FROM delivery_chain FOR UPDATE")
    return row


async def head(conn: asyncpg.Connection) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow("SELECT * FROM delivery_chain")
    return row


async def insert(conn: asyncpg.Connection, rows: Sequence[dict[str, Any]], last: tuple[int, str]) -> None:
    await conn.executemany(_INSERT, [tuple(r[c] for c in COLUMNS) for r in rows])
    await conn.execute("UPDATE delivery_chain SET last_seq = $1, last_hash = $2", *last)


async def boundary_before(conn: asyncpg.Connection, cutoff: datetime) -> asyncpg.Record | None:
    """The last row of the chain's oldest run of rows delivered before `cutoff` (none younger
    before it): retention drops it and every row before it. An old row recorded after a younger
    one (gateways' batches interleave) waits until the younger one goes."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT seq, entry_hash FROM deliveries WHERE delivered_at < $1"
        " AND seq < coalesce((SELECT min(seq) FROM deliveries WHERE delivered_at >= $1), 'infinity'::numeric)"
        " ORDER BY seq DESC LIMIT 1",
        cutoff,
    )
    return row


async def drop_through(conn: asyncpg.Connection, seq: int, entry_hash: str) -> int:
    """Move the floor to `seq` (its hash kept as the boundary), then drop the rows at or below it
    (the table's trigger allows no other delete)."""
    await conn.execute("UPDATE delivery_chain SET floor_seq = $1, floor_hash = $2", seq, entry_hash)
    status = await conn.execute("DELETE FROM deliveries WHERE seq <= $1", seq)
    return int(status.split()[-1])


def walk(conn: asyncpg.Connection, after_seq: int, batch: int = 5000) -> Any:
    """Every row after `after_seq` in seq order, streamed (inside a transaction)."""
    return conn.cursor("SELECT * FROM deliveries WHERE seq > $1 ORDER BY seq", after_seq, prefetch=batch)


async def select(
    conn: asyncpg.Connection, session: str, since: datetime | None, principal: str, limit: int
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT * FROM deliveries WHERE ($1 = '' OR session = $1)"
        " AND ($2::timestamptz IS NULL OR delivered_at >= $2) AND ($3 = '' OR principal = $3)"
        " ORDER BY seq LIMIT $4",
        session,
        since,
        principal,
        limit,
    )
    return rows


async def memories(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
    rows = await conn.fetch(
        "SELECT id, scope, description, content, superseded_by, stale_at, archived_at"
        " FROM memories WHERE id = ANY($1::uuid[])",
        list(ids),
    )
    return {r["id"]: r for r in rows}


async def endings(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
    """For memories no longer stored: the last delete or purge record about each (its operation,
    scope and record_hash)."""
    rows = await conn.fetch(
        "SELECT DISTINCT ON (target_id) target_id, operation, scope, record_hash FROM records"
        " WHERE target_id = ANY($1::uuid[]) AND operation IN ('delete', 'purge')"
        " ORDER BY target_id, seq DESC",
        list(ids),
    )
    return {r["target_id"]: r for r in rows}
