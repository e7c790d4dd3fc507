"""Curation's SQL over the memory graph (migration 0021): evidence edges, identities and
perspective, and the staleness the triggers keep."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from hypermnesia.memory_rows import MEMORY_COLUMNS

# A graph node: the memory's read columns plus its staleness.
NODE_COLUMNS = f"{MEMORY_COLUMNS}, observer, observed"


async def add_edges(
    conn: asyncpg.Connection, derived: uuid.UUID, premises: Sequence[uuid.UUID], by: str
) -> int:
    """Insert derived -> premise edges (the cycle trigger checks each); returns how many were new."""
    rows = await conn.fetch(
        "INSERT INTO evidence_edges (derived_id, premise_id, created_by)"
        " SELECT $1, p, $3 FROM unnest($2::uuid[]) AS p ON CONFLICT DO NOTHING RETURNING premise_id",
        derived,
        list(premises),
        by,
    )
    return len(rows)


async def nodes(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(f"SELECT {NODE_COLUMNS} FROM memories WHERE id = ANY($1::uuid[])", list(ids))
    )


async def scopes_of(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    rows = await conn.fetch("SELECT id, scope FROM memories WHERE id = ANY($1::uuid[])", list(ids))
    return {r["id"]: r["scope"] for r in rows}


async def node(conn: asyncpg.Connection, memory_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {NODE_COLUMNS} FROM memories WHERE id = $1", memory_id)


async def edges(conn: asyncpg.Connection, ids: Sequence[uuid.UUID], *, upward: bool) -> list[asyncpg.Record]:
    """(derived_id, premise_id) for every edge out of these memories to their premises (upward)
    or into them from what was derived from them, oldest first."""
    near, far = ("derived_id", "premise_id") if upward else ("premise_id", "derived_id")
    return list(
        await conn.fetch(
            f"SELECT derived_id, premise_id FROM evidence_edges WHERE {near} = ANY($1::uuid[])"
            f" ORDER BY created_at, {far}",
            list(ids),
        )
    )


async def derived_ids(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these memories are conclusions (rest on some premise)."""
    rows = await conn.fetch(
        "SELECT DISTINCT derived_id FROM evidence_edges WHERE derived_id = ANY($1::uuid[])", list(ids)
    )
    return {r["derived_id"] for r in rows}


async def edges_in_scopes(
    conn: asyncpg.Connection, scopes: Sequence[str] | None
) -> set[tuple[uuid.UUID, uuid.UUID]]:
    """Every edge whose conclusion is a memory of these scopes (all when None): rebuild's compare."""
    if scopes:
        rows = await conn.fetch(
            "SELECT e.derived_id, e.premise_id FROM evidence_edges e JOIN memories m ON m.id = e.derived_id"
            " WHERE m.scope = ANY($1::text[])",
            list(scopes),
        )
    else:
        rows = await conn.fetch(
            "SELECT e.derived_id, e.premise_id FROM evidence_edges e JOIN memories m ON m.id = e.derived_id"
        )
    return {(r["derived_id"], r["premise_id"]) for r in rows}


def _unnest(edges: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Edges as the two arrays `unnest($1::uuid[], $2::uuid[]) AS x(d, p)` reads: conclusions, premises."""
    return [d for d, _ in edges], [p for _, p in edges]


async def delete_edges(conn: asyncpg.Connection, edges: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    if edges:
        await conn.execute(
            "DELETE FROM evidence_edges e USING unnest($1::uuid[], $2::uuid[]) AS x(d, p)"
            " WHERE e.derived_id = x.d AND e.premise_id = x.p",
            *_unnest(edges),
        )


async def insert_edges(
    conn: asyncpg.Connection, edges: Sequence[tuple[uuid.UUID, uuid.UUID]], by: str
) -> None:
    if edges:
        await conn.execute(
            "INSERT INTO evidence_edges (derived_id, premise_id, created_by)"
            " SELECT d, p, $3 FROM unnest($1::uuid[], $2::uuid[]) AS x(d, p) ON CONFLICT DO NOTHING",
            *_unnest(edges),
            by,
        )


async def mark_stale(conn: asyncpg.Connection, premise: uuid.UUID, change: str) -> None:
    await conn.execute("SELECT hm_mark_stale($1, $2)", premise, change)


# ---- perspective -----------------------------------------------------------------------------


async def insert_identity(
    conn: asyncpg.Connection, identity_id: uuid.UUID, scope: str, name: str, owner: str
) -> asyncpg.Record | None:
    """None when the scope already has an identity of that name."""
    return await conn.fetchrow(
        "INSERT INTO identities (id, scope, name, owner_id) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (scope, name) DO NOTHING RETURNING id, scope, name, owner_id",
        identity_id,
        scope,
        name,
        owner,
    )


async def identity(conn: asyncpg.Connection, identity_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id, scope, name, owner_id FROM identities WHERE id = $1", identity_id)


async def set_perspective(
    conn: asyncpg.Connection, memory_id: uuid.UUID, observer: uuid.UUID | None, observed: uuid.UUID | None
) -> None:
    await conn.execute(
        "UPDATE memories SET observer = $2, observed = $3 WHERE id = $1", memory_id, observer, observed
    )
