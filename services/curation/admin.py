"""Curation's maintenance work behind the admin commands: verify, purge, export, import, reindex.

These run on the server host with direct database access and the same HM_* settings as the stack
(with no HM_DATABASE_URL, the embedded Postgres of HM_DATA_DIR, running or not). Re-embedding uses
the encoder the caller passes (the `hypermnesia` command runs the model in-process: tooling/encoder.py),
so none of them needs the embedder service. Their SQL is in services/curation/maintenance_repo.py.
"""

from __future__ import annotations

import getpass
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, Protocol

import asyncpg
import numpy as np

from hypermnesia import validation
from hypermnesia.embedded_pg import resolve_database_url
from hypermnesia.errors import InvalidArgument, NotFound, StartupError
from hypermnesia.kinds import DECAY_CLASS_FOR_KIND, DEFAULT_IMPORTANCE, DEFAULT_TYPE
from hypermnesia.migrator import migrate
from hypermnesia.pin import VECTOR_TABLES, ensure_embedding_pin, read_pin
from hypermnesia.pool import connect_pool
from hypermnesia.secrets import Redaction, RedactMode, Redactor
from hypermnesia.settings import CurationSettings
from hypermnesia.times import iso_exact
from hypermnesia.wording import count
from services.curation import entities, maintenance_repo, memory_fields, payloads, rawlog, repo
from services.curation.embedding import embedding_text

log = logging.getLogger(__name__)

# Vector tables reindex knows how to embed: their rows are embedded as embedding_text(description, content).
REINDEX_TABLES = ("memories",)


def admin_principal() -> str:
    try:
        return f"admin:{getpass.getuser()}"
    except (KeyError, OSError):
        return "admin"


@asynccontextmanager
async def open_pool(settings: CurationSettings) -> AsyncIterator[asyncpg.Pool]:
    url, embedded = resolve_database_url(
        settings.database_url, settings.data_dir, settings.pg_shared_buffers_mb
    )
    pool = await connect_pool(url, max_size=4)
    try:
        await migrate(pool)
        yield pool
    finally:
        await pool.close()
        log.debug("closed the store (embedded server: %s)", embedded is not None)


class Encoder(Protocol):
    """What the maintenance work needs of a model: the admin command passes its in-process encoder
    (tooling/encoder.py), so these run with no embedder service."""

    model_id: str
    dimension: int

    async def embed(self, texts: list[str], on_batch: Callable[[int], None] | None = None) -> np.ndarray: ...


async def require_pin(pool: asyncpg.Pool, encoder: Encoder) -> None:
    """Vectors written now must be comparable with the stored ones."""
    pin = await read_pin(pool)
    if pin is None:
        await ensure_embedding_pin(pool, encoder.model_id, encoder.dimension)
    elif pin != (encoder.model_id, encoder.dimension):
        raise StartupError(
            f"the store is pinned to {pin[0]} ({pin[1]} dims) but HM_EMBEDDING_MODEL_DIR gives "
            f"{encoder.model_id} ({encoder.dimension} dims); run `hypermnesia reindex` first or point it back"
        )


# ---- verify / purge -------------------------------------------------------------------------


async def verify(pool: asyncpg.Pool, progress: Any = None) -> rawlog.VerifyResult:
    async with pool.acquire() as conn:
        return await rawlog.verify(conn, progress=progress)


