"""Saving, updating, superseding and deleting memories: validation, embedding, dedupe (dedupe.py)
and the raw-log record, in one transaction per write so a memory and its record never disagree."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from hypermnesia import validation
from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.errors import FailedPrecondition, InvalidArgument, NotFound
from hypermnesia.kinds import (
    DECAY_CLASS_FOR_KIND,
    DECAY_CLASSES,
    DEFAULT_IMPORTANCE,
    DEFAULT_KIND,
    DEFAULT_TYPE,
)
from hypermnesia.memory_rows import is_live
from hypermnesia.scopes import permits, require
from hypermnesia.secrets import Redaction, RedactMode, Redactor
from services.curation import entities, memory_fields, payloads, rawlog, repo
from services.curation.dedupe import DedupeGate, Similar, Verdict
from services.curation.embedding import BatchEmbedder, embedding_text

log = logging.getLogger(__name__)

WORKING_TTL = timedelta(hours=48)

__all__ = ["MemoryWriter", "SaveInput", "SaveResult", "UpdateInput", "new_memory"]


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
    supersedes: str = ""
    decay_class: str = ""
    # The fields the request did not give (a supersede keeps the replaced memory's: _inherited).
    unset: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SaveResult:
    created: bool
    memory: asyncpg.Record
    replaced: asyncpg.Record | None
    # Live near-duplicates that state a different fact (not replaced; the caller may supersede).
    similar: tuple[Similar, ...] = ()
    # The secrets masked in what was saved (HM_REDACT=mask).
    redacted: Redaction = field(default_factory=Redaction)


@dataclass(frozen=True)
class UpdateInput:
    principal: str
    grants: tuple[str, ...]
    id: str
    # Only the fields present here change (memory_update is a partial edit).
    changes: dict[str, Any] = field(default_factory=dict)


def check_decay_class(value: str) -> str:
    if value not in DECAY_CLASSES:
        raise InvalidArgument(f"decay_class {value!r} is unknown; use one of {', '.join(DECAY_CLASSES)}")
    return value


def new_memory(
    *,
    memory_id: uuid.UUID,
    scope: str,
    owner: str,
    kind: str,
    type: str,
    content: str,
    at: datetime,
    **rest: Any,
) -> dict[str, Any]:
    """A complete set of curated columns for a new memory, defaults filled per kind. The type is
    the caller's to name: a save's default (kinds.DEFAULT_TYPE) is not a derived memory's."""
    fields: dict[str, Any] = {
        "id": memory_id,
        "scope": scope,
        "owner_id": owner,
        "type": type,
        "kind": kind,
        "description": "",
        "content": content,
        "tags": [],
        "metadata": {},
        "importance": DEFAULT_IMPORTANCE,
        "decay_class": DECAY_CLASS_FOR_KIND[kind],
        "created_at": at,
        "updated_at": at,
        "last_accessed_at": at,
        "archived_at": None,
        "expires_at": at + WORKING_TTL if kind == "working" else None,
        "access_count": 0,
        "valid_from": at,
        "valid_to": None,
    }
    fields.update({k: v for k, v in rest.items() if v is not None})
    return fields


