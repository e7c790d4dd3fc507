"""Moving in (issue 17 item 6): `hypermnesia import` reads an earlier server's export JSONL and
Markdown memory files (CLAUDE.md, MEMORY.md, a folder of notes), idempotently, with a dry run and
a summary line; the imported memories are then found through the running stack like any other."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.conftest import Stack
from tests.test_curation_admin import cli
from tooling.moving_in import describe, markdown_pieces

CLAUDE_MD = """# Project rules

These notes are read by every agent working here.

## Build & test
- Run `make test` before every push; the suite uses a real Postgres.
- The wombat deploy key lives in the vault under ops/wombat.
  It is rotated every quarter.

## Style
- Prefer small modules with names that explain themselves.
"""

MEMORY_MD = """# Memory index
- [Deploy target](deploy.md) — production runs on the k3s cluster called kestrel
"""


def test_markdown_pieces_are_bullets_and_section_prose_with_their_heading_path() -> None:
    pieces = markdown_pieces(CLAUDE_MD, "CLAUDE.md")
    texts = [p.text for p in pieces]
    assert texts[0] == "These notes are read by every agent working here."
    assert pieces[0].headings == ("Project rules",)
    assert "The wombat deploy key lives in the vault under ops/wombat.\nIt is rotated every quarter." in texts
    wombat = next(p for p in pieces if "wombat" in p.text)
    assert wombat.headings == ("Project rules", "Build & test")
    assert len(pieces) == 4
    assert describe("[Deploy target](deploy.md) — production runs on kestrel") == (
        "Deploy target — production runs on kestrel"
    )


async def test_markdown_import_is_idempotent_with_a_dry_run(stack: Stack, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "CLAUDE.md").write_text(CLAUDE_MD)
    (notes / "MEMORY.md").write_text(MEMORY_MD)
    scope = "project:movein"
    dry = await cli(stack.database_url, tmp_path, "import", str(notes), "--scope", scope, "--dry-run")
    assert dry.code == 0, dry.err
    assert "nothing written" in dry.out and "would import 5, would skip 0 existing" in dry.out, dry.out
    assert "imported" not in dry.out
    assert await stack.pool.fetchval("SELECT count(*) FROM memories WHERE scope = $1", scope) == 0

    first = await cli(stack.database_url, tmp_path, "import", str(notes), "--scope", scope)
    assert first.code == 0, first.err
    assert "imported 5, skipped 0" in first.out, first.out
    again = await cli(stack.database_url, tmp_path, "import", str(notes), "--scope", scope)
    assert "imported 0, skipped 5" in again.out, again.out
    rows = await stack.pool.fetch("SELECT content, tags, type FROM memories WHERE scope = $1", scope)
    assert len(rows) == 5
    wombat = next(r for r in rows if "wombat" in r["content"])
    assert list(wombat["tags"]) == ["Project rules", "Build & test"] and wombat["type"] == "fact"

    headers = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "movein"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=60) as http:
        found = (await http.post("/memories/search", json={"query": "which cluster runs production?"})).json()
    assert "kestrel" in found["results"][0]["content"]
    verify = await cli(stack.database_url, tmp_path, "verify")
    assert verify.code == 0, verify.err


async def test_seed_001_export_lines_import_with_their_ids(stack: Stack, tmp_path: Path) -> None:
    # The shape an earlier server's `hypermnesia export` writes: no memory kind, its own type labels.
    lines = [
        {
            "id": "0b7a4f51-1f8e-4a55-9f11-2f3c1a2b3c4d",
            "owner_id": "alice",
            "scope": "project:seedling",
            "type": "preference",
            "content": "Alice prefers tabs over spaces in Makefiles only.",
            "description": "tabs in Makefiles",
            "tags": ["style"],
            "metadata": {"source": "chat"},
            "importance": 2.0,
            "created_at": "2025-03-01T10:00:00+00:00",
            "updated_at": "2025-03-02T10:00:00+00:00",
            "last_accessed_at": "2025-03-03T10:00:00+00:00",
            "archived_at": None,
        },
        {
            "id": "0b7a4f51-1f8e-4a55-9f11-2f3c1a2b3c4e",
            "scope": "project:seedling",
            "content": "The staging database is reset every Sunday night.",
            "description": "",
            "created_at": "2025-03-04T10:00:00+00:00",
        },
    ]
    dump = tmp_path / "seed001.jsonl"
    dump.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = await cli(stack.database_url, tmp_path, "import", str(dump))
    assert result.code == 0, result.err
    assert "imported 2, skipped 0" in result.out, result.out
    again = await cli(stack.database_url, tmp_path, "import", str(dump))
    assert "imported 0, skipped 2" in again.out, again.out
    rows = {
        str(r["id"]): r
        for r in await stack.pool.fetch(
            "SELECT id, type, kind, owner_id, importance, created_at FROM memories WHERE scope = 'project:seedling'"
        )
    }
    first = rows["0b7a4f51-1f8e-4a55-9f11-2f3c1a2b3c4d"]
    assert (first["type"], first["kind"], first["owner_id"], first["importance"]) == (
        "preference",
        "semantic",
        "alice",
        2.0,
    )
    assert first["created_at"].year == 2025
    assert rows["0b7a4f51-1f8e-4a55-9f11-2f3c1a2b3c4e"]["type"] == "fact"


async def test_one_line_import_says_one_line_keeps_a_tag_once_and_importance_as_given(
    stack: Stack, tmp_path: Path
) -> None:
    """The first hour's rough edges: "read 1 line" (not "1 lines"), one summary line and no
    progress bar where the output is captured, a repeated tag stored once, importance 0.1 read back
    as 0.1 (the column was float4) through REST and in the export."""
    line = {
        "id": "5e1f2a3b-0000-4c5d-8e9f-0a1b2c3d4e5f",
        "scope": "project:oneliner",
        "content": "The oneliner service restarts nightly at 03:00.",
        "tags": ["ops", "ops", "cron"],
        "importance": 0.1,
        "created_at": "2025-03-04T10:00:00+00:00",
    }
    dump = tmp_path / "one.jsonl"
    dump.write_text(json.dumps(line) + "\n")
    result = await cli(stack.database_url, tmp_path, "import", str(dump))
    assert result.code == 0, result.err
    assert result.out.strip() == "import: read 1 line: imported 1, skipped 0 existing, 0 malformed", (
        result.out
    )
    assert result.err == "", result.err  # no progress bar when stderr is not a terminal

    headers = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "oneliner"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=60) as http:
        got = (await http.get(f"/memories/{line['id']}")).json()
    assert got["tags"] == ["ops", "cron"] and got["importance"] == 0.1, got

    out = tmp_path / "one-out.jsonl"
    exported = await cli(
        stack.database_url, tmp_path, "export", "--scope", "project:oneliner", "--out", str(out)
    )
    assert exported.code == 0, exported.err
    assert exported.err.strip() == f"export: 1 memory written to {out}", exported.err
    row = json.loads(out.read_text())
    assert row["importance"] == 0.1 and row["tags"] == ["ops", "cron"]
    verify = await cli(stack.database_url, tmp_path, "verify")
    assert verify.code == 0 and verify.err == "" and verify.out.startswith("verify: ok, "), verify
