"""The delivery log (issue 30 item 3): what each agent was given, append-only and hash-chained.

The gateway records every answer that delivers memories to an agent (gateway/deliveries.py) and
sends them here in batches; each becomes a row of `deliveries` (migration 0036) whose entry_hash =
sha256(canonical row + "\\n" + prev_hash), the previous row's entry_hash, as the raw log chains
its records (services/curation/rawlog.py). The row holds ids, scores and the sha256 of the text
delivered, never the text itself, so a purge of a memory leaves nothing of it here to erase.

Retention (HM_DELIVERY_RETENTION_DAYS, run by the daily job) drops the oldest rows in chain order
and keeps the last dropped row's seq and hash as the chain's floor: verify walks from there, so the
chain still verifies after old entries are gone, and a row removed from the middle still breaks it.

A listing shows each delivered memory as it is now: live, superseded, stale, archived, deleted or
purged (a deleted or purged one by its id and the hash of the raw-log record that ended it, never
its text), and not_found for an id that names no memory the caller can read (a rule of the map).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from hypermnesia.times import iso_exact
from services.curation import deliveries_repo, repo
from services.curation.rawlog import canonical_json

log = logging.getLogger(__name__)

# What a listing answers at most, and when the caller names no limit.
MAX_LIST = 1000
DEFAULT_LIST = 200
STATES = ("live", "superseded", "stale", "archived", "deleted", "purged", "not_found")


@dataclass
class Entry:
    """One delivery as the gateway reported it."""

    principal: str
    operation: str
    transport: str
    delivered_at: datetime
    request: str
    scopes: list[str]
    items: list[dict[str, Any]]  # {"id": str, "score": float | None}
    text_sha256: str
    text_bytes: int
    session: str = ""
    thread: str = ""


def hashed_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The fields entry_hash covers, in a form that round-trips through Postgres exactly."""
    return {
        "seq": int(row["seq"]),
        "principal": row["principal"],
        "session": row["session"],
        "thread": row["thread"],
        "operation": row["operation"],
        "transport": row["transport"],
        "delivered_at": iso_exact(row["delivered_at"]),
        "request": row["request"],
        "scopes": list(row["scopes"]),
        "items": row["items"],
        "text_sha256": row["text_sha256"],
        "text_bytes": int(row["text_bytes"]),
    }


def entry_hash(row: Mapping[str, Any], prev_hash: str) -> str:
    material = canonical_json(hashed_fields(row)) + "\n" + prev_hash
    return hashlib.sha256(material.encode()).hexdigest()


async def append(pool: asyncpg.Pool, entries: Sequence[Entry]) -> int:
    """Append `entries` in order, one transaction holding the chain head."""
    if not entries:
        return 0
    async with pool.acquire() as conn, conn.transaction():
        head = await deliveries_repo.lock_head(conn)
        seq, prev = int(head["last_seq"]), str(head["last_hash"])
        rows = []
        for e in entries:
            seq += 1
            row: dict[str, Any] = {
                "seq": seq,
                "principal": e.principal,
                "session": e.session,
                "thread": e.thread,
                "operation": e.operation,
                "transport": e.transport,
                # Postgres keeps microseconds: hash what it will give back.
                "delivered_at": e.delivered_at.astimezone(UTC),
                "request": e.request,
                "scopes": list(e.scopes),
                "items": canonical_json(e.items),
                "text_sha256": e.text_sha256,
                "text_bytes": e.text_bytes,
                "prev_hash": prev,
            }
            prev = row["entry_hash"] = entry_hash(row, prev)
            rows.append(row)
        await deliveries_repo.insert(conn, rows, (seq, prev))
    return len(rows)


@dataclass(frozen=True)
class VerifyResult:
    checked: int
    first_broken_seq: int | None
    reason: str
    floor_seq: int
    floor_hash: str


