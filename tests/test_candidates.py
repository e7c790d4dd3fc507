"""Retrieval's candidate SQL: the lexical leg against a pure-Python BM25 over the same lexemes, the
bound on what its selecting terms may match, and the dense leg's exact scan and HNSW walk."""

from __future__ import annotations

import asyncio
import math
import uuid
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest

from hypermnesia import scope_graphs
from hypermnesia.migrator import migrate
from hypermnesia.pin import ensure_embedding_pin
from hypermnesia.pool import connect_pool
from hypermnesia.settings import RetrievalSettings
from hypermnesia.words import STOPWORDS
from services.retrieval import repo
from services.retrieval.filters import Prefilter
from tests.conftest import create_database

K1, B_MEMORY, B_DOCUMENT = 1.2, 0.4, 0.75

ROWS = [
    ("a", "semantic", "The backup job backs up the backup disk every night"),
    ("a", "semantic", "Nightly backup to the NAS failed with error QX-17"),
    ("a", "semantic", "Alice prefers tea"),
    ("a", "semantic", "The NAS runs ZFS with three disks and a spare disk for the backup pool"),
    (
        "a",
        "document",
        "ZFS scrubs verify every block; a scrub of the backup pool found no errors. "
        "Scrub weekly, and scrub again after replacing a disk.",
    ),
    ("a", "semantic", "Bob handles the on-call rotation"),
    ("b", "semantic", "backup backup backup in another scope"),
]


@pytest.fixture
async def pool(pg_server_url: str) -> asyncpg.Pool:
    pool = await connect_pool(await create_database(pg_server_url))
    await migrate(pool)
    await ensure_embedding_pin(pool, "test-model", 3)
    now = datetime.now(UTC)
    rng = np.random.default_rng(0)
    for scope, kind, content in ROWS:
        await pool.execute(
            "INSERT INTO memories (id, scope, owner_id, kind, content, created_at, updated_at,"
            " last_accessed_at, valid_from, embedding) VALUES ($1, $2, 'test', $3, $4, $5, $5, $5, $5, $6)",
            uuid.uuid4(),
            scope,
            kind,
            content,
            now,
            rng.normal(size=3).astype(np.float32),
        )
    yield pool
    await pool.close()


async def _reference(pool: asyncpg.Pool, query: str, scopes: list[str]) -> dict[str, float]:
    """Okapi BM25 per content, from the rows' own lexemes and positions (read from Postgres, so
    stemming matches) with df, N and average length over `scopes`."""
    terms = {
        t
        for cfg in ("english", "simple")
        for t in await pool.fetchval(f"SELECT tsvector_to_array(to_tsvector('{cfg}', $1))", query)
    } - set(STOPWORDS)
    docs = []
    for r in await pool.fetch("SELECT content, kind, search_tsv FROM memories WHERE scope = ANY($1)", scopes):
        tf = {
            u["lexeme"]: len(u["positions"])
            for u in await pool.fetch("SELECT lexeme, positions FROM unnest($1::tsvector)", r["search_tsv"])
        }
        docs.append((r["content"], r["kind"], tf))
    n = len(docs)
    avgdl = sum(sum(tf.values()) for _, _, tf in docs) / n
    df = {t: sum(1 for _, _, tf in docs if t in tf) for t in terms}
    scores = {}
    for content, kind, tf in docs:
        b = B_DOCUMENT if kind == "document" else B_MEMORY
        length = sum(tf.values())
        score = 0.0
        for t in terms:
            if t in tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf[t] * (K1 + 1) / (tf[t] + K1 * (1 - b + b * length / avgdl))
        scores[content] = score
    return scores


def _query(
    query: str,
    scopes: list[str],
    lexical_rows: int = 2_000,
    exact_rows: int = 5_000,
    tags: list[str] | None = None,
) -> repo.CandidateQuery:
    return repo.CandidateQuery(
        query=query,
        prefilter=Prefilter(scopes=scopes, tags=tags or []),
        depth=100,
        expansion=0,
        k1=K1,
        b=B_MEMORY,
        b_documents=B_DOCUMENT,
        lexical_rows=lexical_rows,
        exact_rows=exact_rows,
        ef_search=40,
    )


