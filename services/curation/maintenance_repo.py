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
    "forget_leftovers",
    "forgotten_places",
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


async def forget_leftovers(conn: asyncpg.Connection, memory_id: uuid.UUID, scope: str) -> int:
    """What the memory row's delete trigger (migration 0023) cannot reach, or did not when the
    memory was deleted before it existed: its own evidence edges, orphaned entities, df-0 terms,
    and the text of the Dreamer's proposals that quote it (and of their records). Returns how
    many proposals were blanked."""
    await conn.execute("DELETE FROM evidence_edges WHERE derived_id = $1", memory_id)
    await conn.execute(
        "DELETE FROM entities e WHERE e.scope = $1"
        " AND NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id)",
        scope,
    )
    await conn.execute("DELETE FROM lexical_df WHERE scope = $1 AND df <= 0", scope)
    proposals = await conn.fetch(
        "UPDATE proposals SET content = '', description = '',"
        " rationale = 'removed: it quoted purged memory ' || $1::text"
        " WHERE ($1 = ANY(evidence) OR result_id = $1) AND (content <> '' OR description <> '')"
        " RETURNING id",
        memory_id,
    )
    ids = [r["id"] for r in proposals]
    if ids:
        await conn.execute(
            "DELETE FROM record_texts t USING records r WHERE r.id = t.record_id AND r.target_id = ANY($1)",
            ids,
        )
    if await conn.fetchval("SELECT to_regclass('memory_positions') IS NOT NULL"):
        await conn.execute("DELETE FROM memory_positions WHERE memory_id = $1", memory_id)
    return len(ids)


async def forgotten_places(
    conn: asyncpg.Connection, memory_id: uuid.UUID, scope: str, vector_hashes: Sequence[str]
) -> dict[str, Any]:
    """How much of the memory each derived place still holds (0 everywhere = forgotten). Counts
    only: nothing here returns a word of the text."""
    lexical = await conn.fetchrow(
        "WITH actual AS ("
        "  SELECT t.term, count(*) AS df FROM memories m, unnest(tsvector_to_array(m.search_tsv)) AS t(term)"
        "  WHERE m.scope = $1 GROUP BY t.term)"
        " SELECT count(*) FILTER (WHERE a.df IS NULL) AS orphan_terms,"
        "        count(*) FILTER (WHERE a.df IS NOT NULL AND d.df > a.df) AS overcounted"
        " FROM lexical_df d LEFT JOIN actual a ON a.term = d.term WHERE d.scope = $1",
        scope,
    )
    docs = await conn.fetchrow(
        "SELECT s.docs - (SELECT count(*) FROM memories WHERE scope = $1) AS extra_docs,"
        " s.total_len - (SELECT coalesce(sum(lex_len), 0) FROM memories WHERE scope = $1) AS extra_len"
        " FROM lexical_scope s WHERE s.scope = $1",
        scope,
    )
    positions = 0
    if await conn.fetchval("SELECT to_regclass('memory_positions') IS NOT NULL"):
        positions = await conn.fetchval(
            "SELECT count(*) FROM memory_positions WHERE memory_id = $1", memory_id
        )
    return {
        "memories": await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1", memory_id),
        "stored vectors": await conn.fetchval(
            "SELECT count(*) FROM embedding_store WHERE text_sha256 = ANY($1::text[])", list(vector_hashes)
        ),
        "lexical terms": int(lexical["orphan_terms"]) + int(lexical["overcounted"]),
        "lexical totals": int(bool(docs and (docs["extra_docs"] > 0 or docs["extra_len"] > 0))),
        "entity links": await conn.fetchval(
            "SELECT count(*) FROM memory_entities WHERE memory_id = $1", memory_id
        ),
        "orphaned entities": await conn.fetchval(
            "SELECT count(*) FROM entities e WHERE e.scope = $1"
            " AND NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id)",
            scope,
        ),
        "evidence edges": await conn.fetchval(
            "SELECT count(*) FROM evidence_edges WHERE derived_id = $1", memory_id
        ),
        "conclusions not marked stale": await conn.fetchval(
            "SELECT count(*) FROM evidence_edges e JOIN memories m ON m.id = e.derived_id"
            " WHERE e.premise_id = $1 AND m.stale_at IS NULL",
            memory_id,
        ),
        "proposals quoting it": await conn.fetchval(
            "SELECT count(*) FROM proposals WHERE ($1 = ANY(evidence) OR result_id = $1)"
            " AND (content <> '' OR description <> '')",
            memory_id,
        ),
        "proposal record texts": await conn.fetchval(
            "SELECT count(*) FROM record_texts t JOIN records r ON r.id = t.record_id"
            " JOIN proposals p ON p.id = r.target_id WHERE $1 = ANY(p.evidence) OR p.result_id = $1",
            memory_id,
        ),
        "3D map position": int(positions),
        "raw log texts": await conn.fetchval(
            "SELECT count(*) FROM record_texts t JOIN records r ON r.id = t.record_id"
            " WHERE (r.target_id = $1 OR r.id = $1) AND r.operation <> 'purge'",
            memory_id,
        ),
    }


async def purge_record(conn: asyncpg.Connection, memory_id: uuid.UUID) -> str | None:
    """The payload of the latest purge record about this memory (it holds hashes, no text)."""
    return await conn.fetchval(
        "SELECT t.payload FROM records r JOIN record_texts t ON t.record_id = r.id"
        " WHERE r.target_id = $1 AND r.operation = 'purge' ORDER BY r.seq DESC LIMIT 1",
        memory_id,
    )


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
