"""Curation's pure logic: entity extraction, task patterns and confidence, markdown chunking,
.gitignore rules, and the payload replay (no services needed; the integration tests cover the rest)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from hypermnesia.entities import extract
from services.curation import chunker, payloads, tasks
from services.curation.ingest import walk_markdown
from services.curation.writer import new_memory


def test_entities_are_extracted_deterministically() -> None:
    text = (
        "Alice Smith asked @bob to fix ABC-123 in services/curation/writer.py; see "
        "https://example.com/docs/a.html and call `parse_id` or MemoryWriter.save() via run_async."
    )
    found = extract(text)
    assert ("url", "https://example.com/docs/a.html") in found
    assert ("path", "services/curation/writer.py") in found
    assert ("handle", "@bob") in found
    assert ("ticket", "ABC-123") in found
    assert ("identifier", "parse_id") in found and ("identifier", "run_async") in found
    assert ("identifier", "MemoryWriter.save()") in found
    assert ("name", "Alice Smith") in found
    assert extract(text) == found  # deterministic
    assert not any(name in ("The", "See") for _, name in extract("The cat. See the dog."))


def test_task_patterns_and_confidence_formula() -> None:
    assert tasks.find("TODO: rotate the keys. Also I should sleep.") == [
        ("rotate the keys", 0.9),
        ("sleep", 0.65),
    ]
    assert tasks.find("Before we can ship, we need to fix the build") == [("fix the build", 0.78)]
    c = tasks.score(
        "rotate the deploy_key", 0.9, {("identifier", "deploy_key")}, ["we must rotate the deploy_key"]
    )
    assert c.confidence == round(0.9 * 0.6 + 0.25 + 0.15, 4) and c.priority == "high"
    plain = tasks.score("rotate the keys", 0.9, set(), [])
    assert plain.confidence == 0.54 and plain.priority is None
    medium = tasks.score("update deploy_key", 0.8, {("identifier", "deploy_key")}, [])
    assert medium.confidence == 0.73 and medium.priority == "medium"


async def _count(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]  # a word counts as a token here


async def test_chunks_follow_structure_and_never_split_elements() -> None:
    code = "```python\n" + "\n".join(f"line_{i} = {i}" for i in range(300)) + "\n```"
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * 2} |" for i in range(10))
    doc = (
        "# Title\n\nIntro paragraph here.\n\n## Part one\n\n"
        + ("Sentence number one is here. " * 60)
        + "\n\n"
        + code
        + "\n\n## Part two\n\n- item a\n- item b\n  continued\n- item c\n\n"
        + table
        + "\n"
    )
    chunks = await chunker.chunk(doc, _count)
    texts = [c.text for c in chunks]
    assert any(code in t for t in texts)  # the 300-line code block is whole in one chunk
    assert any(table in t for t in texts)
    assert any("- item a\n- item b\n  continued\n- item c" in t for t in texts)
    assert chunks[0].heading_path == ("Title",)
    assert any(c.heading_path == ("Title", "Part two") for c in chunks)
    assert all(c.tokens <= chunker.TARGET_MAX or "```" in c.text for c in chunks)
    # Overlap: a chunk after a paragraph starts with that paragraph's last sentence.
    assert any(t.startswith("Sentence number one is here.") for t in texts[1:])


def test_gitignore_is_honoured(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / ".gitignore").write_text("out/\n*.tmp.md\n/top-only.md\n!keep.tmp.md\n")
    (tmp_path / "docs" / ".gitignore").write_text("secret.md\n")
    for name in [
        "a.md",
        "top-only.md",
        "x.tmp.md",
        "keep.tmp.md",
        "out/b.md",
        "docs/c.md",
        "docs/secret.md",
        "docs/sub/top-only.md",
        "docs/d.txt",
    ]:
        (tmp_path / name).write_text("# x\n")
    files, skipped = walk_markdown(tmp_path)
    assert [p for p, _ in files] == ["a.md", "docs/c.md", "docs/sub/top-only.md", "keep.tmp.md"]
    assert skipped == []


def test_replay_applies_every_operation() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    a, b = uuid.uuid4(), uuid.uuid4()
    state: dict = {}
    first = new_memory(memory_id=a, scope="s", owner="o", kind="semantic", type="fact", content="v1", at=at)
    payloads.apply(state, payloads.create(first))
    payloads.apply(state, payloads.update(a, {"importance": 3.0, "updated_at": at}))
    second = new_memory(
        memory_id=b, scope="s", owner="o", kind="semantic", type="fact", content="v2", at=at, supersedes=a
    )
    payloads.apply(state, payloads.create(second, closes=a))
    assert state[a]["superseded_by"] == b and state[a]["valid_to"] == at and state[a]["importance"] == 3.0
    payloads.apply(state, payloads.event("archive", b, at))
    assert state[b]["archived_at"] == at
    payloads.apply(state, payloads.event("restore", b, at))
    assert state[b]["archived_at"] is None
    payloads.apply(state, payloads.event("delete", b, at))
    assert b not in state
