"""`hypermnesia bench viz`: the 3D map's projection and `GET /viz/graph` on a synthetic store.

Builds N memories through curation's import path (the search bench's synthetic sentences and
cached real vectors, tooling/bench/search.py; a fifth of them in threads of ten, so same-thread
edges exist), fits the projection as curation's pass does (PCA on a sample, every position
recomputed) and times it, then times `GET /viz/graph` over REST through a gateway process of its
own: every scope at the default node budget (the whole store matches, the budget truncates),
one scope (a tenth of the store), and every scope at the largest budget."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from hypermnesia.pool import connect_pool
from hypermnesia.v1 import curation_pb2
from services.curation import projection_repo
from services.curation.projection import Projector
from tooling.bench.harness import bench_stack
from tooling.bench.search import SCOPES, build_store, percentiles

__all__ = ["register", "run"]

THREAD_SHARE = 5  # one memory in this many belongs to a thread
THREAD_TURNS = 10
DEFAULT_BUDGET = 2000
MAX_BUDGET = 5000


def _shapes() -> dict[str, dict[str, Any]]:
    return {
        f"every scope, budget {DEFAULT_BUDGET:,}": {"scope": SCOPES},
        "one scope (a tenth of the store)": {"scope": SCOPES[0]},
        f"every scope, budget {MAX_BUDGET:,}": {"scope": SCOPES, "limit": MAX_BUDGET},
    }


def _time_rest(base_url: str, params: dict[str, Any], rounds: int) -> tuple[list[float], dict[str, Any]]:
    """Milliseconds per request from a keep-alive http.client (run in a thread: retrieval serves from
    this process's event loop), and the last answer's shape."""
    http = HTTPConnection(urlsplit(base_url).netloc, timeout=60)
    out: list[float] = []
    body: dict[str, Any] = {}
    try:
        path = "/viz/graph?" + urlencode(params, doseq=True)
        for _ in range(rounds + 2):  # two warm-up rounds
            started = time.perf_counter()
            http.request("GET", path)
            response = http.getresponse()
            payload = response.read()
            out.append((time.perf_counter() - started) * 1000)
            if response.status != 200:
                raise RuntimeError(f"/viz/graph answered {response.status}: {payload[:300]!r}")
            body = json.loads(payload)
    finally:
        http.close()
    edges: dict[str, int] = {}
    for e in body["edges"]:
        edges[e["relation"]] = edges.get(e["relation"], 0) + 1
    shape = {"nodes": len(body["nodes"]), "total": body["total"], "edges": edges, "bytes": len(payload)}
    return out[2:], shape


async def _fit(database_url: str) -> dict[str, float]:
    """What curation's pass does when a basis is due, timed: sample, fit, recompute every position."""
    pool = await connect_pool(database_url, max_size=2)
    try:
        projector = Projector(pool, refit_growth=0.25, refit_hours=24)
        async with pool.acquire() as conn:
            state = await projection_repo.state(conn)
        started = time.perf_counter()
        await projector.refit(state)
        total_ms = (time.perf_counter() - started) * 1000
        row = await pool.fetchrow("SELECT fit_ms, sample FROM viz_basis ORDER BY id DESC LIMIT 1")
        positions = await pool.fetchval("SELECT count(*) FROM memory_positions")
    finally:
        await pool.close()
    return {
        "refit_ms": total_ms,
        "fit_ms": float(row["fit_ms"]),
        "sample": row["sample"],
        "positions": positions,
    }


async def run(
    memories: int, rounds: int, database_url: str | None, cache_dir: Path | None, seed: int = 7
) -> dict:
    def in_threads(records: list[curation_pb2.RecordInput]) -> None:
        for i, record in enumerate(records[: memories // THREAD_SHARE]):
            record.thread_id = f"bench-thread-{i // THREAD_TURNS}"
            record.scope = SCOPES[(i // THREAD_TURNS) % len(SCOPES)]

    async with bench_stack(
        memories,
        database_url,
        cache_dir,
        seed,
        prefix="hm-bench-viz-",
        arrange=in_threads,
        # The bench fits the projection itself, timed, rather than have curation's pass refit in
        # the middle of the timing.
        stack_options=dict(viz_refresh_s=0, scope_graph_rows=0),
        gateway_options=dict(default_project=SCOPES[0]),
    ) as bench:
        await build_store(bench.stack.curation_address, bench.db_url, bench.records)
        build_s = time.perf_counter() - bench.stack_started
        fit = await _fit(bench.db_url)
        shapes = {}
        for name, params in _shapes().items():
            ms, shape = await asyncio.to_thread(_time_rest, bench.base_url, params, rounds)
            shapes[name] = {**percentiles(ms), **shape}
    return {
        "memories": memories,
        "rounds": rounds,
        "build_seconds": build_s,
        "projection": fit,
        "rest_ms": shapes,
    }


def format_table(result: dict) -> str:
    fit = result["projection"]
    lines = [
        f"{result['memories']:,} memories in 10 scopes (a fifth in threads of {THREAD_TURNS}), built through"
        f" curation's import in {result['build_seconds']:.0f} s; projection (PCA on {fit['sample']:,}"
        f" sampled vectors, fit {fit['fit_ms']:.0f} ms) refitted with every position recomputed in"
        f" {fit['refit_ms']:.0f} ms ({fit['positions']:,} positions)",
        "",
        f"GET /viz/graph over REST, {result['rounds']} requests each after 2 warm-up, keep-alive http.client:",
        "",
        "| request | nodes / total | edges | answer KB | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["rest_ms"].items():
        edges = ", ".join(f"{k} {v:,}" for k, v in sorted(r["edges"].items())) or "none"
        lines.append(
            f"| {name} | {r['nodes']:,} / {r['total']:,} | {edges} | {r['bytes'] / 1024:.0f} |"
            f" {r['p50']:.0f} | {r['p95']:.0f} | {r['p99']:.0f} |"
        )
    return "\n".join(lines)


def main(memories: int, rounds: int, database_url: str | None, cache_dir: Path, as_json: bool) -> None:
    result = asyncio.run(run(memories, rounds, database_url, cache_dir))
    print(json.dumps(result, indent=2) if as_json else format_table(result))


def cmd_bench_viz(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, load_settings

    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    main(args.memories, args.rounds, settings.database_url, settings.data_dir / "bench-vectors", args.json)


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench viz` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser(
        "viz", help="the 3D map: projection fit and GET /viz/graph latency on a synthetic store"
    )
    b.add_argument("--memories", type=int, default=10_000)
    b.add_argument("--rounds", type=int, default=30, help="timed requests per shape")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_viz)
