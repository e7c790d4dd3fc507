"""Retrieval's SQL: one round trip gathers the dense and lexical candidates, BM25 for each, the
neighbouring turns of the strongest ones, and each candidate's thread neighbours."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import numpy as np

from hypermnesia.memory_rows import MEMORY_COLUMNS
from services.retrieval.filters import LIVE, Prefilter
from services.retrieval.lexical import STOPWORDS

_M_COLUMNS = ", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))
_STOPWORDS = sorted(STOPWORDS)

# Query terms: stemmed English lexemes plus exact `simple` tokens, function words dropped; OR-ed.
# IDF per term from the per-scope document frequencies kept by triggers (migration 0003).
_LEXICAL_PRELUDE = """
qt AS (
    SELECT DISTINCT term FROM (
        SELECT unnest(tsvector_to_array(to_tsvector('english', $1::text))) AS term
        UNION ALL
        SELECT unnest(tsvector_to_array(to_tsvector('simple', $1::text)))
    ) t WHERE term <> ALL($2::text[])
),
corpus AS (
    SELECT coalesce(sum(docs), 0)::float8 AS n,
           coalesce(sum(total_len)::float8 / nullif(sum(docs), 0), 1.0) AS avgdl
    FROM lexical_scope WHERE scope = ANY($3::text[])
),
term_df AS (
    SELECT qt.term, coalesce(d.df, 0)::float8 AS df
    FROM qt LEFT JOIN (
        SELECT term, sum(df) AS df FROM lexical_df
        WHERE scope = ANY($3::text[]) AND term IN (SELECT term FROM qt) GROUP BY term
    ) d ON d.term = qt.term
),
idf AS (
    SELECT array_agg(t.term) AS terms,
           array_agg(ln(1 + (c.n - t.df + 0.5) / (t.df + 0.5))) AS idfs
    FROM term_df t CROSS JOIN corpus c
),
-- Which terms select candidates: those in at most a quarter of the documents (or else the
-- rarest one). Common terms still count in every candidate's BM25, but letting them select
-- would score a large share of the corpus for little gain.
matching AS (
    SELECT t.term FROM term_df t, corpus c
    WHERE t.df > 0 AND (t.df <= 0.25 * c.n OR t.df = (SELECT min(df) FROM term_df WHERE df > 0))
),
tsq AS (
    SELECT (SELECT string_agg('''' || replace(term, '''', '''''') || '''', ' | ') FROM matching)::tsquery
               AS any_term,
           plainto_tsquery('english', $1::text) AS all_terms
)"""


# $5 holds two length-normalisation strengths: [memories, documents] (HM_BM25_B, HM_BM25_B_DOCUMENTS),
# since a memory is a sentence or two while document chunks are long and vary more.
_BM25 = (
    "hm_bm25(m.search_tsv, m.lex_len, idf.terms, idf.idfs, corpus.avgdl, $4,"
    " CASE WHEN m.kind = 'document' THEN ($5::float8[])[2] ELSE ($5::float8[])[1] END)"
)


def _neighbour(direction: str) -> str:
    """The previous (<) or next (>) live turn of m's thread, by (created_at, id)."""
    order = "DESC" if direction == "<" else "ASC"
    return (
        f"(SELECT x.id FROM memories x WHERE m.thread_id IS NOT NULL AND x.scope = m.scope"
        f" AND x.thread_id = m.thread_id AND (x.created_at, x.id) {direction} (m.created_at, m.id)"
        f" AND x.archived_at IS NULL AND x.superseded_by IS NULL"
        f" ORDER BY x.created_at {order}, x.id {order} LIMIT 1)"
    )


def hybrid_sql(where: str) -> str:
    # $1 query, $2 stopwords, $3 scopes (for statistics), $4 k1, $5 [b, b for documents], $6 vector, $7 depth,
    # $8 expansion (how many top candidates of each leg get their neighbours added); filters from $9.
    return f"""
WITH {_LEXICAL_PRELUDE},
dense AS (
    SELECT m.id, m.embedding <=> $6 AS dist FROM memories m
    WHERE {where} ORDER BY m.embedding <=> $6 LIMIT $7
),
lexical AS (
    SELECT m.id, {_BM25} AS bm25
    FROM memories m, tsq, idf, corpus
    WHERE tsq.any_term IS NOT NULL AND m.search_tsv @@ tsq.any_term AND {where}
    ORDER BY bm25 DESC LIMIT $7
),
strongest AS (
    (SELECT id FROM dense ORDER BY dist LIMIT $8) UNION (SELECT id FROM lexical ORDER BY bm25 DESC LIMIT $8)
),
expanded AS (
    SELECT n.id FROM strongest s JOIN memories m ON m.id = s.id,
    LATERAL (SELECT {_neighbour("<")} AS id UNION ALL SELECT {_neighbour(">")}) n
    WHERE m.thread_id IS NOT NULL AND n.id IS NOT NULL
),
pool AS (
    SELECT id FROM dense UNION SELECT id FROM lexical UNION SELECT id FROM expanded
)
SELECT {_M_COLUMNS},
       1 - (m.embedding <=> $6) AS similarity,
       {_BM25} AS bm25,
       (numnode(tsq.all_terms) > 0 AND m.search_tsv @@ tsq.all_terms) AS all_terms,
       {_neighbour("<")} AS prev_id,
       {_neighbour(">")} AS next_id,
       (SELECT count(*) FROM dense) AS dense_count,
       (SELECT count(*) FROM lexical) AS lexical_count
FROM pool p JOIN memories m ON m.id = p.id, tsq, idf, corpus
"""


def lexical_sql(where: str) -> str:
    # $1-$5 as in hybrid_sql, $6 depth; filters from $7. Used when the query has no embedding.
    return f"""
WITH {_LEXICAL_PRELUDE},
lexical AS (
    SELECT m.id, {_BM25} AS bm25
    FROM memories m, tsq, idf, corpus
    WHERE tsq.any_term IS NOT NULL AND m.search_tsv @@ tsq.any_term AND {where}
    ORDER BY bm25 DESC LIMIT $6
)
SELECT {_M_COLUMNS},
       NULL::float8 AS similarity,
       l.bm25,
       (numnode(tsq.all_terms) > 0 AND m.search_tsv @@ tsq.all_terms) AS all_terms,
       {_neighbour("<")} AS prev_id,
       {_neighbour(">")} AS next_id,
       0 AS dense_count,
       (SELECT count(*) FROM lexical) AS lexical_count
FROM lexical l JOIN memories m ON m.id = l.id, tsq
"""


@dataclass(frozen=True)
class CandidateQuery:
    query: str
    prefilter: Prefilter
    depth: int
    expansion: int
    k1: float
    b: float
    b_documents: float


async def candidates(
    pool: asyncpg.Pool, q: CandidateQuery, vector: np.ndarray | None, ef_search: int
) -> list[asyncpg.Record]:
    params = [q.query, _STOPWORDS, q.prefilter.scopes, q.k1, [q.b, q.b_documents]]
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        if vector is None:
            where, filter_params = q.prefilter.sql(first_param=7)
            return await conn.fetch(lexical_sql(where), *params, q.depth, *filter_params)
        where, filter_params = q.prefilter.sql(first_param=9)
        # Iterative scan keeps the HNSW walk going until enough rows pass the filters.
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
        return await conn.fetch(hybrid_sql(where), *params, vector, q.depth, q.expansion, *filter_params)


async def get_memory(pool: asyncpg.Pool, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE id = $1 AND {LIVE}", memory_id)


async def bump_access(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> None:
    await pool.execute(
        "UPDATE memories SET last_accessed_at = now(), access_count = access_count + 1 WHERE id = ANY($1)",
        ids,
    )


async def log_search(pool: asyncpg.Pool, entry: dict) -> None:
    await pool.execute(
        "INSERT INTO search_log (principal, scopes, query, k, candidates, hits, top_score, top_similarity,"
        " latency_ms, stage_ms, degraded) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10::jsonb,$11)",
        entry["principal"],
        entry["scopes"],
        entry["query"],
        entry["k"],
        entry["candidates"],
        entry["hits"],
        entry["top_score"],
        entry["top_similarity"],
        entry["latency_ms"],
        entry["stage_ms"],
        entry["degraded"],
    )
