"""`hypermnesia bench small-scopes`: a search of one small scope inside a large store, beside a
search of one large scope of the same store, in one run.

The shape is a LongMemEval-S import's (469 haystacks of ~245 turns in one store of ~115,000): the
search bench's 100,000 memories in its 10 scopes (real vectors, cached; tooling/bench/search.py)
plus `scopes` small scopes of `per_scope` memories each (derived ones, tooling/bench/synthesis.py).
The scope graphs are built as curation builds them: a scope past HM_SCOPE_GRAPH_ROWS has its own,
a small one has none and its dense leg is an exact scan. New queries, one scope each, are timed
through gRPC and REST from a client process of their own, small and large scopes taking turns so
a slow spell of the machine lands on both; the ratio small / large is the figure."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
from pathlib import Path

from hypermnesia.v1 import curation_pb2
from tooling.bench.harness import bench_stack
from tooling.bench.load import postmaster_pid
from tooling.bench.search import (
    SCOPES,
    TURNS,
    Query,
    grow_store,
    new_query_text,
    percentiles,
    raw_query_embedding_ms,
    stage_medians,
    time_from_own_process,
)
from tooling.bench.synthesis import REAL_MEMORIES

__all__ = ["register", "run"]

LARGE, SMALL = "1 large scope", "1 small scope"
MAX_SCOPES = 2000
MAX_PER_SCOPE = 2000
MAX_QUERIES = 1000


def small_scope(i: int) -> str:
    return f"bench:small-{i}"


def _queries(count: int, shape: str, scopes: int, rng: random.Random, seen: set[str]) -> list[Query]:
    """`count` new query texts (none answered from the embedder's cache), one scope each."""
    return [
        Query(
            new_query_text(rng, seen),
            [rng.choice(SCOPES) if shape == LARGE else small_scope(rng.randrange(scopes))],
            [],
        )
        for _ in range(count)
    ]


async def run(
    scopes: int,
    per_scope: int,
    queries: int,
    database_url: str | None,
    cache_dir: Path | None,
    seed: int = 7,
    large_memories: int = REAL_MEMORIES,
) -> dict:
    def into_small_scopes(records: list[curation_pb2.RecordInput]) -> None:
        for j, record in enumerate(records[large_memories:]):
            record.scope = small_scope(j % scopes)

    tokens = {"bench-token": {"principal": "bench", "scopes": ["bench:*"]}}
    async with bench_stack(
        large_memories + scopes * per_scope,
        database_url,
        cache_dir,
        seed,
        prefix="hm-bench-small-",
        arrange=into_small_scopes,
        # The bench builds the scope graphs itself before timing (grow_store), as curation's pass
        # would within a minute, rather than have that pass start one in the middle of it.
        stack_options=dict(search_log_enabled=True, scope_graph_rows=0),
        gateway_options=dict(auth_tokens=tokens, default_project=SCOPES[0]),
        real=large_memories,
    ) as bench:
        stack = bench.stack
        build = await grow_store(
            stack.curation_address, bench.db_url, bench.records, await postmaster_pid(bench.db_url)
        )
        rng, seen = random.Random(seed + 1), set[str]()
        shapes = (LARGE, SMALL)
        timed = {
            (path, shape): _queries(queries, shape, scopes, rng, seen)
            for path in ("grpc", "rest")
            for shape in shapes
        }
        ms: dict[tuple[str, str], list[float]] = {key: [] for key in timed}
        targets = {"grpc": stack.retrieval_address, "rest": bench.base_url}
        for turn in range(TURNS):
            order = shapes if turn % 2 == 0 else shapes[::-1]
            for path, target in targets.items():
                for shape in order:
                    warmup = _queries(5, shape, scopes, rng, seen)
                    got = await time_from_own_process(path, target, warmup, timed[path, shape][turn::TURNS])
                    ms[path, shape] += [t for _, t in got]
        await stack.searcher.drain()  # search_log rows are written off the hot path
        inside = {shape: await stage_medians(bench.db_url, timed["grpc", shape]) for shape in shapes}
        # The machine's speed now: figures of two runs compare only at a like speed.
        raw_ms = raw_query_embedding_ms(bench.work / "models", _queries(30, LARGE, scopes, rng, seen))
    return {
        "large_memories": large_memories,
        "scopes": scopes,
        "per_scope": per_scope,
        "queries": queries,
        "import_seconds": build["import_seconds"],
        "scope_graphs": build["scope_graphs"],
        "graphs_seconds": build["graphs_seconds"],
        "raw_log_records_verified": build["raw_log_records_verified"],
        "ms": {f"{path} {shape}": percentiles(values) for (path, shape), values in ms.items()},
        "grpc_stage_ms_p50": inside,
        "load_average": os.getloadavg()[0],
        "raw_query_embedding_ms_p50": raw_ms,
    }


def format_table(r: dict) -> str:
    total = r["large_memories"] + r["scopes"] * r["per_scope"]
    lines = [
        f"{total:,} memories: {r['large_memories']:,} in 10 large scopes and {r['scopes']:,} small scopes"
        f" of {r['per_scope']:,}; imported through curation in {r['import_seconds']:.0f} s,"
        f" {r['scope_graphs']} scope graphs built in {r['graphs_seconds']:.0f} s; {r['queries']} new"
        f" queries per path and shape, one scope each, k=10, small and large taking turns;"
        f" load average {r['load_average']:.1f}, one query embedded by raw onnxruntime in"
        f" {r['raw_query_embedding_ms_p50']:.1f} ms (p50)",
        "",
        "| path | scope | p50 ms | p95 ms | p99 ms | inside (gRPC, p50): embed / SQL / score ms |",
        "|---|---|---|---|---|---|",
    ]
    for path, name in (("grpc", "gRPC Retrieval.Search"), ("rest", "REST POST /memories/search")):
        for shape in (LARGE, SMALL):
            p = r["ms"][f"{path} {shape}"]
            stages = r["grpc_stage_ms_p50"].get(shape, {})
            inside = " / ".join(
                f"{stages.get(k, float('nan')):.1f}" for k in ("embed_ms", "candidates_ms", "score_ms")
            )
            lines.append(
                f"| {name} | {shape} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {inside if path == 'grpc' else ''} |"
            )
    lines.append("")
    for path, name in (("grpc", "gRPC"), ("rest", "REST")):
        small, large = r["ms"][f"{path} {SMALL}"], r["ms"][f"{path} {LARGE}"]
        lines.append(
            f"{name}, small scope / large scope: p50 {small['p50'] / large['p50']:.2f}x,"
            f" p95 {small['p95'] / large['p95']:.2f}x"
        )
    return "\n".join(lines)


def cmd_bench_small_scopes(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, fail, load_settings

    if not 1 <= args.scopes <= MAX_SCOPES:
        fail(f"--scopes must be between 1 and {MAX_SCOPES:,}")
    if not 1 <= args.per_scope <= MAX_PER_SCOPE:
        fail(f"--per-scope must be between 1 and {MAX_PER_SCOPE:,}")
    if not 3 <= args.queries <= MAX_QUERIES:
        fail(f"--queries must be between 3 and {MAX_QUERIES:,}")
    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    result = asyncio.run(
        run(
            args.scopes,
            args.per_scope,
            args.queries,
            settings.database_url,
            settings.data_dir / "bench-vectors",
        )
    )
    print(json.dumps(result, indent=2) if args.json else format_table(result))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench small-scopes` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser(
        "small-scopes",
        help="search latency of one small scope inside a large store, beside one large scope of it",
    )
    b.add_argument(
        "--scopes", type=int, default=469, help="small scopes (default 469, LongMemEval-S's haystacks)"
    )
    b.add_argument("--per-scope", type=int, default=245, help="memories in each small scope (default 245)")
    b.add_argument("--queries", type=int, default=150, help="timed queries per path and shape (default 150)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_small_scopes)