class MemoryWriter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        embedder: EmbedderClient,
        *,
        embed_timeout_s: float,
        dedupe_threshold: float,
        dedupe_content_threshold: float,
        redact: RedactMode = "mask",
    ) -> None:
        self.pool = pool
        self.redact = redact
        self.embedder = embedder
        self.embeddings = BatchEmbedder(embedder, embed_timeout_s)
        self.embed_timeout_s = embed_timeout_s
        self.dedupe_threshold = dedupe_threshold
        self.dedupe_content_threshold = dedupe_content_threshold
        self.dedupe = DedupeGate(
            pool, self.embeddings, threshold=dedupe_threshold, content_threshold=dedupe_content_threshold
        )

    def validate(self, item: SaveInput) -> SaveInput:
        validation.check_content(item.content)
        validation.check_description(item.description)
        validation.check_scope(item.scope)
        tags = validation.check_tags(item.tags)
        validation.check_type(item.type)
        validation.check_metadata(item.metadata)
        validation.check_kind(item.kind or DEFAULT_KIND)
        if item.decay_class:
            check_decay_class(item.decay_class)
        if item.importance is not None:
            validation.check_importance(item.importance)
        require(item.grants, [item.scope])
        return item if tags == item.tags else replace(item, tags=tags)

    async def _dedupe(self, item: SaveInput, kind: str, vector: np.ndarray) -> Verdict:
        if kind == "core" or item.supersedes:  # pinned memories and corrections are never merged
            return Verdict(None)
        return await self.dedupe.check(item.scope, kind, item.description, item.content, vector)

    async def _superseded(self, item: SaveInput) -> asyncpg.Record:
        """The memory a correction replaces, as it is now (every curated column)."""
        target = validation.parse_id(item.supersedes)
        async with self.pool.acquire() as conn:
            old = await repo.fetch_full(conn, target)
        if old is None or not permits(item.grants, old["scope"]):
            raise NotFound(f"cannot supersede {target}: no such memory in your scopes")
        return old

    async def save(self, item: SaveInput) -> SaveResult:
        replaced = await self._superseded(item) if item.supersedes else None
        if replaced is not None:
            item = _inherited(item, replaced)
        # Before anything is written: a refused secret leaves nothing behind, a masked one is all
        # that is ever embedded, compared, logged or stored (a correction's inherited fields too:
        # the memory it replaces may have been written with HM_REDACT=off).
        scan = Redactor(self.redact)
        item = _redacted(item, scan)
        item = self.validate(item)
        kind = item.kind or DEFAULT_KIND
        target = validation.parse_id(item.supersedes) if item.supersedes else None
        vector = await self.embeddings.one(embedding_text(item.description, item.content))
        verdict = await self._dedupe(item, kind, vector)
        duplicate = verdict.duplicate
        now = datetime.now(UTC)
        text_fields: dict[str, Any] = {
            "type": item.type or DEFAULT_TYPE,
            "description": item.description,
            "content": item.content,
            "tags": list(item.tags),
            "metadata": dict(item.metadata),
        }
        async with self.pool.acquire() as conn, conn.transaction():
            # Every write takes the chain head before any memory row, so writers never deadlock.
            await rawlog.lock_head(conn)
            if duplicate is not None:
                old = await repo.lock_memory(conn, duplicate["id"])
                if old is not None and is_live(old, now):
                    # A restatement adds to what the memory carried; it never drops a tag or a key.
                    changes = {
                        **text_fields,
                        "tags": list(dict.fromkeys([*old["tags"], *item.tags])),
                        "metadata": {**_metadata(old["metadata"]), **item.metadata},
                        "updated_at": now,
                    }
                    if item.importance is not None:
                        changes["importance"] = item.importance
                    await repo.update_memory(conn, old["id"], changes, vector)
                    await rawlog.append(
                        conn,
                        scope=item.scope,
                        kind="memory",
                        operation="update",
                        author=item.principal,
                        target_id=old["id"],
                        payload=payloads.update(old["id"], changes, reason="dedupe"),
                    )
                    await entities.link(conn, old["id"], item.scope, item.description, item.content, now)
                    row = await repo.fetch_memory(conn, old["id"])
                    assert row is not None
                    return SaveResult(
                        created=False, memory=row, replaced=old, similar=verdict.similar, redacted=scan.report
                    )
            fields = new_memory(
                memory_id=uuid.uuid4(),
                scope=item.scope,
                owner=item.principal,
                kind=kind,
                content=item.content,
                at=now,
                importance=item.importance,
                decay_class=item.decay_class or None,
                supersedes=target,
                **{k: v for k, v in text_fields.items() if k != "content"},
                **({k: replaced[k] for k in _CARRIED} if replaced is not None else {}),
            )
            if target is not None:
                assert replaced is not None
                await self._close_for_supersede(conn, replaced, fields["id"], item.scope, item.grants, now)
            await repo.insert_memories(conn, [fields], [vector])
            await rawlog.append(
                conn,
                scope=item.scope,
                kind="memory",
                operation="supersede" if target else "save",
                author=item.principal,
                target_id=fields["id"],
                payload=payloads.create(fields, closes=target),
            )
            await entities.link(conn, fields["id"], item.scope, item.description, item.content, now)
            row = await repo.fetch_memory(conn, fields["id"])
            assert row is not None
            return SaveResult(
                created=True, memory=row, replaced=None, similar=verdict.similar, redacted=scan.report
            )

    async def _close_for_supersede(
        self,
        conn: asyncpg.Connection,
        seen: asyncpg.Record,
        successor: uuid.UUID,
        scope: str,
        grants: tuple[str, ...],
        at: datetime,
    ) -> None:
        """Check that `seen` (the replaced memory, as the correction's kept fields were read from
        it) may be superseded by a new memory in `scope` and has not changed since, then close it."""
        target = seen["id"]
        old = await repo.lock_memory(conn, target)
        if old is None or not permits(grants, old["scope"]):
            raise NotFound(f"cannot supersede {target}: no such memory in your scopes")
        if old["scope"] != scope:
            raise InvalidArgument(
                f"cannot supersede {target}: it lives in scope {old['scope']!r}, not {scope!r}; "
                "a correction must be saved in the same scope"
            )
        if old["superseded_by"] is not None:
            raise FailedPrecondition(
                f"{target} was already superseded by {old['superseded_by']}; supersede the current "
                "version instead (a chain has one head)"
            )
        if old["updated_at"] != seen["updated_at"]:
            raise FailedPrecondition(f"{target} changed while superseding it; try again")
        if target == successor or await repo.chain_contains(conn, target, successor):
            raise InvalidArgument(f"superseding {target} with {successor} would make a cycle in its chain")
        await repo.close_memory(conn, target, successor, at)

    async def update(self, item: UpdateInput) -> tuple[asyncpg.Record, Redaction]:
        """Change only the given fields, keep the id; re-embed when the text changes. Returns the
        memory and the secrets masked in the changes."""
        memory_id = validation.parse_id(item.id)
        scan = Redactor(self.redact)
        changes = _validated_changes(
            {name: _redacted_field(scan, name, value) for name, value in item.changes.items()}
        )
        if not changes:
            raise InvalidArgument(
                "nothing to update; give at least one of content, description, type, tags, metadata, "
                "importance, decay_class"
            )
        async with self.pool.acquire() as conn:
            current = await repo.fetch_full(conn, memory_id)
        _check_writable(current, item.id, item.grants)
        assert current is not None
        vector = None
        if "content" in changes or "description" in changes:
            vector = await self.embeddings.one(
                embedding_text(
                    changes.get("description", current["description"]),
                    changes.get("content", current["content"]),
                )
            )
        now = datetime.now(UTC)
        changes["updated_at"] = now
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            locked = await repo.lock_memory(conn, memory_id)
            _check_writable(locked, item.id, item.grants)
            assert locked is not None
            if vector is not None and (locked["content"], locked["description"]) != (
                current["content"],
                current["description"],
            ):
                raise FailedPrecondition(f"{item.id} changed while updating; try again")
            await repo.update_memory(conn, memory_id, changes, vector)
            await rawlog.append(
                conn,
                scope=locked["scope"],
                kind="memory",
                operation="update",
                author=item.principal,
                target_id=memory_id,
                payload=payloads.update(memory_id, changes),
            )
            if vector is not None:
                await entities.link(
                    conn,
                    memory_id,
                    locked["scope"],
                    changes.get("description", locked["description"]),
                    changes.get("content", locked["content"]),
                    now,
                )
            row = await repo.fetch_memory(conn, memory_id)
        assert row is not None
        return row, scan.report

    async def delete(self, principal: str, grants: tuple[str, ...], memory_id_text: str) -> asyncpg.Record:
        """Remove a memory from every read; its history stays in the raw log (a tombstone record)."""
        async with self.pool.acquire() as conn, conn.transaction():
            locked = await repo.lock_for_write(conn, grants, memory_id_text)
            memory_id = locked["id"]
            now = datetime.now(UTC)
            await repo.delete_memory(conn, memory_id)
            await rawlog.append(
                conn,
                scope=locked["scope"],
                kind="memory",
                operation="delete",
                author=principal,
                target_id=memory_id,
                payload=payloads.event("delete", memory_id, now),
            )
        return locked


