"""Builds and runs the embedder's gRPC server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.engine import EmbeddingEngine
from services.embedder.model import SentenceEncoder, resolve_model
from services.embedder.servicer import EmbedderServicer

log = logging.getLogger(__name__)

SERVICE_NAME = embedder_pb2.DESCRIPTOR.services_by_name["Embedder"].full_name


def build_engine(settings: EmbedderSettings) -> EmbeddingEngine:
    files = resolve_model(settings.embedding_model_dir, settings.model_cache_dir)
    encoder = SentenceEncoder(files, max_tokens=settings.embedding_max_tokens, threads=settings.embed_threads)
    return EmbeddingEngine(encoder)


@asynccontextmanager
async def running(
    settings: EmbedderSettings, engine: EmbeddingEngine | None = None
) -> AsyncIterator[tuple[grpc.aio.Server, int, EmbeddingEngine]]:
    """A started embedder server (port 0 picks a free port); stopped on exit."""
    engine = engine or build_engine(settings)
    servicer = EmbedderServicer(engine, max_texts=settings.embed_max_texts)
    server, port, health = create_server(
        [(embedder_pb2_grpc.add_EmbedderServicer_to_server, servicer, SERVICE_NAME)],
        settings.host,
        settings.embedder_port,
    )
    await server.start()
    await mark_serving(health, [SERVICE_NAME])
    log.info("embedder %s (%d dims) serving on %s:%d", engine.encoder.model_id, engine.encoder.dimension,
             settings.host, port)
    try:
        yield server, port, engine
    finally:
        await server.stop(2)


async def serve(settings: EmbedderSettings) -> None:
    async with running(settings) as (server, _port, engine):
        start_metrics_server(settings.host, settings.embedder_metrics_port)
        await run_until_signalled(server)
        engine.close()
