"""Retrieval's SQL: the dense leg's nearest ids, then one round trip gathers them with the
lexical candidates, BM25 for each, the neighbouring turns of the strongest ones, and each
candidate's thread neighbours; and, for a recall depth that asks, the evidence of the hits."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
import numpy as np

from hypermnesia import scope_graphs
from hypermnesia.memory_rows import fresh_sql, live_sql, memory_columns
from hypermnesia.settings import RetrievalSettings
from hypermnesia.words import STOPWORDS
from services.retrieval.filters import Prefilter

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
-- df: documents of the searched scopes holding the term (for idf); postings: of every scope,
-- which is what reading the term from the GIN index costs.
term_df AS (
    SELECT qt.term, coalesce(d.df, 0)::float8 AS df, coalesce(d.postings, 0)::float8 AS postings
    FROM qt LEFT JOIN (
        SELECT term, sum(df) FILTER (WHERE scope = ANY($3::text[])) AS df, sum(df) AS postings
        FROM lexical_df WHERE term IN (SELECT term FROM qt) GROUP BY term
    ) d ON d.term = qt.term
),
idf AS (
    -- The query's terms found in these scopes, rarest first, with the tsquery that tests for each
    -- (quoted, so the lexeme is taken as it is).
    SELECT array_agg(ln(1 + (c.n - t.df + 0.5) / (t.df + 0.5)) ORDER BY t.df, t.term) AS idfs,
           array_agg(hm_quoted_tsquery(t.term) ORDER BY t.df, t.term) AS queries
    FROM term_df t CROSS JOIN corpus c WHERE t.df > 0
),
-- Which terms select lexical candidates: the rarest, while together they have at most $6 index
-- postings (NULL: no limit), and none found in over a quarter of the documents unless it is the
-- rarest. Every term still counts in each candidate's BM25; the limit bounds the leg's cost, and
-- the dense leg finds what common words alone would have selected.
matching AS (
    SELECT r.term FROM (
        SELECT t.term, t.df, sum(t.postings) OVER (ORDER BY t.df, t.term) AS running,
               row_number() OVER (ORDER BY t.df, t.term) AS rarity
        FROM term_df t WHERE t.df > 0
    ) r, corpus c
    WHERE ($6::float8 IS NULL OR r.running <= $6::float8) AND (r.df <= 0.25 * c.n OR r.rarity = 1)
),
tsq AS (
    SELECT (SELECT string_agg(hm_quoted_tsquery(term)::text, ' | ') FROM matching)::tsquery AS any_term,
           plainto_tsquery('english', $1::text) AS all_terms
)"""

# BM25 over the first BM25_TERMS query terms, rarest first: a longer query's extra terms are its
# most common words. The slots are one row of scalars (reading array elements per row and term
# cost ~40 us a row); slots past the query's terms hold NULL and cost nothing.
BM25_TERMS = 16
_SLOTS = f"""
slots AS (
    SELECT {", ".join(f"i.queries[{n}] AS q{n}, i.idfs[{n}] AS w{n}" for n in range(1, BM25_TERMS + 1))},
           $4::float8 AS k1, ($5::float8[])[1] AS b_memory, ($5::float8[])[2] AS b_document,
           greatest(c.avgdl, 1.0) AS avgdl
    FROM idf i, corpus c
)"""
# $5 holds two length-normalisation strengths, [memories, documents] (HM_BM25_B,
# HM_BM25_B_DOCUMENTS), since a memory is a sentence or two while document chunks are long.
_NORM = (
    "(1 - (CASE WHEN m.kind = 'document' THEN s.b_document ELSE s.b_memory END) * (1 - m.lex_len / s.avgdl))"
)

# A term's frequency in a memory is the number of positions its lexeme has in the tsvector, which
# ts_rank_cd with unit weights returns for a one-term query: it finds the lexeme by binary search
# (~1 us), where scanning a list of the memory's words cost ~20 us for an abstract. `f` holds each
# slot's frequency, computed once per row (NULL past the query's terms: ts_rank_cd is strict).
# A long memory (a document chunk) keeps its tsvector TOASTed, out of line: every reference to
# m.search_tsv would fetch it again, so `x` detoasts it once per row (ts_delete of a lexeme no
# tsvector holds returns its input as it is). OFFSET 0 keeps the planner from inlining either
# subquery back into every reference.
_FREQUENCIES = (
    "LATERAL (SELECT x.tsv, "
    + ", ".join(f"ts_rank_cd('{{1,1,1,1}}', x.tsv, s.q{n}) AS f{n}" for n in range(1, BM25_TERMS + 1))
    + " FROM (SELECT ts_delete(m.search_tsv, ''::text) AS tsv OFFSET 0) x OFFSET 0) f"
)


