"""`hypermnesia bench search`: search latency on a synthetic store with real embeddings.

Builds N memories (synthetic sentences over a fixed vocabulary, spread over scopes and tags),
embeds them with the real model, loads them with COPY (the bench measures reads, not writes),
then times a mix of filtered and unfiltered queries through the gRPC Search call and through
REST on the gateway, and measures ANN recall@10 against exact search with the same filters."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import grpc
import httpx
import numpy as np
from tqdm import tqdm

from hypermnesia.db import resolve_database_url
from hypermnesia.embedder_client import DOCUMENT, QUERY, EmbedderClient
from hypermnesia.local_stack import create_database, drop_database, embedder_process, local_stack
from hypermnesia.v1 import common_pb2, retrieval_pb2, retrieval_pb2_grpc

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


async def synthetic_vectors(
    embedder: EmbedderClient, texts: list[str], cache_dir: Path | None
) -> np.ndarray:
    """The texts' document vectors, kept in cache_dir (keyed by model, count and content) so a
    second run skips the ~15 minutes of embedding that 100,000 texts take on a 2-core machine."""
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
        np.save(path, vectors)
    return vectors


async def build_store(
    database_url: str, embedder: EmbedderClient, n: int, seed: int, cache_dir: Path | None = None
) -> None:
    """N synthetic memories with real embeddings, loaded with COPY (triggers keep BM25 stats)."""
    rng = random.Random(seed)
    texts = [synthetic_text(rng, i) for i in range(n)]
    all_vectors = await synthetic_vectors(embedder, texts, cache_dir)
    now = datetime.now(UTC)
    conn = await asyncpg.connect(database_url)
    from pgvector.asyncpg import register_vector

    await register_vector(conn)
    try:
        with tqdm(total=n, desc="load", unit="mem", file=sys.stderr) as bar:
            batch = 1024
            for start in range(0, n, batch):
                chunk = texts[start : start + batch]
                vectors = all_vectors[start : start + len(chunk)]
                # Scope and tag are drawn independently, so every (scope, tag) filter has matches.
                records = [
                    (
                        uuid.uuid4(),
                        rng.choice(SCOPES),
                        "bench",
                        "note",
                        "semantic",
                        "",
                        text,
                        [rng.choice(TAGS)],
                        "{}",
                        1.0,
                        "slow",
                        now,
                        now,
                        now,
                        now,
                        vectors[j],
                    )
                    for j, text in enumerate(chunk)
                ]
                await conn.copy_records_to_table(
                    "memories",
                    records=records,
                    columns=[
                        "id",
                        "scope",
                        "owner_id",
                        "type",
                        "kind",
                        "description",
                        "content",
                        "tags",
                        "metadata",
                        "importance",
                        "decay_class",
                        "created_at",
                        "updated_at",
                        "last_accessed_at",
                        "valid_from",
                        "embedding",
                    ],
                )
                bar.update(len(chunk))
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()


@dataclass
class Query:
    text: str
    scopes: list[str]
    tags: list[str]

    @property
    def filtered(self) -> bool:
        return bool(self.tags) or len(self.scopes) == 1


def make_queries(count: int, rng: random.Random, seen: set[str]) -> list[Query]:
    """`count` queries, half filtered by one scope + one tag. Every text is new (not in `seen`), so
    no query embedding comes from the embedder's cache: each search pays for its embedding."""
    out: list[Query] = []
    while len(out) < count:
        text = synthetic_query(rng)
        if text in seen:
            continue
        seen.add(text)
        if len(out) % 2:
            out.append(Query(text, [rng.choice(SCOPES)], [rng.choice(TAGS)]))
        else:
            out.append(Query(text, SCOPES, []))
    return out


async def ann_recall(
    database_url: str, embedder: EmbedderClient, queries: list[Query], ef_search: int, depth: int
) -> dict:
    """recall@10 of the HNSW walk (iterative scan, same filters) against an exact scan."""
    conn = await asyncpg.connect(database_url)
    from pgvector.asyncpg import register_vector

    await register_vector(conn)
    recalls: dict[str, list[float]] = {"filtered": [], "unfiltered": []}
    try:
        for q in queries:
            (vector,) = await embedder.embed([q.text], QUERY, timeout_s=60)
            where = "scope = ANY($2::text[]) AND ($3::text[] = '{}' OR tags @> $3::text[])"
            async with conn.transaction():
                await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
                # As the service reads it: the HNSW walk's first `depth` rows, re-sorted exactly.
                ann = await conn.fetch(
                    f"WITH a AS MATERIALIZED (SELECT id, embedding <=> $1 AS d FROM memories WHERE {where}"
                    f" ORDER BY embedding <=> $1 LIMIT {int(depth)}) SELECT id FROM a ORDER BY d LIMIT 10",
                    vector,
                    q.scopes,
                    q.tags,
                )
            exact = await conn.fetch(
                f"SELECT id FROM memories WHERE {where} ORDER BY (embedding <=> $1) + 0 LIMIT 10",
                vector,
                q.scopes,
                q.tags,
            )
            truth = {r["id"] for r in exact}
            if not truth:
                continue  # nothing matches the filter: no recall to measure
            got = {r["id"] for r in ann}
            recalls["filtered" if q.filtered else "unfiltered"].append(len(truth & got) / len(truth))
    finally:
        await conn.close()
    return {k: statistics.fmean(v) for k, v in recalls.items() if v}


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


