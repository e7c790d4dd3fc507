"""The configured embedding model run in this process, for the admin commands (import, reindex,
rebuild, ingest) that work on the store directly and need no embedder service."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hypermnesia.settings import EmbedderSettings

__all__ = ["LocalEncoder"]

EMBED_BATCH = 64


class LocalEncoder:
    """The configured model (HM_EMBEDDING_MODEL_DIR, else the default), through the embedder's own
    engine so vectors are exactly what the embedder service would return. Satisfies
    services.curation.admin.Encoder."""

    def __init__(self, settings: EmbedderSettings) -> None:
        from services.embedder.engine import EmbeddingEngine
        from services.embedder.server import build_provider

        # No reranker: the admin commands only embed documents.
        self.engine = EmbeddingEngine(build_provider(settings))
        self.engine.start()
        self.model_id: str = self.engine.info.model_id
        self.dimension: int = int(self.engine.info.dimension)

    async def embed(self, texts: list[str], on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        parts = []
        for start in range(0, len(texts), EMBED_BATCH):
            chunk = texts[start : start + EMBED_BATCH]
            parts.append((await self.engine.embed(chunk)).vectors)
            if on_batch is not None:
                on_batch(len(chunk))
        return np.concatenate(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return list(await self.engine.count_tokens(texts))

    async def close(self) -> None:
        await self.engine.close()