def _bm25_term(i: int) -> str:
    return f"CASE WHEN f.f{i} > 0 THEN s.w{i} * f.f{i} * (s.k1 + 1) / (f.f{i} + s.k1 * {_NORM}) ELSE 0 END"


_BM25 = "(" + " + ".join(_bm25_term(i) for i in range(1, BM25_TERMS + 1)) + ")"


def _neighbour(direction: str) -> str:
    """The previous (<) or next (>) live turn of m's thread, by (created_at, id)."""
    order = "DESC" if direction == "<" else "ASC"
    # The CASE skips the subquery (and its per-row start-up) for rows outside any thread.
    return (
        f"(CASE WHEN m.thread_id IS NOT NULL THEN (SELECT x.id FROM memories x WHERE x.scope = m.scope"
        f" AND x.thread_id = m.thread_id AND (x.created_at, x.id) {direction} (m.created_at, m.id)"
        f" AND {live_sql('x')} AND {fresh_sql('x')}"
        f" ORDER BY x.created_at {order}, x.id {order} LIMIT 1) END)"
    )


def dense_sql(where: str, exact: bool) -> str:
    # $1 vector, $2 depth; filters from $3. `+ 0` hides the ordering from the HNSW index: exact.
    order = "(m.embedding <=> $1) + 0" if exact else "m.embedding <=> $1"
    return f"SELECT m.id FROM memories m WHERE {where} ORDER BY {order} LIMIT $2"


# Whether a candidate is a derived conclusion resting on evidence in the searched scopes ($3): a
# probe of the edges' primary key, selected only when recall depth `auto` decides from it. An edge
# to a premise the caller cannot read does not count: it is not revealed, not even by a flag.
_DERIVED = (
    "EXISTS (SELECT 1 FROM evidence_edges e JOIN memories pm ON pm.id = e.premise_id"
    " WHERE e.derived_id = m.id AND pm.scope = ANY($3::text[])) AS derived"
)


# Adaptive fusion's estimate for the searched scopes ($3), as the latest refit stored it
# (migration 0029, hypermnesia/fusion_estimate.py); NULL before any. One probe of the primary key,
# read in the same statement (and snapshot) as the candidates it weighs: nothing is cached in the
# process, so every replica reading the same store reads the same estimate.
_SCOPE_ESTIMATE = (
    "(SELECT fe.estimate FROM fusion_estimates fe WHERE fe.scope_key = hm_scope_key($3::text[])"
    " ORDER BY fe.refit_id DESC LIMIT 1) AS scope_estimate"
)


# The cosine of the query ($7) and the opening turn of the candidate's thread (its first live turn),
# selected only when the opening is weighted (HM_CONTEXT_OPENING_WEIGHT): one probe of the thread
# index per threaded candidate.
_OPENING = (
    "(CASE WHEN m.thread_id IS NOT NULL THEN (SELECT 1 - (x.embedding <=> $7) FROM memories x"
    " WHERE x.scope = m.scope AND x.thread_id = m.thread_id"
    f" AND {live_sql('x')} AND {fresh_sql('x')}"
    " ORDER BY x.created_at, x.id LIMIT 1) END) AS opening_similarity"
)


