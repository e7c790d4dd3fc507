"""The SQL of curation's maintenance work (services/curation/admin.py): counts for progress bars,
the purge's erasure, the export's cursor, the import's existence check and the reindex's column swap.

The memory table's own writes (insert, lock, delete) stay in services/curation/repo.py; the raw
log's in services/curation/rawlog.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from services.curation import memory_fields

__all__ = [
    "count_memories",
    "count_records",
    "delete_kept_vectors",
    "delete_record_texts",
    "existing_memory_ids",
    "lock_out_writers",
    "memories_for_export",
    "move_pin",
    "record_ids_about",
    "record_payloads",
    "records_scope",
    "reset_kept_vectors",
    "rows_to_embed",
    "swap_vector_column",
]


async def count_records(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM records"))


async def count_memories(conn: asyncpg.Connection | asyncpg.Pool, scopes: Sequence[str] | None = None) -> int:
    if scopes:
        return int(
            await conn.fetchval("SELECT count(*) FROM memories WHERE scope = ANY($1::text[])", list(scopes))
        )
    return int(await conn.fetchval("SELECT count(*) FROM memories"))


# ---- purge -----------------------------------------------------------------------------------


async def record_ids_about(conn: asyncpg.Connection, memory_id: uuid.UUID) -> list[uuid.UUID]:
    """Every record that is or targets this memory, except earlier purges (they hold no text)."""
    rows = await conn.fetch(
        "SELECT id FROM records WHERE (target_id = $1 OR id = $1) AND operation <> 'purge'", memory_id
    )
    return [r["id"] for r in rows]


async def records_scope(conn: asyncpg.Connection, record_ids: Sequence[uuid.UUID]) -> str | None:
    return await conn.fetchval("SELECT scope FROM records WHERE id = ANY($1) LIMIT 1", list(record_ids))


async def record_payloads(conn: asyncpg.Connection, record_ids: Sequence[uuid.UUID]) -> list[str]:
    """The texts (JSON payloads) of these records, in log order."""
    rows = await conn.fetch(
        "SELECT t.payload FROM record_texts t JOIN records r ON r.id = t.record_id"
        " WHERE t.record_id = ANY($1) ORDER BY r.seq",
        list(record_ids),
    )
    return [r["payload"] for r in rows]


async def delete_record_texts(conn: asyncpg.Connection, record_ids: Sequence[uuid.UUID]) -> None:
    await conn.execute("DELETE FROM record_texts WHERE record_id = ANY($1)", list(record_ids))


async def delete_kept_vectors(conn: asyncpg.Connection, text_hashes: Sequence[str]) -> None:
    await conn.execute("DELETE FROM embedding_store WHERE text_sha256 = ANY($1)", list(text_hashes))


# ---- export / import -------------------------------------------------------------------------


async def memories_for_export(
    conn: asyncpg.Connection, scopes: Sequence[str] | None
) -> AsyncIterator[asyncpg.Record]:
    """Every memory (archived and superseded too) in creation order, streamed; run it inside a
    read-only repeatable-read transaction for one consistent snapshot."""
    where = " WHERE scope = ANY($1::text[])" if scopes else ""
    sql = f"SELECT {memory_fields.SELECT_LIST} FROM memories{where} ORDER BY created_at, id"
    async for row in conn.cursor(sql, *([list(scopes)] if scopes else []), prefetch=1000):
        yield row


async def existing_memory_ids(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    return {r["id"] for r in await conn.fetch("SELECT id FROM memories WHERE id = ANY($1)", list(ids))}


# ---- reindex ---------------------------------------------------------------------------------


async def lock_out_writers(conn: asyncpg.Connection, table: str) -> None:
    """Block writes to `table` (reads go on) until the transaction ends."""
    await conn.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")


async def rows_to_embed(conn: asyncpg.Connection, table: str) -> list[asyncpg.Record]:
    """id, description and content of every row of a vector table."""
    return list(await conn.fetch(f"SELECT id, description, content FROM {table}"))


async def swap_vector_column(
    conn: asyncpg.Connection, table: str, dimension: int, vectors: Sequence[tuple[uuid.UUID, Any]]
) -> None:
    """Replace `table`'s embedding column (and its HNSW index) with one of `dimension` holding
    `vectors` (id, vector); any dimension works because the column is rebuilt, not updated."""
    await conn.execute(f"ALTER TABLE {table} ADD COLUMN embedding_next vector({int(dimension)})")
    # As hypermnesia.pin.add_vector_column: inline, not TOASTed, so distance scans stay fast.
    await conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding_next SET STORAGE MAIN")
    await conn.executemany(f"UPDATE {table} SET embedding_next = $2 WHERE id = $1", list(vectors))
    await conn.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS embedding")  # and its HNSW index
    await conn.execute(f"ALTER TABLE {table} RENAME COLUMN embedding_next TO embedding")
    await conn.execute(
        f"CREATE INDEX {table}_embedding_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
    )


async def reset_kept_vectors(conn: asyncpg.Connection) -> None:
    """Forget every kept vector: after a reindex only the new model's vectors may stay."""
    await conn.execute("TRUNCATE embedding_store")


async def move_pin(conn: asyncpg.Connection, model_id: str, dimension: int) -> None:
    updated = await conn.execute(
        "UPDATE embedding_pin SET model_id = $1, dimension = $2, pinned_at = now()", model_id, dimension
    )
    if updated == "UPDATE 0":
        await conn.execute(
            "INSERT INTO embedding_pin (model_id, dimension) VALUES ($1, $2)", model_id, dimension
        )
