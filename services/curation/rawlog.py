"""The append-only raw log and its sha256 chain along `seq`.

record_hash = sha256(canonical row + "\\n" + content_sha256 + "\\n" + record_hash at seq-1). The
payload text is stored beside the row (record_texts), and only its hash is chained, so a purge
can erase the text while the chain still verifies.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hypermnesia.times import iso_exact

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def row_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the hash covers, in a form that round-trips through Postgres exactly."""
    return {
        "id": str(row["id"]),
        "seq": int(row["seq"]),
        "scope": row["scope"],
        "kind": row["kind"],
        "operation": row["operation"],
        "target_id": str(row["target_id"]) if row["target_id"] else None,
        "author": row["author"],
        "source_ref": row["source_ref"],
        "prev_source_ref": row["prev_source_ref"],
        "thread_id": row["thread_id"],
        "topic_id": row["topic_id"],
        "created_at": iso_exact(row["created_at"]),
    }


def compute_hash(row: Mapping[str, Any], content_sha256: str, prev_hash: str) -> str:
    material = canonical_json(row_fields(row)) + "\n" + content_sha256 + "\n" + prev_hash
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class Appended:
    id: uuid.UUID
    seq: int
    record_hash: str


@dataclass
class Entry:
    """One record to append. `id` may be chosen by the caller: a record that creates a memory
    shares its id with that memory, so `/records/{id}` and the memory are found by one id."""

    scope: str
    kind: str
    operation: str
    author: str
    payload: Mapping[str, Any]
    target_id: uuid.UUID | None = None
    source_ref: str | None = None
    prev_source_ref: str | None = None
    thread_id: str | None = None
    topic_id: str | None = None
    created_at: datetime | None = None
    id: uuid.UUID | None = None


# A batch's records and their texts, one statement each: a column array per field (unnest), so
# an import of hundreds of records costs two round trips, not two per record.
_INSERT_RECORDS = (
    "INSERT INTO records (id, seq, scope, kind, operation, target_id, author, source_ref,"
    " prev_source_ref, thread_id, topic_id, created_at, content_sha256, record_hash)"
    " SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::uuid[],"
    " $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::text[], $14::text[])"
)
_INSERT_TEXTS = "INSERT INTO record_texts (record_id, payload) SELECT * FROM unnest($1::uuid[], $2::text[])"


async def lock_head(conn: asyncpg.Connection) -> None:
    """Take the chain head now (held until commit). Every write transaction takes it before any
    memory row, so two writers never wait on each other in opposite orders (no deadlocks), and an
    importer re-checks source_refs under the same lock that orders its appends."""
    await conn.execute("SELECT 1 FROM record_chain FOR UPDATE")


async def append_many(conn: asyncpg.Connection, entries: list[Entry]) -> list[Appended]:
    """Append records in order inside the caller's transaction. Locks the chain head until
    commit, so concurrent writers get gapless seqs and one linear chain."""
    if not entries:
        return []
    head = await conn.fetchrow("SELECT last_seq, last_hash FROM record_chain FOR UPDATE")
    seq, prev_hash = int(head["last_seq"]), str(head["last_hash"])
    now = datetime.now(UTC)
    record_rows: list[tuple[Any, ...]] = []
    text_rows: list[tuple[uuid.UUID, str]] = []
    out: list[Appended] = []
    for entry in entries:
        seq += 1
        text = canonical_json(entry.payload)
        content_sha256 = hashlib.sha256(text.encode()).hexdigest()
        row: dict[str, Any] = {
            "id": entry.id or uuid.uuid4(),
            "seq": seq,
            "scope": entry.scope,
            "kind": entry.kind,
            "operation": entry.operation,
            "target_id": entry.target_id,
            "author": entry.author,
            "source_ref": entry.source_ref,
            "prev_source_ref": entry.prev_source_ref,
            "thread_id": entry.thread_id,
            "topic_id": entry.topic_id,
            "created_at": entry.created_at or now,
        }
        prev_hash = compute_hash(row, content_sha256, prev_hash)
        record_rows.append((*row.values(), content_sha256, prev_hash))
        text_rows.append((row["id"], text))
        out.append(Appended(row["id"], seq, prev_hash))
    await conn.execute(_INSERT_RECORDS, *(list(column) for column in zip(*record_rows, strict=True)))
    await conn.execute(_INSERT_TEXTS, *(list(column) for column in zip(*text_rows, strict=True)))
    await conn.execute("UPDATE record_chain SET last_seq = $1, last_hash = $2", seq, prev_hash)
    return out


async def append(conn: asyncpg.Connection, **fields: Any) -> Appended:
    """Append one record (fields as in Entry) inside the caller's transaction."""
    (appended,) = await append_many(conn, [Entry(**fields)])
    return appended


@dataclass(frozen=True)
class VerifyResult:
    checked: int
    first_broken_seq: int | None
    reason: str


async def verify(conn: asyncpg.Connection, batch: int = 5000, progress: Any = None) -> VerifyResult:
    """Walk the chain in seq order; name the first seq whose hash or linkage does not hold."""
    prev_hash = GENESIS_HASH
    expected_seq = 1
    checked = 0
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        cursor = conn.cursor(
            "SELECT r.*, t.payload FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
            " ORDER BY r.seq",
            prefetch=batch,
        )
        async for row in cursor:
            if row["seq"] != expected_seq:
                return VerifyResult(checked, expected_seq, f"seq {expected_seq} is missing")
            if compute_hash(row, row["content_sha256"], prev_hash) != row["record_hash"]:
                return VerifyResult(checked, row["seq"], "record_hash does not match the row")
            # A purged record has no text; any text still present must be the text that was hashed.
            payload = row["payload"]
            if payload is not None and hashlib.sha256(payload.encode()).hexdigest() != row["content_sha256"]:
                return VerifyResult(
                    checked, row["seq"], "the record's text does not match its content_sha256"
                )
            prev_hash = row["record_hash"]
            expected_seq += 1
            checked += 1
            if progress is not None:
                progress.update(1)
        head = await conn.fetchrow("SELECT last_seq, last_hash FROM record_chain")
        if head["last_seq"] != checked or head["last_hash"] != prev_hash:
            return VerifyResult(checked, checked + 1, "the chain head does not match the last record")
    return VerifyResult(checked, None, "ok")