@pytest.mark.parametrize(
    "query",
    ["backup disk", "ZFS scrub of the backup pool", "error QX-17 on the NAS", "who prefers tea?"],
)
async def test_bm25_matches_a_reference_implementation(pool: asyncpg.Pool, query: str) -> None:
    expected = await _reference(pool, query, ["a"])
    rows = await repo.candidates(pool, _query(query, ["a"]), None)
    got = {r["content"]: r["bm25"] for r in rows}
    assert got, "the lexical leg found nothing"
    for content, score in got.items():
        assert score == pytest.approx(expected[content], rel=1e-9), content


async def test_term_frequency_counts(pool: asyncpg.Pool) -> None:
    """ "backup" three times in one memory outscores the same word once in a longer one; a
    tf-blind score would rank them the other way round."""
    rows = await repo.candidates(pool, _query("backup", ["a"]), None)
    scores = {r["content"]: r["bm25"] for r in rows}
    assert scores[ROWS[0][2]] > scores[ROWS[1][2]]


async def test_bm25_reads_long_documents_stored_out_of_line(pool: asyncpg.Pool) -> None:
    """A chunk too long for its page has its tsvector TOASTed; its terms still count, each as
    often as it occurs, against the same reference."""
    long_text = "backup " + " ".join(f"w{i}" for i in range(3000)) + " backup scrub backup"
    for content in (long_text, "one backup, one scrub"):
        await pool.execute(
            "INSERT INTO memories (id, scope, owner_id, kind, content, created_at, updated_at,"
            " last_accessed_at, valid_from, embedding) VALUES ($1, 'c', 'test', 'document', $2, now(),"
            " now(), now(), now(), '[1,0,0]')",
            uuid.uuid4(),
            content,
        )
    assert await pool.fetchval(
        "SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE relname = 'memories'"
    ), "the long document should have been stored out of line"
    expected = await _reference(pool, "backup scrub w17", ["c"])
    rows = await repo.candidates(pool, _query("backup scrub w17", ["c"]), None)
    got = {r["content"]: r["bm25"] for r in rows}
    # "backup" and "scrub" are in both rows, too common to select here, but they count in the score.
    assert list(got) == [long_text]
    for content, score in got.items():
        assert score == pytest.approx(expected[content], rel=1e-9), content[:40]


async def test_selecting_terms_are_bounded_by_the_rows_they_match(pool: asyncpg.Pool) -> None:
    vector = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    # "alice" and "bob" are in one row each: with room for one row only the first selects ...
    rows = await repo.candidates(pool, _query("alice bob", ["a"], lexical_rows=1), vector)
    assert rows[0]["lexical_count"] == 1
    # ... with room for three, both do ("alice" is two terms, stemmed "alic" and exact "alice",
    # each counted: the bound errs on the cheap side).
    rows = await repo.candidates(pool, _query("alice bob", ["a"], lexical_rows=3), vector)
    assert rows[0]["lexical_count"] == 2
    # "backup" is in four rows: over a bound of 3 it selects nothing in a hybrid search (the dense
    # leg still answers) ...
    rows = await repo.candidates(pool, _query("backup", ["a"], lexical_rows=3), vector)
    assert rows[0]["lexical_count"] == 0 and rows[0]["dense_count"] == 6
    # ... but it does when there is no dense leg (embedder down).
    rows = await repo.candidates(pool, _query("backup", ["a"], lexical_rows=3), None)
    assert len(rows) == 4


