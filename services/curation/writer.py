"""Saving memories: validation, embedding, two-gated dedupe, and the raw-log record, in one
transaction per write so a memory and its record never disagree."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from hypermnesia import validation
from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from hypermnesia.kinds import DECAY_CLASS_FOR_KIND, DEFAULT_KIND
from hypermnesia.scopes import require
from services.curation import rawlog, repo

log = logging.getLogger(__name__)

DEFAULT_IMPORTANCE = 1.0
WORKING_TTL = timedelta(hours=48)


@dataclass(frozen=True)
class SaveInput:
    principal: str
    grants: tuple[str, ...]
    content: str
    description: str
    scope: str
    type: str
    tags: list[str]
    metadata: dict[str, Any]
    importance: float | None
    kind: str


@dataclass(frozen=True)
class SaveResult:
    created: bool
    memory: asyncpg.Record
    replaced: asyncpg.Record | None


def embedding_text(description: str, content: str) -> str:
    """What a memory is embedded as: the one-line description ranks, the content grounds it."""
    return f"{description}\n{content}" if description else content


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class MemoryWriter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        embedder: EmbedderClient,
        *,
        embed_timeout_s: float,
        dedupe_threshold: float,
        dedupe_content_threshold: float,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.embed_timeout_s = embed_timeout_s
        self.dedupe_threshold = dedupe_threshold
        self.dedupe_content_threshold = dedupe_content_threshold

    def validate(self, item: SaveInput) -> SaveInput:
        validation.check_content(item.content)
        validation.check_description(item.description)
        validation.check_scope(item.scope)
        validation.check_tags(item.tags)
        validation.check_type(item.type)
        validation.check_kind(item.kind or DEFAULT_KIND)
        if item.importance is not None:
            validation.check_importance(item.importance)
        require(item.grants, [item.scope])
        return item

    async def _is_same_fact(self, new_content: str, old_content: str) -> bool:
        """Second dedupe gate: the contents themselves must agree, so two different facts with a
        similar description insert side by side instead of one clobbering the other."""
        if new_content.strip() == old_content.strip():
            return True
        vectors = await self.embedder.embed([new_content, old_content], DOCUMENT, self.embed_timeout_s)
        return _cosine(vectors[0], vectors[1]) >= self.dedupe_content_threshold

    async def save(self, item: SaveInput) -> SaveResult:
        self.validate(item)
        kind = item.kind or DEFAULT_KIND
        (vector,) = await self.embedder.embed(
            [embedding_text(item.description, item.content)], DOCUMENT, self.embed_timeout_s
        )
        duplicate: asyncpg.Record | None = None
        if kind != "core":  # pinned core memories are curated by hand; never merged silently
            async with self.pool.acquire() as conn:
                nearest = await repo.nearest_active(conn, item.scope, vector)
            if nearest and nearest[1] >= self.dedupe_threshold and nearest[0]["kind"] == kind:
                if await self._is_same_fact(item.content, nearest[0]["content"]):
                    duplicate = nearest[0]
        now = datetime.now(UTC)
        fields: dict[str, Any] = {
            "scope": item.scope,
            "owner_id": item.principal,
            "type": item.type or "note",
            "kind": kind,
            "description": item.description,
            "content": item.content,
            "tags": item.tags,
            "metadata": item.metadata,
            "importance": DEFAULT_IMPORTANCE if item.importance is None else item.importance,
            "decay_class": DECAY_CLASS_FOR_KIND[kind],
            "embedding": vector,
        }
        async with self.pool.acquire() as conn, conn.transaction():
            if duplicate is not None:
                old = await repo.lock_memory(conn, duplicate["id"])
                if old is not None and old["archived_at"] is None and not old["superseded_by"]:
                    if item.importance is None:
                        fields["importance"] = old["importance"]
                    row = await repo.overwrite_memory(conn, old["id"], fields, now)
                    await rawlog.append(
                        conn, scope=item.scope, kind="memory", operation="update", author=item.principal,
                        target_id=old["id"], payload=_payload(fields, reason="dedupe"), created_at=now,
                    )
                    return SaveResult(created=False, memory=row, replaced=old)
            fields["id"] = uuid.uuid4()
            fields["created_at"] = now
            fields["expires_at"] = now + WORKING_TTL if kind == "working" else None
            row = await repo.insert_memory(conn, fields)
            await rawlog.append(
                conn, scope=item.scope, kind="memory", operation="save", author=item.principal,
                target_id=fields["id"], payload=_payload(fields), created_at=now,
            )
            return SaveResult(created=True, memory=row, replaced=None)


def _payload(fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The record payload: every field needed to rebuild the memory, never the vector."""
    keep = ("type", "kind", "description", "content", "tags", "metadata", "importance", "decay_class",
            "expires_at")
    data = {k: fields[k] for k in keep if k in fields}
    if data.get("expires_at") is not None:
        data["expires_at"] = data["expires_at"].isoformat()
    data.update(extra)
    return data