async def verify(pool: asyncpg.Pool) -> VerifyResult:
    """Walk the chain from its floor; name the first seq whose hash or linkage does not hold."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        head = await deliveries_repo.head(conn)
        floor_seq, prev = int(head["floor_seq"]), str(head["floor_hash"])
        expected, checked = floor_seq + 1, 0

        def broken(seq: int, reason: str) -> VerifyResult:
            return VerifyResult(checked, seq, reason, floor_seq, head["floor_hash"])

        async for row in deliveries_repo.walk(conn, floor_seq):
            if row["seq"] != expected:
                return broken(expected, f"delivery {expected} is missing")
            if row["prev_hash"] != prev:
                return broken(row["seq"], "prev_hash is not the previous delivery's hash")
            if entry_hash(row, prev) != row["entry_hash"]:
                return broken(row["seq"], "entry_hash does not match the row")
            prev, expected, checked = row["entry_hash"], expected + 1, checked + 1
        if int(head["last_seq"]) != expected - 1 or head["last_hash"] != prev:
            return broken(expected, "the chain head does not match the last delivery")
    return VerifyResult(checked, None, "ok", floor_seq, head["floor_hash"])


async def enforce_retention(pool: asyncpg.Pool, days: float, now: datetime | None = None) -> int:
    """Drop the deliveries older than `days` (0 keeps them all); the boundary hash stays as the
    chain's floor. Returns how many were dropped."""
    if days <= 0:
        return 0
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    async with pool.acquire() as conn, conn.transaction():
        await deliveries_repo.lock_head(conn)
        boundary = await deliveries_repo.boundary_before(conn, cutoff)
        if boundary is None:
            return 0
        dropped = await deliveries_repo.drop_through(conn, boundary["seq"], boundary["entry_hash"])
    log.info(
        "delivery log: dropped %d deliveries older than %g days (through seq %d)",
        dropped,
        days,
        boundary["seq"],
    )
    return dropped


# ---- listing -------------------------------------------------------------------------------------


@dataclass
class Delivered:
    """A delivered item as it is now."""

    id: str
    score: float | None
    state: str
    hash: str = ""
    scope: str = ""
    description: str = ""
    content: str = ""
    superseded_by: str = ""


@dataclass
class Listed:
    row: asyncpg.Record
    memories: list[Delivered] = field(default_factory=list)


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _now_state(item_id: str, score: float | None, memory: Any, ending: Any) -> Delivered:
    if memory is not None:
        if memory["superseded_by"] is not None:
            state = "superseded"
        elif memory["stale_at"] is not None:
            state = "stale"
        elif memory["archived_at"] is not None:
            state = "archived"
        else:
            state = "live"
        return Delivered(
            item_id,
            score,
            state,
            hash=repo.text_sha256(memory["content"]),
            scope=memory["scope"],
            description=memory["description"],
            content=memory["content"],
            superseded_by=str(memory["superseded_by"] or ""),
        )
    if ending is not None:
        # Gone: its id and the hash of the record that ended it, which the raw log's chain covers.
        state = "purged" if ending["operation"] == "purge" else "deleted"
        return Delivered(item_id, score, state, hash=ending["record_hash"], scope=ending["scope"])
    return Delivered(item_id, score, "not_found")


async def listing(
    pool: asyncpg.Pool, session: str, since: datetime | None, principal: str, limit: int
) -> tuple[list[Listed], bool]:
    """The deliveries the connection's grants may read (row security), oldest first, each item in
    its current state; and whether more matched than `limit`."""
    limit = min(limit or DEFAULT_LIST, MAX_LIST)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        rows = await deliveries_repo.select(conn, session, since, principal, limit + 1)
        truncated = len(rows) > limit
        rows = rows[:limit]
        items = [(r, json.loads(r["items"])) for r in rows]
        ids = {u for _, its in items for i in its if (u := _uuid(i["id"])) is not None}
        memories = await deliveries_repo.memories(conn, sorted(ids))
        endings = await deliveries_repo.endings(conn, sorted(ids - set(memories)))
    out = []
    for row, its in items:
        listed = Listed(row)
        for item in its:
            key = _uuid(item["id"])
            listed.memories.append(
                _now_state(item["id"], item.get("score"), memories.get(key), endings.get(key))  # type: ignore[arg-type]
            )
        out.append(listed)
    return out, truncated
