"""`python -m tooling.bench.as_of`: what an as-of search costs beside a search of now.

The search bench's synthetic store (tooling/bench/search.py: N memories in 10 scopes, built through
curation's import path, real embeddings), then `deleted` memories deleted after the instant T the
as-of searches ask about, so each as-of search of their scopes replays the log and embeds their
texts again (a deleted memory's vectors go with it). The gRPC Search call is timed with and
without `as_of`, the two taking turns with queries of their own (every text new), in the search
bench's three shapes (every scope, one scope, one scope and one tag)."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import grpc

from hypermnesia.times import timestamp
from hypermnesia.v1 import curation_pb2, curation_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from tooling.bench.harness import bench_stack
from tooling.bench.search import (
    BENCH_CALLER,
    TURNS,
    Query,
    Timings,
    build_store,
    make_queries,
    summarise,
)


async def time_searches(
    address: str, queries: list[Query], at: datetime | None, degraded: list[str] | None = None
) -> Timings:
    """Each query's milliseconds; the degraded flags of the answers are added to `degraded`."""
    out = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalStub(channel)
        for q in queries:
            request = retrieval_pb2.SearchRequest(
                caller=BENCH_CALLER, query=q.text, scopes=q.scopes, tags=q.tags, k=10
            )
            if at is not None:
                request.as_of.CopyFrom(timestamp(at))
            started = time.perf_counter()
            response = await stub.Search(request, timeout=120)
            out.append((q.shape, (time.perf_counter() - started) * 1000))
            if degraded is not None:
                degraded += response.degraded
    return out


async def delete_some(curation_address: str, database_url: str, count: int, rng: random.Random) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        ids = [str(r["id"]) for r in await conn.fetch("SELECT id FROM memories ORDER BY id")]
    finally:
        await conn.close()
    async with grpc.aio.insecure_channel(curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        for memory_id in rng.sample(ids, count):
            await stub.Delete(curation_pb2.MemoryRequest(caller=BENCH_CALLER, id=memory_id), timeout=60)


async def run(memories: int, queries: int, deleted: int, cache_dir: Path | None, seed: int = 7) -> dict:
    async with bench_stack(
        memories,
        None,
        cache_dir,
        seed,
        prefix="hm-bench-asof-",
        # A query embedding that misses the default 300 ms on a loaded machine would turn the
        # search lexical-only; the answers' `degraded` flags are counted to show none did.
        stack_options=dict(scope_graph_rows=0, embed_timeout_ms=10000),
        gateway_options=dict(auth_tokens={}, default_project="bench:project-0"),
    ) as bench:
        stack = bench.stack
        await build_store(stack.curation_address, bench.db_url, bench.records)
        at = datetime.now(UTC)
        rng, seen = random.Random(seed + 1), set[str]()
        await delete_some(stack.curation_address, bench.db_url, deleted, rng)
        now_qs, past_qs = make_queries(queries, rng, seen), make_queries(queries, rng, seen)
        await time_searches(stack.retrieval_address, make_queries(6, rng, seen), None)  # warm-up
        await time_searches(stack.retrieval_address, make_queries(6, rng, seen), at)
        now_ms: Timings = []
        past_ms: Timings = []
        degraded: dict[str, list[str]] = {"now": [], "as_of": []}
        for turn in range(TURNS):
            now_ms += await time_searches(stack.retrieval_address, now_qs[turn::TURNS], None, degraded["now"])
            past_ms += await time_searches(
                stack.retrieval_address, past_qs[turn::TURNS], at, degraded["as_of"]
            )
    return {
        "memories": memories,
        "deleted_after_as_of": deleted,
        "queries": queries,
        "grpc_ms_now": summarise(now_ms),
        "grpc_ms_as_of": summarise(past_ms),
        "degraded_answers": {path: len(flags) for path, flags in degraded.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=60, help="per path")
    parser.add_argument("--deleted", type=int, default=20, help="memories deleted after the as-of instant")
    parser.add_argument("--data-dir", type=Path, default=None, help="where the vectors are cached")
    args = parser.parse_args()
    cache = args.data_dir / "bench-vectors" if args.data_dir else None
    print(json.dumps(asyncio.run(run(args.memories, args.queries, args.deleted, cache)), indent=2))


if __name__ == "__main__":
    main()
