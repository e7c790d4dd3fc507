"""An Embedder service that answers document calls from vectors the real model already made, and
passes everything else (Info, queries, unknown texts, token counts, rerank) on to the real embedder.

The search bench builds its store through curation's own import path, which embeds every record
through HM_EMBEDDER_ADDRESS; pointed here, curation gets the cached vectors of an earlier run
instead of spending ~15 minutes re-embedding 100,000 texts on a 2-core machine. Every vector it
serves came from the real model (the bench's cache is keyed by model id), so the store is the same
one a cold run builds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import grpc
import numpy as np

from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc

__all__ = ["known_vectors_embedder"]


class _KnownVectors(embedder_pb2_grpc.EmbedderServicer):
    def __init__(
        self, vectors: Mapping[str, np.ndarray], upstream: embedder_pb2_grpc.EmbedderAsyncStub
    ) -> None:
        self.vectors = vectors
        self.upstream = upstream
        self.info: embedder_pb2.InfoResponse | None = None

    async def Info(
        self, request: embedder_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.InfoResponse:
        self.info = await self.upstream.Info(request, timeout=context.time_remaining())
        return self.info

    async def Embed(
        self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.EmbedResponse:
        known = request.input_type != embedder_pb2.INPUT_TYPE_QUERY and all(
            t in self.vectors for t in request.texts
        )
        if not known or self.info is None or not request.texts:
            return await self.upstream.Embed(request, timeout=context.time_remaining())
        rows = np.stack([self.vectors[t] for t in request.texts]).astype("<f4", copy=False)
        return embedder_pb2.EmbedResponse(
            model_id=self.info.model_id,
            dimension=self.info.dimension,
            vectors=rows.tobytes(),
        )

    async def CountTokens(
        self, request: embedder_pb2.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.CountTokensResponse:
        return await self.upstream.CountTokens(request, timeout=context.time_remaining())

    async def Rerank(
        self, request: embedder_pb2.RerankRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.RerankResponse:
        return await self.upstream.Rerank(request, timeout=context.time_remaining())


@asynccontextmanager
async def known_vectors_embedder(
    vectors: Mapping[str, np.ndarray], upstream_address: str
) -> AsyncIterator[str]:
    """Serve `vectors` (document text -> the real model's vector) on a free loopback port in front
    of the embedder at upstream_address; yields the address to give curation."""
    async with grpc.aio.insecure_channel(upstream_address) as channel:
        server = grpc.aio.server()
        embedder_pb2_grpc.add_EmbedderServicer_to_server(
            _KnownVectors(vectors, embedder_pb2_grpc.EmbedderStub(channel)), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            await server.stop(grace=None)
