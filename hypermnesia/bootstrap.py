"""Start-up shared by retrieval and curation: the store (migrated) and the pinned embedder."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg

from hypermnesia.embedded_pg import EmbeddedPostgres, resolve_database_url
from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.migrator import migrate
from hypermnesia.pin import ensure_embedding_pin
from hypermnesia.pool import check_service_role, connect_pool
from hypermnesia.settings import EmbedderClientSettings

log = logging.getLogger(__name__)


@dataclass
class Store:
    pool: asyncpg.Pool
    embedded: EmbeddedPostgres | None

    async def close(self) -> None:
        await self.pool.close()


async def open_store(settings: EmbedderClientSettings) -> Store:
    url, embedded = resolve_database_url(
        settings.database_url, settings.data_dir, settings.pg_shared_buffers_mb
    )
    pool = await connect_pool(url, max_size=settings.db_pool_size)
    try:
        await migrate(pool)  # creates the role requests run as (migration 0025)
        await check_service_role(pool)
    except BaseException:
        await pool.close()
        raise
    return Store(pool, embedded)


async def connect_embedder(settings: EmbedderClientSettings, pool: asyncpg.Pool) -> EmbedderClient:
    """Wait for the embedder, then pin its model in the store or refuse a different one."""
    client = EmbedderClient(settings.embedder_address)
    info = await client.wait_for_info(settings.startup_timeout_s)
    await ensure_embedding_pin(pool, info.model_id, info.dimension)
    return client