async def purge(pool: asyncpg.Pool, memory_id_text: str, principal: str) -> int:
    """GDPR erasure: remove the memory and the text of every record about it; the chain still
    verifies (it covers content hashes, not texts). Audited by a purge record. Returns the number
    of records whose text was removed."""
    try:
        memory_id = uuid.UUID(memory_id_text)
    except ValueError as exc:
        raise InvalidArgument(f"{memory_id_text!r} is not a memory id (a UUID)") from exc
    async with pool.acquire() as conn, conn.transaction():
        await rawlog.lock_head(conn)
        row = await repo.lock_memory(conn, memory_id)
        record_ids = await maintenance_repo.record_ids_about(conn, memory_id)
        if row is None and not record_ids:
            raise NotFound(f"no memory or record {memory_id_text}")
        scope = row["scope"] if row is not None else await maintenance_repo.records_scope(conn, record_ids)
        assert scope is not None, "a memory's records have its scope"
        removed = await maintenance_repo.record_payloads(conn, record_ids)
        await maintenance_repo.delete_record_texts(conn, record_ids)
        # Vectors are derived from the text and could leak it: erase every version's vector too.
        texts = payloads.embedded_texts([json.loads(payload) for payload in removed])
        if row is not None:
            texts.append(embedding_text(row["description"], row["content"]))
        vector_hashes = sorted(
            {repo.text_sha256(t) for t in texts} | set(await _purged_hashes(conn, memory_id))
        )
        await maintenance_repo.delete_kept_vectors(conn, vector_hashes)
        reclose = None
        if row is not None and row["supersedes"] is not None:
            predecessor = await repo.fetch_full(conn, row["supersedes"])
            if predecessor is not None and predecessor["superseded_by"] == memory_id:
                reclose = {
                    "id": str(predecessor["id"]),
                    "valid_to": iso_exact(predecessor["valid_to"]),
                }
        if row is not None:
            # The delete trigger (migration 0023) takes its df counts, kept vector, own evidence
            # edges, orphaned entities and map position with it; its conclusions go stale.
            await repo.delete_memory(conn, memory_id)
        blanked = await maintenance_repo.forget_leftovers(conn, memory_id, scope)
        now = datetime.now(UTC)
        # The purge record keeps the hashes of the erased vectors (no text) so that
        # `verify --forgotten` can still look for them once the texts are gone.
        await rawlog.append(
            conn,
            scope=scope,
            kind="memory",
            operation="purge",
            author=principal,
            target_id=memory_id,
            payload=payloads.event(
                "purge",
                memory_id,
                now,
                records=len(removed),
                reclose=reclose,
                vectors=vector_hashes,
                proposals_blanked=blanked,
            ),
        )
    log.warning(
        "purged %s: removed the text of %d records (audited as a purge record)", memory_id, len(removed)
    )
    return len(removed)


async def _purged_hashes(conn: asyncpg.Connection, memory_id: uuid.UUID) -> list[str]:
    """The vector hashes an earlier purge of this memory recorded (a second purge keeps them)."""
    payload = await maintenance_repo.purge_record(conn, memory_id)
    return list(json.loads(payload).get("vectors") or []) if payload else []


# Where a memory's content can live besides its row, and what each place holds once it is
# forgotten. `by design` places are kept by a delete (the history stays in the raw log; a purge
# erases them) and only count against a purged memory.
KEPT_BY_DELETE = ("raw log texts", "proposals quoting it", "proposal record texts")
INFORMATION = (
    "search log: holds the queries people typed (never memory text); hits are not stored",
    "context caches: none is persisted; the retrieval service's in-process read cache expires in seconds",
)


@dataclass
class ForgottenReport:
    memory_id: str
    state: str  # "purged", "deleted" or "present"
    places: dict[str, int]
    kept_by_design: dict[str, int]

    @property
    def holding(self) -> dict[str, int]:
        return {k: v for k, v in self.places.items() if v}

    def lines(self) -> list[str]:
        out = [f"memory {self.memory_id}: {self.state}"]
        for place, held in self.places.items():
            out.append(f"  {place:<30} {'HOLDS ' + str(held) if held else 'clean'}")
        for place, kept in self.kept_by_design.items():
            if kept:
                out.append(
                    f"  {place:<30} kept by design: {kept} (a delete keeps the history; purge erases it)"
                )
        out += [f"  {line}" for line in INFORMATION]
        return out