# The free-text fields of a save or an update: what secrets are looked for in.
_TEXT_FIELDS = ("content", "description", "type")


def _redacted_field(scan: Redactor, name: str, value: Any) -> Any:
    if value is None:
        return value
    if name in _TEXT_FIELDS:
        return scan.text(value, name)
    if name == "tags":
        return scan.texts(list(value), "tags")
    if name == "metadata":
        return scan.value(value, "metadata")
    return value


def _redacted(item: SaveInput, scan: Redactor) -> SaveInput:
    """The save with HM_REDACT applied to every text it carries."""
    changed = {
        name: _redacted_field(scan, name, getattr(item, name)) for name in (*_TEXT_FIELDS, "tags", "metadata")
    }
    return replace(item, **changed) if scan.report.count else item


# What a correction takes from the memory it replaces, given or not: where it belongs (its
# repository; the state object it is the value of), which the save request cannot name.
_CARRIED = ("repo", "state_key")
_INHERITABLE = frozenset(("type", "kind", "description", "tags", "metadata", "importance", "decay_class"))


def _inherited(item: SaveInput, old: asyncpg.Record) -> SaveInput:
    """A correction keeps every field of the memory it replaces that it does not give (type, kind,
    description, tags, metadata, importance, decay class) and, named no scope, lives where that
    memory lives (the only scope it may be saved in: a session's project is not it when the
    memory is, say, a `user:` one). A kind given that differs from the old one brings its own
    decay class unless one is given too."""
    # In their JSON form (a list of tags, a metadata object, importance as stored), as a save takes them.
    kept = memory_fields.to_json_partial({name: old[name] for name in item.unset & _INHERITABLE})
    if "decay_class" in kept and (item.kind or old["kind"]) != old["kind"]:
        del kept["decay_class"]
    return replace(item, scope=item.scope or old["scope"], **kept)


