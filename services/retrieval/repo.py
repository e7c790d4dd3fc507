"""Retrieval's SQL: candidate generation (dense + lexical in one round trip) and reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import numpy as np

from hypermnesia.memory_rows import MEMORY_COLUMNS

# The live-memory predicate every default read applies.
LIVE = (
    "m.archived_at IS NULL AND m.superseded_by IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())"
)

_HYBRID_SQL = f"""
WITH dense AS (
    SELECT m.id FROM memories m
    WHERE m.scope = ANY($2::text[]) AND {LIVE} AND m.tags @> $3::text[]
    ORDER BY m.embedding <=> $1 LIMIT $4
),
lexical AS (
    SELECT m.id, ts_rank_cd(m.search_tsv, q.query, 1) AS lex_score
    FROM memories m,
         (SELECT to_tsquery('english', $5) || to_tsquery('simple', $5) AS query) q
    WHERE $5 <> '' AND m.scope = ANY($2::text[]) AND {LIVE} AND m.tags @> $3::text[]
      AND m.search_tsv @@ q.query
    ORDER BY lex_score DESC LIMIT $4
),
pool AS (SELECT id FROM dense UNION SELECT id FROM lexical)
SELECT {", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))},
       1 - (m.embedding <=> $1) AS similarity,
       l.lex_score,
       (d.id IS NOT NULL) AS in_dense
FROM pool p
JOIN memories m ON m.id = p.id
LEFT JOIN lexical l ON l.id = p.id
LEFT JOIN dense d ON d.id = p.id
"""

_LEXICAL_ONLY_SQL = f"""
SELECT {", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))},
       NULL::float8 AS similarity,
       ts_rank_cd(m.search_tsv, q.query, 1) AS lex_score,
       false AS in_dense
FROM memories m, (SELECT to_tsquery('english', $1) || to_tsquery('simple', $1) AS query) q
WHERE $1 <> '' AND m.scope = ANY($2::text[]) AND {LIVE} AND m.tags @> $3::text[]
  AND m.search_tsv @@ q.query
ORDER BY lex_score DESC LIMIT $4
"""


@dataclass(frozen=True)
class CandidateQuery:
    scopes: list[str]
    tags: list[str]
    limit: int
    tsquery: str


async def hybrid_candidates(
    pool: asyncpg.Pool, vector: np.ndarray, q: CandidateQuery, ef_search: int
) -> list[asyncpg.Record]:
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        # Iterative scan keeps the HNSW walk going until enough rows pass the filters.
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
        return await conn.fetch(_HYBRID_SQL, vector, q.scopes, q.tags, q.limit, q.tsquery)


async def lexical_candidates(pool: asyncpg.Pool, q: CandidateQuery) -> list[asyncpg.Record]:
    return await pool.fetch(_LEXICAL_ONLY_SQL, q.tsquery, q.scopes, q.tags, q.limit)


async def get_memory(pool: asyncpg.Pool, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(
        f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE id = $1 AND {LIVE}", memory_id
    )


async def bump_access(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> None:
    await pool.execute(
        "UPDATE memories SET last_accessed_at = now(), access_count = access_count + 1 WHERE id = ANY($1)",
        ids,
    )


async def log_search(pool: asyncpg.Pool, entry: dict) -> None:
    await pool.execute(
        "INSERT INTO search_log (principal, scopes, query, k, candidates, hits, top_score, top_similarity,"
        " latency_ms, stage_ms, degraded) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10::jsonb,$11)",
        entry["principal"], entry["scopes"], entry["query"], entry["k"], entry["candidates"],
        entry["hits"], entry["top_score"], entry["top_similarity"], entry["latency_ms"],
        entry["stage_ms"], entry["degraded"],
    )
