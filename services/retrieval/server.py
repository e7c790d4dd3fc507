"""Builds and runs the retrieval gRPC server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import grpc

from hypermnesia.bootstrap import connect_embedder, open_store
from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.pool import redact
from hypermnesia.settings import RetrievalSettings
from hypermnesia.v1 import retrieval_pb2, retrieval_pb2_grpc
from services.retrieval import structure, viz
from services.retrieval.context import ContextAssembler
from services.retrieval.replica import ReadRouter, open_replica_pool
from services.retrieval.search import Searcher
from services.retrieval.servicer import RetrievalServicer

log = logging.getLogger(__name__)

SERVICE_NAME = retrieval_pb2.DESCRIPTOR.services_by_name["Retrieval"].full_name


async def open_router(settings: RetrievalSettings, primary: asyncpg.Pool) -> ReadRouter:
    """Reads through HM_DATABASE_READ_URL when it is set, else on the primary."""
    if not settings.database_read_url:
        return ReadRouter(primary, None)
    replica = await open_replica_pool(settings.database_read_url, settings.db_pool_size)
    router = ReadRouter(
        primary,
        replica,
        wait_ms=settings.replica_wait_ms,
        replica_name=redact(settings.database_read_url),
    )
    await router.start()
    log.info("retrieval reads from the replica at %s", router.replica_name)
    return router


@asynccontextmanager
async def running(settings: RetrievalSettings) -> AsyncIterator[tuple[grpc.aio.Server, int, Searcher]]:
    """A started retrieval server (port 0 picks a free one); stopped and closed on exit."""
    store = await open_store(settings)  # the primary: migrations and bookkeeping only ever there
    embedder = await connect_embedder(settings, store.pool)
    router = await open_router(settings, store.pool)
    searcher = Searcher(store.pool, embedder, settings)
    server, port, health = create_server(
        [
            (
                retrieval_pb2_grpc.add_RetrievalServicer_to_server,
                RetrievalServicer(searcher, ContextAssembler(store.pool, searcher, embedder), router),
                SERVICE_NAME,
            ),
            structure.registration(router),
            viz.registration(router),
        ],
        settings.host,
        settings.retrieval_port,
    )
    await server.start()
    await mark_serving(health, [SERVICE_NAME, structure.SERVICE_NAME, viz.SERVICE_NAME])
    log.info("retrieval serving on %s:%d", settings.host, port)
    try:
        yield server, port, searcher
    finally:
        await server.stop(2)
        await router.close()
        await searcher.close()
        await embedder.close()
        await store.close()


async def serve(settings: RetrievalSettings) -> None:
    async with running(settings) as (server, _port, _searcher):
        start_metrics_server(settings.host, settings.retrieval_metrics_port)
        await run_until_signalled(server)
