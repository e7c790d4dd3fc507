"""The admin CLI as a user runs it (a real `hypermnesia` process with direct database access):
verify + tamper detection, purge, export/import round trip, rebuild, reindex to another model,
and document ingestion."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import Stack, create_database

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "admin"}


@dataclass
class Result:
    code: int
    out: str
    err: str


async def cli(
    database_url: str, data_dir: Path, *args: str, stdin: bytes | None = None, **env: str
) -> Result:
    environment = {**os.environ, "HM_DATABASE_URL": database_url, "HM_DATA_DIR": str(data_dir), **env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hypermnesia",
        *args,
        env=environment,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    return Result(proc.returncode or 0, out.decode(), err.decode())


async def _seed(stack: Stack) -> list[dict]:
    """A few memories through every kind of write."""
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = []
        for i, text in enumerate(
            [
                "The release train leaves every second Tuesday",
                "Grafana lives at grafana.internal:3000",
                "Use ruff for linting and formatting",
                "The on-call rotation changes on Mondays",
                "The coffee machine is on the third floor",
            ]
        ):
            saved.append(
                (
                    await http.post(
                        "/memories",
                        json={
                            "content": text,
                            "description": f"fact {i}",
                            "tags": ["seed"],
                            "metadata": {"i": i},
                        },
                    )
                ).json()["memory"]
            )
        await http.patch(f"/memories/{saved[0]['id']}", json={"importance": 6})
        await http.post(
            f"/memories/{saved[1]['id']}/supersede", json={"content": "Grafana moved to grafana.ops:3000"}
        )
        await http.post(
            "/memories/forget",
            json={"older_than_days": 0, "importance_floor": 1, "tags": ["seed"], "apply": True},
        )
        await http.post(f"/memories/{saved[2]['id']}/restore")
        await http.post(
            "/records/import",
            json={
                "records": [
                    {
                        "type": "conversation",
                        "content": "Caroline: I went to the LGBTQ support group yesterday",
                        "source_ref": "t1",
                        "thread_id": "c1",
                        "created_at": "2023-05-07T10:00:00Z",
                    },
                    {
                        "type": "conversation",
                        "content": "Melanie: That sounds great, how was it?",
                        "source_ref": "t2",
                        "thread_id": "c1",
                        "created_at": "2023-05-07T10:01:00Z",
                    },
                ]
            },
        )
    return saved


async def test_verify_detects_tampering_and_purge_keeps_it_green(stack: Stack, model_cache: Path) -> None:
    saved = await _seed(stack)
    ok = await cli(stack.database_url, model_cache, "verify")
    assert ok.code == 0, ok.err
    assert "verify: ok" in ok.out

    # Edit a row behind the service's back (the trigger has to be disabled to do it at all).
    target = await stack.pool.fetchrow("SELECT seq, author FROM records ORDER BY seq OFFSET 3 LIMIT 1")
    await stack.pool.execute("ALTER TABLE records DISABLE TRIGGER records_no_update")
    try:
        await stack.pool.execute("UPDATE records SET author = 'mallory' WHERE seq = $1", target["seq"])
        broken = await cli(stack.database_url, model_cache, "verify")
        assert broken.code == 3
        assert f"BROKEN at seq {target['seq']}" in broken.err
    finally:
        await stack.pool.execute(
            "UPDATE records SET author = $2 WHERE seq = $1", target["seq"], target["author"]
        )
        await stack.pool.execute("ALTER TABLE records ENABLE TRIGGER records_no_update")
    # Editing the stored text (not the row) is caught too.
    seq, record_id, payload = await stack.pool.fetchrow(
        "SELECT r.seq, r.id, t.payload FROM records r JOIN record_texts t ON t.record_id = r.id ORDER BY r.seq LIMIT 1"
    )
    await stack.pool.execute(
        "UPDATE record_texts SET payload = $2 WHERE record_id = $1",
        record_id,
        payload.replace("release", "RELEASE"),
    )
    try:
        broken = await cli(stack.database_url, model_cache, "verify")
        assert broken.code == 3 and f"BROKEN at seq {seq}" in broken.err and "text" in broken.err
    finally:
        await stack.pool.execute(
            "UPDATE record_texts SET payload = $2 WHERE record_id = $1", record_id, payload
        )

    victim = saved[3]["id"]
    purged = await cli(stack.database_url, model_cache, "purge", victim)
    assert purged.code == 0, purged.err
    assert await stack.pool.fetchval("SELECT count(*) FROM memories WHERE id = $1::uuid", victim) == 0
    texts = await stack.pool.fetchval(
        "SELECT count(*) FROM records r JOIN record_texts t ON t.record_id = r.id"
        " WHERE r.target_id = $1::uuid AND r.operation <> 'purge'",
        victim,
    )
    assert texts == 0
    audit = await stack.pool.fetchrow(
        "SELECT author, operation FROM records WHERE target_id = $1::uuid ORDER BY seq DESC LIMIT 1", victim
    )
    assert audit["operation"] == "purge" and audit["author"].startswith("admin")
    assert "On-call" not in json.dumps(
        [r["payload"] for r in await stack.pool.fetch("SELECT payload FROM record_texts")]
    )
    again = await cli(stack.database_url, model_cache, "verify")
    assert again.code == 0, again.err

    check = await cli(stack.database_url, model_cache, "rebuild", "--check")
    assert check.code == 0, check.out + check.err
    assert "found 0 missing, 0 different, 0 extra" in check.out

    unknown = await cli(stack.database_url, model_cache, "purge", "not-a-uuid")
    assert unknown.code == 1 and "not a memory id" in unknown.err


async def test_rebuild_restores_an_emptied_table(stack: Stack, model_cache: Path) -> None:
    live = await stack.pool.fetch("SELECT id, content, archived_at, superseded_by FROM memories ORDER BY id")
    assert live
    await stack.pool.execute("DELETE FROM memories")
    check = await cli(stack.database_url, model_cache, "rebuild", "--check")
    assert check.code == 5 and f"found {len(live)} missing" in check.out
    rebuilt = await cli(stack.database_url, model_cache, "rebuild")
    assert rebuilt.code == 0, rebuilt.err
    after = await stack.pool.fetch("SELECT id, content, archived_at, superseded_by FROM memories ORDER BY id")
    assert [tuple(r) for r in after] == [tuple(r) for r in live]
    assert await stack.pool.fetchval("SELECT count(*) FROM memories WHERE embedding IS NULL") == 0
    check = await cli(stack.database_url, model_cache, "rebuild", "--check")
    assert check.code == 0, check.out


async def test_export_wipe_import_round_trip(
    stack: Stack, model_cache: Path, tmp_path: Path, pg_server_url: str
) -> None:
    dump = tmp_path / "dump.jsonl"
    exported = await cli(stack.database_url, model_cache, "export", "--out", str(dump))
    assert exported.code == 0, exported.err
    lines = dump.read_text().splitlines()
    count = await stack.pool.fetchval("SELECT count(*) FROM memories")
    assert len(lines) == count and all("embedding" not in json.loads(line) for line in lines)
    assert any(json.loads(line)["archived_at"] for line in lines)  # archived included

    scoped = await cli(stack.database_url, model_cache, "export", "--scope", "project:admin", "--out", "-")
    assert {json.loads(line)["scope"] for line in scoped.out.splitlines()} == {"project:admin"}

    fresh = await create_database(pg_server_url)
    with_junk = dump.read_text() + "this is not json\n" + '{"id": "x"}\n' + lines[0] + "\n"
    (tmp_path / "junk.jsonl").write_text(with_junk)
    imported = await cli(fresh, model_cache, "import", str(tmp_path / "junk.jsonl"))
    assert imported.code == 4, imported.err
    assert f"line {count + 1}:" in imported.err and f"line {count + 2}: missing" in imported.err
    assert f"imported {count}, skipped 1 existing, 2 malformed" in imported.out
    again = await cli(fresh, model_cache, "import", str(dump))
    assert again.code == 0 and f"imported 0, skipped {count}" in again.out

    round_trip = await cli(fresh, model_cache, "export")
    assert sorted(round_trip.out.splitlines()) == sorted(lines)
    verify = await cli(fresh, model_cache, "verify")
    assert verify.code == 0, verify.err
    check = await cli(fresh, model_cache, "rebuild", "--check")
    assert check.code == 0, check.out


def _tiny_bert(folder: Path) -> None:
    """A random-weight BERT with MiniLM's tokenizer and 32 dimensions instead of 384."""
    from safetensors.numpy import load_file, save_file

    from services.embedder.model import default_model_dir

    source = default_model_dir()
    rng = np.random.default_rng(7)
    tensors = {}
    for name, value in load_file(str(source / "model.safetensors")).items():
        if name.startswith("encoder.layer.") and not name.startswith("encoder.layer.0."):
            continue
        shape = tuple(32 if d == 384 else 64 if d == 1536 else d for d in value.shape)
        tensors[name] = (
            value if name.endswith("position_ids") else (rng.standard_normal(shape) * 0.05).astype(np.float32)
        )
        if name.endswith("LayerNorm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    config.update(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    (folder / "hypermnesia.json").write_text(json.dumps({"model_id": "test/tiny-random-bert"}))


async def test_reindex_to_a_different_model_and_dimension(
    stack: Stack, model_cache: Path, tmp_path: Path, pg_server_url: str
) -> None:
    fresh = await create_database(pg_server_url)
    dump = await cli(stack.database_url, model_cache, "export")
    imported = await cli(fresh, model_cache, "import", "-", stdin=dump.out.encode())
    assert imported.code == 0, imported.err
    count = len(dump.out.splitlines())
    tiny = tmp_path / "tiny"
    _tiny_bert(tiny)
    moved = await cli(fresh, model_cache, "reindex", HM_EMBEDDING_MODEL_DIR=str(tiny))
    assert moved.code == 0, moved.err
    assert f"reindex: {count} memories re-embedded with test/tiny-random-bert (32 dims)" in moved.out
    import asyncpg

    conn = await asyncpg.connect(fresh)
    try:
        assert tuple(await conn.fetchrow("SELECT model_id, dimension FROM embedding_pin")) == (
            "test/tiny-random-bert",
            32,
        )
        dims = await conn.fetch("SELECT vector_dims(embedding) AS d FROM memories")
        assert len(dims) == count and {d["d"] for d in dims} == {32}
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_indexes WHERE tablename = 'memories' AND indexdef LIKE '%hnsw%'"
            )
            == 1
        )
    finally:
        await conn.close()
    # The old model is now refused with a sentence that says what to do.
    refused = await cli(fresh, model_cache, "import", "-", stdin=dump.out.encode())
    assert refused.code == 1 and "hypermnesia reindex" in refused.err