async def forgotten(pool: asyncpg.Pool, memory_id_text: str) -> ForgottenReport:
    """Check every place derived content can live for this memory; counts only, no text."""
    try:
        memory_id = uuid.UUID(memory_id_text)
    except ValueError as exc:
        raise InvalidArgument(f"{memory_id_text!r} is not a memory id (a UUID)") from exc
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        record_ids = await maintenance_repo.record_ids_about(conn, memory_id)
        row = await repo.fetch_full(conn, memory_id)
        purge = await maintenance_repo.purge_record(conn, memory_id)
        if row is None and not record_ids and purge is None:
            raise NotFound(f"no memory or record {memory_id_text}")
        scope = (
            row["scope"]
            if row is not None
            else await conn.fetchval(
                "SELECT scope FROM records WHERE target_id = $1 OR id = $1 LIMIT 1", memory_id
            )
        )
        texts = payloads.embedded_texts(
            [json.loads(p) for p in await maintenance_repo.record_payloads(conn, record_ids)]
        )
        if row is not None:
            texts.append(embedding_text(row["description"], row["content"]))
        hashes = sorted({repo.text_sha256(t) for t in texts} | set(await _purged_hashes(conn, memory_id)))
        places = await maintenance_repo.forgotten_places(conn, memory_id, scope, hashes)
    state = "purged" if purge is not None else ("present" if row is not None else "deleted")
    kept = {}
    if state == "deleted":
        kept = {k: places.pop(k) for k in KEPT_BY_DELETE}
    return ForgottenReport(str(memory_id), state, places, kept)


# ---- export / import ------------------------------------------------------------------------


async def export(pool: asyncpg.Pool, out: IO[str], scopes: list[str] | None, progress: Any = None) -> int:
    """Every memory (archived and superseded included) as JSONL, without vectors."""
    count = 0
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        async for row in maintenance_repo.memories_for_export(conn, scopes):
            out.write(json.dumps(memory_fields.to_json(row), ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
            if progress is not None:
                progress.update(1)
    return count


@dataclass
class ImportReport:
    read: int = 0
    imported: int = 0  # a dry run: what it would import
    skipped: int = 0
    bad_lines: list[str] = field(default_factory=list)
    dry_run: bool = False
    scopes: set[str] = field(default_factory=set)  # of the memories imported
    # The secrets masked in the lines read (HM_REDACT=mask).
    redacted: Redaction = field(default_factory=Redaction)

    def summary(self) -> str:
        if self.dry_run:
            done = f"would import {self.imported}, would skip {self.skipped} existing"
        else:
            done = f"imported {self.imported}, skipped {self.skipped} existing"
        masked = ""
        if self.redacted.count:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.redacted.kinds.items()))
            masked = f"; {count(self.redacted.count, 'secret')} masked ({kinds})"
        return f"read {count(self.read, 'line')}: {done}, {len(self.bad_lines)} malformed{masked}"


_REQUIRED = ("id", "scope", "content", "owner_id", "kind", "created_at")


def parse_line(number: int, line: str) -> dict[str, Any]:
    """One dump line as curated columns; InvalidArgument names the line and what is wrong."""
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in _REQUIRED if not data.get(k)]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        fields = memory_fields.from_json(data)
        validation.check_scope(fields["scope"])
        validation.check_content(fields["content"])
        validation.check_kind(fields["kind"])
        fields["tags"] = validation.check_tags(list(fields.get("tags") or []))
        for name in ("updated_at", "last_accessed_at", "valid_from"):
            fields[name] = fields[name] or fields["created_at"]
        fields["type"] = fields["type"] or DEFAULT_TYPE
        fields["description"] = fields["description"] or ""
        fields["importance"] = DEFAULT_IMPORTANCE if fields["importance"] is None else fields["importance"]
        fields["decay_class"] = fields["decay_class"] or DECAY_CLASS_FOR_KIND[fields["kind"]]
        if not isinstance(fields.get("metadata") or {}, dict):
            raise ValueError("metadata is not an object")
    except (ValueError, TypeError, InvalidArgument) as exc:
        message = exc.message if isinstance(exc, InvalidArgument) else str(exc)
        raise InvalidArgument(f"line {number}: {message}") from exc
    return fields