def hybrid_sql(
    where: str, flag_derived: bool = False, scope_estimate: bool = False, opening: bool = False
) -> str:
    # $1 query, $2 stopwords, $3 scopes (for statistics), $4 k1, $5 [b, b for documents], $6 how many
    # index postings the selecting terms may have (NULL: no limit), $7 vector (NULL: lexical-only),
    # $8 the dense leg's ids (nearest first), $9 depth, $10 expansion (how many top candidates of
    # each leg get their neighbours added); filters from $11.
    optional = "".join(
        f", {column}"
        for column, wanted in (
            (_DERIVED, flag_derived),
            (_SCOPE_ESTIMATE, scope_estimate),
            (_OPENING, opening),
        )
        if wanted
    )
    return f"""
WITH {_LEXICAL_PRELUDE},{_SLOTS},
dense AS (
    SELECT d.id, d.rank FROM unnest($8::uuid[]) WITH ORDINALITY AS d(id, rank)
),
lexical AS (
    SELECT m.id, {_BM25} AS bm25
    FROM memories m, tsq, slots s, {_FREQUENCIES}
    WHERE tsq.any_term IS NOT NULL AND m.search_tsv @@ tsq.any_term AND {where}
    ORDER BY bm25 DESC LIMIT $9
),
strongest AS (
    (SELECT id FROM dense ORDER BY rank LIMIT $10) UNION (SELECT id FROM lexical ORDER BY bm25 DESC LIMIT $10)
),
expanded AS (
    SELECT n.id FROM strongest s JOIN memories m ON m.id = s.id,
    LATERAL (SELECT {_neighbour("<")} AS id UNION ALL SELECT {_neighbour(">")}) n
    WHERE m.thread_id IS NOT NULL AND n.id IS NOT NULL
),
pool AS (
    SELECT id FROM dense UNION SELECT id FROM lexical UNION SELECT id FROM expanded
)
SELECT {memory_columns("m")},
       1 - (m.embedding <=> $7) AS similarity,
       {_BM25} AS bm25,
       (numnode(tsq.all_terms) > 0 AND f.tsv @@ tsq.all_terms) AS all_terms,
       {_neighbour("<")} AS prev_id,
       {_neighbour(">")} AS next_id,
       (SELECT count(*) FROM dense) AS dense_count,
       (SELECT count(*) FROM lexical) AS lexical_count{optional}
FROM pool p JOIN memories m ON m.id = p.id, tsq, slots s, {_FREQUENCIES}
"""


# pgvector refuses a larger hnsw.ef_search; deeper searches rely on the iterative scan, which
# goes on walking until LIMIT rows pass the filters.
MAX_EF_SEARCH = 1000


@dataclass(frozen=True)
class CandidateQuery:
    query: str
    prefilter: Prefilter
    depth: int
    expansion: int
    k1: float
    b: float
    b_documents: float
    # How many index postings the terms that select lexical candidates may have together (hybrid
    # only: a lexical-only search has no dense leg to fall back on, so its rarest term always selects).
    lexical_rows: int
    # Searched scopes this small (in rows) get an exact dense scan instead of the HNSW walk.
    exact_rows: int
    ef_search: int
    # Select whether each candidate is a derived conclusion (the `derived` column).
    flag_derived: bool = False
    # Select the searched scopes' stored fusion estimate (the `scope_estimate` column; adaptive).
    scope_estimate: bool = False
    # Select the cosine of each candidate's thread opening (the `opening_similarity` column).
    opening: bool = False

    @classmethod
    def from_settings(
        cls,
        settings: RetrievalSettings,
        query: str,
        prefilter: Prefilter,
        k: int,
        flag_derived: bool = False,
        scope_estimate: bool = False,
        opening: bool = False,
    ) -> CandidateQuery:
        """The query the service runs for a search of k results (the benchmark reuses it)."""
        depth = max(settings.search_candidates, k)
        return cls(
            query=query,
            prefilter=prefilter,
            depth=depth,
            expansion=settings.search_context_expansion,
            k1=settings.bm25_k1,
            b=settings.bm25_b,
            b_documents=settings.bm25_b_documents,
            lexical_rows=settings.search_lexical_rows,
            exact_rows=settings.search_exact_rows,
            ef_search=min(max(settings.hnsw_ef_search, depth), MAX_EF_SEARCH),
            flag_derived=flag_derived,
            scope_estimate=scope_estimate,
            opening=opening,
        )


async def candidates(
    pool: asyncpg.Pool, q: CandidateQuery, vector: np.ndarray | None, sizes: ScopeSizes | None = None
) -> list[asyncpg.Record]:
    """Every candidate of a search; `vector` None (the embedder failed) searches lexical-only."""
    async with pool.acquire() as conn:
        dense_ids = [] if vector is None else await dense_leg(conn, q, vector, sizes or ScopeSizes(ttl_s=0))
        return await hybrid(conn, q, vector, dense_ids)


async def hybrid(
    conn: asyncpg.Connection, q: CandidateQuery, vector: np.ndarray | None, dense_ids: list
) -> list[asyncpg.Record]:
    """The one round trip after the dense leg: the candidates with their scores and neighbours."""
    # Without a vector there is no dense leg to find what common words alone would select, so the
    # lexical leg gets no bound on its index postings.
    bound = None if vector is None else float(q.lexical_rows)
    params = [q.query, _STOPWORDS, q.prefilter.scopes, q.k1, [q.b, q.b_documents], bound]
    where, filter_params = q.prefilter.sql(first_param=11)
    return await conn.fetch(
        hybrid_sql(where, q.flag_derived, q.scope_estimate, q.opening),
        *params,
        vector,
        dense_ids,
        q.depth,
        q.expansion,
        *filter_params,
    )


