"""`hypermnesia bench load` run tiny, end to end: a store built through curation's import, the
stack as real processes, concurrent REST clients, and each process's resident memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROCESSES = ("embedder", "retrieval", "curation", "gateway", "postgres", "total")


def _hypermnesia(data_dir: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HM_DATABASE_URL"}  # the bench's own Postgres
    env["HM_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "hypermnesia", "bench", "load", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bench_load_reports_throughput_latency_errors_and_memory(model_cache: Path) -> None:
    done = _hypermnesia(
        model_cache, "--memories", "300", "--clients", "4", "--duration", "3", "--json", timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["errors"] == 0, result["error_kinds"]
    assert result["throughput_rps"] > 0
    for op in ("search", "save", "lone_save"):
        assert result[op]["count"] > 0, op
        assert 0 < result[op]["p50_ms"] <= result[op]["p95_ms"] <= result[op]["p99_ms"], op
    assert result["lone_save"]["errors"] == 0
    assert result["search"]["count"] > result["save"]["count"]  # 80/20
    for moment in ("idle", "after"):
        sizes = result["pss_mb"][moment]
        assert set(sizes) == set(PROCESSES)
        for name in PROCESSES:
            assert sizes[name] is not None and sizes[name] > 1, (moment, name, sizes)
    assert result["store"]["database"] == "hm_load_300"


def test_bench_load_refuses_unbounded_runs(model_cache: Path) -> None:
    done = _hypermnesia(model_cache, "--memories", "300", "--clients", "0", timeout=60)
    assert done.returncode == 1
    assert "--clients must be between 1 and 256, not 0" in done.stderr


def test_bench_load_runs_a_baseline_checkout_on_the_same_store_taking_turns(
    model_cache: Path, tmp_path: Path
) -> None:
    from tooling.bench.load import format_runs

    # Any checkout serves as the baseline; this one's own root keeps the test independent of history.
    root = Path(__file__).resolve().parents[1]
    done = _hypermnesia(
        model_cache, "--memories", "300", "--clients", "2", "--duration", "2", "--baseline", str(root),
        "--rounds", "2", "--json", timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [(r["round"], r["code"]) for r in result["runs"]] == [
        (1, "this"), (1, "baseline"), (2, "baseline"), (2, "this")
    ]  # fmt: skip
    for run in result["runs"]:
        assert run["errors"] == 0 and run["throughput_rps"] > 0
        per_request = run["cpu_ms_per_request"]
        assert per_request["total"] > 0 and per_request["postgres"] > 0, per_request
    this, base = result["by_code"]["this"], result["by_code"]["baseline"]
    assert this["runs"] == base["runs"] == 2 and len(base["cpu_ms_per_request"]) == 2
    assert set(this["vs_baseline"]) == {
        "throughput_rps",
        "search_p95_ms",
        "cpu_ms_per_request",
        "idle_pss_mb",
    }
    table = format_runs(result)
    assert "## round 2, baseline " in table and "this checkout against the baseline" in table
    assert "| this | 2 |" in table and "| baseline | 2 |" in table

    not_a_checkout = _hypermnesia(model_cache, "--memories", "300", "--baseline", str(tmp_path), timeout=60)
    assert not_a_checkout.returncode == 1
    assert "is not a hypermnesia checkout" in not_a_checkout.stderr
