"""The committed gRPC code is exactly what the pinned grpcio-tools generates from protos/."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    generated = _load_generator().generate(tmp_path)
    assert generated, "no files were generated"
    committed_dir = ROOT / "hypermnesia" / "v1"
    stale = []
    for fresh in generated:
        committed = committed_dir / fresh.name
        if not committed.exists() or committed.read_text() != fresh.read_text():
            stale.append(fresh.name)
    extra = {p.name for p in committed_dir.glob("*_pb2*.py*")} - {p.name for p in generated}
    assert not stale and not extra, (
        f"generated gRPC code is stale ({sorted(stale)}; extra {sorted(extra)}): run `python scripts/gen_protos.py`"
    )
