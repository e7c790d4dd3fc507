"""`hypermnesia bench search`: search latency on a synthetic store with real embeddings.

Builds N memories (synthetic sentences over a fixed vocabulary, spread over scopes and tags)
through curation's own import path (`Curation.ImportRecords`: raw log, entities, BM25 statistics,
as any store gets them, so `hypermnesia verify` passes on it), with vectors from the real model
(cached between runs), then times a mix of filtered and unfiltered queries through the gRPC Search
call and through REST on the gateway, and measures ANN recall@10 against exact search with the
same filters.

With `fusions` (`--fusions weighted adaptive`), the gRPC path is timed once per fusion in the same
run, each with queries of its own (every text new) in the same shapes, the fusions taking turns so
a slow spell of the machine lands on each.

With `deliveries` (`--deliveries on off`), REST is timed through two gateway processes side by side,
one recording every delivery in the delivery log (HM_DELIVERY_LOG=true, gateway/deliveries.py) and
one not, taking turns in the same way: the log's cost on a search as a client sees it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
import numpy as np
from tqdm import tqdm

from hypermnesia import scope_graphs
from hypermnesia.embedder_client import DOCUMENT, QUERY, EmbedderClient
from hypermnesia.pool import connect_pool
from hypermnesia.settings import CurationSettings, RetrievalSettings
from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from services.curation import fusion_refits, rawlog
from services.embedder.onnx_provider import OnnxProvider
from services.retrieval import repo
from services.retrieval.filters import Prefilter
from tooling.bench.embedder import bench_raw
from tooling.bench.harness import bench_stack
from tooling.bench.load import postmaster_pid
from tooling.bench.store_size import idle_memory_mb, index_sizes_mb, peak_postgres_memory
from tooling.bench.synthesis import REAL_MEMORIES, derived_pairs, derived_text, derived_vectors, fidelity
from tooling.local_stack import LocalStack, gateway_process

# gRPC and REST are timed in this many alternating turns (see run).
TURNS = 3
# The delivery log's arms alternate query by query; the p95 of each sixth of the run is reported
# per arm, so the spread shows next to the difference.
DELIVERY_TURNS = 6
SCOPES = [f"bench:project-{i}" for i in range(10)]
TAGS = ["ops", "design", "bug", "meeting", "decision", "personal"]
SUBJECTS = [
    "the deploy pipeline",
    "Alice",
    "Bob",
    "the billing service",
    "our k3s cluster",
    "the mobile app",
    "the search index",
    "Carol",
    "the nightly backup",
    "the auth middleware",
    "the data team",
    "the CI runners",
    "the payment gateway",
    "Dave",
    "the staging database",
    "the onboarding flow",
]
VERBS = [
    "moved to",
    "failed because of",
    "now depends on",
    "was rewritten for",
    "needs a review of",
    "prefers",
    "blocked on",
    "was rolled back after",
    "switched away from",
    "is documented in",
]
OBJECTS = [
    "Postgres 17",
    "a flaky network switch",
    "the new VPN",
    "rate limiting",
    "TypeScript strict mode",
    "the Grafana dashboard",
    "an expired TLS certificate",
    "the EU data residency rule",
    "Redis",
    "the on-call rotation",
    "weekly releases",
    "the GPU node",
    "feature flags",
    "S3 lifecycle rules",
    "the legacy cron jobs",
    "a memory leak in the worker",
    "OpenTelemetry tracing",
    "the LDAP sync",
]
EXTRAS = [
    "last Tuesday",
    "during the incident",
    "per the ADR",
    "after the audit",
    "before the launch",
    "for the Q3 roadmap",
    "according to the runbook",
    "as agreed in standup",
    "until further notice",
]
QUESTIONS = [
    "what happened with {o} {e}?",
    "why did {s} change {e}?",
    "what does {s} depend on {e}?",
    "who handles {o} {e}",
    "is there a decision about {o} for {s}",
    "{s} {o} {e}",
]


def synthetic_text(rng: random.Random, i: int) -> str:
    ticket = f"{rng.choice(['OPS', 'BUG', 'DEV'])}-{rng.randint(100, 9999)}"
    return (
        f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
        f"{rng.choice(EXTRAS)} ({ticket}, note {i})"
    )


def synthetic_query(rng: random.Random) -> str:
    return rng.choice(QUESTIONS).format(s=rng.choice(SUBJECTS), o=rng.choice(OBJECTS), e=rng.choice(EXTRAS))


async def synthetic_vectors(embedder: EmbedderClient, texts: list[str], cache_dir: Path | None) -> np.ndarray:
    """The texts' document vectors, kept in cache_dir (keyed by model, count and content) so a
    second run skips the ~15 minutes of embedding that 100,000 texts take on a 2-core machine.
    Curation receives them through tooling/bench/known_vectors.py when it imports the records."""
    info = await embedder.wait_for_info(60)
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = None
    if cache_dir is not None:
        path = cache_dir / f"{info.model_id.replace('/', '--')}-{len(texts)}-{digest}.npy"
        if path.exists():
            return np.load(path)
    vectors = np.empty((len(texts), info.dimension), dtype=np.float32)
    with tqdm(total=len(texts), desc="embed", unit="mem", file=sys.stderr) as bar:
        batch = 1024
        for start in range(0, len(texts), batch):
            chunk = texts[start : start + batch]
            vectors[start : start + len(chunk)] = await embedder.embed(chunk, DOCUMENT, timeout_s=600)
            bar.update(len(chunk))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with partial.open("wb") as f:
            np.save(f, vectors)
        partial.replace(path)  # a run stopped mid-write leaves no truncated cache behind
    return vectors


def store_texts(
    rng: random.Random, memories: int, real: int = REAL_MEMORIES
) -> tuple[list[str], list[tuple[int, int]]]:
    """The store's texts: `real` synthetic sentences (their vectors come from the model), then one
    derived text per memory past them (tooling/bench/synthesis.py); and the derived ones' parents."""
    texts = [synthetic_text(rng, i) for i in range(min(memories, real))]
    pairs = derived_pairs(rng, real, memories - real) if memories > real else []
    texts += [derived_text(texts[a], texts[b], real + j) for j, (a, b) in enumerate(pairs)]
    return texts, pairs