async def import_dump(
    pool: asyncpg.Pool,
    encoder: Encoder | None,
    lines: Iterable[str],
    principal: str,
    progress: Any = None,
    batch: int = 500,
    dry_run: bool = False,
    redact: RedactMode = "mask",
) -> ImportReport:
    """Restore a dump: re-embed, keep ids and timestamps, skip ids that exist (idempotent). A dry
    run checks every line and counts what would be imported, and writes nothing. Secrets are
    handled as HM_REDACT says (`redact`): masked, or the line refused like a malformed one."""
    report = ImportReport(dry_run=dry_run)
    scan = Redactor(redact)
    pending: list[dict[str, Any]] = []

    async def flush() -> None:
        if not pending:
            return
        async with pool.acquire() as conn:
            have = await maintenance_repo.existing_memory_ids(conn, [f["id"] for f in pending])
        fresh = [f for f in pending if f["id"] not in have]
        if dry_run:
            report.imported += len(fresh)
            report.skipped += len(pending) - len(fresh)
            if progress is not None:
                progress.update(len(pending))
            pending.clear()
            return
        assert encoder is not None, "an import that writes needs an encoder"
        vectors = await encoder.embed([embedding_text(f["description"], f["content"]) for f in fresh])
        async with pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            have |= await maintenance_repo.existing_memory_ids(conn, [f["id"] for f in fresh])
            keep = [(f, v) for f, v in zip(fresh, vectors, strict=True) if f["id"] not in have]
            await repo.insert_memories(conn, [f for f, _ in keep], [v for _, v in keep])
            await rawlog.append_many(
                conn,
                [
                    rawlog.Entry(
                        scope=f["scope"],
                        kind="memory",
                        operation="import",
                        author=principal,
                        target_id=f["id"],
                        source_ref=None,
                        thread_id=f["thread_id"],
                        payload=payloads.create(f),
                    )
                    for f, _ in keep
                ],
            )
            await entities.link_many(
                conn,
                [(f["id"], f["scope"], f["description"], f["content"], f["created_at"]) for f, _ in keep],
            )
        report.imported += len(keep)
        report.scopes.update(f["scope"] for f, _ in keep)
        report.skipped += len(pending) - len(keep)
        if progress is not None:
            progress.update(len(pending))
        pending.clear()

    seen: set[uuid.UUID] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        report.read += 1
        try:
            fields = parse_line(number, line)
            _redact_fields(fields, scan, f"line {number}: ")
        except InvalidArgument as exc:
            report.bad_lines.append(exc.message)
            continue
        if fields["id"] in seen:
            report.skipped += 1
            continue
        seen.add(fields["id"])
        pending.append(fields)
        if len(pending) >= batch:
            await flush()
    await flush()
    report.redacted = scan.report
    return report


def _redact_fields(fields: dict[str, Any], scan: Redactor, where: str) -> None:
    """HM_REDACT applied, in place, to a dump line's free texts."""
    for name in ("content", "description", "type"):
        if fields.get(name):
            fields[name] = scan.text(fields[name], where + name)
    fields["tags"] = scan.texts(list(fields.get("tags") or []), where + "tags")
    if fields.get("metadata"):
        fields["metadata"] = scan.value(fields["metadata"], where + "metadata")


# ---- reindex --------------------------------------------------------------------------------


async def reindex(pool: asyncpg.Pool, encoder: Encoder, progress: Any = None) -> int:
    """Re-embed every vector table with the encoder's model; swap each vector column + HNSW index
    and the model pin in one transaction (a different dimension works). Writers wait meanwhile."""
    unknown = [t for t in VECTOR_TABLES if t not in REINDEX_TABLES]
    if unknown:
        raise StartupError(f"reindex does not know how to embed rows of {', '.join(unknown)}")
    total = 0
    async with pool.acquire() as conn, conn.transaction():
        await rawlog.lock_head(conn)  # no write lands mid-swap
        for table in VECTOR_TABLES:
            await maintenance_repo.lock_out_writers(conn, table)
            rows = await maintenance_repo.rows_to_embed(conn, table)
            texts = [embedding_text(r["description"], r["content"]) for r in rows]
            vectors = await encoder.embed(texts, progress.update if progress else None)
            await maintenance_repo.swap_vector_column(
                conn, table, encoder.dimension, [(r["id"], v) for r, v in zip(rows, vectors, strict=True)]
            )
            total += len(rows)
            if table == "memories":
                # The kept vectors follow the pin: only the new model's vectors may stay.
                await maintenance_repo.reset_kept_vectors(conn)
                await repo.store_vectors(conn, texts, list(vectors))
        await maintenance_repo.move_pin(conn, encoder.model_id, encoder.dimension)
    return total
