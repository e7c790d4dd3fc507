"""Embedding for the write path: one text, or many in batches that keep the embedder busy without
one call carrying more than it accepts (2,048 texts) or taking longer than the write timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient

BATCH = 64
# Two calls in flight: the embedder encodes one while the next travels, no more (it has one worker).
PARALLEL = 2
# A batch of long texts on a busy machine can take far longer than one text; the deadline grows
# with the batch (and counts the wait behind the other call in flight) so it only fires on a hang.
SECONDS_PER_TEXT = 1.0

EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]


def embedding_text(description: str, content: str) -> str:
    """What a memory is embedded as: the one-line description ranks, the content grounds it."""
    return f"{description}\n{content}" if description else content


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class BatchEmbedder:
    def __init__(self, client: EmbedderClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    async def one(self, text: str) -> np.ndarray:
        return (await self.client.embed([text], DOCUMENT, self.timeout_s))[0]

    async def many(self, texts: list[str], on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Vectors for all texts, in order; embedded BATCH at a time, PARALLEL calls in flight."""
        if not texts:
            return np.zeros((0, self.client.dimension or 0), dtype=np.float32)
        gate = asyncio.Semaphore(PARALLEL)

        async def part(chunk: list[str]) -> np.ndarray:
            async with gate:
                deadline = self.timeout_s + SECONDS_PER_TEXT * len(chunk) * PARALLEL
                vectors = await self.client.embed(chunk, DOCUMENT, deadline)
            if on_batch is not None:
                on_batch(len(chunk))
            return vectors

        parts = await asyncio.gather(*(part(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)))
        return np.concatenate(parts, axis=0)
