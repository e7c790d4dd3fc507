"""Secrets already stored (written before HM_REDACT, or with it off): found, then masked.

`scan` reports which memories hold a secret, in their live text or in the raw-log texts about them,
by kind and count, never the text. `apply` treats each one as `hypermnesia purge` treats a memory's
records, but only the records holding a secret: their texts are erased (the chain still verifies:
it covers content hashes, not texts) with the vectors kept for those texts; the memory itself is
rewritten masked, as a version (an `update` record whose payload is the whole masked memory, so a
rebuild restores it although its earlier records lost their text), so every word that was not a
secret stays. Proposals quoting a secret and the search log's queries are masked in place (neither
is in the chain); entities and lexical terms the old text alone held go with it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np

from hypermnesia import secrets
from hypermnesia.times import iso_exact
from services.curation import entities, maintenance_repo, payloads, rawlog, repo
from services.curation.embedding import embedding_text

log = logging.getLogger(__name__)

__all__ = ["Found", "RedactReport", "apply", "scan"]

_TEXT_COLUMNS = ("content", "description", "type", "tags", "metadata")
EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]


def _kinds(value: Any) -> Counter[str]:
    """The kinds of secret in a text or a JSON value (every string in it, keys included)."""
    found: Counter[str] = Counter()
    if isinstance(value, str):
        found.update(f.kind for f in secrets.find(value))
    elif isinstance(value, dict):
        for k, v in value.items():
            found += _kinds(str(k)) + _kinds(v)
    elif isinstance(value, list | tuple):
        for v in value:
            found += _kinds(v)
    return found


def _metadata(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else (value or {})


@dataclass
class Found:
    """One memory (or, memory_id None, records about no memory) holding secrets."""

    memory_id: uuid.UUID | None
    scope: str
    live: Counter[str] = field(default_factory=Counter)  # in the memory's current text
    records: list[uuid.UUID] = field(default_factory=list)  # raw-log records whose text holds one
    in_records: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        def kinds(c: Counter[str]) -> str:
            return ", ".join(f"{k} {n}" for k, n in sorted(c.items()))

        parts = []
        if self.live:
            parts.append(f"live text: {kinds(self.live)}")
        if self.records:
            parts.append(f"raw log: {len(self.records)} record(s) ({kinds(self.in_records)})")
        who = f"memory {self.memory_id}" if self.memory_id else "records about no memory"
        return f"{who} [{self.scope}]: " + "; ".join(parts)


@dataclass
class RedactReport:
    found: list[Found] = field(default_factory=list)
    proposals: int = 0  # proposals whose text holds a secret
    searches: int = 0  # search_log queries holding one
    applied: bool = False
    texts_erased: int = 0

    @property
    def kinds(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for f in self.found:
            total += f.live + f.in_records
        return total

    def lines(self) -> list[str]:
        out = [f.line() for f in self.found]
        if self.proposals:
            out.append(f"proposals: {self.proposals} quote a secret")
        if self.searches:
            out.append(f"search log: {self.searches} queries hold a secret")
        return out

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items())) or "none"
        memories = sum(1 for f in self.found if f.memory_id is not None)
        head = f"{memories} memories hold secrets ({kinds})"
        if self.applied:
            return head + f"; masked them and erased the text of {self.texts_erased} raw-log records"
        return head + "; --apply masks them and erases the raw-log texts holding them"


async def scan(pool: asyncpg.Pool, scopes: list[str] | None = None) -> RedactReport:
    """What holds a secret, by memory: counts and kinds only."""
    report = RedactReport()
    by_memory: dict[uuid.UUID | None, Found] = {}
    scope_filter = " WHERE scope = ANY($1::text[])" if scopes else ""
    args: list[Any] = [scopes] if scopes else []
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        async for row in conn.cursor(
            f"SELECT id, scope, {', '.join(_TEXT_COLUMNS)} FROM memories{scope_filter}", *args
        ):
            found = Counter[str]()
            for name in _TEXT_COLUMNS:
                value = _metadata(row[name]) if name == "metadata" else row[name]
                found += _kinds(value)
            if found:
                by_memory[row["id"]] = Found(row["id"], row["scope"], live=found)
        records_filter = " WHERE r.scope = ANY($1::text[])" if scopes else ""
        async for row in conn.cursor(
            "SELECT r.id, r.target_id, r.scope, r.kind, t.payload FROM record_texts t"
            f" JOIN records r ON r.id = t.record_id{records_filter} ORDER BY r.seq",
            *args,
        ):
            found = _kinds(json.loads(row["payload"]))
            if not found:
                continue
            # A record that created a memory shares its id; every other one targets it.
            memory_id = row["target_id"] or row["id"]
            if row["kind"] == "proposal":
                memory_id = None  # a proposal is not a memory: its record text is erased alone
            entry = by_memory.setdefault(memory_id, Found(memory_id, row["scope"]))
            entry.records.append(row["id"])
            entry.in_records += found
        async for row in conn.cursor(
            f"SELECT content, description, rationale FROM proposals{scope_filter}", *args
        ):
            if any(_kinds(row[c]) for c in ("content", "description", "rationale")):
                report.proposals += 1
        searched = " WHERE scopes && $1::text[]" if scopes else ""
        async for row in conn.cursor(f"SELECT query FROM search_log{searched}", *args):
            if _kinds(row["query"]):
                report.searches += 1
    report.found = sorted(by_memory.values(), key=lambda f: (f.memory_id is None, str(f.memory_id)))
    return report


async def apply(
    pool: asyncpg.Pool, embed: EmbedFn, principal: str, scopes: list[str] | None = None
) -> RedactReport:
    """Mask every secret `scan` finds (see the module's docstring); one transaction per memory."""
    report = await scan(pool, scopes)
    for found in report.found:
        report.texts_erased += await _apply_one(pool, embed, principal, found)
    async with pool.acquire() as conn, conn.transaction():
        await _mask_in_place(conn, scopes)
    report.applied = True
    log.warning(
        "redact: masked %d memories, erased the text of %d raw-log records",
        sum(1 for f in report.found if f.memory_id is not None),
        report.texts_erased,
    )
    return report


async def _apply_one(pool: asyncpg.Pool, embed: EmbedFn, principal: str, found: Found) -> int:
    row = None
    if found.memory_id is not None:
        async with pool.acquire() as conn:
            row = await repo.fetch_full(conn, found.memory_id)
    changes: dict[str, Any] = {}
    vector = None
    if row is not None:
        scan_ = secrets.Redactor("mask")
        current = {name: row[name] for name in _TEXT_COLUMNS}
        current["metadata"] = _metadata(current["metadata"])
        masked = {
            "content": scan_.text(current["content"], "content"),
            "description": scan_.text(current["description"], "description"),
            "type": scan_.text(current["type"], "type"),
            "tags": scan_.texts(list(current["tags"]), "tags"),
            "metadata": scan_.value(current["metadata"], "metadata"),
        }
        changes = {k: v for k, v in masked.items() if v != current[k]}
        if "content" in changes or "description" in changes:
            (vector,) = await embed([embedding_text(masked["description"], masked["content"])])
    async with pool.acquire() as conn, conn.transaction():
        await rawlog.lock_head(conn)
        erased = await maintenance_repo.record_payloads(conn, found.records)
        await maintenance_repo.delete_record_texts(conn, found.records)
        # Vectors are derived from the text and could leak it: the kept ones of erased texts go too.
        texts = payloads.embedded_texts([json.loads(p) for p in erased])
        if row is not None and vector is not None:
            texts.append(embedding_text(row["description"], row["content"]))
        vector_hashes = sorted({repo.text_sha256(t) for t in texts})
        await maintenance_repo.delete_kept_vectors(conn, vector_hashes)
        now = datetime.now(UTC)
        if row is not None:
            locked = await repo.lock_memory(conn, row["id"])
            if locked is None:
                return len(erased)  # deleted meanwhile: its records' texts are erased, that is all
            if changes:
                await repo.update_memory(conn, row["id"], {**changes, "updated_at": now}, vector)
                await entities.link(
                    conn,
                    row["id"],
                    row["scope"],
                    changes.get("description", row["description"]),
                    changes.get("content", row["content"]),
                    now,
                )
            full = await repo.lock_memory(conn, row["id"])
            assert full is not None
            await rawlog.append(
                conn,
                scope=row["scope"],
                kind="memory",
                operation="update",
                author=principal,
                target_id=row["id"],
                payload=payloads.create(
                    full,
                    closes=await _reclose(conn, full),
                    reason="redact",
                    redacted={"records": len(erased), "vectors": vector_hashes},
                ),
            )
            await _leftovers(conn, row["scope"])
        elif erased:
            await rawlog.append(
                conn,
                scope=found.scope,
                kind="memory",
                operation="redact",
                author=principal,
                payload={
                    "v": payloads.PAYLOAD_VERSION,
                    "op": "redact",
                    "at": iso_exact(now),
                    "records": [str(r) for r in found.records],
                    "vectors": vector_hashes,
                },
            )
    return len(erased)


async def _reclose(conn: asyncpg.Connection, memory: asyncpg.Record) -> uuid.UUID | None:
    """The memory this one closed, when it still is closed by it: redone on replay, since the
    record that closed it may just have lost its text."""
    if memory["supersedes"] is None:
        return None
    predecessor = await repo.fetch_full(conn, memory["supersedes"])
    if predecessor is not None and predecessor["superseded_by"] == memory["id"]:
        return uuid.UUID(str(predecessor["id"]))
    return None


async def _leftovers(conn: asyncpg.Connection, scope: str) -> None:
    """Entities and lexical terms only the old text held."""
    await conn.execute(
        "DELETE FROM entities e WHERE e.scope = $1"
        " AND NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id)",
        scope,
    )
    await conn.execute("DELETE FROM lexical_df WHERE scope = $1 AND df <= 0", scope)


async def _mask_in_place(conn: asyncpg.Connection, scopes: list[str] | None) -> None:
    """Proposals and the search log are not in the chain: their texts are masked where they are."""
    where = " WHERE scope = ANY($1::text[])" if scopes else ""
    args: list[Any] = [scopes] if scopes else []
    for row in await conn.fetch(f"SELECT id, content, description, rationale FROM proposals{where}", *args):
        masked = {c: secrets.masked(row[c]) for c in ("content", "description", "rationale")}
        if any(masked[c] != row[c] for c in masked):
            await conn.execute(
                "UPDATE proposals SET content = $2, description = $3, rationale = $4 WHERE id = $1",
                row["id"],
                masked["content"],
                masked["description"],
                masked["rationale"],
            )
    searched = " WHERE scopes && $1::text[]" if scopes else ""
    for row in await conn.fetch(f"SELECT id, query FROM search_log{searched}", *args):
        masked_query = secrets.masked(row["query"])
        if masked_query != row["query"]:
            await conn.execute("UPDATE search_log SET query = $2 WHERE id = $1", row["id"], masked_query)