async def time_grpc(address: str, queries: list[Query]) -> list[float]:
    caller = common_pb2.Caller(principal="bench", grants=["bench:*"])
    out = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalStub(channel)
        for q in queries:
            started = time.perf_counter()
            await stub.Search(
                retrieval_pb2.SearchRequest(caller=caller, query=q.text, scopes=q.scopes, tags=q.tags, k=10),
                timeout=30,
            )
            out.append((time.perf_counter() - started) * 1000)
    return out


async def time_rest(base_url: str, queries: list[Query]) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        for q in queries:
            body = {"query": q.text, "k": 10, "tags": q.tags or None}
            if len(q.scopes) == 1:
                body["scope"] = q.scopes[0]
            started = time.perf_counter()
            response = await http.post("/memories/search", json=body)
            out.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return out


async def run(memories: int, queries: int, database_url: str | None, seed: int = 7) -> dict:
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        work = Path(tmp)
        server_url, _embedded = resolve_database_url(database_url, work)
        db_url = await create_database(server_url, prefix="hm_bench")
        try:
            async with embedder_process(work) as embedder_address:
                client = EmbedderClient(embedder_address)
                await client.wait_for_info(60)
                # The pin must exist before COPY: the stack creates it, so start it first.
                tokens = {"bench-token": {"principal": "bench", "scopes": ["bench:*"]}}
                async with local_stack(
                    db_url,
                    embedder_address,
                    work,
                    gateway=True,
                    require_auth=False,
                    auth_tokens=tokens,
                    default_project="bench:project-0",
                    search_log_enabled=True,
                ) as stack:
                    started = time.perf_counter()
                    await build_store(db_url, client, memories, seed)
                    build_s = time.perf_counter() - started
                    rng, seen = random.Random(seed + 1), set[str]()
                    qs = make_queries(queries, rng, seen)
                    await time_grpc(stack.retrieval_address, make_queries(20, rng, seen))  # warm up
                    grpc_ms = await time_grpc(stack.retrieval_address, qs)
                    assert stack.base_url is not None
                    await time_rest(stack.base_url, make_queries(20, rng, seen))
                    rest_ms = await time_rest(stack.base_url, make_queries(queries, rng, seen))
                    await asyncio.sleep(1)  # the last searches' search_log rows are written off the hot path
                    stages = await stage_medians(db_url, qs)
                    recall = await ann_recall(
                        db_url, client, qs[: min(len(qs), 100)], ef_search=200, depth=200
                    )
                await client.close()
        finally:
            await drop_database(db_url)
    return {
        "memories": memories,
        "queries": queries,
        "build_seconds": build_s,
        "grpc_ms": percentiles(grpc_ms),
        "rest_ms": percentiles(rest_ms),
        "ann_recall_at_10": recall,
        "grpc_stage_ms_p50": stages,
    }


def format_table(result: dict) -> str:
    lines = [
        f"{result['memories']:,} memories, {result['queries']} queries per path"
        " (half filtered by scope + tag),"
        f" k=10, query embedding included; store built in {result['build_seconds']:.0f} s",
        "",
        "| path | p50 ms | p95 ms | p99 ms | mean ms |",
        "|---|---|---|---|---|",
    ]
    for name, key in (("gRPC Retrieval.Search", "grpc_ms"), ("REST POST /memories/search", "rest_ms")):
        p = result[key]
        lines.append(f"| {name} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['mean']:.1f} |")
    stages = ", ".join(f"{k} {v:.1f}" for k, v in result["grpc_stage_ms_p50"].items())
    lines += ["", f"Inside the retrieval service (gRPC queries, medians from search_log, ms): {stages}"]
    recall = result["ann_recall_at_10"]
    lines += ["", "| ANN recall@10 vs exact (same filters) | value |", "|---|---|"]
    for name, value in recall.items():
        lines.append(f"| {name} | {value:.3f} |")
    return "\n".join(lines)


def main(memories: int, queries: int, database_url: str | None, as_json: bool) -> None:
    result = asyncio.run(run(memories, queries, database_url))
    print(json.dumps(result, indent=2) if as_json else format_table(result))
