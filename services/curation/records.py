"""The records API's write side: raw records in, curated memories out.

A writer says what it observed (a conversation turn, a document, a state object, a note); curation
decides what it becomes. Each new record creates one memory with the same id, so the id returned
for a record also finds its memory. Imports are idempotent on (scope, source_ref): a re-sent record
is skipped and answered with the id it already has. Records are evidence, so they are never merged
by dedupe; a conversation turn keeps its thread and its order in it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hypermnesia import speakers, validation
from hypermnesia.errors import FailedPrecondition, InvalidArgument, NotFound
from hypermnesia.scopes import require
from hypermnesia.secrets import Redaction, RedactMode, Redactor
from services.curation import entities, payloads, projection_repo, rawlog, records_repo, repo, tasks
from services.curation.embedding import BatchEmbedder, embedding_text
from services.curation.metrics import IMPORT_STAGE_SECONDS
from services.curation.writer import new_memory

log = logging.getLogger(__name__)

RECORD_TYPES = ("conversation", "document", "state_object", "note")
TYPE_ALIASES = {"memory": "note"}
KIND_FOR_TYPE = {"conversation": "episodic", "document": "document", "state_object": "semantic"}


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the time spent in one stage of an import (hm_import_stage_seconds, and the per-stage
    table of `hypermnesia bench import`)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        IMPORT_STAGE_SECONDS.labels(name).inc(time.perf_counter() - started)


@dataclass
class RecordSpec:
    type: str
    scope: str
    content: str
    source_ref: str | None = None
    thread_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    prev_source_ref: str | None = None
    topic_id: str | None = None
    description: str = ""
    tags: list[str] = field(default_factory=list)
    importance: float | None = None
    state_kind: str | None = None
    state_key: str | None = None
    supersedes: str | None = None
    repo: str | None = None
    kind: str | None = None
    speaker: str | None = None  # conversation only: kept in metadata (hypermnesia/speakers.py)


@dataclass(frozen=True)
class ImportResult:
    imported: int
    skipped: int
    ids: list[str]
    # The secrets masked in the records (HM_REDACT=mask).
    redacted: Redaction = field(default_factory=Redaction)
    # Assistant turns not stored (HM_STORE_ASSISTANT_TURNS=false); their ids are empty.
    left_out: int = 0


def redact_record(spec: RecordSpec, scan: Redactor, where: str = "") -> None:
    """HM_REDACT applied, in place, to every free text of a record (its ids and refs are keys,
    not text: they are left as given)."""
    spec.content = scan.text(spec.content, where + "content")
    spec.description = scan.text(spec.description, where + "description")
    spec.tags = scan.texts(spec.tags, where + "tags")
    spec.metadata = scan.value(spec.metadata, where + "metadata")


def _short(value: str | None, name: str, where: str) -> str | None:
    if not value:
        return None
    if len(value) > validation.MAX_REF_CHARS or "\x00" in value:
        raise InvalidArgument(
            f"{where}{name} must be at most {validation.MAX_REF_CHARS} characters without NUL"
        )
    return value


def check_record(spec: RecordSpec, grants: Iterable[str], where: str = "") -> RecordSpec:
    """Validate one record in place; messages start with `where` (e.g. 'records[3]: ')."""
    try:
        spec.type = TYPE_ALIASES.get(spec.type, spec.type)
        if spec.type not in RECORD_TYPES:
            raise InvalidArgument(
                f"type {spec.type!r} is unknown; use one of {', '.join(RECORD_TYPES)} "
                "(a writer says what it observed; curation decides the memory kind)"
            )
        validation.check_scope(spec.scope)
        validation.check_content(spec.content)
        validation.check_description(spec.description)
        spec.tags = validation.check_tags(spec.tags)
        validation.check_metadata(spec.metadata)
        if spec.importance is not None:
            validation.check_importance(spec.importance)
        for name in (
            "source_ref",
            "thread_id",
            "prev_source_ref",
            "topic_id",
            "supersedes",
            "repo",
            "state_kind",
            "state_key",
            "speaker",
        ):
            setattr(spec, name, _short(getattr(spec, name), name, ""))
        if spec.speaker:
            _keep_speaker(spec)
        if spec.kind:
            if spec.type != "note":
                raise InvalidArgument(
                    f"kind applies to note records only; a {spec.type} becomes {KIND_FOR_TYPE[spec.type]}"
                )
            validation.check_kind(spec.kind)
        if spec.type == "state_object":
            spec.state_kind = spec.state_kind or _short(str(spec.metadata.get("kind") or ""), "kind", "")
            spec.state_key = spec.state_key or _short(str(spec.metadata.get("key") or ""), "key", "")
            if not spec.state_kind or not spec.state_key:
                raise InvalidArgument("a state_object needs state_kind and state_key (the projection key)")
            if "/" in spec.state_kind:
                raise InvalidArgument("state_kind must not contain '/'")
        if spec.created_at is not None and spec.created_at.tzinfo is None:
            spec.created_at = spec.created_at.replace(tzinfo=UTC)
        if spec.supersedes and spec.supersedes == spec.source_ref:
            raise InvalidArgument("a record cannot supersede itself (that would be a cycle)")
        require(grants, [spec.scope])
    except InvalidArgument as exc:
        raise InvalidArgument(where + exc.message) from exc
    return spec


def _keep_speaker(spec: RecordSpec) -> None:
    """A conversation turn's speaker goes into its metadata, the memory's place for what a writer
    says about a record (as topic_id does)."""
    if spec.type != "conversation":
        raise InvalidArgument(f"speaker applies to conversation records only, not to a {spec.type}")
    given = spec.metadata.get(speakers.SPEAKER_KEY)
    if given is not None and given != spec.speaker:
        raise InvalidArgument(
            f"speaker {spec.speaker!r} and metadata.speaker {given!r} differ; send one of them"
        )
    spec.metadata = {**spec.metadata, speakers.SPEAKER_KEY: spec.speaker}


def is_assistant_turn(spec: RecordSpec) -> bool:
    return spec.type == "conversation" and speakers.is_assistant(spec.metadata)


class RecordImporter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        embeddings: BatchEmbedder,
        *,
        task_extraction: bool = True,
        redact: RedactMode = "mask",
        store_assistant_turns: bool = True,
    ) -> None:
        self.pool = pool
        self.embeddings = embeddings
        self.task_extraction = task_extraction
        self.redact = redact
        self.store_assistant_turns = store_assistant_turns

    async def import_records(
        self, principal: str, grants: tuple[str, ...], specs: Sequence[RecordSpec], operation: str = "import"
    ) -> ImportResult:
        """Write the records (idempotent on (scope, source_ref)); with HM_STORE_ASSISTANT_TURNS
        false the assistant's turns are checked like the rest, then left out: not stored, answered
        with an empty id and counted in `left_out`."""
        if not specs:
            raise InvalidArgument('no records given; send {"records": [...]} with at least one record')
        if len(specs) > validation.MAX_IMPORT_RECORDS:
            raise InvalidArgument(
                f"{len(specs):,} records in one call; the limit is {validation.MAX_IMPORT_RECORDS:,}. Split them"
            )
        if self.store_assistant_turns:
            return await self._import(principal, grants, specs, operation)
        for i, spec in enumerate(specs):
            check_record(spec, grants, f"records[{i}]: " if len(specs) > 1 else "")
        kept = [i for i, spec in enumerate(specs) if not is_assistant_turn(spec)]
        if len(kept) == len(specs):
            return await self._import(principal, grants, specs, operation)
        ids = [""] * len(specs)
        done = ImportResult(imported=0, skipped=0, ids=[])
        if kept:
            done = await self._import(principal, grants, [specs[i] for i in kept], operation)
            for i, memory_id in zip(kept, done.ids, strict=True):
                ids[i] = memory_id
        left_out = len(specs) - len(kept)
        return ImportResult(done.imported, done.skipped + left_out, ids, done.redacted, left_out)

    async def _import(
        self, principal: str, grants: tuple[str, ...], specs: Sequence[RecordSpec], operation: str
    ) -> ImportResult:
        with stage("check and redact"):
            for i, spec in enumerate(specs):
                check_record(spec, grants, f"records[{i}]: " if len(specs) > 1 else "")
            # Every record before any is written: a refusal leaves the whole batch unwritten, and
            # only masked text reaches task extraction, embeddings, entities and the raw log.
            scan = Redactor(self.redact)
            for i, spec in enumerate(specs):
                redact_record(spec, scan, f"records[{i}]." if len(specs) > 1 else "")
        # First occurrence of each (scope, source_ref) in this batch; later ones are duplicates.
        first: dict[tuple[str, str], int] = {}
        for i, spec in enumerate(specs):
            if spec.source_ref:
                first.setdefault((spec.scope, spec.source_ref), i)
        with stage("dedupe lookup"):
            async with self.pool.acquire() as conn:
                existing = await _existing(conn, list(first))
                await _check_supersede_targets(conn, specs, existing, first)
        fresh = [
            i
            for i, s in enumerate(specs)
            if not s.source_ref
            or (first[(s.scope, s.source_ref)] == i and (s.scope, s.source_ref) not in existing)
        ]
        with stage("task extraction"):
            found = await self._task_candidates(specs, fresh)
        with stage("embed"):
            vectors = await self.embeddings.many(
                [embedding_text(specs[i].description, specs[i].content) for i in fresh]
                + [embedding_text(f"task: {c.text[:120]}", c.text) for _, c in found]
            )
        async with self.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                with stage("chain lock and recheck"):
                    await rawlog.lock_head(conn)
                    # Re-check under the chain lock: a concurrent import of the same refs may have won.
                    existing = await _existing(conn, list(first))
                ids: list[str | None] = [None] * len(specs)
                for i, spec in enumerate(specs):
                    if spec.source_ref and (spec.scope, spec.source_ref) in existing:
                        ids[i] = str(existing[(spec.scope, spec.source_ref)])
                written = await self._write(conn, principal, specs, fresh, vectors, ids, operation, found)
            except BaseException:
                await transaction.rollback()
                raise
            with stage("commit"):
                await transaction.commit()
        for i, spec in enumerate(specs):  # in-batch duplicates answer with the first one's id
            if ids[i] is None and spec.source_ref:
                ids[i] = ids[first[(spec.scope, spec.source_ref)]]
        final = [i for i in ids if i is not None]
        assert len(final) == len(specs)
        return ImportResult(imported=written, skipped=len(specs) - written, ids=final, redacted=scan.report)

    async def _write(
        self,
        conn: asyncpg.Connection,
        principal: str,
        specs: Sequence[RecordSpec],
        fresh: list[int],
        vectors: Any,
        ids: list[str | None],
        operation: str,
        found: list[tuple[int, tasks.Candidate]],
    ) -> int:
        now = datetime.now(UTC)
        with stage("ordinals and state heads"):
            ordinals = await _next_ordinals(conn, [specs[i] for i in fresh])
            heads = await _state_heads(conn, [specs[i] for i in fresh])
        by_ref: dict[tuple[str, str], uuid.UUID] = {}
        rows: list[dict[str, Any]] = []
        row_vectors: list[Any] = []
        entries: list[rawlog.Entry] = []
        closes: list[tuple[uuid.UUID, uuid.UUID, datetime]] = []
        made: dict[int, dict[str, Any]] = {}
        for position, i in enumerate(fresh):
            spec = specs[i]
            if ids[i] is not None:
                continue  # lost a race with a concurrent import of the same ref
            memory_id = uuid.uuid4()
            at = spec.created_at or now
            target = await _resolve_target(conn, spec, by_ref, heads)
            fields = _memory_fields(spec, memory_id, principal, at, ordinals, target)
            if spec.type == "state_object":
                heads[(spec.scope, fields["state_key"])] = memory_id
            if target is not None:
                closes.append((target, memory_id, at))
            rows.append(fields)
            made[i] = fields
            row_vectors.append(vectors[position])
            entries.append(
                rawlog.Entry(
                    id=memory_id,
                    scope=spec.scope,
                    kind=spec.type,
                    operation=operation,
                    author=principal,
                    target_id=memory_id,
                    source_ref=spec.source_ref,
                    prev_source_ref=spec.prev_source_ref,
                    thread_id=spec.thread_id,
                    topic_id=spec.topic_id,
                    created_at=at,
                    payload=payloads.create(fields, closes=target),
                )
            )
            ids[i] = str(memory_id)
            if spec.source_ref:
                by_ref[(spec.scope, spec.source_ref)] = memory_id
        written = len(rows)
        for offset, (i, candidate) in enumerate(found):
            if i not in made:
                continue
            task = tasks.task_fields(candidate, made[i], uuid.uuid4(), principal)
            rows.append(task)
            row_vectors.append(vectors[len(fresh) + offset])
            entries.append(
                rawlog.Entry(
                    id=task["id"],
                    scope=task["scope"],
                    kind="task",
                    operation="derive",
                    author=principal,
                    target_id=task["id"],
                    thread_id=task["thread_id"],
                    payload=payloads.create(task),
                )
            )
        # repo.insert_memories in its parts, each timed.
        with stage("vector cache"):
            await repo.store_vectors(
                conn, [embedding_text(r["description"], r["content"]) for r in rows], row_vectors
            )
        with stage("memories insert"):
            await repo.insert_rows(conn, rows, row_vectors)
        with stage("projection"):
            await projection_repo.project(conn, [r["id"] for r in rows])
        with stage("supersede"):
            for old, new, at in closes:
                await repo.close_memory(conn, old, new, at)
        with stage("raw log"):
            await rawlog.append_many(conn, entries)
        with stage("entities"):
            await entities.link_many(
                conn, [(r["id"], r["scope"], r["description"], r["content"], r["created_at"]) for r in rows]
            )
        return written

    async def _task_candidates(
        self, specs: Sequence[RecordSpec], fresh: list[int]
    ) -> list[tuple[int, tasks.Candidate]]:
        turns = [
            (i, specs[i].scope, specs[i].thread_id or "", specs[i].content)
            for i in fresh
            if specs[i].type == "conversation"
        ]
        if not self.task_extraction or not turns:
            return []
        async with self.pool.acquire() as conn:
            known = {
                scope: await tasks.known_entities(conn, scope, [t[3] for t in turns if t[1] == scope])
                for scope in {t[1] for t in turns}
            }
        return tasks.candidates_for(turns, known)


def _memory_fields(
    spec: RecordSpec,
    memory_id: uuid.UUID,
    principal: str,
    at: datetime,
    ordinals: dict[tuple[str, str], int],
    target: uuid.UUID | None,
) -> dict[str, Any]:
    metadata = dict(spec.metadata)
    if spec.topic_id:
        metadata.setdefault("topic_id", spec.topic_id)
    ordinal = None
    if spec.type == "conversation" and spec.thread_id:
        key = (spec.scope, spec.thread_id)
        ordinal = ordinals[key]
        ordinals[key] = ordinal + 1
    kind = KIND_FOR_TYPE.get(spec.type) or spec.kind or "semantic"
    return new_memory(
        memory_id=memory_id,
        scope=spec.scope,
        owner=principal,
        kind=kind,
        content=spec.content,
        at=at,
        type=spec.type,
        description=spec.description,
        tags=list(spec.tags),
        metadata=metadata,
        importance=spec.importance,
        source_ref=spec.source_ref,
        thread_id=spec.thread_id,
        ordinal=ordinal,
        repo=spec.repo,
        supersedes=target,
        state_key=f"{spec.state_kind}/{spec.state_key}" if spec.type == "state_object" else None,
    )


async def _existing(
    conn: asyncpg.Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], uuid.UUID]:
    """(scope, source_ref) -> id of the record already holding it."""
    if not keys:
        return {}
    return await records_repo.existing_refs(conn, keys)


async def _next_ordinals(conn: asyncpg.Connection, specs: list[RecordSpec]) -> dict[tuple[str, str], int]:
    """The next turn number of every thread the batch appends to."""
    keys = sorted({(s.scope, s.thread_id) for s in specs if s.type == "conversation" and s.thread_id})
    if not keys:
        return {}
    return await records_repo.next_ordinals(conn, keys)


async def _state_heads(conn: asyncpg.Connection, specs: list[RecordSpec]) -> dict[tuple[str, str], uuid.UUID]:
    """The current memory of every (scope, state_key) the batch writes."""
    keys = sorted({(s.scope, f"{s.state_kind}/{s.state_key}") for s in specs if s.type == "state_object"})
    if not keys:
        return {}
    return await records_repo.state_heads(conn, keys)


async def _resolve_target(
    conn: asyncpg.Connection,
    spec: RecordSpec,
    by_ref: dict[tuple[str, str], uuid.UUID],
    heads: dict[tuple[str, str], uuid.UUID],
) -> uuid.UUID | None:
    """The memory this record closes: an explicit `supersedes`, or the state object's head."""
    if spec.supersedes:
        target = by_ref.get((spec.scope, spec.supersedes))
        if target is None:
            target = await _lookup_target(conn, spec.scope, spec.supersedes)
        if target is None:
            raise NotFound(
                f"supersedes {spec.supersedes!r}: no record or memory with that source_ref or id "
                f"in scope {spec.scope!r}"
            )
        return target
    if spec.type == "state_object":
        return heads.get((spec.scope, f"{spec.state_kind}/{spec.state_key}"))
    return None


