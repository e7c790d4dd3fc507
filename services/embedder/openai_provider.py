"""The `openai` provider: any OpenAI-compatible `/v1/embeddings` endpoint (Ollama, TEI, vLLM,
llama.cpp, a hosted API). Batching, the cache and backpressure still happen here, above it.

The endpoint does its own tokenization; a local tokenizer (tokenizer.json in
HM_EMBEDDING_MODEL_DIR, else the packaged MiniLM one as an approximation) gives the lengths the
batcher groups by and the counts CountTokens reports.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np

from hypermnesia.errors import StartupError, Unavailable
from services.embedder.model import count_without_specials, default_model_dir, load_counter
from services.embedder.provider import Prepared, ProviderInfo

if TYPE_CHECKING:
    from hypermnesia.settings import EmbedderSettings

log = logging.getLogger(__name__)


class OpenAIProvider:
    # Remote latency is mostly waiting on the network: keep a few batches in flight.
    concurrency = 4

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_tokens: int = 256,
        tokenizer_path: Path | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.max_tokens = max_tokens
        self.http = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)
        self.counter = load_counter(tokenizer_path or default_model_dir() / "tokenizer.json")
        try:
            probe = self._request(["dimension probe"])
        except Unavailable as exc:
            raise StartupError(
                f"{exc.message}; check HM_EMBEDDING_API_URL and HM_EMBEDDING_API_MODEL"
            ) from exc
        self.info = ProviderInfo(
            provider="openai",
            model_id=model,
            dimension=int(probe.shape[1]),
            pooling="remote",
            max_tokens=max_tokens,
            quantization="remote",
        )

    @classmethod
    def from_settings(cls, settings: EmbedderSettings) -> OpenAIProvider:
        assert settings.embedding_api_url and settings.embedding_api_model  # checked by the settings
        folder = settings.embedding_model_dir
        tokenizer = folder / "tokenizer.json" if folder and (folder / "tokenizer.json").exists() else None
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return cls(
            settings.embedding_api_url,
            settings.embedding_api_model,
            api_key=key,
            timeout_s=settings.embedding_api_timeout_s,
            max_tokens=settings.embedding_max_tokens,
            tokenizer_path=tokenizer,
        )

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            response = self.http.post(
                self.url, json={"model": self.model, "input": texts, "encoding_format": "float"}
            )
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except httpx.HTTPStatusError as exc:
            raise Unavailable(f"the embedding endpoint answered HTTP {exc.response.status_code}") from exc
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"the embedding endpoint {self.url} is unreachable ({type(exc).__name__})"
            ) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise Unavailable(f"the embedding endpoint {self.url} sent an unexpected reply") from exc
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise Unavailable(
                f"the embedding endpoint returned {vectors.shape[0]} vectors for {len(texts)} texts"
            )
        # Unit length like the local providers, so cosine = dot product everywhere downstream.
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        counts = [n + 2 for n in count_without_specials(self.counter, list(texts))]
        return [
            Prepared(text=t, tokens=min(n, self.max_tokens), truncated=n > self.max_tokens)
            for t, n in zip(texts, counts, strict=True)
        ]

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        return self._request([p.text for p in batch])

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return count_without_specials(self.counter, list(texts))

    def close(self) -> None:
        self.http.close()