@pytest.mark.parametrize(("exact_rows", "tags"), [(5_000, []), (0, []), (0, ["none"])])
async def test_dense_leg_walks_or_scans_to_the_same_nearest(
    pool: asyncpg.Pool, exact_rows: int, tags: list[str]
) -> None:
    """A small scope is scanned exactly; with exact_rows 0 it is walked through HNSW (with the
    planner's choice once a tag narrows it). Every way returns the rows nearest first."""
    if tags:
        await pool.execute("UPDATE memories SET tags = '{none}' WHERE scope = 'a'")
    vector = np.array([0.3, -1.0, 0.2], dtype=np.float32)
    exact = await pool.fetch(
        "SELECT id FROM memories WHERE scope = 'a' ORDER BY (embedding <=> $1) + 0", vector
    )
    async with pool.acquire() as conn:
        query = _query("", ["a"], exact_rows=exact_rows, tags=tags)
        ids = await repo.dense_leg(conn, query, vector, repo.ScopeSizes(ttl_s=0))
    assert ids == [r["id"] for r in exact]


async def test_a_large_scope_gets_its_own_graph_and_single_scope_searches_use_it(pool: asyncpg.Pool) -> None:
    """Scope graphs (hypermnesia/scope_graphs.py): built for scopes of at least min_rows that are
    not most of the store, once; the planner walks a one-scope search through its scope's graph
    and returns the same nearest rows; an invalid graph (an interrupted build) is rebuilt."""
    for n in range(3):  # scope "a" becomes 6 of 10 rows, "b" 4
        await pool.execute(
            "INSERT INTO memories (id, scope, owner_id, kind, content, created_at, updated_at,"
            " last_accessed_at, valid_from, embedding) VALUES ($1, 'b', 'test', 'semantic', $2, now(),"
            " now(), now(), now(), $3)",
            uuid.uuid4(),
            f"filler {n}",
            np.array([n, 1.0, 0.5], dtype=np.float32),
        )
    assert await scope_graphs.ensure(pool, min_rows=5) == ["a"]
    assert await scope_graphs.ensure(pool, min_rows=5) == []  # built once

    vector = np.array([0.3, -1.0, 0.2], dtype=np.float32)
    query = _query("", ["a"], exact_rows=0)
    where, filter_params = query.prefilter.sql(first_param=3)
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + repo.dense_sql(where, exact=False), vector, 10, *filter_params
        )
        assert scope_graphs.name("a") in plan
    async with pool.acquire() as conn:
        ids = await repo.dense_leg(conn, query, vector, repo.ScopeSizes(ttl_s=0))
    exact = await pool.fetch(
        "SELECT id FROM memories WHERE scope = 'a' ORDER BY (embedding <=> $1) + 0", vector
    )
    assert ids == [r["id"] for r in exact]

    await pool.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass", scope_graphs.name("a")
    )
    assert await scope_graphs.ensure(pool, min_rows=5) == ["a"]
    assert await pool.fetchval(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass", scope_graphs.name("a")
    )


async def test_a_graph_being_built_is_neither_dropped_nor_searched(pool: asyncpg.Pool) -> None:
    """A scope graph mid-build is invalid, like an interrupted one: `ensure` leaves it to its
    builder (dropping it would wait for the build's lock for the whole build, then undo it), and
    retrieval does not count it as the scope's graph until the build is done."""
    for n in range(3):  # scope "a" becomes 6 of 10 rows
        await pool.execute(
            "INSERT INTO memories (id, scope, owner_id, kind, content, created_at, updated_at,"
            " last_accessed_at, valid_from, embedding) VALUES ($1, 'b', 'test', 'semantic', $2, now(),"
            " now(), now(), now(), $3)",
            uuid.uuid4(),
            f"filler {n}",
            np.array([n, 1.0, 0.5], dtype=np.float32),
        )
    index = scope_graphs.name("a")
    async with pool.acquire() as reader, pool.acquire() as builder:
        # An open snapshot holds a concurrent build at its last wait, its index in place but invalid.
        snapshot = reader.transaction(isolation="repeatable_read", readonly=True)
        await snapshot.start()
        await reader.fetchval("SELECT count(*) FROM memories")
        build = asyncio.create_task(
            builder.execute(
                f'CREATE INDEX CONCURRENTLY "{index}" ON memories'
                " USING hnsw (embedding vector_cosine_ops) WHERE scope = 'a'"
            )
        )
        try:
            while not await pool.fetchval(
                "SELECT count(*) FROM pg_stat_progress_create_index WHERE index_relid = to_regclass($1)",
                index,
            ):
                assert not build.done(), build
                await asyncio.sleep(0.05)
            async with pool.acquire() as conn:
                _, _, own_graph = await repo.ScopeSizes(ttl_s=0).get(conn, ["a"])
            assert not own_graph
            assert await scope_graphs.ensure(pool, min_rows=5) == []
            assert await pool.fetchval("SELECT to_regclass($1) IS NOT NULL", index)  # not dropped
        finally:
            await snapshot.rollback()
            await build
    assert await pool.fetchval("SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass", index)
    async with pool.acquire() as conn:
        _, _, own_graph = await repo.ScopeSizes(ttl_s=0).get(conn, ["a"])
    assert own_graph


