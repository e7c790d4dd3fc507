"""Deterministic entity extraction (no model in the loop) and the entity index.

Seed 002 links memories through the entities they mention. Extraction here is pattern-based so it
is cheap, repeatable and the same on a rebuild: URLs, file paths, @handles, tickets (ABC-123),
code identifiers (snake_case, camelCase, dotted.names, `backticked`) and capitalised names.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

import asyncpg

MAX_ENTITIES = 64

_URL = re.compile(r"\bhttps?://[^\s<>()\"'`]+[^\s<>()\"'`.,;:!?]")
_PATH = re.compile(r"(?<![\w@/])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b|(?<![\w/])[\w-]+\.(?:py|md|ts|tsx|js|"
                   r"json|yaml|yml|toml|sql|proto|go|rs|java|rb|sh|txt|cfg|ini)\b")
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


async def link(
    conn: asyncpg.Connection, memory_id: uuid.UUID, scope: str, description: str, content: str, at: datetime
) -> None:
    """Replace the memory's entity links with those extracted from its current text."""
    await conn.execute("DELETE FROM memory_entities WHERE memory_id = $1", memory_id)
    pairs = extract(f"{description}\n{content}")
    if not pairs:
        return
    await conn.execute(
        "WITH e AS ("
        "  INSERT INTO entities (scope, type, name, first_seen, last_seen)"
        "  SELECT $1, t, n, $4, $4 FROM unnest($2::text[], $3::text[]) AS x(t, n)"
        "  ON CONFLICT (scope, type, name) DO UPDATE SET last_seen = GREATEST(entities.last_seen, $4)"
        "  RETURNING id)"
        " INSERT INTO memory_entities (memory_id, entity_id) SELECT $5, id FROM e ON CONFLICT DO NOTHING",
        scope, [p[0] for p in pairs], [p[1] for p in pairs], at, memory_id,
    )


async def link_many(conn: asyncpg.Connection, items: list[tuple[uuid.UUID, str, str, str, datetime]]) -> None:
    """link() for a batch of new memories: (id, scope, description, content, at)."""
    memory_ids, scopes, types, names, times = [], [], [], [], []
    for memory_id, scope, description, content, at in items:
        for kind, name in extract(f"{description}\n{content}"):
            memory_ids.append(memory_id)
            scopes.append(scope)
            types.append(kind)
            names.append(name)
            times.append(at)
    if not memory_ids:
        return
    # Upsert each distinct entity once (ON CONFLICT cannot touch one row twice in a statement).
    await conn.execute(
        "INSERT INTO entities (scope, type, name, first_seen, last_seen)"
        " SELECT s, t, n, min(a), max(a) FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])"
        "   AS x(s, t, n, a) GROUP BY s, t, n"
        " ON CONFLICT (scope, type, name) DO UPDATE"
        "   SET last_seen = GREATEST(entities.last_seen, EXCLUDED.last_seen),"
        "       first_seen = LEAST(entities.first_seen, EXCLUDED.first_seen)",
        scopes, types, names, times,
    )
    await conn.execute(
        "INSERT INTO memory_entities (memory_id, entity_id)"
        " SELECT x.m, e.id FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS x(m, s, t, n)"
        " JOIN entities e ON e.scope = x.s AND e.type = x.t AND e.name = x.n ON CONFLICT DO NOTHING",
        memory_ids, scopes, types, names,
    )
