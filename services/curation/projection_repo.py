"""The 3D map's SQL on the curation side (migration 0024): the current basis, the sample a basis is
fitted on, and the stored positions, written with the schema's one formula (hm_viz_position)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import numpy as np

__all__ = [
    "Basis",
    "State",
    "drop_orphans",
    "insert_basis",
    "project",
    "project_missing",
    "sample_vectors",
    "state",
]

# The newest basis is the current one (a condition on alias b, which must be the table itself for
# hm_viz_position to take its row).
CURRENT_BASIS = "b.id = (SELECT max(id) FROM viz_basis)"

# Positions of the given memories (all of them with `ids` NULL) under the current basis, written or
# replaced. A vector of another dimension than the basis's (a reindex in progress) is skipped: the
# next pass refits.
_UPSERT = (
    "INSERT INTO memory_positions (memory_id, basis_id, x, y, z)"
    " SELECT m.id, b.id, p[1], p[2], p[3] FROM memories m CROSS JOIN viz_basis b,"
    " LATERAL hm_viz_position(m.embedding, b) AS p"
    f" WHERE {CURRENT_BASIS} AND m.embedding IS NOT NULL AND vector_dims(m.embedding) = b.dims AND {{where}}"
    " ON CONFLICT (memory_id) DO UPDATE"
    " SET basis_id = EXCLUDED.basis_id, x = EXCLUDED.x, y = EXCLUDED.y, z = EXCLUDED.z"
)


@dataclass(frozen=True)
class Basis:
    """A fitted linear projection to 3D: position_k = ((v - mean) . axes[k]) / scales[k]."""

    method: str
    model_id: str
    mean: np.ndarray
    axes: np.ndarray  # 3 x dims, unit rows
    scales: np.ndarray  # 3
    fitted_on: int
    sample: int
    fit_ms: float


@dataclass(frozen=True)
class State:
    basis_id: int | None
    basis_model: str | None
    basis_dims: int | None
    fitted_on: int
    fitted_at: datetime | None
    vectors: int  # memories with a vector now (past EXACT_COUNT_ROWS, the table's estimated rows)
    model_id: str | None  # the embedding pin's
    dims: int | None


# Past this many rows (the planner's estimate) a pass reads the estimate instead of counting: the
# count reads every heap page, vectors included (~400 MB at 100,000 memories), once a minute, and
# kept the whole table in Postgres's cache on an idle stack. A refit waits for growth of tens of
# percent, which an estimate kept by autovacuum tells as well.
EXACT_COUNT_ROWS = 20_000


async def state(conn: asyncpg.Connection) -> State:
    """What a pass needs to decide between projecting what is missing and refitting."""
    row = await conn.fetchrow(
        "SELECT b.id, b.model_id AS basis_model, b.dims AS basis_dims, b.fitted_on, b.fitted_at,"
        " (SELECT CASE WHEN c.reltuples >= $1 THEN c.reltuples::bigint"
        "  ELSE (SELECT count(*) FROM memories WHERE embedding IS NOT NULL) END"
        "  FROM pg_class c WHERE c.oid = 'memories'::regclass) AS vectors,"
        " (SELECT model_id FROM embedding_pin LIMIT 1) AS model_id,"
        " (SELECT dimension FROM embedding_pin LIMIT 1) AS dims"
        f" FROM (SELECT 1) one LEFT JOIN viz_basis b ON {CURRENT_BASIS}",
        EXACT_COUNT_ROWS,
    )
    assert row is not None
    return State(
        basis_id=row["id"],
        basis_model=row["basis_model"],
        basis_dims=row["basis_dims"],
        fitted_on=int(row["fitted_on"] or 0),
        fitted_at=row["fitted_at"],
        vectors=int(row["vectors"]),
        model_id=row["model_id"],
        dims=row["dims"],
    )


async def sample_vectors(conn: asyncpg.Connection, limit: int) -> np.ndarray:
    """Up to `limit` vectors drawn at random from every memory that has one (archived and
    superseded ones too: the map can show them)."""
    rows = await conn.fetch(
        "SELECT embedding FROM memories WHERE embedding IS NOT NULL ORDER BY random() LIMIT $1", limit
    )
    if not rows:
        return np.empty((0, 0), dtype=np.float32)
    return np.stack([np.asarray(r["embedding"].to_numpy(), dtype=np.float32) for r in rows])


async def insert_basis(conn: asyncpg.Connection, basis: Basis) -> int:
    """Store a new basis, make it current, recompute every position with it and keep only the
    previous basis besides (one transaction: a reader sees all old positions or all new ones)."""
    offsets = basis.axes @ basis.mean
    async with conn.transaction():
        basis_id = await conn.fetchval(
            "INSERT INTO viz_basis (method, model_id, dims, axis_x, axis_y, axis_z, offsets, scales,"
            " fitted_on, sample, fit_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
            basis.method,
            basis.model_id,
            int(basis.axes.shape[1]),
            basis.axes[0],
            basis.axes[1],
            basis.axes[2],
            [float(v) for v in offsets],
            [float(v) for v in basis.scales],
            basis.fitted_on,
            basis.sample,
            basis.fit_ms,
        )
        await conn.execute(_UPSERT.format(where="true"), timeout=3600)
        await conn.execute("DELETE FROM viz_basis WHERE id < $1 - 1", basis_id)
    return int(basis_id)


async def project(conn: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> None:
    """Position these memories with the current basis as they are written (nothing before the
    first basis is fitted). One statement in the writer's transaction: three inner products a row."""
    if ids:
        await conn.execute(_UPSERT.format(where="m.id = ANY($1::uuid[])"), list(ids))


async def project_missing(conn: asyncpg.Connection, limit: int) -> int:
    """Position up to `limit` memories that have a vector but no position under the current basis
    (written by a path that does not call `project`, or before the basis existed)."""
    status = await conn.execute(
        _UPSERT.format(
            where=(
                "m.id IN (SELECT m2.id FROM memories m2 LEFT JOIN memory_positions q ON q.memory_id = m2.id"
                " WHERE m2.embedding IS NOT NULL"
                " AND (q.memory_id IS NULL OR q.basis_id <> (SELECT max(id) FROM viz_basis))"
                f" LIMIT {int(limit)})"
            ),
        )
    )
    return int(status.split()[-1])


async def drop_orphans(conn: asyncpg.Connection) -> int:
    """Forget the positions of deleted memories."""
    status = await conn.execute(
        "DELETE FROM memory_positions p WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = p.memory_id)"
    )
    return int(status.split()[-1])
