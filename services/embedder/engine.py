"""Runs the encoder off the event loop. Requests are processed in length-sorted chunks so that
padding stays small; a single worker thread owns the ONNX session (its intra-op threads already
use every core, a second caller would only contend for them)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from services.embedder.model import SentenceEncoder

CHUNK = 32


class EmbeddingEngine:
    def __init__(self, encoder: SentenceEncoder) -> None:
        self.encoder = encoder
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx")

    def _encode_sorted(self, texts: list[str]) -> tuple[np.ndarray, list[int], list[bool]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.encoder.dimension), dtype=np.float32)
        used = [0] * len(texts)
        truncated = [False] * len(texts)
        for start in range(0, len(order), CHUNK):
            idx = order[start : start + CHUNK]
            vectors, counts, cut = self.encoder.encode([texts[i] for i in idx])
            for row, i in enumerate(idx):
                out[i] = vectors[row]
                used[i] = counts[row]
                truncated[i] = cut[row]
        return out, used, truncated

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, list[int], list[bool]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._encode_sorted, texts)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.encoder.count_tokens, texts)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
