"""Structure-aware markdown chunking for document ingestion.

The text is cut into blocks (heading, fenced code, list, table, paragraph) and blocks are packed
into chunks of TARGET_MIN-TARGET_MAX tokens, counted with the embedder's tokenizer. A code block,
list or table is never split; a paragraph longer than a chunk is split between sentences. A new
heading closes a chunk that already reached TARGET_MIN, so chunks follow sections. Each chunk
after the first starts with ~10% overlap from the end of the previous one, and carries the path
of headings above it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

TARGET_MIN = 256
TARGET_MAX = 512
OVERLAP = 0.10

CountFn = Callable[[list[str]], Awaitable[list[int]]]

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TABLE = re.compile(r"^\s*\|")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


@dataclass(frozen=True)
class Block:
    kind: str  # heading | code | list | table | paragraph
    text: str
    headings: tuple[str, ...]


@dataclass(frozen=True)
class Chunk:
    text: str
    heading_path: tuple[str, ...]
    tokens: int


def blocks(markdown: str) -> list[Block]:
    """The document's blocks in order, each with the heading path it sits under."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    out: list[Block] = []
    path: list[tuple[int, str]] = []
    i = 0

    def heads() -> tuple[str, ...]:
        return tuple(t for _, t in path)

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := _HEADING.match(line):
            level = len(m.group(1))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, m.group(2))]
            out.append(Block("heading", line.strip(), heads()))
            i += 1
            continue
        if m := _FENCE.match(line):
            fence, start = m.group(1), i
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                i += 1
            i = min(i + 1, len(lines))
            out.append(Block("code", "\n".join(lines[start:i]), heads()))
            continue
        for kind, pattern in (("list", _LIST), ("table", _TABLE)):
            if pattern.match(line):
                start = i
                i += 1
                # A list continues through indented lines and blank lines followed by more items.
                while i < len(lines) and (
                    pattern.match(lines[i])
                    or (kind == "list" and lines[i].startswith(("  ", "\t")) and lines[i].strip())
                    or (
                        kind == "list"
                        and not lines[i].strip()
                        and i + 1 < len(lines)
                        and pattern.match(lines[i + 1])
                    )
                ):
                    i += 1
                out.append(Block(kind, "\n".join(lines[start:i]).strip("\n"), heads()))
                break
        else:
            start = i
            while (
                i < len(lines)
                and lines[i].strip()
                and not (
                    _HEADING.match(lines[i])
                    or _FENCE.match(lines[i])
                    or _LIST.match(lines[i])
                    or _TABLE.match(lines[i])
                )
            ):
                i += 1
            out.append(Block("paragraph", "\n".join(lines[start:i]), heads()))
    return out


async def chunk(markdown: str, count: CountFn) -> list[Chunk]:
    """Chunks of the document; `count` gives token counts with the embedder's tokenizer."""
    parts = blocks(markdown)
    if not parts:
        return []
    sizes = await count([b.text for b in parts])
    # Split over-long paragraphs between sentences (other elements are kept whole).
    units: list[tuple[Block, int]] = []
    for block, size in zip(parts, sizes, strict=True):
        if block.kind == "paragraph" and size > TARGET_MAX:
            sentences = _SENTENCE.split(block.text)
            counts = await count(sentences)
            units.extend(
                (Block("paragraph", s, block.headings), c) for s, c in zip(sentences, counts, strict=True)
            )
        else:
            units.append((block, size))
    chunks: list[list[tuple[Block, int]]] = [[]]
    for unit in units:
        current = chunks[-1]
        used = sum(c for _, c in current)
        starts_section = unit[0].kind == "heading" and used >= TARGET_MIN
        if current and (used + unit[1] > TARGET_MAX or starts_section):
            chunks.append([unit])
        else:
            current.append(unit)
    out: list[Chunk] = []
    previous: list[tuple[Block, int]] = []
    for members in chunks:
        text = "\n\n".join(b.text for b, _ in members)
        tokens = sum(c for _, c in members)
        lead = await _overlap(previous, count) if previous else ""
        if lead:
            text = f"{lead}\n\n{text}"
            tokens += (await count([lead]))[0]
        first = next((b for b, _ in members if b.kind != "heading"), members[0][0])
        out.append(Chunk(text, first.headings, tokens))
        previous = members
    return out


async def _overlap(previous: list[tuple[Block, int]], count: CountFn) -> str:
    """About 10% of the previous chunk, taken from its end without cutting an element: the last
    sentences of a closing paragraph, or a closing element small enough to repeat whole."""
    budget = max(1, int(sum(c for _, c in previous) * OVERLAP))
    last, size = previous[-1]
    if last.kind == "heading":
        return ""
    if last.kind != "paragraph":
        return last.text if size <= budget else ""
    sentences = _SENTENCE.split(last.text)
    counts = await count(sentences)
    taken: list[str] = []
    used = 0
    for sentence, n in zip(reversed(sentences), reversed(counts), strict=True):
        if used + n > budget and taken:
            break
        if used + n > budget * 2:
            break
        taken.insert(0, sentence)
        used += n
    return " ".join(taken)
