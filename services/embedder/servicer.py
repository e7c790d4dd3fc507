"""Embedder RPCs (thin: validation here, work in the engine)."""

from __future__ import annotations

import grpc

from hypermnesia.errors import FailedPrecondition, InvalidArgument
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.engine import EmbeddingEngine


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self, engine: EmbeddingEngine, *, max_texts: int) -> None:
        self.engine = engine
        self.max_texts = max_texts

    def _check_count(self, count: int, what: str = "texts") -> None:
        if count > self.max_texts:
            raise InvalidArgument(
                f"{count:,} {what} in one call; the limit is {self.max_texts:,} (HM_EMBED_MAX_TEXTS). "
                "Send them in several calls"
            )

    async def Embed(
        self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.EmbedResponse:
        self._check_count(len(request.texts))
        info = self.engine.info
        if not request.texts:
            return embedder_pb2.EmbedResponse(model_id=info.model_id, dimension=info.dimension)
        result = await self.engine.embed(request.texts, request.input_type)
        return embedder_pb2.EmbedResponse(
            model_id=info.model_id,
            dimension=info.dimension,
            vectors=result.vectors.astype("<f4", copy=False).tobytes(),
            token_counts=result.tokens,
            truncated=result.truncated,
        )

    async def CountTokens(
        self, request: embedder_pb2.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.CountTokensResponse:
        self._check_count(len(request.texts))
        return embedder_pb2.CountTokensResponse(counts=await self.engine.count_tokens(request.texts))

    async def Rerank(
        self, request: embedder_pb2.RerankRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.RerankResponse:
        reranker = self.engine.reranker
        if reranker is None:
            raise FailedPrecondition(
                "reranking is off: set HM_RERANK_MODEL_DIR to a cross-encoder to enable it"
            )
        self._check_count(len(request.documents), "documents")
        scores = await self.engine.rerank(request.query, list(request.documents))
        return embedder_pb2.RerankResponse(model_id=reranker.model_id, scores=scores.tolist())

    async def Info(
        self, request: embedder_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> embedder_pb2.InfoResponse:
        info = self.engine.info
        reranker = self.engine.reranker
        return embedder_pb2.InfoResponse(
            model_id=info.model_id,
            dimension=info.dimension,
            pooling=info.pooling,
            max_tokens=info.max_tokens,
            quantization=info.quantization,
            provider=info.provider,
            rerank_model_id=reranker.model_id if reranker else "",
        )
