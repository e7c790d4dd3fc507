"""The embedder's core, above any provider: query cache, tokenization on arrival, the batcher,
and the cross-encoder. The servicer validates and calls this; tests can build one directly
around any provider (e.g. one that fails on purpose)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from hypermnesia.v1 import embedder_pb2
from services.embedder import metrics
from services.embedder.batcher import Batcher
from services.embedder.cache import Cached, QueryCache
from services.embedder.provider import EmbeddingProvider, Prepared, ProviderInfo
from services.embedder.reranker import CrossEncoderReranker

QUERY = embedder_pb2.INPUT_TYPE_QUERY

# Tokenizing a few short texts costs less than handing them to a thread; beyond this many
# characters per call the tokenizer runs on its own thread so the event loop stays responsive.
_INLINE_CHARS = 4096


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # float32 [n, dimension]
    tokens: list[int]
    truncated: list[bool]


@dataclass(frozen=True)
class BatchLimits:
    max_batch_size: int = 32
    max_batch_tokens: int = 2048
    max_wait_ms: float = 2.0
    max_queue: int = 4096


class EmbeddingEngine:
    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        limits: BatchLimits | None = None,
        cache_size: int = 4096,
        reranker: CrossEncoderReranker | None = None,
    ) -> None:
        limits = limits or BatchLimits()
        self.provider = provider
        self.info: ProviderInfo = provider.info
        self.limits = limits
        self.batcher = Batcher(
            provider,
            max_batch_size=limits.max_batch_size,
            max_batch_tokens=limits.max_batch_tokens,
            max_wait_ms=limits.max_wait_ms,
            max_queue=limits.max_queue,
        )
        self.cache = QueryCache(cache_size)
        self.reranker = reranker
        self._tokenizer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")

    def start(self) -> None:
        self.batcher.start()

    async def close(self) -> None:
        await self.batcher.close()
        self._tokenizer_thread.shutdown(wait=False, cancel_futures=True)
        self.provider.close()

    async def _tokenize(self, texts: list[str]) -> list[Prepared]:
        if sum(len(t) for t in texts) <= _INLINE_CHARS:
            return self.provider.prepare(texts)
        return await asyncio.get_running_loop().run_in_executor(
            self._tokenizer_thread, self.provider.prepare, texts
        )

    async def embed(self, texts: Sequence[str], input_type: int = 0) -> Embedded:
        """One unit vector per text, in order. Queries are served from the cache when seen before
        and jump ahead of queued documents."""
        count = len(texts)
        vectors = np.empty((count, self.info.dimension), dtype=np.float32)
        tokens = [0] * count
        truncated = [False] * count
        cached = input_type == QUERY and self.cache.enabled
        missing: list[int] = []
        for i, text in enumerate(texts):
            hit = self.cache.get((self.info.model_id, QUERY, text)) if cached else None
            if hit is None:
                missing.append(i)
            else:
                vectors[i], tokens[i], truncated[i] = hit.vector, hit.tokens, hit.truncated
        metrics.TEXTS.inc(count - len(missing))
        if missing:
            prepared = await self._tokenize([texts[i] for i in missing])
            computed = await self.batcher.submit(prepared, urgent=input_type == QUERY)
            for row, (i, p) in enumerate(zip(missing, prepared, strict=True)):
                vectors[i], tokens[i], truncated[i] = computed[row], p.tokens, p.truncated
                if cached:
                    self.cache.put(
                        (self.info.model_id, QUERY, texts[i]), Cached(computed[row], p.tokens, p.truncated)
                    )
        return Embedded(vectors, tokens, truncated)

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if sum(len(t) for t in texts) <= _INLINE_CHARS:
            return self.provider.count_tokens(texts)
        return await asyncio.get_running_loop().run_in_executor(
            self._tokenizer_thread, self.provider.count_tokens, texts
        )

    async def rerank(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """Cross-encoder scores (0..1, higher is more relevant), in document order."""
        assert self.reranker is not None, "check engine.reranker before calling rerank"
        reranker = self.reranker
        with metrics.RERANK_SECONDS.time():
            scores = await self.batcher.run_exclusive(lambda: reranker.score(query, documents))
        metrics.RERANK_PAIRS.inc(len(documents))
        return scores
