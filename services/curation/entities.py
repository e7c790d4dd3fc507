"""The entity index (seed 002 links memories through the entities they mention): a memory's links
are replaced from its current text with the shared extractor (hypermnesia/entities.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from hypermnesia.entities import extract


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