class ScopeSizes:
    """How many rows the searched scopes hold, of how many in all, and whether the one scope
    searched has its own graph: what picks the dense leg's plan. Read at most once per `ttl_s`
    for each list of scopes, which saves a round trip on nearly every search; a count a second
    old picks the same plan."""

    def __init__(self, ttl_s: float = 1.0, max_entries: int = 1024) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._read: dict[tuple[str, ...], tuple[float, tuple[int, int, bool]]] = {}

    async def get(self, conn: asyncpg.Connection, scopes: list[str]) -> tuple[int, int, bool]:
        key = tuple(scopes)
        now = time.monotonic()
        cached = self._read.get(key)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        row = await conn.fetchrow(
            "SELECT coalesce(sum(docs) FILTER (WHERE scope = ANY($2::text[])), 0), coalesce(sum(docs), 0),"
            f" cardinality($2::text[]) = 1 AND {scope_graphs.VALID_SQL}"
            " FROM lexical_scope",
            scope_graphs.name(scopes[0]) if scopes else "",
            scopes,
        )
        sizes = (int(row[0]), int(row[1]), bool(row[2]))
        if self.ttl_s > 0:
            if len(self._read) >= self.max_entries:
                self._read.clear()
            self._read[key] = (now, sizes)
        return sizes


async def dense_leg(
    conn: asyncpg.Connection, q: CandidateQuery, vector: np.ndarray, sizes: ScopeSizes
) -> list:
    """The dense leg's ids, nearest first, by the cheaper way for the searched scopes' size:
    - the scope's own HNSW graph when one scope is searched and it has one
      (hypermnesia/scope_graphs.py): about 3 ms at 10,000 rows;
    - an exact scan of a small share of the store (at most q.exact_rows rows, or 5% of the
      store): a walk of the global graph would visit 20 rows for each one passing the filter;
    - the walk of the global graph (iterative, so the filters do not starve it) over a large
      share: the planner would otherwise read every row of the scope by bitmap and sort them all
      (45 ms against 27 ms for one scope in ten at 100,000 memories);
    - the planner's choice when other filters (tags, kinds, time) narrow a very large scope.

    It runs in a read-only transaction of its own, so the planner settings it needs end with it:
    they go out with BEGIN in one round trip, and the query after it (the hybrid one) plans with
    the defaults without a round trip to restore them."""
    if conn.is_in_transaction():  # its COMMIT would end the caller's transaction
        raise RuntimeError("dense_leg runs in a transaction of its own; call it outside one")
    scope_rows, all_rows, own_graph = await sizes.get(conn, q.prefilter.scopes)
    exact = not own_graph and (
        scope_rows <= q.exact_rows
        or scope_rows * 20 <= all_rows
        # Tags, kinds or time usually leave a small part of the scope: the walk would skip most of
        # what it visits (100 ms against 14 ms for one tag in six of a 10,000-row scope).
        or (q.prefilter.narrows and scope_rows <= 10 * q.exact_rows)
    )
    walk = own_graph or (not exact and not q.prefilter.narrows)
    where, filter_params = q.prefilter.sql(first_param=3)
    # Planned for these filter values every time (0.4 ms): a cached generic plan cannot see how
    # selective they are and fell back to scanning the whole table (75 ms against 13 ms).
    # Walking means the HNSW index: bitmap and sequential scans are the alternatives to rule out.
    walk_only = " SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off;" if walk else ""
    try:
        await conn.execute(
            "BEGIN READ ONLY; SET LOCAL plan_cache_mode = force_custom_plan;"
            f" SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {int(q.ef_search)};"
            f"{walk_only}"
        )
        rows = await conn.fetch(dense_sql(where, exact), vector, q.depth, *filter_params)
        await conn.execute("COMMIT")
    except asyncio.CancelledError:
        # Cancelled mid-statement, the connection cannot take a ROLLBACK until Postgres confirms
        # the cancel; closing it ends the transaction (the pool opens a fresh one when needed).
        conn.terminate()
        raise
    except BaseException:
        with contextlib.suppress(Exception):  # a broken connection: the pool replaces it
            await conn.execute("ROLLBACK")
        raise
    return [r["id"] for r in rows]