async def store_vectors(
    embedder: EmbedderClient, texts: list[str], pairs: list[tuple[int, int]], cache_dir: Path | None
) -> np.ndarray:
    """The real memories' vectors from the model (or the cache), then the derived ones'."""
    real = await synthetic_vectors(embedder, texts[: len(texts) - len(pairs)], cache_dir)
    return np.concatenate([real, derived_vectors(real, pairs, seed=len(texts))]) if pairs else real


# Records per ImportRecords call: curation's limit (hypermnesia.validation.MAX_IMPORT_RECORDS).
IMPORT_BATCH = 5000
BENCH_CALLER = common_pb2.Caller(principal="bench", grants=["bench:*"])


def synthetic_records(texts: list[str], rng: random.Random) -> list[curation_pb2.RecordInput]:
    """One note record per text. Scope and tag are drawn independently, so every (scope, tag)
    filter has matches; source_ref makes a re-sent batch a no-op, as for any writer."""
    return [
        curation_pb2.RecordInput(
            type="note",
            kind="semantic",
            scope=rng.choice(SCOPES),
            content=text,
            tags=[rng.choice(TAGS)],
            source_ref=f"bench-{i}",
        )
        for i, text in enumerate(texts)
    ]


async def build_store(
    curation_address: str, database_url: str, records: list[curation_pb2.RecordInput]
) -> None:
    """Write the records through curation's ImportRecords, IMPORT_BATCH at a time."""
    async with grpc.aio.insecure_channel(curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        with tqdm(total=len(records), desc="import", unit="mem", file=sys.stderr) as bar:
            for start in range(0, len(records), IMPORT_BATCH):
                chunk = records[start : start + IMPORT_BATCH]
                reply = await stub.ImportRecords(
                    curation_pb2.ImportRecordsRequest(caller=BENCH_CALLER, records=chunk), timeout=3600
                )
                if reply.imported + reply.skipped != len(chunk):
                    raise RuntimeError(
                        f"curation imported {reply.imported} and skipped {reply.skipped} of {len(chunk)} records"
                    )
                bar.update(len(chunk))
    # A store that has settled, as users search it: without this, autovacuum's first pass over
    # the fresh rows (and the hint bits every first read writes) lands in the timing.
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("VACUUM (ANALYZE) memories")
    finally:
        await conn.close()


async def verify_store(database_url: str) -> int:
    """Walk the raw log's chain as `hypermnesia verify` does; the number of records it checked."""
    conn = await asyncpg.connect(database_url)
    try:
        result = await rawlog.verify(conn)
    finally:
        await conn.close()
    if result.first_broken_seq is not None:
        raise RuntimeError(
            f"the bench store's raw log is broken at seq {result.first_broken_seq}: {result.reason}"
        )
    return int(result.checked)


@dataclass
class Query:
    text: str
    scopes: list[str]
    tags: list[str]
    fusion: str = ""  # the service's default

    @property
    def shape(self) -> str:
        if len(self.scopes) > 1:
            return "all 10 scopes"
        return "1 scope + 1 tag" if self.tags else "1 scope"


def new_query_text(rng: random.Random, seen: set[str]) -> str:
    """A query text not in `seen` (added to it): none is answered from the embedder's cache."""
    while (text := synthetic_query(rng)) in seen:
        pass
    seen.add(text)
    return text


def make_queries(count: int, rng: random.Random, seen: set[str]) -> list[Query]:
    """`count` queries in three shapes, in turn: every scope (the store), one scope (a project:
    a tenth of the store), one scope and one tag (a sixtieth). Every text is new (not in `seen`),
    so no query embedding comes from the embedder's cache: each search pays for its embedding."""
    out: list[Query] = []
    while len(out) < count:
        text = new_query_text(rng, seen)
        shape = len(out) % 3
        if shape == 0:
            out.append(Query(text, SCOPES, []))
        elif shape == 1:
            out.append(Query(text, [rng.choice(SCOPES)], []))
        else:
            out.append(Query(text, [rng.choice(SCOPES)], [rng.choice(TAGS)]))
    return out


async def build_scope_graphs(database_url: str, maintenance_work_mem: str | None = None) -> int:
    """What curation does within a minute of a scope growing large (hypermnesia/scope_graphs.py),
    with the server's maintenance_work_mem or the one given (set on the database, so the build's
    connection has it)."""
    if maintenance_work_mem is not None:
        conn = await asyncpg.connect(database_url)
        try:
            name = await conn.fetchval("SELECT current_database()")
            await conn.execute(
                f"ALTER DATABASE \"{name}\" SET maintenance_work_mem = '{maintenance_work_mem}'"
            )
        finally:
            await conn.close()
    pool = await connect_pool(database_url, max_size=1)
    try:
        return len(await scope_graphs.ensure(pool, CurationSettings().scope_graph_rows))
    finally:
        await pool.close()


# hnsw.ef_search values whose recall and dense-leg time are measured beside the service's own.
EF_SEARCH_SWEEP = (40, 100, 200, 400)


async def ann_recall(
    database_url: str, embedder: EmbedderClient, queries: list[Query], sweep: tuple[int, ...] = ()
) -> tuple[dict[str, float], dict[str, dict[str, dict[str, float]]]]:
    """recall@10 of the service's dense leg (repo.dense_leg: exact scan or iterative HNSW walk, as the
    service picks for the filter, with the service's settings) against an exact scan, per shape;
    and for each hnsw.ef_search of `sweep`, the leg's recall and median time (ms) per shape."""
    settings = RetrievalSettings()
    pool = await connect_pool(database_url, max_size=1)
    recalls: dict[str, list[float]] = {}
    swept: dict[int, dict[str, tuple[list[float], list[float]]]] = {ef: {} for ef in sweep}
    try:
        for q in queries:
            (vector,) = await embedder.embed([q.text], QUERY, timeout_s=60)
            cq = repo.CandidateQuery.from_settings(
                settings, q.text, Prefilter(scopes=q.scopes, tags=q.tags), 10
            )
            async with pool.acquire() as conn:
                ann = await repo.dense_leg(conn, cq, vector, repo.ScopeSizes(ttl_s=0))
            where = "scope = ANY($2::text[]) AND ($3::text[] = '{}' OR tags @> $3::text[])"
            exact = await pool.fetch(
                f"SELECT id FROM memories WHERE {where} ORDER BY (embedding <=> $1) + 0 LIMIT 10",
                vector,
                q.scopes,
                q.tags,
            )
            truth = {r["id"] for r in exact}
            if not truth:
                continue  # nothing matches the filter: no recall to measure
            # The leg hands its candidates on for fusion; its nearest 10 by exact distance count.
            recalls.setdefault(q.shape, []).append(len(truth & set(ann)) / len(truth))
            for ef in sweep:
                async with pool.acquire() as conn:
                    started = time.perf_counter()
                    got = await repo.dense_leg(
                        conn, replace(cq, ef_search=ef), vector, repo.ScopeSizes(ttl_s=0)
                    )
                    ms = (time.perf_counter() - started) * 1000
                found, times = swept[ef].setdefault(q.shape, ([], []))
                found.append(len(truth & set(got)) / len(truth))
                times.append(ms)
    finally:
        await pool.close()
    by_ef = {
        str(ef): {
            shape: {"recall": statistics.fmean(found), "ms_p50": statistics.median(times)}
            for shape, (found, times) in sorted(shapes.items())
        }
        for ef, shapes in swept.items()
    }
    return {k: statistics.fmean(v) for k, v in sorted(recalls.items())}, by_ef


async def stage_medians(database_url: str, queries: list[Query]) -> dict[str, float]:
    """Median per-stage milliseconds the service logged (search_log) for these queries."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT stage_ms FROM search_log WHERE query = ANY($1::text[])", [q.text for q in queries]
        )
    finally:
        await conn.close()
    stages = [json.loads(r["stage_ms"]) for r in rows]
    return {name: statistics.median(s[name] for s in stages) for name in (stages[0] if stages else {})}


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]

    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "mean": statistics.fmean(ordered)}


Timings = list[tuple[str, float]]  # (query shape, milliseconds)


async def time_grpc(address: str, queries: list[Query]) -> Timings:
    caller = BENCH_CALLER
    out = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalStub(channel)
        for q in queries:
            started = time.perf_counter()
            await stub.Search(
                retrieval_pb2.SearchRequest(
                    caller=caller, query=q.text, scopes=q.scopes, tags=q.tags, k=10, fusion=q.fusion
                ),
                timeout=30,
            )
            out.append((q.shape, (time.perf_counter() - started) * 1000))
    return out


def time_rest(base_url: str, queries: list[Query]) -> Timings:
    """REST reads one project at a time: a query over every scope becomes one over a scope. Timed
    with the standard library's keep-alive client: httpx alone added ~2.7 ms to a /health call
    (4.3 against 1.6 ms), which is the client's cost, not the gateway's (docs/PERFORMANCE.md)."""
    http = HTTPConnection(urlsplit(base_url).netloc, timeout=30)
    try:
        return [_rest_search(http, q, i) for i, q in enumerate(queries)]
    finally:
        http.close()


def _rest_search(http: HTTPConnection, q: Query, i: int) -> tuple[str, float]:
    """One timed REST search on a keep-alive connection: (shape, ms)."""
    scope = q.scopes[0] if len(q.scopes) == 1 else SCOPES[i % len(SCOPES)]
    body = json.dumps({"query": q.text, "k": 10, "tags": q.tags or None, "scope": scope})
    started = time.perf_counter()
    http.request("POST", "/memories/search", body, {"Content-Type": "application/json"})
    response = http.getresponse()
    payload = response.read()
    ms = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise RuntimeError(f"REST search answered {response.status}: {payload[:500]!r}")
    return Query(q.text, [scope], q.tags).shape, ms


async def time_from_own_process(path: str, target: str, warmup: list[Query], queries: list[Query]) -> Timings:
    """`queries` timed from a separate client process (after `warmup`), as real clients call: a
    client sharing the services' process and event loop adds its own work to every call."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tooling.bench.search",
        path,
        target,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    sent = json.dumps([asdict(q) for q in warmup + queries]).encode()
    out, _ = await child.communicate(sent)
    if child.returncode != 0:
        raise RuntimeError(
            f"the benchmark's {path} client exited with {child.returncode}; see its output above"
        )
    return [(shape, ms) for shape, ms in json.loads(out)][len(warmup) :]


def _client(path: str, target: str) -> None:
    """The client process of time_from_own_process (and of time_delivery_arms, `rest-arms`):
    queries on stdin, timings on stdout."""
    if path == "rest-arms":
        plan = [(arm, Query(**q)) for arm, q in json.load(sys.stdin)]
        json.dump(_rest_arms(json.loads(target), plan), sys.stdout)
        return
    queries = [Query(**q) for q in json.load(sys.stdin)]
    timings = asyncio.run(time_grpc(target, queries)) if path == "grpc" else time_rest(target, queries)
    json.dump(timings, sys.stdout)


def summarise(timings: Timings) -> dict:
    by_shape: dict[str, list[float]] = {}
    for shape, ms in timings:
        by_shape.setdefault(shape, []).append(ms)
    return {
        **percentiles([ms for _, ms in timings]),
        "p50_by_shape": {shape: statistics.median(v) for shape, v in sorted(by_shape.items())},
    }


def with_fusion(queries: list[Query], fusion: str) -> list[Query]:
    return [Query(q.text, q.scopes, q.tags, fusion) for q in queries]


# A store larger than this is also measured at this size in the same run, first (`at`).
BESIDE = 100_000
# maintenance_work_mem for the scope graphs' builds: a graph that fits builds in memory (pgvector
# warns and slows down when it does not); a 100,000-row scope's graph is ~200 MB.
BUILD_MEMORY = "512MB"


async def run(
    memories: int,
    queries: int,
    database_url: str | None,
    cache_dir: Path | None = None,
    seed: int = 7,
    fusions: list[str] | None = None,
    deliveries: list[str] | None = None,
    at: list[int] | None = None,
    real: int = REAL_MEMORIES,
) -> dict:
    """The store grows to each size of `at` (default: BESIDE when `memories` is larger) and then to
    `memories`; at each, the scope graphs are built afresh (timed, Postgres's memory sampled) and
    searches timed. Fusions and delivery-log arms are timed at the last size only."""
    sizes = sorted({n for n in (at if at is not None else [BESIDE]) if 0 < n < memories}) + [memories]
    tokens = {"bench-token": {"principal": "bench", "scopes": ["bench:*"]}}
    async with bench_stack(
        memories,
        database_url,
        cache_dir,
        seed,
        prefix="hm-bench-",
        stack_options=dict(
            search_log_enabled=True,
            # The bench builds the scope graphs itself, before timing, rather than have curation's
            # periodic pass start one in the middle of it.
            scope_graph_rows=0,
        ),
        gateway_options=dict(auth_tokens=tokens, default_project="bench:project-0"),
        real=real,
    ) as bench:
        stack, db_url, client, base_url = bench.stack, bench.db_url, bench.embedder, bench.base_url
        postmaster = await postmaster_pid(db_url)
        start_s = bench.vectors_s + time.perf_counter() - bench.stack_started  # vectors, stack start
        rng, seen = random.Random(seed + 1), set[str]()
        steps: list[dict] = []
        built = 0
        for size in sizes:
            step = await grow_store(stack.curation_address, db_url, bench.records[built:size], postmaster)
            step["memories"] = built = size
            if not steps:  # the first step's build includes the vectors and the stack's start
                step["build_seconds"] += start_s
            step["load_average"] = os.getloadavg()[0]  # this shared machine's business as searches start
            step.update(await measure_searches(stack, db_url, client, base_url, queries, rng, seen))
            # The machine's speed at this size: figures of two sizes compare only at a like speed.
            step["raw_query_embedding_ms_p50"] = raw_query_embedding_ms(
                bench.work / "models", make_queries(30, rng, seen)
            )
            # The stack as it sits between searches: wait for the search log's writes to land.
            await stack.searcher.drain()
            await asyncio.sleep(2)
            step["idle_pss_mb"] = idle_memory_mb(postmaster)
            steps.append(step)
        last = steps[-1]
        qs = last.pop("_queries")
        for step in steps[:-1]:
            step.pop("_queries")
        # The searches so far logged their observations: one refit gives adaptive
        # fusion the estimates it reads (a lookup that finds a row, as in use).
        await stack.searcher.drain()
        await fusion_refits.refit(stack.writer.pool, "bench")
        by_fusion: dict[str, Timings] = {}
        fusion_qs = {f: with_fusion(make_queries(queries, rng, seen), f) for f in fusions or []}
        for turn in range(TURNS):
            shift = turn % max(1, len(fusion_qs))
            for f in list(fusion_qs)[shift:] + list(fusion_qs)[:shift]:
                warmup = with_fusion(make_queries(10, rng, seen), f)
                by_fusion.setdefault(f, [])
                by_fusion[f] += await time_from_own_process(
                    "grpc", stack.retrieval_address, warmup, fusion_qs[f][turn::TURNS]
                )
        by_deliveries = await time_delivery_arms(
            deliveries or [], bench.work, base_url, stack.retrieval_address, stack.curation_address,
            dict(auth_tokens=tokens, default_project="bench:project-0"), queries, rng, seen,
        )  # fmt: skip
        await stack.searcher.drain()  # search_log rows are written off the hot path
        fusion_stages = {f: await stage_medians(db_url, fq) for f, fq in fusion_qs.items()}
        stages = await stage_medians(db_url, qs)
        raw_ms = raw_query_embedding_ms(bench.work / "models", make_queries(60, rng, seen))
        derived = len(bench.texts) - min(real, memories)
        vectors: dict[str, Any] = {"real": min(real, memories), "derived": derived}
        if derived:
            sample = list(range(len(bench.texts) - derived, len(bench.texts)))[:: max(1, derived // 200)]
            vectors["fidelity"] = await fidelity(
                client, [bench.texts[i] for i in sample], bench.vectors[sample]
            )
    return {
        "memories": memories,
        "queries": queries,
        "build_seconds": sum(step["build_seconds"] for step in steps),
        "raw_log_records_verified": last["raw_log_records_verified"],
        "scope_graphs": last["scope_graphs"],
        "scope_graphs_seconds": last["graphs_seconds"],
        "grpc_ms": last["grpc_ms"],
        "rest_ms": last["rest_ms"],
        "ann_recall_at_10": last["ann_recall_at_10"],
        "grpc_stage_ms_p50": stages,
        "grpc_ms_by_fusion": {f: summarise(t) for f, t in by_fusion.items()},
        "grpc_stage_ms_p50_by_fusion": fusion_stages,
        "raw_query_embedding_ms_p50": raw_ms,
        "rest_ms_by_delivery_log": {
            arm: {**summarise(t), "p95_by_turn": _p95_by_turn(t, -(-len(t) // DELIVERY_TURNS))}
            for arm, t in by_deliveries.items()
        },
        "vectors": vectors,
        "build_memory": BUILD_MEMORY,
        "steps": steps,
    }


async def grow_store(
    curation_address: str, db_url: str, records: list[curation_pb2.RecordInput], postmaster: int | None
) -> dict:
    """Import `records` into the store (its scope graphs dropped first, so each size's graphs are
    built whole, as a new scope's would be), verify the raw log, build the scope graphs; times and
    Postgres's peak memory of each part."""
    conn = await asyncpg.connect(db_url)
    try:
        for name in await conn.fetch(
            "SELECT relname FROM pg_class WHERE relname LIKE $1 AND relkind = 'i'", scope_graphs.PREFIX + "%"
        ):
            await conn.execute(f'DROP INDEX "{name["relname"]}"')
    finally:
        await conn.close()
    started = time.perf_counter()
    async with peak_postgres_memory(postmaster) as import_peak:
        await build_store(curation_address, db_url, records)
    import_s = time.perf_counter() - started
    verified = await verify_store(db_url)
    started = time.perf_counter()
    async with peak_postgres_memory(postmaster) as graphs_peak:
        graphs = await build_scope_graphs(db_url, BUILD_MEMORY)
    graphs_s = time.perf_counter() - started
    conn = await asyncpg.connect(db_url)
    try:
        sizes = await index_sizes_mb(conn)
    finally:
        await conn.close()
    return {
        "imported": len(records),
        "import_seconds": import_s,
        "build_seconds": import_s,
        "raw_log_records_verified": verified,
        "scope_graphs": graphs,
        "graphs_seconds": graphs_s,
        "sizes_mb": sizes,
        "postgres_peak_mb": {
            "import_pss": import_peak.pss_mb,
            "import_largest_rss": import_peak.rss_max_process_mb,
            "graphs_pss": graphs_peak.pss_mb,
            "graphs_largest_rss": graphs_peak.rss_max_process_mb,
        },
    }


async def measure_searches(
    stack: LocalStack,
    db_url: str,
    client: EmbedderClient,
    base_url: str,
    queries: int,
    rng: random.Random,
    seen: set[str],
) -> dict:
    """gRPC and REST timed in turns, each with new queries, and the dense leg's recall."""
    qs = make_queries(queries, rng, seen)
    rest_qs = make_queries(queries, rng, seen)
    grpc_ms, rest_ms = [], []
    # The two paths take turns, so a slow spell of this shared machine lands on both
    # and their difference stays the gateway's own cost.
    for turn in range(TURNS):
        grpc_ms += await time_from_own_process(
            "grpc", stack.retrieval_address, make_queries(10, rng, seen), qs[turn::TURNS]
        )
        rest_ms += await time_from_own_process(
            "rest", base_url, make_queries(10, rng, seen), rest_qs[turn::TURNS]
        )
    recall, by_ef = await ann_recall(db_url, client, qs[: min(len(qs), 150)], EF_SEARCH_SWEEP)
    return {
        "grpc_ms": summarise(grpc_ms),
        "rest_ms": summarise(rest_ms),
        "ann_recall_at_10": recall,
        "ann_by_ef_search": by_ef,
        "_queries": qs,
    }


def _p95_by_turn(timings: Timings, per_turn: int) -> list[float]:
    turns = [timings[i : i + per_turn] for i in range(0, len(timings), max(1, per_turn))]
    return [percentiles([ms for _, ms in t])["p95"] for t in turns if t]


async def time_delivery_arms(
    arms: list[str],
    work: Path,
    on_url: str,
    retrieval_address: str,
    curation_address: str,
    options: dict,
    queries: int,
    rng: random.Random,
    seen: set[str],
) -> dict[str, Timings]:
    """REST through a gateway with the delivery log on (the bench's own, HM_DELIVERY_LOG's default)
    and one with it off, `queries` each, from one client process that alternates between them query
    by query (on, off, off, on, ...): on this shared machine a slow spell lasts seconds, and timed in
    blocks it lands on one arm (a first run in blocks put the log's cost at -53%)."""
    if not arms:
        return {}
    async with gateway_process(
        retrieval_address, curation_address, work / "gateway-no-log.log", require_auth=False,
        delivery_log=False, **options,
    ) as off_url:  # fmt: skip
        urls = {"on": on_url, "off": off_url}
        arm_qs = {arm: make_queries(queries, rng, seen) for arm in arms}
        plan: list[tuple[str, Query]] = []
        for i in range(queries):
            order = arms if i % 2 == 0 else arms[::-1]
            plan += [(arm, arm_qs[arm][i]) for arm in order]
        warmup = [(arm, q) for q in make_queries(10, rng, seen) for arm in arms]
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tooling.bench.search", "rest-arms", json.dumps(urls),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        sent = json.dumps([[arm, asdict(q)] for arm, q in warmup + plan]).encode()
        out, _ = await child.communicate(sent)
        if child.returncode != 0:
            raise RuntimeError(f"the benchmark's rest-arms client exited with {child.returncode}")
    timed: dict[str, Timings] = {arm: [] for arm in arms}
    for arm, shape, ms in json.loads(out)[len(warmup) :]:
        timed[arm].append((shape, ms))
    return timed


def _rest_arms(urls: dict[str, str], plan: list[tuple[str, Query]]) -> list[tuple[str, str, float]]:
    """`plan`'s queries, each through its arm's gateway (a keep-alive connection per arm)."""
    connections = {arm: HTTPConnection(urlsplit(url).netloc, timeout=30) for arm, url in urls.items()}
    try:
        return [(arm, *_rest_search(connections[arm], q, i)) for i, (arm, q) in enumerate(plan)]
    finally:
        for http in connections.values():
            http.close()


def raw_query_embedding_ms(cache_dir: Path, queries: list[Query]) -> float:
    """p50 of embedding one query in this process with raw onnxruntime (no service), as the
    machine runs now: this shared box's speed moves between runs, and with it every figure above."""
    provider = OnnxProvider.from_settings(
        None, cache_dir, max_tokens=256, quantization="fp32", intra_op_threads=0, inter_op_threads=0
    )
    try:
        texts = [q.text for q in queries]
        return bench_raw(provider, texts, 1, len(texts), "raw, one query").p50_ms
    finally:
        provider.close()


def format_table(result: dict) -> str:
    lines = [
        f"{result['memories']:,} memories in 10 scopes, {result['queries']} queries per path, one at a"
        " time, in three shapes (every scope / 1 scope / 1 scope + 1 tag; REST reads one scope,"
        " through a gateway process of its own, from a keep-alive http.client),"
        f" k=10, query embedding included; store built through curation's import in"
        f" {result['build_seconds']:.0f} s (raw log of {result['raw_log_records_verified']:,} records"
        " verified),"
        f" {result['scope_graphs']} scope graphs in {result['scope_graphs_seconds']:.0f} s",
        "",
        "| path | p50 ms | p95 ms | p99 ms | mean ms | p50 by shape |",
        "|---|---|---|---|---|---|",
    ]
    for name, key in (("gRPC Retrieval.Search", "grpc_ms"), ("REST POST /memories/search", "rest_ms")):
        p = result[key]
        shapes = ", ".join(f"{shape} {ms:.1f}" for shape, ms in p["p50_by_shape"].items())
        lines.append(
            f"| {name} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['mean']:.1f} | {shapes} |"
        )
    by_fusion = result.get("grpc_ms_by_fusion") or {}
    if by_fusion:
        lines += [
            "",
            f"gRPC per fusion, same run, {result['queries']} queries each, taking turns:",
            "",
            "| fusion | p50 ms | p95 ms | p99 ms | mean ms | p95 vs first | inside: embed / SQL / score (p50) |",
            "|---|---|---|---|---|---|---|",
        ]
        first = next(iter(by_fusion.values()))["p95"]
        for f, p in by_fusion.items():
            inside = result["grpc_stage_ms_p50_by_fusion"].get(f, {})
            stage_text = " / ".join(
                f"{inside.get(k, 0.0):.1f}" for k in ("embed_ms", "candidates_ms", "score_ms")
            )
            lines.append(
                f"| {f} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['mean']:.1f}"
                f" | {p['p95'] / first - 1:+.1%} | {stage_text} |"
            )
    by_log = result.get("rest_ms_by_delivery_log") or {}
    if by_log:
        lines += [
            "",
            f"REST with the delivery log on and off, same run, {result['queries']} queries each, "
            "alternating query by query from one client, a gateway process each:",
            "",
            "| delivery log | p50 ms | p95 ms | p99 ms | mean ms | p95 vs off | p95 of each sixth of the run |",
            "|---|---|---|---|---|---|---|",
        ]
        first = by_log.get("off", next(iter(by_log.values())))["p95"]
        for arm, p in by_log.items():
            turns = " / ".join(f"{ms:.1f}" for ms in p["p95_by_turn"])
            lines.append(
                f"| {arm} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['mean']:.1f}"
                f" | {p['p95'] / first - 1:+.1%} | {turns} |"
            )
    stages = ", ".join(f"{k} {v:.1f}" for k, v in result["grpc_stage_ms_p50"].items())
    lines += ["", f"Inside the retrieval service (gRPC queries, medians from search_log, ms): {stages}"]
    lines += [
        "",
        "This machine during the run: one query embedded in-process by raw onnxruntime, p50"
        f" {result['raw_query_embedding_ms_p50']:.1f} ms (embed_ms above is that plus the gRPC hop)",
    ]
    recall = result["ann_recall_at_10"]
    lines += ["", "| dense leg recall@10 vs exact (same filters) | value |", "|---|---|"]
    for name, value in recall.items():
        lines.append(f"| {name} | {value:.3f} |")
    return "\n".join(lines + format_steps(result))


def format_steps(result: dict) -> list[str]:
    """The store at each size of the run, side by side: its build, its size, Postgres's memory,
    search through REST, the dense leg's recall (and per hnsw.ef_search), the idle stack."""
    steps, v = result["steps"], result["vectors"]
    lines = [
        "",
        f"The store at each size, same run (vectors: {v['real']:,} real, {v['derived']:,} derived"
        " from two real ones each, tooling/bench/synthesis.py; queries embedded for real):",
    ]
    if "fidelity" in v:
        f = v["fidelity"]
        lines.append(
            f"derived vector vs the model's vector of its text, cosine over {f['sample']:.0f}: p50"
            f" {f['cosine_p50']:.3f}, min {f['cosine_min']:.3f} (two unrelated memories:"
            f" {f['unrelated_cosine_p50']:.3f})"
        )
    lines += [
        "",
        "| memories | import s (rec/s) | scope graphs: built in s | table / global HNSW / scope HNSW MB"
        " | Postgres peak PSS MB: import / graphs (largest backend RSS) | REST p50 / p95 / p99 ms"
        " | recall@10: 1 scope / + tag / all | idle PSS MB: Postgres / embedder / gateway"
        " | load average; raw query embedding p50 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for st in steps:
        sz, pk, rest, rc, idle = (
            st["sizes_mb"],
            st["postgres_peak_mb"],
            st["rest_ms"],
            st["ann_recall_at_10"],
            st["idle_pss_mb"],
        )
        recall = " / ".join(
            f"{rc.get(shape, float('nan')):.3f}" for shape in ("1 scope", "1 scope + 1 tag", "all 10 scopes")
        )
        lines.append(
            f"| {st['memories']:,} | {st['import_seconds']:.0f} ({st['imported'] / max(st['import_seconds'], 1e-9):.0f})"
            f" | {st['scope_graphs']} in {st['graphs_seconds']:.0f} | {sz['table']:.0f} / {sz['global_hnsw']:.0f} / {sz['scope_hnsw']:.0f}"
            f" | {pk['import_pss']:.0f} / {pk['graphs_pss']:.0f} ({pk['graphs_largest_rss']:.0f})"
            f" | {rest['p50']:.1f} / {rest['p95']:.1f} / {rest['p99']:.1f} | {recall}"
            f" | {idle.get('postgres', float('nan')):.0f} / {idle.get('embedder', float('nan')):.0f} / {idle.get('gateway', float('nan')):.0f}"
            f" | {st['load_average']:.1f}; {st['raw_query_embedding_ms_p50']:.1f} |"
        )
    if len(steps) > 1:
        first, last = steps[0]["rest_ms"], steps[-1]["rest_ms"]
        lines.append(
            f"\nREST p95 at {steps[-1]['memories']:,} / at {steps[0]['memories']:,}: {last['p95'] / first['p95']:.2f}x"
            f" (p50 {last['p50'] / first['p50']:.2f}x); scope graphs built with maintenance_work_mem {result['build_memory']}"
        )
    lines += [
        "",
        "| memories | hnsw.ef_search | dense leg recall@10 (ms p50): 1 scope / + tag / all |",
        "|---|---|---|",
    ]
    for st in steps:
        for ef, shapes in st["ann_by_ef_search"].items():
            cells = " / ".join(
                f"{shapes[shape]['recall']:.3f} ({shapes[shape]['ms_p50']:.1f})" if shape in shapes else "-"
                for shape in ("1 scope", "1 scope + 1 tag", "all 10 scopes")
            )
            lines.append(f"| {st['memories']:,} | {ef} | {cells} |")
    return lines


def main(
    memories: int,
    queries: int,
    database_url: str | None,
    cache_dir: Path,
    as_json: bool,
    fusions: list[str] | None = None,
    deliveries: list[str] | None = None,
    at: list[int] | None = None,
) -> None:
    result = asyncio.run(
        run(memories, queries, database_url, cache_dir, fusions=fusions, deliveries=deliveries, at=at)
    )
    print(json.dumps(result, indent=2) if as_json else format_table(result))


if __name__ == "__main__":
    _client(*sys.argv[1:3])