async def _lookup_target(conn: asyncpg.Connection, scope: str, ref: str) -> uuid.UUID | None:
    row = await records_repo.memory_by_ref(conn, scope, ref)
    if row is None:
        try:
            memory_id = uuid.UUID(ref)
        except ValueError:
            return None
        # Only the record's own scope is searched: a correction lives beside what it corrects, and
        # an id from another scope is reported like an unknown one (its existence is not revealed).
        row = await records_repo.memory_in_scope(conn, scope, memory_id)
        if row is None:
            return None
    if row["superseded_by"] is not None:
        raise FailedPrecondition(
            f"supersedes {ref!r}: it was already superseded by {row['superseded_by']}; supersede the "
            "current version instead"
        )
    return row["id"]


async def _check_supersede_targets(
    conn: asyncpg.Connection,
    specs: Sequence[RecordSpec],
    existing: dict[tuple[str, str], uuid.UUID],
    first: dict[tuple[str, str], int],
) -> None:
    """Fail the whole batch before anything is embedded when a supersede cannot be honoured."""
    seen: set[tuple[str, str]] = set()
    targeted: set[tuple[str, str]] = set()
    for i, spec in enumerate(specs):
        where = f"records[{i}]: " if len(specs) > 1 else ""
        key_self = (spec.scope, spec.source_ref or "")
        if spec.source_ref and (key_self in existing or first[key_self] != i):
            continue  # a re-sent record is skipped whole, its supersede was honoured the first time
        if spec.supersedes:
            key = (spec.scope, spec.supersedes)
            if key in targeted and key not in existing:
                raise InvalidArgument(f"{where}{spec.supersedes!r} is superseded twice in this batch")
            if key not in seen:
                try:
                    if await _lookup_target(conn, spec.scope, spec.supersedes) is None:
                        later = first.get(key)
                        if later is not None and later > i:
                            raise InvalidArgument(
                                f"supersedes {spec.supersedes!r}, which comes later in the batch; send "
                                "records in order (a record can only correct an earlier one)"
                            )
                        raise NotFound(
                            f"supersedes {spec.supersedes!r}: no record or memory with that "
                            f"source_ref or id in scope {spec.scope!r}"
                        )
                except (InvalidArgument, NotFound, FailedPrecondition) as exc:
                    raise type(exc)(where + exc.message) from exc
            targeted.add(key)
        if spec.source_ref:
            seen.add((spec.scope, spec.source_ref))
