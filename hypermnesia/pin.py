"""The embedding pin: the one model whose vectors the store holds, and the vector columns it sizes."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from hypermnesia.errors import StartupError
from hypermnesia.migrator import SCHEMA_LOCK_KEY

__all__ = ["VECTOR_TABLES", "ModelMismatch", "add_vector_column", "ensure_embedding_pin", "read_pin"]

log = logging.getLogger(__name__)

# Tables whose `embedding` column the pin creates (and reindex swaps); each gets an HNSW index.
VECTOR_TABLES = ("memories",)


class ModelMismatch(StartupError):
    pass


async def ensure_embedding_pin(pool: asyncpg.Pool, model_id: str, dimension: int) -> None:
    """Pin the model on first start (creating the vector columns and HNSW indexes); refuse a
    different model later, because vectors from two models are not comparable."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK_KEY)
        pin = await conn.fetchrow("SELECT model_id, dimension FROM embedding_pin")
        if pin is None:
            await conn.execute(
                "INSERT INTO embedding_pin (model_id, dimension) VALUES ($1, $2)", model_id, dimension
            )
            for table in VECTOR_TABLES:
                await add_vector_column(conn, table, "embedding", dimension)
            log.info("pinned embedding model %s (%d dims)", model_id, dimension)
            return
        if (pin["model_id"], pin["dimension"]) != (model_id, dimension):
            raise ModelMismatch(
                f"the store's vectors were made by {pin['model_id']} ({pin['dimension']} dims) but the "
                f"embedder serves {model_id} ({dimension} dims); run `hypermnesia reindex` to move the "
                "store to the new model, or point HM_EMBEDDING_MODEL_DIR back at the pinned one"
            )


async def add_vector_column(conn: Any, table: str, column: str, dimension: int) -> None:
    await conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} vector({int(dimension)})")
    # Inline, not TOASTed: every candidate's distance reads its vector, and a TOAST fetch per row
    # made exact (filtered) scans 10x slower. MAIN still moves it out as a last resort.
    await conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE MAIN")
    await conn.execute(
        f"CREATE INDEX {table}_{column}_hnsw ON {table} USING hnsw ({column} vector_cosine_ops)"
    )


async def read_pin(pool: asyncpg.Pool) -> tuple[str, int] | None:
    row = await pool.fetchrow("SELECT model_id, dimension FROM embedding_pin")
    return (row["model_id"], row["dimension"]) if row else None
