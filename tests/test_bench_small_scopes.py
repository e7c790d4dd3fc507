"""`hypermnesia bench small-scopes`, run tiny: small scopes inside a store of large ones, each
shape timed through gRPC and REST, with what the service logged for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tooling.bench import small_scopes as bench
from tooling.bench.search import SCOPES


async def test_small_scopes_are_timed_beside_large_ones_in_one_store(
    pg_server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The large scopes (~30 memories) get graphs of their own, as 10,000-row ones would; the
    # small ones (8) do not.
    monkeypatch.setenv("HM_SCOPE_GRAPH_ROWS", "20")
    result = await bench.run(
        scopes=12, per_scope=8, queries=6, database_url=pg_server_url, cache_dir=tmp_path, large_memories=300
    )
    assert result["raw_log_records_verified"] == 300 + 12 * 8
    assert result["scope_graphs"] == len(SCOPES)
    for path in ("grpc", "rest"):
        for shape in (bench.LARGE, bench.SMALL):
            p = result["ms"][f"{path} {shape}"]
            assert p["p99"] >= p["p95"] >= p["p50"] > 0, (path, shape, p)
    # The service logged each gRPC query of each shape: its SQL time is there per shape.
    for shape in (bench.LARGE, bench.SMALL):
        assert result["grpc_stage_ms_p50"][shape]["candidates_ms"] > 0
    table = bench.format_table(result)
    assert "396 memories: 300 in 10 large scopes and 12 small scopes of 8" in table
    assert result["raw_query_embedding_ms_p50"] > 0
    assert "REST, small scope / large scope: p50 " in table and "| 1 small scope |" in table


def test_small_scope_names_and_queries_stay_in_the_bench_grant() -> None:
    import random

    qs = bench._queries(20, bench.SMALL, 3, random.Random(1), set())
    assert {q.scopes[0] for q in qs} <= {"bench:small-0", "bench:small-1", "bench:small-2"}
    assert len({q.text for q in qs}) == 20  # every text new: none from the embedder's cache
    assert all(q.scopes[0] in SCOPES for q in bench._queries(5, bench.LARGE, 3, random.Random(1), set()))