_UPDATABLE = ("content", "description", "type", "tags", "metadata", "importance", "decay_class")


def _validated_changes(changes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in _UPDATABLE:
            raise InvalidArgument(f"{name} cannot be updated; updatable fields: {', '.join(_UPDATABLE)}")
        if value is None:
            continue
        if name == "content":
            validation.check_content(value)
        elif name == "description":
            validation.check_description(value)
        elif name == "type":
            validation.check_type(value)
        elif name == "tags":
            value = validation.check_tags(list(value))
        elif name == "importance":
            validation.check_importance(float(value))
        elif name == "decay_class":
            check_decay_class(value)
        elif name == "metadata":
            validation.check_metadata(value)
        out[name] = value
    return out


def _check_writable(row: asyncpg.Record | None, memory_id: str, grants: tuple[str, ...]) -> None:
    if row is None or not permits(grants, row["scope"]):
        raise NotFound(f"no memory {memory_id} in your scopes")
    if row["superseded_by"] is not None:
        raise FailedPrecondition(
            f"{memory_id} was superseded by {row['superseded_by']}; update the current version instead"
        )
    if row["archived_at"] is not None:
        raise FailedPrecondition(f"{memory_id} is archived; restore it first (memory_restore)")


def _metadata(value: Any) -> dict[str, Any]:
    """A row's metadata as a dict (the column reads back as JSON text)."""
    return dict(json.loads(value) if isinstance(value, str) else (value or {}))
