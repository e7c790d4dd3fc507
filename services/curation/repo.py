"""Curation's SQL over memories and the entity index (the raw-log SQL lives in rawlog.py, the
records API's reads in records_repo.py, forgetting's in lifecycle_repo.py, document ingestion's in
documents_repo.py)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from hypermnesia import validation
from hypermnesia.errors import NotFound
from hypermnesia.memory_rows import MEMORY_COLUMNS, live_sql, predecessors_sql
from hypermnesia.scopes import permits
from services.curation import memory_fields, projection_repo, rawlog
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
    conn: asyncpg.Connection, scope: str, vector: np.ndarray, limit: int
) -> list[tuple[asyncpg.Record, float]]:
    """The `limit` closest live memories in the scope, closest first, with their cosine
    similarity. The planner scans a small scope's rows exactly and walks a large scope's own HNSW
    graph (hypermnesia/scope_graphs.py): approximate, but at 10,000 rows the walk returned the
    exact nearest for 39-40 of 40 queries (2026-12-03), and a duplicate, far closer than any other
    row, is what a walk finds first. An expired working memory is not live
    (memory_rows.live_sql): a save merged into it would vanish with it."""
    rows = await conn.fetch(
        f"SELECT {MEMORY_COLUMNS}, 1 - (embedding <=> $2) AS similarity FROM memories"
        f" WHERE scope = $1 AND {live_sql()}"
        " ORDER BY embedding <=> $2 LIMIT $3",
        scope,
        vector,
        limit,
    )
    return [(row, float(row["similarity"])) for row in rows]


# Above this many rows a batch is copied into a temporary table and inserted with one statement:
# the store's statement-level triggers (retrieval's lexical statistics) then run once, not per row.
_COPY_FROM = 16


async def insert_memories(
    conn: asyncpg.Connection, rows: Sequence[Mapping[str, Any]], vectors: Sequence[np.ndarray | None]
) -> None:
    """Insert complete memories (every column of memory_fields.COLUMNS) with their vectors. Must
    run inside a transaction (the staging table lives until its commit)."""
    await store_vectors(conn, [embedding_text(r["description"], r["content"]) for r in rows], vectors)
    await insert_rows(conn, rows, vectors)
    # The 3D map's position, with the current basis, in the same transaction as the row.
    await projection_repo.project(conn, [r["id"] for r in rows])


async def insert_rows(
    conn: asyncpg.Connection, rows: Sequence[Mapping[str, Any]], vectors: Sequence[np.ndarray | None]
) -> None:
    """The memories' rows alone (insert_memories without the vector cache and the map position)."""
    args = [(*memory_fields.db_args(row), vec) for row, vec in zip(rows, vectors, strict=True)]
    if len(args) < _COPY_FROM:
        await conn.executemany(_INSERT, args)
    else:
        await _insert_many(conn, args)


async def _insert_many(conn: asyncpg.Connection, args: list[tuple[Any, ...]]) -> None:
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


async def lock_for_write(
    conn: asyncpg.Connection, grants: tuple[str, ...], memory_id_text: str
) -> asyncpg.Record:
    """Start a write to one memory the caller names: the raw log's head first (the lock order every
    writer keeps), then the memory's row. A memory outside the caller's scopes is answered as missing."""
    memory_id = validation.parse_id(memory_id_text)
    await rawlog.lock_head(conn)
    row = await lock_memory(conn, memory_id)
    if row is None or not permits(grants, row["scope"]):
        raise NotFound(f"no memory {memory_id_text} in your scopes")
    return row


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
        text = (
            embedding_text(fields["description"], fields["content"])
            if {"description", "content"} <= set(fields)
            else None
        )
        if text is None:
            current = await conn.fetchrow(
                "SELECT description, content FROM memories WHERE id = $1", memory_id
            )
            if current is not None:
                text = embedding_text(
                    fields.get("description", current["description"]),
                    fields.get("content", current["content"]),
                )
        if text is not None:
            await store_vectors(conn, [text], [vector])
    args.append(memory_id)
    await conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ${len(args)}", *args)
    if vector is not None:
        await projection_repo.project(conn, [memory_id])


async def close_memory(
    conn: asyncpg.Connection, memory_id: uuid.UUID, successor: uuid.UUID, at: datetime
) -> None:
    """Supersede: the old row stays for lineage and as-of reads, closed at `at`."""
    await conn.execute(
        "UPDATE memories SET superseded_by = $2, valid_to = $3 WHERE id = $1", memory_id, successor, at
    )


async def delete_memory(conn: asyncpg.Connection, memory_id: uuid.UUID) -> None:
    """A delete or purge: the row and, with it, every version's kept vector (an edit leaves the
    earlier text's vector behind otherwise). A rebuild's removal of an extra row keeps vectors
    (delete_memories): they are the raw layer's, reused when the row is derived again."""
    await conn.execute(
        "DELETE FROM embedding_store WHERE text_sha256 IN ("
        " SELECT hm_embedding_text_sha256(description, content) FROM memories WHERE id = $1"
        " UNION SELECT unnest(hm_version_text_hashes($1)))",
        memory_id,
    )
    await delete_memories(conn, [memory_id])