def evidence_sql(where: str) -> str:
    # $1 the derived hits to walk from (best first), $2 every hit (not repeated as evidence), $3 how
    # many hops, $4 how many rows; filters (scopes, liveness, staleness) from $5. The filters hold
    # in the walk itself, so a premise the caller may not read is neither returned nor walked
    # through: an edge to it is not revealed, not even as a count. The graph is acyclic (the
    # trigger of migration 0021), so the walk ends within $3 hops.
    return f"""
WITH RECURSIVE walk(id, premise_of, root, hops) AS (
    SELECT e.premise_id, e.derived_id, e.derived_id, 1
    FROM evidence_edges e JOIN memories m ON m.id = e.premise_id
    WHERE e.derived_id = ANY($1::uuid[]) AND {where}
  UNION
    SELECT e.premise_id, e.derived_id, w.root, w.hops + 1
    FROM walk w JOIN evidence_edges e ON e.derived_id = w.id JOIN memories m ON m.id = e.premise_id
    WHERE w.hops < $3 AND {where}
),
nearest AS (
    SELECT DISTINCT ON (id) id, premise_of, hops, array_position($1::uuid[], root) AS rank
    FROM walk WHERE id <> ALL($2::uuid[])
    ORDER BY id, hops, array_position($1::uuid[], root), premise_of
)
SELECT {memory_columns("m")}, n.premise_of, n.hops
FROM nearest n JOIN memories m ON m.id = n.id
ORDER BY n.hops, n.rank, m.created_at, m.id
LIMIT $4
"""


async def evidence(
    pool: asyncpg.Pool,
    roots: list[uuid.UUID],
    hits: list[uuid.UUID],
    prefilter: Prefilter,
    hops: int,
    limit: int,
) -> list[asyncpg.Record]:
    """The evidence of the derived hits `roots`, nearest first (by hops, then the rank of the hit
    it was reached from), each row with `premise_of` (the conclusion it supports) and `hops`;
    none of `hits`. One round trip over the edges' indexes (primary key on derived_id)."""
    where, params = prefilter.sql(first_param=5)
    return list(await pool.fetch(evidence_sql(where), roots, hits, hops, limit, *params))


async def get_memory(pool: asyncpg.Pool, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(
        f"SELECT {memory_columns('m')} FROM memories m WHERE m.id = $1 AND {live_sql('m')}", memory_id
    )


async def entity_links(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    """(memory_id, type, name) of every entity the memories in `ids` are linked to."""
    return await pool.fetch(
        "SELECT me.memory_id, e.type, e.name FROM memory_entities me JOIN entities e ON e.id = me.entity_id"
        " WHERE me.memory_id = ANY($1::uuid[])",
        ids,
    )


async def open_tasks(pool: asyncpg.Pool, scopes: list[str]) -> list[asyncpg.Record]:
    """(id, sources) of the live working-memory tasks of these scopes; `sources` is the metadata's
    derived_from (JSON, as the caller wrote it)."""
    return await pool.fetch(
        "SELECT m.id, m.metadata->'derived_from' AS sources FROM memories m"
        f" WHERE m.scope = ANY($1::text[]) AND m.type = 'task' AND m.kind = 'working' AND {live_sql('m')}",
        scopes,
    )


# What a search leaves behind (bookkeeping.py batches it): search_log rows, these columns in order.
LOG_COLUMNS = (
    "at",
    "principal",
    "scopes",
    "query",
    "k",
    "candidates",
    "hits",
    "top_score",
    "top_similarity",
    "latency_ms",
    "stage_ms",
    "degraded",
    # Adaptive fusion's observation (fusion.observe): read by refits only, never by a search.
    "clarity_log_ratio",
)
_INSERT_LOG = (
    f"INSERT INTO search_log ({', '.join(LOG_COLUMNS)})"
    f" VALUES ({', '.join(f'${n}' for n in range(1, len(LOG_COLUMNS) + 1))})"
)
_BUMP = (
    "UPDATE memories m SET last_accessed_at = now(), access_count = m.access_count + b.n"
    " FROM unnest($1::uuid[], $2::int[]) AS b(id, n) WHERE m.id = b.id"
)


async def write_bookkeeping(
    pool: asyncpg.Pool, bumps: Mapping[uuid.UUID, int], log_rows: list[tuple]
) -> None:
    """Access bumps (memory id -> times recalled) and search_log rows (LOG_COLUMNS order) in one
    transaction that does not wait for the disk: a crash may lose the last second of bookkeeping,
    never a memory."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL synchronous_commit = off")
        if bumps:
            await conn.execute(_BUMP, list(bumps), list(bumps.values()))
        if log_rows:
            await conn.executemany(_INSERT_LOG, log_rows)
