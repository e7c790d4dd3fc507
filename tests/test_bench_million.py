"""`hypermnesia bench search` past its real vectors, run tiny: memories derived from two real ones
(tooling/bench/synthesis.py), the store measured at two sizes in one run, with its HNSW indexes'
size, Postgres's memory while it was built and the idle stack's memory."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from tooling.bench import search as bench
from tooling.bench.synthesis import derived_pairs, derived_text, derived_vectors


def test_derived_memories_join_two_real_ones() -> None:
    rng = random.Random(3)
    texts, pairs = bench.store_texts(rng, 50, real=20)
    assert len(texts) == 50 and len(pairs) == 30 and len(set(texts)) == 50
    (a, b), first = pairs[0], texts[20]
    # The head of one real text and the tail of another, numbered as memory 20.
    assert first == derived_text(texts[a], texts[b], 20) and first.endswith(", note 20)")
    assert first.split()[0] == texts[a].split()[0] and texts[b].rpartition(" (")[0].endswith(
        first.rpartition(" (")[0].split()[-1]
    )
    # The store's first memories are the same however large it is: the cached real vectors fit.
    assert bench.store_texts(random.Random(3), 20, real=20)[0] == texts[:20]

    real = np.random.default_rng(0).standard_normal((20, 384)).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    derived = derived_vectors(real, pairs, seed=1)
    assert derived.shape == (30, 384) and derived.dtype == np.float32
    assert np.allclose(np.linalg.norm(derived, axis=1), 1.0, atol=1e-5)
    # Near the normalised sum of its parents, yet not on it (the noise), and reproducible.
    parents = real[[a for a, _ in pairs]] + real[[b for _, b in pairs]]
    parents /= np.linalg.norm(parents, axis=1, keepdims=True)
    cosines = np.sum(parents * derived, axis=1)
    assert np.all(cosines > 0.99) and np.all(cosines < 1.0 - 1e-6)
    assert np.array_equal(derived, derived_vectors(real, pairs, seed=1))
    assert derived_pairs(random.Random(1), 20, 5) == derived_pairs(random.Random(1), 20, 5)


async def test_search_bench_measures_each_size_of_a_derived_store(
    pg_server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scopes of ~60 memories at the first size get graphs of their own, as 5,000-row ones would.
    monkeypatch.setenv("HM_SCOPE_GRAPH_ROWS", "50")
    result = await bench.run(
        memories=1200, queries=9, database_url=pg_server_url, cache_dir=tmp_path, at=[600], real=400
    )
    (cached,) = tmp_path.glob("*-400-*.npy")  # only the real memories' vectors are cached
    assert np.load(cached).shape == (400, 384)
    assert result["vectors"]["real"] == 400 and result["vectors"]["derived"] == 800
    fidelity = result["vectors"]["fidelity"]
    # A derived vector lies nearer the model's vector of its own text than two memories lie apart.
    assert fidelity["cosine_p50"] > fidelity["unrelated_cosine_p50"]

    first, last = result["steps"]
    assert (first["memories"], last["memories"]) == (600, 1200)
    assert (first["imported"], last["imported"]) == (600, 600)
    assert last["raw_log_records_verified"] == 1200 == result["raw_log_records_verified"]
    for step in (first, last):
        assert step["scope_graphs"] == 10, step  # dropped and built again at each size
        sizes = step["sizes_mb"]
        assert sizes["scope_graphs"] == 10 and sizes["scope_hnsw"] > 0 and sizes["global_hnsw"] > 0
        peak = step["postgres_peak_mb"]
        assert peak["import_pss"] > 1 and peak["graphs_pss"] > 1 and peak["graphs_largest_rss"] > 1
        assert set(step["idle_pss_mb"]) == {"postgres", "embedder", "gateway"}
        assert all(mb > 1 for mb in step["idle_pss_mb"].values()), step["idle_pss_mb"]
        assert step["rest_ms"]["p95"] >= step["rest_ms"]["p50"] > 0
        assert set(step["ann_by_ef_search"]) == {str(ef) for ef in bench.EF_SEARCH_SWEEP}
        assert step["raw_query_embedding_ms_p50"] > 0 and step["load_average"] >= 0
    assert last["sizes_mb"]["table"] > first["sizes_mb"]["table"]
    assert last["sizes_mb"]["global_hnsw"] > first["sizes_mb"]["global_hnsw"]
    # A store this small is scanned exactly: every setting finds the true nearest.
    assert result["ann_recall_at_10"] == {"1 scope": 1.0, "1 scope + 1 tag": 1.0, "all 10 scopes": 1.0}
    table = bench.format_table(result)
    assert "| 600 |" in table and "| 1,200 |" in table and "REST p95 at 1,200 / at 600" in table
    assert "400 real, 800 derived" in table
