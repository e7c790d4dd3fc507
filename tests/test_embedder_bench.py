"""`hypermnesia bench embedder` runs end to end (tiny counts; the real run is documented in
docs/PERFORMANCE.md). Only the shape of the report is checked: speed is not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tooling.cli import main


def test_bench_embedder_smoke(model_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "bench",
            "embedder",
            "--json",
            "--clients",
            "2",
            "--scale",
            "0.005",
            "--rounds",
            "1",
            "--data-dir",
            str(model_cache),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    names = {(r["name"], r["clients"]) for r in report["rows"]}
    assert ("(b) service, short", 2) in names and ("(b) service, short", 1) in names
    assert ("(c) service, no batching, short", 2) in names
    assert ("(d) service, ~100 words", 1) in names and ("(a) raw, short, batch 1", 0) in names
    assert ("(a) raw, onnxruntime defaults, short, batch 1", 0) in names
    assert ("(a) raw, short, batch 1, paired", 0) in names and ("(b) service, short, paired", 1) in names
    assert all(r["texts_per_s"] > 0 and r["p95_ms"] >= r["p50_ms"] > 0 for r in report["rows"])
    assert report["ratio_b32_over_a"] > 0 and report["ratio_b32_over_c32"] > 0
    assert "single_client_p50_minus_raw_batch1_p50_ms" in report
