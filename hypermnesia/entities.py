"""Deterministic entity extraction (no model in the loop), shared by the write path (which links
memories to the entities they mention: the entity index) and the read path (which scores a
memory's entity overlap with the query). Pattern-based so it is cheap, repeatable and the same on
a rebuild: URLs, file paths, @handles, tickets (ABC-123), code identifiers (snake_case, camelCase,
dotted.names, `backticked`) and capitalised names.
"""

from __future__ import annotations

import re

MAX_ENTITIES = 64

_URL = re.compile(r"\bhttps?://[^\s<>()\"'`]+[^\s<>()\"'`.,;:!?]")
_PATH = re.compile(
    r"(?<![\w@/])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b|(?<![\w/])[\w-]+\.(?:py|md|ts|tsx|js|"
    r"json|yaml|yml|toml|sql|proto|go|rs|java|rb|sh|txt|cfg|ini)\b"
)
_HANDLE = re.compile(r"(?<![\w.])@[A-Za-z][\w-]{1,38}\b")
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b")
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_CAMEL = re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\(?\)?")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
# Capitalised words that start sentences or are grammar, not names.
_STOP = frozenset(
    "A An The This That These Those It Its I We You He She They My Our Your Their If When While Then "
    "And But Or So For To In On At By Of With From As Is Are Was Were Be Do Does Did Not No Yes Use "
    "Run Set Get Add Make See Note Also All Any Each Every Some After Before Because Since Until "
    "Why What Which Who How Where There Here Please Thanks Okay Ok TODO Next Follow Don Let Right Sure "
    "Well Now Maybe Just Still Great Good Hi Hello Hey".split()
)


def extract(text: str) -> list[tuple[str, str]]:
    """(type, name) pairs in first-seen order, deduplicated, at most MAX_ENTITIES."""
    found: dict[tuple[str, str], None] = {}
    taken: list[tuple[int, int]] = []

    def add(kind: str, match: re.Match[str], group: int = 0) -> None:
        start, end = match.span(group)
        if any(s <= start < e or s < end <= e for s, e in taken):
            return  # already part of a more specific entity (a path inside a URL, ...)
        taken.append((start, end))
        found.setdefault((kind, match.group(group)), None)

    for m in _URL.finditer(text):
        add("url", m)
    for m in _PATH.finditer(text):
        add("path", m)
    for m in _HANDLE.finditer(text):
        add("handle", m)
    for m in _TICKET.finditer(text):
        add("ticket", m)
    for m in _BACKTICK.finditer(text):
        add("identifier", m, 1)
    for pattern in (_DOTTED, _SNAKE, _CAMEL):
        for m in pattern.finditer(text):
            add("identifier", m)
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        while words and words[0] in _STOP:
            words.pop(0)
        if not words or (len(words) == 1 and len(words[0]) < 3):
            continue
        start = m.start() + m.group(0).index(words[0])
        end = start + len(" ".join(words)) if len(words) == len(m.group(0).split()) else m.end()
        if any(s <= start < e for s, e in taken):
            continue
        taken.append((start, end))
        found.setdefault(("name", " ".join(words)), None)
    return list(found)[:MAX_ENTITIES]


def overlap_key(entity: tuple[str, str]) -> tuple[str, str]:
    """How two mentions are compared for overlap: same type, name equal ignoring case."""
    return entity[0], entity[1].casefold()
