"""The 3D map's SQL on the read side: two round trips, one for the nodes (the budget's most
important, then most recent memories of the filter, with their positions and the filter's total),
one for every edge between them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

__all__ = ["ENTITY_CAP", "ENTITY_MIN_JACCARD", "MAX_ENTITY_FANOUT", "GraphFilter", "edges", "nodes"]

# Entity-overlap edges: two memories are linked when the Jaccard index of their entity sets reaches
# this (sharing one of two entities each, 1/3, does; one of four each, 1/7, does not) ...
ENTITY_MIN_JACCARD = 0.25
# ... each memory keeping at most this many of them (its strongest), so that a popular entity
# draws a few lines per node rather than a hairball ...
ENTITY_CAP = 6
# ... and an entity found in more than this many of the nodes links none of them: it says as
# little as a stop word, and its pairs would grow with the square of the budget.
MAX_ENTITY_FANOUT = 200


@dataclass(frozen=True)
class GraphFilter:
    scopes: list[str]
    kinds: list[str]
    since: datetime | None
    until: datetime | None
    limit: int


# The current basis (the newest); alias b must be the table itself for hm_viz_position.
_CURRENT = "b.id = (SELECT max(id) FROM viz_basis)"


async def nodes(pool: asyncpg.Pool, f: GraphFilter) -> tuple[list[asyncpg.Record], int, str]:
    """(the node rows, the filter's total, the projection's method or "none"). Every memory of the
    scopes counts, archived, superseded and stale ones too (the map shows them as such). A memory
    written since curation's last pass has no stored position under the current basis: it is
    placed on read with the same formula (hm_viz_position), so no node is left out."""
    params: list[object] = [f.scopes]
    where = ["m.scope = ANY($1::text[])"]
    if f.kinds:
        params.append(f.kinds)
        where.append(f"m.kind = ANY(${len(params)}::text[])")
    if f.since is not None:
        params.append(f.since)
        where.append(f"m.created_at >= ${len(params)}")
    if f.until is not None:
        params.append(f.until)
        where.append(f"m.created_at < ${len(params)}")
    params.append(f.limit)
    rows = await pool.fetch(
        # The budget is picked over narrow rows (the filter's total counted on the way), then only
        # the chosen ones are read whole.
        "WITH f AS ("
        " SELECT m.id, m.importance, m.created_at, count(*) OVER () AS total"
        f" FROM memories m WHERE {' AND '.join(where)}"
        f" ORDER BY m.importance DESC, m.created_at DESC, m.id LIMIT ${len(params)})"
        " SELECT f.total, m.id, m.kind, m.type, m.scope, m.importance, m.description,"
        " left(m.content, 80) AS head, m.created_at, m.archived_at, m.superseded_by,"
        " m.stale_at IS NOT NULL AS stale, m.decay_class, m.last_accessed_at, b.method,"
        " CASE WHEN p.basis_id = b.id THEN ARRAY[p.x, p.y, p.z]"
        " WHEN vector_dims(m.embedding) = b.dims THEN hm_viz_position(m.embedding, b) END AS position"
        f" FROM f JOIN memories m ON m.id = f.id LEFT JOIN viz_basis b ON {_CURRENT}"
        " LEFT JOIN memory_positions p ON p.memory_id = f.id"
        " ORDER BY f.importance DESC, f.created_at DESC, f.id",
        *params,
    )
    if not rows:
        total = 0
        method = await pool.fetchval(f"SELECT b.method FROM viz_basis b WHERE {_CURRENT}")
        return [], total, method or "none"
    return list(rows), int(rows[0]["total"]), rows[0]["method"] or "none"


# Every edge among the nodes $1, in one statement. Supersede both ways (a chain is written from
# either end), evidence derived -> premise, same thread between consecutive turns among the nodes
# (ordinal, then time), entity overlap as described at ENTITY_MIN_JACCARD.
_EDGES = f"""
WITH n AS (SELECT id, supersedes, superseded_by, scope, thread_id, ordinal, created_at
           FROM memories WHERE id = ANY($1::uuid[])),
ents AS (SELECT me.memory_id, me.entity_id, count(*) OVER (PARTITION BY me.memory_id) AS size
         FROM memory_entities me WHERE me.memory_id = ANY($1::uuid[])),
telling AS (SELECT entity_id FROM ents GROUP BY entity_id
            HAVING count(*) BETWEEN 2 AND {MAX_ENTITY_FANOUT}),
-- Each pair carries both set sizes: joining a sizes table twice instead let the planner, which
-- cannot estimate these CTEs, cross the two (4 million rows and 1.8 s at 2,000 nodes).
pairs AS (SELECT a.memory_id AS s, c.memory_id AS t, count(*) AS shared,
                 min(a.size) AS size_s, min(c.size) AS size_t
          FROM ents a JOIN telling USING (entity_id)
          JOIN ents c ON c.entity_id = a.entity_id AND c.memory_id > a.memory_id
          GROUP BY a.memory_id, c.memory_id),
scored AS (SELECT s, t, shared::float8 / (size_s + size_t - shared) AS w FROM pairs),
ranked AS (SELECT s, t, w,
                  row_number() OVER (PARTITION BY s ORDER BY w DESC, t) AS rank_s,
                  row_number() OVER (PARTITION BY t ORDER BY w DESC, s) AS rank_t
           FROM scored WHERE w >= $2),
thread AS (SELECT id, lag(id) OVER (PARTITION BY scope, thread_id ORDER BY ordinal NULLS LAST, created_at, id)
                  AS previous
           FROM n WHERE thread_id IS NOT NULL)
SELECT 'supersedes' AS relation, n.id AS source, n.supersedes AS target, 1.0::float8 AS weight
  FROM n WHERE n.supersedes = ANY($1::uuid[])
UNION
SELECT 'supersedes', n.superseded_by, n.id, 1.0 FROM n WHERE n.superseded_by = ANY($1::uuid[])
UNION ALL
SELECT 'evidence', e.derived_id, e.premise_id, 1.0 FROM evidence_edges e
  WHERE e.derived_id = ANY($1::uuid[]) AND e.premise_id = ANY($1::uuid[])
UNION ALL
SELECT 'same_thread', previous, id, 1.0 FROM thread WHERE previous IS NOT NULL
UNION ALL
SELECT 'entity_overlap', s, t, w FROM ranked WHERE rank_s <= $3 AND rank_t <= $3
"""


async def edges(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    if not ids:
        return []
    return list(await pool.fetch(_EDGES, ids, ENTITY_MIN_JACCARD, ENTITY_CAP))