async def test_the_dense_leg_leaves_no_transaction_or_setting_behind(pool: asyncpg.Pool) -> None:
    """The dense leg's planner settings live in its own transaction: after it, whether it ran or
    its query failed, the connection is out of any transaction with the defaults back, so the
    hybrid query (and the next user of the pooled connection) plans normally."""
    sizes = repo.ScopeSizes(ttl_s=0)
    async with pool.acquire() as conn:
        default_seqscan = await conn.fetchval("SHOW enable_seqscan")
        ids = await repo.dense_leg(conn, _query("", ["a"], exact_rows=0), np.ones(3, np.float32), sizes)
        assert len(ids) == 6
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SHOW enable_seqscan") == default_seqscan
        assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
        with pytest.raises(asyncpg.DataError, match="different vector dimensions"):
            await repo.dense_leg(conn, _query("", ["a"], exact_rows=0), np.ones(4, np.float32), sizes)
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SHOW enable_seqscan") == default_seqscan
    # The connection went back to the pool without asyncpg's reset query and serves the next search.
    rows = await repo.candidates(pool, _query("backup", ["a"]), np.ones(3, np.float32))
    assert {r["content"] for r in rows} >= {ROWS[0][2], ROWS[1][2]}


async def test_scope_sizes_are_read_again_once_their_time_is_up(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        cached, fresh = repo.ScopeSizes(ttl_s=3600), repo.ScopeSizes(ttl_s=0)
        assert await cached.get(conn, ["a"]) == (6, 7, False)
        await conn.execute("DELETE FROM memories WHERE scope = 'a' AND content LIKE 'Bob%'")
        assert await cached.get(conn, ["a"]) == (6, 7, False)  # within its time: no round trip
        assert await fresh.get(conn, ["a"]) == (5, 6, False)
        assert await cached.get(conn, ["a", "b"]) == (6, 6, False)  # another list of scopes


async def test_the_dense_leg_refuses_to_run_inside_a_callers_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        with pytest.raises(RuntimeError, match="outside one"):
            await repo.dense_leg(conn, _query("", ["a"]), np.ones(3, np.float32), repo.ScopeSizes(ttl_s=0))


async def test_a_deep_search_stays_within_pgvectors_ef_search_limit(pool: asyncpg.Pool) -> None:
    """Candidate depth may go to 10,000, but pgvector refuses hnsw.ef_search over 1,000: the walk's
    breadth is capped and its iterative scan still fills the depth."""
    query = repo.CandidateQuery.from_settings(
        RetrievalSettings(search_candidates=5_000, search_exact_rows=0), "", Prefilter(scopes=["a"]), 10
    )
    assert (query.depth, query.ef_search) == (5_000, repo.MAX_EF_SEARCH)
    async with pool.acquire() as conn:
        ids = await repo.dense_leg(conn, query, np.ones(3, np.float32), repo.ScopeSizes(ttl_s=0))
    assert len(ids) == 6
