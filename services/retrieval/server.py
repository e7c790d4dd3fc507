"""Builds and runs the retrieval gRPC server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from hypermnesia.bootstrap import connect_embedder, open_store
from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.settings import RetrievalSettings
from hypermnesia.v1 import retrieval_pb2, retrieval_pb2_grpc
from services.retrieval import structure, viz
from services.retrieval.context import ContextAssembler
from services.retrieval.search import Searcher
from services.retrieval.servicer import RetrievalServicer

log = logging.getLogger(__name__)

SERVICE_NAME = retrieval_pb2.DESCRIPTOR.services_by_name["Retrieval"].full_name


@asynccontextmanager
async def running(settings: RetrievalSettings) -> AsyncIterator[tuple[grpc.aio.Server, int, Searcher]]:
    """A started retrieval server (port 0 picks a free one); stopped and closed on exit."""
    store = await open_store(settings)
    embedder = await connect_embedder(settings, store.pool)
    searcher = Searcher(store.pool, embedder, settings)
    server, port, health = create_server(
        [
            (
                retrieval_pb2_grpc.add_RetrievalServicer_to_server,
                RetrievalServicer(searcher, ContextAssembler(store.pool, searcher, embedder)),
                SERVICE_NAME,
            ),
            structure.registration(store.pool),
            viz.registration(store.pool),
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
        await searcher.close()
        await embedder.close()
        await store.close()


async def serve(settings: RetrievalSettings) -> None:
    async with running(settings) as (server, _port, _searcher):
        start_metrics_server(settings.host, settings.retrieval_metrics_port)
        await run_until_signalled(server)
