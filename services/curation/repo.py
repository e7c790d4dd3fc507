"""Curation's SQL over memories (the raw-log SQL lives in rawlog.py, the records API's reads in
records_repo.py)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from hypermnesia.memory_rows import MEMORY_COLUMNS
from services.curation import memory_fields
from services.curation.embedding import embedding_text

_INSERT = (
    f"INSERT INTO memories ({memory_fields.SELECT_LIST}, embedding) VALUES ("
    + ", ".join(
        f"${i}::jsonb" if name == "metadata" else f"${i}"
        for i, name in enumerate(memory_fields.COLUMNS, start=1)
    )
    + f", ${len(memory_fields.COLUMNS) + 1})"
)


async def nearest_active(
    conn: asyncpg.Connection, scope: str, vector: np.ndarray
) -> tuple[asyncpg.Record, float] | None:
    """The closest live memory in the scope and its cosine similarity (exact scan within the
    scope's rows, so dedupe never misses a duplicate the ANN index would skip)."""
    row = await conn.fetchrow(
        f"SELECT {MEMORY_COLUMNS}, 1 - (embedding <=> $2) AS similarity FROM memories"
        " WHERE scope = $1 AND archived_at IS NULL AND superseded_by IS NULL"
        " ORDER BY embedding <=> $2 LIMIT 1",
        scope,
        vector,
    )
    return (row, float(row["similarity"])) if row else None


# Above this many rows a batch is copied into a temporary table and inserted with one statement:
# the store's statement-level triggers (retrieval's lexical statistics) then run once, not per row.
_COPY_FROM = 16


async def insert_memories(
    conn: asyncpg.Connection, rows: Sequence[Mapping[str, Any]], vectors: Sequence[np.ndarray | None]
) -> None:
    """Insert complete memories (every column of memory_fields.COLUMNS) with their vectors. Must
    run inside a transaction (the staging table lives until its commit)."""
    args = [(*memory_fields.db_args(row), vec) for row, vec in zip(rows, vectors, strict=True)]
    await store_vectors(conn, [embedding_text(r["description"], r["content"]) for r in rows], vectors)
    if len(args) < _COPY_FROM:
        await conn.executemany(_INSERT, args)
        return
    columns = [*memory_fields.COLUMNS, "embedding"]
    await conn.execute(
        "CREATE TEMP TABLE memories_incoming ON COMMIT DROP AS"
        f" SELECT {', '.join(columns)} FROM memories WITH NO DATA"
    )
    await conn.copy_records_to_table("memories_incoming", records=args, columns=columns)
    await conn.execute(
        f"INSERT INTO memories ({', '.join(columns)}) SELECT {', '.join(columns)} FROM memories_incoming;"
        " DROP TABLE memories_incoming"
    )


async def fetch_memory(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1", memory_id)


async def fetch_full(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    """Every curated column (the wider set of memory_fields), without the vector."""
    return await conn.fetchrow(f"SELECT {memory_fields.SELECT_LIST} FROM memories WHERE id = $1", memory_id)


async def lock_memory(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {memory_fields.SELECT_LIST} FROM memories WHERE id = $1 FOR UPDATE", memory_id
    )


async def update_memory(
    conn: asyncpg.Connection, memory_id: uuid.UUID, fields: Mapping[str, Any], vector: np.ndarray | None
) -> None:
    """Set the given curated columns (and the vector when the text changed)."""
    sets, args = [], []
    for name, value in fields.items():
        args.append(memory_fields.db_value(name, value))
        sets.append(f"{name} = ${len(args)}" + ("::jsonb" if name == "metadata" else ""))
    if vector is not None:
        args.append(vector)
        sets.append(f"embedding = ${len(args)}")
        text = embedding_text(fields["description"], fields["content"]) if {"description", "content"} <= set(fields) else None
        if text is None:
            current = await conn.fetchrow("SELECT description, content FROM memories WHERE id = $1", memory_id)
            if current is not None:
                text = embedding_text(fields.get("description", current["description"]),
                                      fields.get("content", current["content"]))
        if text is not None:
            await store_vectors(conn, [text], [vector])
    args.append(memory_id)
    await conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ${len(args)}", *args)


async def close_memory(conn: asyncpg.Connection, memory_id: uuid.UUID, successor: uuid.UUID, at: datetime) -> None:
    """Supersede: the old row stays for lineage and as-of reads, closed at `at`."""
    await conn.execute(
        "UPDATE memories SET superseded_by = $2, valid_to = $3 WHERE id = $1", memory_id, successor, at
    )


async def delete_memory(conn: asyncpg.Connection, memory_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM memory_entities WHERE memory_id = $1", memory_id)
    await conn.execute("DELETE FROM memories WHERE id = $1", memory_id)


async def chain_contains(conn: asyncpg.Connection, start: uuid.UUID, candidate: uuid.UUID) -> bool:
    """Whether `candidate` is `start` or one of its predecessors (walking `supersedes`)."""
    found = await conn.fetchval(
        "WITH RECURSIVE chain(id, depth) AS ("
        "  SELECT id, 0 FROM memories WHERE id = $1"
        "  UNION ALL SELECT m.supersedes, c.depth + 1 FROM chain c JOIN memories m ON m.id = c.id"
        "  WHERE m.supersedes IS NOT NULL AND c.depth < 100000"
        ") CYCLE id SET is_cycle USING path"
        " SELECT bool_or(id = $2) FROM chain",
        start,
        candidate,
    )
    return bool(found)


async def embeddings_for(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    rows = await conn.fetch("SELECT id, embedding FROM memories WHERE id = ANY($1)", list(ids))
    return {r["id"]: r["embedding"] for r in rows}


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def store_vectors(conn: asyncpg.Connection, texts: Sequence[str], vectors: Sequence[Any]) -> None:
    """Keep each vector by the text it embeds (see embedding_store in 0002_curation.sql)."""
    pairs = {text_sha256(t): np.asarray(v, dtype="<f4").tobytes() for t, v in zip(texts, vectors, strict=True)
             if v is not None}
    if pairs:
        await conn.execute(
            "INSERT INTO embedding_store (text_sha256, vector) SELECT * FROM unnest($1::text[], $2::bytea[])"
            " ON CONFLICT DO NOTHING",
            list(pairs), list(pairs.values()),
        )


async def stored_vectors(conn: asyncpg.Connection, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Vectors kept for these texts (by text), where there are any."""
    by_hash = {text_sha256(t): t for t in texts}
    rows = await conn.fetch(
        "SELECT text_sha256, vector FROM embedding_store WHERE text_sha256 = ANY($1)", list(by_hash))
    return {by_hash[r["text_sha256"]]: np.frombuffer(r["vector"], dtype="<f4") for r in rows}
