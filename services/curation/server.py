"""Builds and runs the curation gRPC server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from hypermnesia.bootstrap import connect_embedder, open_store
from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import curation_pb2, curation_pb2_grpc
from services.curation.servicer import CurationServicer
from services.curation.writer import MemoryWriter

log = logging.getLogger(__name__)

SERVICE_NAME = curation_pb2.DESCRIPTOR.services_by_name["Curation"].full_name


@asynccontextmanager
async def running(settings: CurationSettings) -> AsyncIterator[tuple[grpc.aio.Server, int, MemoryWriter]]:
    """A started curation server (port 0 picks a free one); stopped and closed on exit."""
    store = await open_store(settings)
    embedder = await connect_embedder(settings, store.pool)
    writer = MemoryWriter(
        store.pool,
        embedder,
        embed_timeout_s=settings.embed_write_timeout_ms / 1000,
        dedupe_threshold=settings.dedupe_threshold,
        dedupe_content_threshold=settings.dedupe_content_threshold,
    )
    server, port, health = create_server(
        [(curation_pb2_grpc.add_CurationServicer_to_server, CurationServicer(writer), SERVICE_NAME)],
        settings.host,
        settings.curation_port,
    )
    await server.start()
    await mark_serving(health, [SERVICE_NAME])
    log.info("curation serving on %s:%d", settings.host, port)
    try:
        yield server, port, writer
    finally:
        await server.stop(2)
        await embedder.close()
        await store.close()


async def serve(settings: CurationSettings) -> None:
    async with running(settings) as (server, _port, _writer):
        start_metrics_server(settings.host, settings.curation_metrics_port)
        await run_until_signalled(server)
