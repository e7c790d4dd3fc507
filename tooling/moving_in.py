"""Moving in: what `hypermnesia import` reads besides its own dumps.

- An earlier hypermnesia server's `export` JSONL (one memory per line, no `kind`, `type` defaulting
  to `fact`).
- Markdown memory files: `CLAUDE.md`, `MEMORY.md`, a folder of notes. Each bullet is a memory, and
  so is the prose of each section; the headings above it become its tags, and the first line (a
  link's text, for an index line such as `- [Title](file.md) — hook`) its description.

Every memory gets an id derived from where it came from and what it says (uuid5), so importing the
same files again adds nothing, and an edited bullet comes in as a new memory beside the old one.
The output is the dump's own line format (services/curation/memory_fields), so the one import path
validates, embeds and writes everything.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypermnesia.kinds import DEFAULT_IMPORTANCE, DEFAULT_TYPE
from hypermnesia.scopes import project_scope_for_root
from hypermnesia.times import iso
from hypermnesia.validation import MAX_DESCRIPTION_CHARS, MAX_TAG_CHARS, MAX_TAGS

# Fixed namespace: the same file and text give the same id on every machine.
_NAMESPACE = uuid.UUID("5b1f4a52-2d0c-4c59-9a1e-6d0e8f2a7c11")
MARKDOWN_SUFFIXES = (".md", ".markdown")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_DESCRIPTION_CHARS = 150


@dataclass(frozen=True)
class Piece:
    """One memory found in a Markdown file."""

    path: str
    headings: tuple[str, ...]
    text: str


def _flush(lines: list[str]) -> str:
    return "\n".join(lines).strip()


def markdown_pieces(text: str, path: str) -> list[Piece]:
    """The memories of one Markdown file, in file order: each top-level bullet (with its nested
    lines) and the prose of each section. Fenced code stays with the piece it sits in."""
    pieces: list[Piece] = []
    headings: list[str] = []
    prose: list[str] = []
    bullet: list[str] = []
    in_fence = False

    def end_bullet() -> None:
        if bullet and (body := _flush(bullet)):
            pieces.append(Piece(path, tuple(headings), body))
        bullet.clear()

    def end_prose() -> None:
        if prose and (body := _flush(prose)):
            pieces.append(Piece(path, tuple(headings), body))
        prose.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            (bullet if bullet else prose).append(line)
            continue
        if in_fence:
            (bullet if bullet else prose).append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            end_bullet()
            end_prose()
            level = len(heading.group(1))
            del headings[level - 1 :]
            headings.extend([""] * (level - 1 - len(headings)))
            headings.append(heading.group(2))
            continue
        item = _BULLET.match(line)
        if item and not item.group(1):  # a top-level bullet starts a memory
            end_bullet()
            bullet.append(item.group(2))
            continue
        if bullet and (line.startswith((" ", "\t")) or item):
            bullet.append(line.strip() if not item else line.rstrip())
            continue
        if not line.strip():
            if bullet:
                end_bullet()
            elif prose:
                prose.append("")
            continue
        end_bullet()
        prose.append(line.rstrip())
    end_bullet()
    end_prose()
    return [p for p in pieces if p.text]


def describe(text: str) -> str:
    """A one-line description: the first line, links reduced to their text, cut at a word."""
    lines = [line for line in text.strip().splitlines() if line.strip() and not _FENCE.match(line)]
    first = _LINK.sub(r"\1", (lines or [text.strip()])[0]).strip(" -*#")
    if len(first) <= _DESCRIPTION_CHARS:
        return first
    return first[:_DESCRIPTION_CHARS].rsplit(" ", 1)[0] + "…"


def _tags(headings: tuple[str, ...]) -> list[str]:
    tags = [_LINK.sub(r"\1", h).strip()[:MAX_TAG_CHARS] for h in headings if h.strip()]
    return list(dict.fromkeys(tags))[:MAX_TAGS]


def markdown_files(root: Path) -> list[Path]:
    """The Markdown files to read: the file itself, or every one under a folder (sorted)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in MARKDOWN_SUFFIXES)


def markdown_dump_lines(
    root: Path, scope: str | None, owner: str, now: datetime | None = None
) -> Iterator[str]:
    """Dump lines for the Markdown memory files at `root`. The scope defaults to the project an MCP
    session (or a hook) started in the file's folder uses, so the memories land where they were
    read from."""
    now = now or datetime.now(UTC)
    base = root if root.is_dir() else root.parent
    for file in markdown_files(root):
        relative = file.relative_to(base).as_posix() if file != root else file.name
        target = scope or project_scope_for_root(str(file.parent.resolve()))
        text = file.read_text(encoding="utf-8", errors="replace")
        for piece in markdown_pieces(text, relative):
            content = piece.text
            memory_id = uuid.uuid5(_NAMESPACE, f"{target}\n{relative}\n{content}")
            stamp = iso(now)
            yield json.dumps(
                {
                    "id": str(memory_id),
                    "scope": target,
                    "owner_id": owner,
                    "type": DEFAULT_TYPE,
                    "kind": "semantic",
                    "content": content,
                    "description": describe(content)[:MAX_DESCRIPTION_CHARS],
                    "tags": _tags(piece.headings),
                    "metadata": {"imported_from": relative, "heading_path": [h for h in piece.headings if h]},
                    "importance": DEFAULT_IMPORTANCE,
                    "created_at": stamp,
                    "updated_at": stamp,
                    "last_accessed_at": stamp,
                },
                ensure_ascii=False,
            )


def seed_line(data: dict[str, Any], owner: str) -> dict[str, Any]:
    """An earlier server's export line in this store's dump format: that server has no memory kinds (every
    memory is a semantic fact here) and defaults `type` to `fact`."""
    out = dict(data)
    out.setdefault("kind", "semantic")
    out["type"] = out.get("type") or DEFAULT_TYPE
    out["owner_id"] = out.get("owner_id") or owner
    if out.get("importance") is None:
        out["importance"] = DEFAULT_IMPORTANCE
    return out


def normalised_dump_lines(lines: Iterable[str], owner: str) -> Iterator[str]:
    """Dump lines as they come, with an earlier server's lines (no `kind`) completed; a line that is
    not a JSON object is passed on as it is, for the import to report."""
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            yield line
            continue
        if isinstance(data, dict) and "kind" not in data:
            yield json.dumps(seed_line(data, owner), ensure_ascii=False)
        else:
            yield line
