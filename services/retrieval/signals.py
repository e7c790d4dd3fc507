"""The structural scoring signals beside relevance, recency and importance:

- topic match: 1 when the memory is filed under the search's active topic (a record's `topic_id`,
  kept in the memory's metadata), else 0; a preference, not a filter;
- entity overlap: Jaccard similarity between the entities the query names and those the memory
  is linked to in the entity index (the same deterministic extractor wrote those links);
- active-task bonus: 0.5 for a memory an open task was derived from, and for the open task itself,
  so ongoing work surfaces first (manager mode; answer mode, relevance first, turns it off).

The topic is read from the candidate rows; entities and tasks each cost one indexed lookup, made
only when their weight is on (and, for entities, when the query names one)."""

from __future__ import annotations

import json
import uuid

import asyncpg

from hypermnesia.entities import extract, overlap_key
from services.retrieval import repo

TASK_BONUS = 0.5

EntitySet = frozenset[tuple[str, str]]


def topic_match(topic: str, metadata: object) -> float:
    data = json.loads(metadata) if isinstance(metadata, str) else (metadata or {})
    return 1.0 if isinstance(data, dict) and data.get("topic_id") == topic else 0.0


def query_entities(query: str) -> EntitySet:
    return frozenset(overlap_key(e) for e in extract(query))


def jaccard(a: EntitySet, b: EntitySet) -> float:
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


async def entity_sets(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> dict[uuid.UUID, EntitySet]:
    """The linked entities of each memory in `ids` (memories with none are absent)."""
    rows = await repo.entity_links(pool, ids)
    found: dict[uuid.UUID, set[tuple[str, str]]] = {}
    for r in rows:
        found.setdefault(r["memory_id"], set()).add(overlap_key((r["type"], r["name"])))
    return {memory_id: frozenset(names) for memory_id, names in found.items()}


async def active_task_ids(pool: asyncpg.Pool, scopes: list[str], ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `ids` are open tasks (live working-memory tasks of these scopes) or memories such a
    task was derived from. Dismissed tasks are archived and expired ones are not live, so neither
    counts."""
    rows = await repo.open_tasks(pool, scopes)
    wanted = set(ids)
    active: set[uuid.UUID] = set()
    for r in rows:
        active.add(r["id"])
        for source in _json_list(r["sources"]):
            try:
                active.add(uuid.UUID(source))
            except ValueError:
                continue  # metadata is the caller's to write; a bad id refers to nothing
    return active & wanted


def _json_list(value: object) -> list[str]:
    if value is None:
        return []
    parsed = json.loads(value) if isinstance(value, str) else value
    return [str(v) for v in parsed] if isinstance(parsed, list) else []