async def test_ingest_tree(stack: Stack, model_cache: Path, tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "docs").mkdir(parents=True)
    (tree / "build").mkdir()
    (tree / ".gitignore").write_text("build/\n*.draft.md\n")
    long_section = "\n\n".join(
        f"Paragraph {i}. The ingestion pipeline hashes each file, chunks it by structure and embeds the chunks. "
        f"Unchanged files are skipped by their content hash, so re-running is cheap. Step {i} matters."
        for i in range(40)
    )
    (tree / "README.md").write_text(
        "# Project\n\nIntro text.\n\n## Setup\n\n```bash\npip install hypermnesia\nhypermnesia up\n```\n\n"
        "- one\n- two\n- three\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n## Design\n\n" + long_section + "\n"
    )
    (tree / "docs" / "ops.md").write_text("# Operations\n\nBackups run nightly at 02:00.\n")
    (tree / "docs" / "notes.draft.md").write_text("# Draft\n\nnot ready\n")
    (tree / "build" / "out.md").write_text("# Generated\n")
    (tree / "docs" / "logo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")

    first = await cli(stack.database_url, model_cache, "ingest", str(tree), "--repo", "demo")
    assert first.code == 0, first.err
    assert "3 files: 2 new" in first.out and "logo.md: binary file" in first.err
    chunks = await stack.pool.fetch(
        "SELECT path, heading_path, content, ordinal FROM memories WHERE repo = 'demo' AND superseded_by IS NULL"
        " ORDER BY path, ordinal"
    )
    assert {c["path"] for c in chunks} == {"README.md", "docs/ops.md"}
    readme = [c for c in chunks if c["path"] == "README.md"]
    assert len(readme) >= 2
    assert any("```bash\npip install hypermnesia\nhypermnesia up\n```" in c["content"] for c in readme)
    assert any(c["heading_path"] == ["Project", "Design"] for c in readme)
    tokens = await stack.pool.fetch(
        "SELECT (metadata->>'tokens')::int AS n FROM memories WHERE path = 'README.md'"
    )
    assert all(t["n"] <= 600 for t in tokens)

    records = await stack.pool.fetchval("SELECT count(*) FROM records")
    unchanged = await cli(stack.database_url, model_cache, "ingest", str(tree), "--repo", "demo")
    assert unchanged.code == 0 and "2 unchanged" in unchanged.out
    assert await stack.pool.fetchval("SELECT count(*) FROM records") == records

    (tree / "docs" / "ops.md").write_text("# Operations\n\nBackups run nightly at 03:00 since May.\n")
    (tree / "README.md").unlink()
    changed = await cli(stack.database_url, model_cache, "ingest", str(tree), "--repo", "demo")
    assert changed.code == 0 and "1 changed" in changed.out and "1 retired" in changed.out
    live = await stack.pool.fetch(
        "SELECT path, content FROM memories WHERE repo = 'demo' AND superseded_by IS NULL AND archived_at IS NULL"
    )
    assert [(r["path"], "03:00" in r["content"]) for r in live] == [("docs/ops.md", True)]
    old = await stack.pool.fetchrow(
        "SELECT superseded_by FROM memories WHERE path = 'docs/ops.md' AND content LIKE '%02:00%'"
    )
    assert old["superseded_by"] is not None
    check = await cli(stack.database_url, model_cache, "rebuild", "--check")
    assert check.code == 0, check.out


@pytest.mark.parametrize("args", [["import", "/no/such/file"], ["ingest", "/no/such/dir", "--repo", "x"]])
async def test_cli_bad_paths(stack: Stack, model_cache: Path, args: list[str]) -> None:
    result = await cli(stack.database_url, model_cache, *args)
    assert result.code == 1 and ("not a file" in result.err or "not a folder" in result.err)
