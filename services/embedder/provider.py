"""The one protocol every embedding provider implements, so the embedder is pluggable by configuration.

Batching, the query cache, metrics and backpressure live above this protocol (batcher.py,
engine.py), so a provider only has to turn texts into token counts and a batch into vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class ProviderInfo:
    provider: str  # onnx | sentence_transformers | openai
    model_id: str
    dimension: int
    pooling: str
    max_tokens: int
    quantization: str


@dataclass(slots=True)
class Prepared:
    """One text, tokenized once on arrival so the batcher can group texts of similar length."""

    text: str
    tokens: int  # tokens the text will occupy in a batch (after truncation, with special tokens)
    truncated: bool
    ids: Sequence[int] | None = None  # token ids, when the provider runs its own model


class EmbeddingProvider(Protocol):
    info: ProviderInfo
    # Batches the provider may run at once: 1 for in-process inference (its threads already use
    # every core), more for a remote endpoint whose latency is mostly waiting.
    concurrency: int

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        """Tokenize (cheap, thread-safe); never raises for long or empty texts."""
        ...

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        """Blocking inference: float32 [len(batch), dimension], unit-length rows, in batch order."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Untruncated token counts without the special tokens the model adds."""
        ...

    def close(self) -> None: ...
