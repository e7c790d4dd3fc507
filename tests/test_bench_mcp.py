"""`hypermnesia bench mcp` run small, end to end: two stacks as real processes (one running a
checkout given as the baseline), LoCoMo's conv-26 through fastmcp's client and REST, taking turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tooling.bench.mcp import conversation, plan

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def _bench(data_dir: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HM_DATABASE_URL"}  # the bench's own Postgres
    env["HM_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "hypermnesia", "bench", "mcp", "--data-dir", str(DATA), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_the_workload_is_the_seed_comparisons() -> None:
    """conv-26: 419 saves and 150 searches, a save then a search while the questions last."""
    calls = plan(conversation(DATA, "conv-26"))
    assert sum(op == "save" for op, _ in calls) == 419
    assert sum(op == "search" for op, _ in calls) == 150
    assert [op for op, _ in calls[:4]] == ["save", "search", "save", "search"]
    assert all(op == "save" for op, _ in calls[300:])


def test_bench_mcp_times_both_checkouts_side_by_side(model_cache: Path) -> None:
    done = _bench(model_cache, "--calls", "8", "--baseline", str(ROOT), "--json", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["saves"], result["searches"]) == (4, 4)
    assert set(result["arms"]) == {"this", "baseline"}
    for arm in result["arms"].values():
        for op in ("mcp search", "rest search", "mcp save"):
            assert 0 < arm[op]["p50_ms"] <= arm[op]["p95_ms"] <= arm[op]["p99_ms"], op
    for used in result["cpu_ms_per_call"].values():
        assert set(used) == {"embedder", "retrieval", "curation", "gateway", "postgres", "clients"}
        assert used["gateway"] > 0 and used["postgres"] > 0 and used["clients"] > 0, used


def test_bench_mcp_refuses_a_baseline_that_is_not_a_checkout(model_cache: Path, tmp_path: Path) -> None:
    done = _bench(model_cache, "--baseline", str(tmp_path), timeout=60)
    assert done.returncode == 1
    assert "is not a hypermnesia checkout" in done.stderr
