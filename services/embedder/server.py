"""Builds and runs the embedder's gRPC server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.engine import BatchLimits, EmbeddingEngine
from services.embedder.provider import EmbeddingProvider
from services.embedder.reranker import CrossEncoderReranker
from services.embedder.servicer import EmbedderServicer

log = logging.getLogger(__name__)

SERVICE_NAME = embedder_pb2.DESCRIPTOR.services_by_name["Embedder"].full_name


def build_provider(settings: EmbedderSettings) -> EmbeddingProvider:
    """The provider named by HM_EMBEDDING_PROVIDER (optional ones are imported only when chosen)."""
    if settings.embedding_provider == "sentence_transformers":
        from services.embedder.st_provider import SentenceTransformersProvider

        return SentenceTransformersProvider.from_settings(settings)
    if settings.embedding_provider == "openai":
        from services.embedder.openai_provider import OpenAIProvider

        return OpenAIProvider.from_settings(settings)
    from services.embedder.onnx_provider import OnnxProvider, default_workers

    return OnnxProvider.from_settings(
        settings.embedding_model_dir,
        settings.model_cache_dir,
        max_tokens=settings.embedding_max_tokens,
        quantization=settings.embedding_quantization,
        intra_op_threads=settings.embed_intra_op_threads,
        inter_op_threads=settings.embed_inter_op_threads,
        workers=settings.embed_workers or default_workers(),
        load_sessions_idle_s=settings.embed_load_sessions_idle_s,
    )


def limits_from(settings: EmbedderSettings) -> BatchLimits:
    return BatchLimits(
        max_batch_size=settings.embed_max_batch_size,
        max_batch_tokens=settings.embed_max_batch_tokens,
        max_wait_ms=settings.embed_max_wait_ms,
        max_queue=settings.embed_max_queue,
    )


def build_engine(settings: EmbedderSettings, provider: EmbeddingProvider | None = None) -> EmbeddingEngine:
    reranker = None
    if settings.rerank_model_dir is not None:
        reranker = CrossEncoderReranker(
            settings.rerank_model_dir,
            settings.model_cache_dir,
            max_tokens=settings.rerank_max_tokens,
            max_batch_tokens=settings.embed_max_batch_tokens,
            intra_op_threads=settings.embed_intra_op_threads,
            inter_op_threads=settings.embed_inter_op_threads,
        )
    return EmbeddingEngine(
        provider or build_provider(settings),
        limits=limits_from(settings),
        cache_size=settings.embed_query_cache_size,
        reranker=reranker,
    )


@asynccontextmanager
async def running(
    settings: EmbedderSettings, engine: EmbeddingEngine | None = None
) -> AsyncIterator[tuple[grpc.aio.Server, int, EmbeddingEngine]]:
    """A started embedder server (port 0 picks a free port); stopped on exit. Pass `engine` to
    serve one built around another provider (tests inject faults this way)."""
    engine = engine or build_engine(settings)
    engine.start()
    servicer = EmbedderServicer(engine, max_texts=settings.embed_max_texts)
    server, port, health = create_server(
        [(embedder_pb2_grpc.add_EmbedderServicer_to_server, servicer, SERVICE_NAME)],
        settings.host,
        settings.embedder_port,
    )
    await server.start()
    await mark_serving(health, [SERVICE_NAME])
    info = engine.info
    log.info(
        "embedder %s (%s, %s, %d dims) serving on %s:%d",
        info.model_id,
        info.provider,
        info.quantization,
        info.dimension,
        settings.host,
        port,
    )
    try:
        yield server, port, engine
    finally:
        await server.stop(2)
        await engine.close()


async def serve(settings: EmbedderSettings) -> None:
    async with running(settings) as (server, _port, _engine):
        start_metrics_server(settings.host, settings.embedder_metrics_port)
        await run_until_signalled(server)
