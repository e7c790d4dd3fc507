"""Embedder RPCs (thin: validation here, work in the engine)."""

from __future__ import annotations

import grpc

from hypermnesia.errors import FailedPrecondition, InvalidArgument
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder import metrics
from services.embedder.engine import EmbeddingEngine


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self, engine: EmbeddingEngine, *, max_texts: int) -> None:
        self.engine = engine
        self.max_texts = max_texts

    def _check_texts(self, texts: list[str]) -> None:
        if len(texts) > self.max_texts:
            raise InvalidArgument(
                f"{len(texts):,} texts in one call; the limit is {self.max_texts:,} (HM_EMBED_MAX_TEXTS). "
                "Send them in several calls"
            )

    async def Embed(
        self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.EmbedResponse:
        texts = list(request.texts)
        self._check_texts(texts)
        encoder = self.engine.encoder
        if not texts:
            return embedder_pb2.EmbedResponse(model_id=encoder.model_id, dimension=encoder.dimension)
        vectors, used, truncated = await self.engine.embed(texts)
        metrics.TEXTS.inc(len(texts))
        return embedder_pb2.EmbedResponse(
            model_id=encoder.model_id,
            dimension=encoder.dimension,
            vectors=vectors.astype("<f4", copy=False).tobytes(),
            token_counts=used,
            truncated=truncated,
        )

    async def CountTokens(
        self, request: embedder_pb2.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.CountTokensResponse:
        texts = list(request.texts)
        self._check_texts(texts)
        return embedder_pb2.CountTokensResponse(counts=await self.engine.count_tokens(texts))

    async def Rerank(
        self, request: embedder_pb2.RerankRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.RerankResponse:
        raise FailedPrecondition("reranking is off: set HM_RERANK_MODEL_DIR to a cross-encoder to enable it")

    async def Info(
        self, request: embedder_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.InfoResponse:
        encoder = self.engine.encoder
        return embedder_pb2.InfoResponse(
            model_id=encoder.model_id,
            dimension=encoder.dimension,
            pooling=encoder.pooling,
            max_tokens=encoder.max_tokens,
            quantization="fp32",
            provider="onnx",
        )
