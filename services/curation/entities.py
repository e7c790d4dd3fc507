"""The entity index (memories linked through the entities they mention): a memory's links
are replaced from its current text with the shared extractor (hypermnesia/entities.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from hypermnesia.entities import extract
from services.curation import repo


async def link(
    conn: asyncpg.Connection, memory_id: uuid.UUID, scope: str, description: str, content: str, at: datetime
) -> None:
    """Replace the memory's entity links with those extracted from its current text."""
    await repo.replace_entity_links(conn, memory_id, scope, extract(f"{description}\n{content}"), at)


async def link_many(conn: asyncpg.Connection, items: list[tuple[uuid.UUID, str, str, str, datetime]]) -> None:
    """link() for a batch of new memories: (id, scope, description, content, at)."""
    await repo.add_entity_links(
        conn,
        [
            (memory_id, scope, kind, name, at)
            for memory_id, scope, description, content, at in items
            for kind, name in extract(f"{description}\n{content}")
        ],
    )
