"""Rebuild: the curated layer is derived, the raw log is the truth.

The raw log is replayed, in seq order, into a shadow copy of the memories (in memory: id ->
curated columns), which is then compared with the live table. `check` reports every difference;
otherwise the differences are applied in one transaction that also holds the chain head, so no
write lands between the replay and the swap. Applying the difference rather than swapping whole
tables keeps other areas' columns, triggers and references to `memories` intact.

Stored vectors are re-used: the live row's where its text is unchanged, else the raw layer's
embedding_store (vectors by text, all made by the pinned model: reindex refills it when the pin
moves); only text never embedded before is embedded. Access counters are side
effects of reads and are not in the raw log, so they are neither compared nor overwritten.

Evidence edges (the graph a derived memory rests on) are replayed too, from the create records
that carry `evidence` and the `evidence` records, and compared and restored like the memories.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from hypermnesia.v1 import curation_pb2
from hypermnesia.wording import count
from services.curation import entities, graph_repo, memory_fields, payloads, rawlog, records_repo, repo
from services.curation.embedding import EmbedFn, embedding_text

log = logging.getLogger(__name__)

MAX_REPORTED = 1000


@dataclass
class RebuildReport:
    replayed: int = 0
    live: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    reembedded: int = 0
    differences: list[str] = field(default_factory=list)
    applied: bool = False
    edges_added: int = 0
    edges_removed: int = 0

    def to_message(self) -> curation_pb2.RebuildResponse:
        return curation_pb2.RebuildResponse(
            replayed=self.replayed,
            live=self.live,
            inserted=self.inserted,
            updated=self.updated,
            deleted=self.deleted,
            reembedded=self.reembedded,
            differences=self.differences[:MAX_REPORTED],
            applied=self.applied,
        )

    def summary(self) -> str:
        verb = "fixed" if self.applied else "found"
        return (
            f"replayed {count(self.replayed, 'record')} against {count(self.live, 'live memory')}; "
            f"{verb} {self.inserted} missing, {self.updated} different, {self.deleted} extra; "
            f"{self.reembedded} re-embedded; {count(self.edges_added, 'evidence edge')} missing, "
            f"{self.edges_removed} extra"
        )


_COMPARED = [c for c in memory_fields.COLUMNS if c not in memory_fields.ACCESS_COLUMNS]


async def replay(
    conn: asyncpg.Connection,
    scopes: list[str] | None,
    progress: Callable[[int], None] | None = None,
    edges: set[tuple[uuid.UUID, uuid.UUID]] | None = None,
) -> tuple[dict[uuid.UUID, dict[str, Any]], int]:
    """The curated memories the raw log implies, and how many records were replayed; the evidence
    edges it implies are added to `edges` when given."""
    state: dict[uuid.UUID, dict[str, Any]] = {}
    count = 0
    async for payload in records_repo.payloads_in_order(conn, scopes):
        count += 1
        if progress is not None:
            progress(1)
        if payload is None:
            continue  # purged: its text is gone, and the purge record removes its memory
        data = json.loads(payload)
        payloads.apply(state, data)
        if edges is not None:
            edges.update(payloads.edges(data))
    return state, count


def _differences(memory_id: uuid.UUID, live: dict[str, Any], shadow: dict[str, Any]) -> list[str]:
    a, b = memory_fields.to_json(live), memory_fields.to_json(shadow)
    return [
        f"{memory_id}: {name} live={a[name]!r} replayed={b[name]!r}"
        for name in _COMPARED
        if a[name] != b[name]
    ]


class Rebuilder:
    def __init__(self, pool: asyncpg.Pool, embed: EmbedFn) -> None:
        self.pool = pool
        self.embed = embed

    async def rebuild(
        self, scopes: list[str] | None, *, check: bool, progress: Callable[[int], None] | None = None
    ) -> RebuildReport:
        report = RebuildReport()
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            if not check:
                # Hold the chain head: no write can land between the replay and the swap.
                await rawlog.lock_head(conn)
            replayed_edges: set[tuple[uuid.UUID, uuid.UUID]] = set()
            shadow, report.replayed = await replay(conn, scopes, progress, replayed_edges)
            live = {r["id"]: dict(r) for r in await repo.curated_rows(conn, scopes)}
            # Edges of conclusions that exist (a deleted conclusion's edges count on neither side).
            replayed_edges = {e for e in replayed_edges if e[0] in shadow}
            live_edges = await graph_repo.edges_in_scopes(conn, scopes)
            edges_missing = sorted(replayed_edges - live_edges)
            edges_extra = sorted(live_edges - replayed_edges)
            report.edges_added, report.edges_removed = len(edges_missing), len(edges_extra)
            report.live = len(live)
            missing = [i for i in shadow if i not in live]
            extra = [i for i in live if i not in shadow]
            changed = [i for i in shadow if i in live and _differences(i, live[i], shadow[i])]
            report.inserted, report.deleted, report.updated = len(missing), len(extra), len(changed)
            report.differences = (
                [
                    f"{i}: missing from memories (replayed {shadow[i]['scope']!r} {shadow[i]['content'][:60]!r})"
                    for i in missing[:MAX_REPORTED]
                ]
                + [f"{i}: in memories but not in the raw log" for i in extra[:MAX_REPORTED]]
                + [d for i in changed[:MAX_REPORTED] for d in _differences(i, live[i], shadow[i])]
                + [f"evidence edge {d} -> {p}: missing" for d, p in edges_missing[:MAX_REPORTED]]
                + [f"evidence edge {d} -> {p}: not in the raw log" for d, p in edges_extra[:MAX_REPORTED]]
            )
            if check:
                return report
            await self._apply(conn, shadow, live, missing, extra, changed, report)
            await graph_repo.delete_edges(conn, edges_extra)
            await graph_repo.insert_edges(conn, edges_missing, "system:rebuild")
            report.applied = True
        log.info("rebuild: %s", report.summary())
        return report

    async def _apply(
        self,
        conn: asyncpg.Connection,
        shadow: dict[uuid.UUID, dict[str, Any]],
        live: dict[uuid.UUID, dict[str, Any]],
        missing: list[uuid.UUID],
        extra: list[uuid.UUID],
        changed: list[uuid.UUID],
        report: RebuildReport,
    ) -> None:
        def text(m: dict[str, Any]) -> str:
            return embedding_text(m["description"], m["content"])

        need = [i for i in missing + changed if i not in live or text(live[i]) != text(shadow[i])]
        kept = await repo.stored_vectors(conn, [text(shadow[i]) for i in need])
        embed = [i for i in need if text(shadow[i]) not in kept]
        vectors = {i: kept[text(shadow[i])] for i in need if i not in set(embed)}
        if embed:
            vectors.update(zip(embed, await self.embed([text(shadow[i]) for i in embed]), strict=True))
        report.reembedded = len(embed)
        if extra:
            await repo.delete_memories(conn, extra)
        for i in changed:
            fields = {c: shadow[i][c] for c in _COMPARED if c != "id"}
            await repo.update_memory(conn, i, fields, vectors.get(i))
            if i in vectors:
                await entities.link(
                    conn,
                    i,
                    shadow[i]["scope"],
                    shadow[i]["description"],
                    shadow[i]["content"],
                    shadow[i]["updated_at"],
                )
        rows = [shadow[i] for i in missing]
        await repo.insert_memories(conn, rows, [vectors[i] for i in missing])
        await entities.link_many(
            conn, [(r["id"], r["scope"], r["description"], r["content"], r["created_at"]) for r in rows]
        )
