"""The `sentence_transformers` provider (extra `[st]`: needs torch). Loads the model from a
local folder only, never from the hub."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hypermnesia.errors import StartupError
from services.embedder.model import available_cores, default_model_dir, model_id_for
from services.embedder.provider import Prepared, ProviderInfo

if TYPE_CHECKING:
    from hypermnesia.settings import EmbedderSettings


class SentenceTransformersProvider:
    concurrency = 1

    def __init__(self, model_dir: Path | None, *, max_tokens: int, threads: int = 0) -> None:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise StartupError(
                "HM_EMBEDDING_PROVIDER=sentence_transformers needs the optional extra: "
                "pip install 'hypermnesia[st]' (it brings torch)"
            ) from exc
        folder = default_model_dir() if model_dir is None else model_dir
        torch.set_num_threads(threads or available_cores())
        # local_files_only: the folder is the model; never ask the hub for anything.
        self.model: Any = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        self.model.max_seq_length = max_tokens
        self.tokenizer: Any = self.model.tokenizer
        self.max_tokens = max_tokens
        # sentence-transformers 6 renamed the method (the old name warns); accept both.
        dimension_of = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        dimension = dimension_of()
        if dimension is None:
            raise StartupError(f"{folder} does not declare its embedding dimension (modules.json, 1_Pooling)")
        self.info = ProviderInfo(
            provider="sentence_transformers",
            model_id=model_id_for(folder, model_dir is None),
            dimension=int(dimension),
            pooling="mean",
            max_tokens=max_tokens,
            quantization="fp32",
        )

    @classmethod
    def from_settings(cls, settings: EmbedderSettings) -> SentenceTransformersProvider:
        return cls(
            settings.embedding_model_dir,
            max_tokens=settings.embedding_max_tokens,
            threads=settings.embed_intra_op_threads,
        )

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        lengths = [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]]
        return [
            Prepared(text=t, tokens=min(n, self.max_tokens), truncated=n > self.max_tokens)
            for t, n in zip(texts, lengths, strict=True)
        ]

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        vectors = self.model.encode(
            [p.text for p in batch],
            batch_size=len(batch),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def close(self) -> None:
        """The model is freed with the process."""
