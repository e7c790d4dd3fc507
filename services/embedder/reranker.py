"""The cross-encoder: BERT sequence-classification weights (ONNX, or safetensors converted by
onnx_export without torch) scoring (query, document) pairs encoded with token type ids."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hypermnesia.errors import StartupError
from services.embedder.model import load_session, pad_batch, resolve_model


def relevance(logits: np.ndarray) -> np.ndarray:
    """Logits [n, labels] -> one score in 0..1 per pair: sigmoid of a single logit (the
    sentence-transformers CrossEncoder default), else the softmax probability of the last label."""
    logits = logits.astype(np.float64)
    if logits.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-logits[:, 0]))
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted[:, -1] / shifted.sum(axis=1)


def _position_limit(model_dir: Path) -> int | None:
    config = model_dir / "config.json"
    if not config.exists():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings")
    return int(value) if value else None


class CrossEncoderReranker:
    def __init__(
        self,
        model_dir: Path,
        cache_dir: Path,
        *,
        max_tokens: int,
        max_batch_tokens: int,
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
    ) -> None:
        from tokenizers import Tokenizer

        files = resolve_model(model_dir, cache_dir, head="classifier")
        self.model_id = files.model_id
        limit = _position_limit(model_dir)
        self.max_tokens = min(max_tokens, limit) if limit else max_tokens
        self.max_batch_tokens = max_batch_tokens
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
        self.tokenizer.no_padding()
        # Pairs longer than the limit lose tokens from whichever side is longer (usually the document).
        self.tokenizer.enable_truncation(max_length=self.max_tokens, strategy="longest_first")
        pad = self.tokenizer.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else pad
        self.session = load_session(
            files.onnx_path, intra_op_threads=intra_op_threads, inter_op_threads=inter_op_threads
        )
        outputs = [o.name for o in self.session.get_outputs()]
        if "logits" not in outputs:
            raise StartupError(
                f"{model_dir} is not a cross-encoder: its graph outputs {outputs}, not `logits`; "
                "HM_RERANK_MODEL_DIR needs BERT sequence-classification weights"
            )

    def score(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """Blocking: one relevance score per document, in input order."""
        if not documents:
            return np.zeros(0, dtype=np.float32)
        encodings = self.tokenizer.encode_batch([(query, d) for d in documents])
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        scores = np.empty(len(documents), dtype=np.float64)
        start = 0
        while start < len(order):
            # Sorted by length, so the last row of a chunk is its longest: grow while it fits.
            end = start + 1
            while (
                end < len(order)
                and (end - start + 1) * len(encodings[order[end]].ids) <= self.max_batch_tokens
            ):
                end += 1
            chunk = order[start:end]
            ids, mask = pad_batch([encodings[i].ids for i in chunk], self.pad_id)
            types, _ = pad_batch([encodings[i].type_ids for i in chunk], 0)
            (logits,) = self.session.run(
                ["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            )
            scores[chunk] = relevance(np.asarray(logits))
            start = end
        return scores.astype(np.float32)