async def delete_memories(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> None:
    await conn.execute("DELETE FROM memory_entities WHERE memory_id = ANY($1::uuid[])", list(ids))
    await conn.execute("DELETE FROM memories WHERE id = ANY($1::uuid[])", list(ids))


async def curated_rows(conn: asyncpg.Connection, scopes: Sequence[str] | None) -> list[asyncpg.Record]:
    """Every memory of these scopes (all when None) with every curated column and its vector."""
    if scopes:
        return list(
            await conn.fetch(
                f"SELECT {memory_fields.SELECT_LIST}, embedding FROM memories WHERE scope = ANY($1::text[])",
                list(scopes),
            )
        )
    return list(await conn.fetch(f"SELECT {memory_fields.SELECT_LIST}, embedding FROM memories"))


async def chain_contains(conn: asyncpg.Connection, start: uuid.UUID, candidate: uuid.UUID) -> bool:
    """Whether `candidate` is `start` or one of its predecessors (walking `supersedes`)."""
    return bool(await conn.fetchval(predecessors_sql(), start, candidate))


async def embeddings_for(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    rows = await conn.fetch("SELECT id, embedding FROM memories WHERE id = ANY($1)", list(ids))
    return {r["id"]: r["embedding"] for r in rows}


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def store_vectors(conn: asyncpg.Connection, texts: Sequence[str], vectors: Sequence[Any]) -> None:
    """Keep each vector by the text it embeds (see embedding_store in 0002_curation.sql)."""
    pairs = {
        text_sha256(t): np.asarray(v, dtype="<f4").tobytes()
        for t, v in zip(texts, vectors, strict=True)
        if v is not None
    }
    if pairs:
        await conn.execute(
            "INSERT INTO embedding_store (text_sha256, vector) SELECT * FROM unnest($1::text[], $2::bytea[])"
            " ON CONFLICT DO NOTHING",
            list(pairs),
            list(pairs.values()),
        )


async def stored_vectors(conn: asyncpg.Connection, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Vectors kept for these texts (by text), where there are any."""
    by_hash = {text_sha256(t): t for t in texts}
    rows = await conn.fetch(
        "SELECT text_sha256, vector FROM embedding_store WHERE text_sha256 = ANY($1)", list(by_hash)
    )
    return {by_hash[r["text_sha256"]]: np.frombuffer(r["vector"], dtype="<f4") for r in rows}


# ---- the entity index ------------------------------------------------------------------------


async def replace_entity_links(
    conn: asyncpg.Connection, memory_id: uuid.UUID, scope: str, pairs: Sequence[tuple[str, str]], at: datetime
) -> None:
    """Link the memory to exactly these (type, name) entities of its scope, creating them as needed."""
    await conn.execute("DELETE FROM memory_entities WHERE memory_id = $1", memory_id)
    if not pairs:
        return
    await conn.execute(
        "WITH e AS ("
        "  INSERT INTO entities (scope, type, name, first_seen, last_seen)"
        "  SELECT $1, t, n, $4, $4 FROM unnest($2::text[], $3::text[]) AS x(t, n)"
        "  ON CONFLICT (scope, type, name) DO UPDATE SET last_seen = GREATEST(entities.last_seen, $4)"
        "  RETURNING id)"
        " INSERT INTO memory_entities (memory_id, entity_id) SELECT $5, id FROM e ON CONFLICT DO NOTHING",
        scope,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        at,
        memory_id,
    )


async def add_entity_links(
    conn: asyncpg.Connection, links: Sequence[tuple[uuid.UUID, str, str, str, datetime]]
) -> None:
    """Link new memories to entities: (memory id, scope, type, name, seen at) per link."""
    if not links:
        return
    memory_ids, scopes, types, names, times = (list(column) for column in zip(*links, strict=True))
    # Upsert each distinct entity once (ON CONFLICT cannot touch one row twice in a statement).
    await conn.execute(
        "INSERT INTO entities (scope, type, name, first_seen, last_seen)"
        " SELECT s, t, n, min(a), max(a) FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])"
        "   AS x(s, t, n, a) GROUP BY s, t, n"
        " ON CONFLICT (scope, type, name) DO UPDATE"
        "   SET last_seen = GREATEST(entities.last_seen, EXCLUDED.last_seen),"
        "       first_seen = LEAST(entities.first_seen, EXCLUDED.first_seen)",
        scopes,
        types,
        names,
        times,
    )
    await conn.execute(
        "INSERT INTO memory_entities (memory_id, entity_id)"
        " SELECT x.m, e.id FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS x(m, s, t, n)"
        " JOIN entities e ON e.scope = x.s AND e.type = x.t AND e.name = x.n ON CONFLICT DO NOTHING",
        memory_ids,
        scopes,
        types,
        names,
    )


async def known_entities(
    conn: asyncpg.Connection, scope: str, wanted: Sequence[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Which of these (type, name) entities the scope's index holds."""
    rows = await conn.fetch(
        "SELECT e.type, e.name FROM entities e JOIN unnest($2::text[], $3::text[]) AS w(t, n)"
        " ON e.type = w.t AND e.name = w.n WHERE e.scope = $1",
        scope,
        [w[0] for w in wanted],
        [w[1] for w in wanted],
    )
    return {(r["type"], r["name"]) for r in rows}
