"""The default provider: a mean-pooled sentence-embedding model run by onnxruntime in-process."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hypermnesia.errors import StartupError
from services.embedder import metrics
from services.embedder.model import (
    ModelFiles,
    SharedWeights,
    available_cores,
    count_without_specials,
    fingerprint,
    load_counter,
    load_session,
    load_tokenizer,
    pad_batch,
    release_freed_memory,
    resolve_model,
)
from services.embedder.provider import Prepared, ProviderInfo
from services.embedder.quantize import quantize_int8

log = logging.getLogger(__name__)


def quantized_files(files: ModelFiles, cache_dir: Path) -> ModelFiles:
    """The int8 weight-only twin of `files`, built once into cache_dir."""
    source = files.onnx_path
    target = cache_dir / f"{files.model_id.replace('/', '--')}-int8-{fingerprint(source)}" / "model.onnx"
    if not target.exists():
        log.info("quantizing %s to int8 weights (one time)", source)
        try:
            quantize_int8(source, target)
        except ValueError as exc:
            raise StartupError(f"cannot quantize {source} to int8: {exc}; use fp32") from exc
    return ModelFiles(files.model_id, target, files.tokenizer_path)


def default_workers() -> int:
    """Two sessions on two or more cores: measured on 2 cores, two single-threaded sessions side by
    side embedded 17-30% more texts per second than one session using both cores (docs/PERFORMANCE.md)."""
    return min(2, available_cores())


class OnnxProvider:
    """Tokenizer + onnxruntime sessions for a model whose graph outputs `embeddings` [batch, dim]
    (mean pooled and L2 normalised, as onnx_export builds it).

    With `workers` > 1 the batcher may run that many batches at once. A batch that runs alone uses
    the wide session (every intra-op thread: lowest latency for a lone query); a batch that runs
    beside another uses one of `workers` narrow sessions, which split the threads between them.
    Under load the narrow sessions keep every core busy without the barrier at the end of each
    parallel op, which also stalls whenever the event loop takes one of the cores."""

    def __init__(
        self,
        files: ModelFiles,
        *,
        max_tokens: int,
        quantization: str = "fp32",
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
        workers: int = 1,
    ) -> None:
        self.files = files
        self.tokenizer = load_tokenizer(files.tokenizer_path, max_tokens)
        self.counter = load_counter(files.tokenizer_path)
        pad = self.tokenizer.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else pad
        threads = intra_op_threads or available_cores()
        self.concurrency = max(1, workers)
        # One copy of the weights for the wide and the narrow sessions (SharedWeights).
        self.weights = SharedWeights(files.onnx_path) if self.concurrency > 1 else None
        # Pinned: it runs only when no other batch does, never from two threads at once.
        self.session = load_session(
            files.onnx_path,
            intra_op_threads=threads,
            inter_op_threads=inter_op_threads,
            pin=True,
            weights=self.weights,
        )
        self._narrow: queue.SimpleQueue = queue.SimpleQueue()
        if self.concurrency > 1:
            narrow_threads = max(1, threads // self.concurrency)
            for _ in range(self.concurrency):
                self._narrow.put(
                    load_session(
                        files.onnx_path,
                        intra_op_threads=narrow_threads,
                        inter_op_threads=inter_op_threads,
                        weights=self.weights,
                    )
                )
        release_freed_memory()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._wide_batches = metrics.SESSION_BATCHES.labels("wide")
        self._narrow_batches = metrics.SESSION_BATCHES.labels("narrow")
        self._wants_types = any(i.name == "token_type_ids" for i in self.session.get_inputs())
        probe = self.embed(self.prepare([""]))
        self.info = ProviderInfo(
            provider="onnx",
            model_id=files.model_id,
            dimension=int(probe.shape[1]),
            pooling="mean",
            max_tokens=max_tokens,
            quantization=quantization,
        )

    @classmethod
    def from_settings(
        cls,
        model_dir: Path | None,
        cache_dir: Path,
        *,
        max_tokens: int,
        quantization: str,
        intra_op_threads: int,
        inter_op_threads: int,
        workers: int = 1,
    ) -> OnnxProvider:
        files = resolve_model(model_dir, cache_dir)
        if quantization == "int8":
            files = quantized_files(files, cache_dir)
        return cls(
            files,
            max_tokens=max_tokens,
            quantization=quantization,
            intra_op_threads=intra_op_threads,
            inter_op_threads=inter_op_threads,
            workers=workers,
        )

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        # One text (the common query case) skips encode_batch's hand-off to the tokenizer's
        # thread pool, whose threads would wake up only to contend with inference for the cores.
        if len(texts) == 1:
            encodings = [self.tokenizer.encode(texts[0])]
        else:
            encodings = self.tokenizer.encode_batch(list(texts))
        return [
            Prepared(text=t, tokens=len(e.ids), truncated=bool(e.overflowing), ids=e.ids)
            for t, e in zip(texts, encodings, strict=True)
        ]

    def feeds(self, batch: Sequence[Prepared]) -> dict[str, np.ndarray]:
        """The model's inputs for `batch`, padded to its longest row."""
        ids, mask = pad_batch([p.ids or [] for p in batch], self.pad_id)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._wants_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        feeds = self.feeds(batch)
        with self._lock:
            alone = self._in_flight == 0
            self._in_flight += 1
        try:
            if alone or self.concurrency == 1:
                self._wide_batches.inc()
                (vectors,) = self.session.run(["embeddings"], feeds)
            else:
                self._narrow_batches.inc()
                session = self._narrow.get()  # never waits when callers respect `concurrency`
                try:
                    (vectors,) = session.run(["embeddings"], feeds)
                finally:
                    self._narrow.put(session)
        finally:
            with self._lock:
                self._in_flight -= 1
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return count_without_specials(self.counter, list(texts))

    def close(self) -> None:
        """Nothing to release: the session's threads go with the process."""
