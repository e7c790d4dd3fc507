"""The default provider: a mean-pooled sentence-embedding model run by onnxruntime in-process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from hypermnesia.errors import StartupError
from services.embedder import metrics
from services.embedder.model import (
    ModelFiles,
    PinnedSession,
    SharedWeights,
    available_cores,
    count_without_specials,
    fingerprint,
    load_session,
    load_tokenizer,
    pad_batch,
    release_freed_memory,
    resolve_model,
)
from services.embedder.provider import Prepared, ProviderInfo

log = logging.getLogger(__name__)


def quantized_files(files: ModelFiles, cache_dir: Path) -> ModelFiles:
    """The int8 weight-only twin of `files`, built once into cache_dir."""
    source = files.onnx_path
    target = cache_dir / f"{files.model_id.replace('/', '--')}-int8-{fingerprint(source)}" / "model.onnx"
    if not target.exists():
        # Imported here: the onnx package (~10 MB resident) is not needed to serve.
        from services.embedder.quantize import quantize_int8

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
    parallel op, which also stalls whenever the event loop takes one of the cores.

    The narrow ("load") sessions exist only while there is load: they share one copy of the
    weights (SharedWeights, ~90 MB for MiniLM fp32) and each holds its own prepacked operands
    (~40 MB), which an idle embedder has no use for; the wide session keeps a copy of its own,
    whose prepacked originals onnxruntime frees (46 MB less than sharing them). The first batch that arrives while another runs starts loading them on a thread of their own
    (`_LoadSessions`); until they are ready, batches take turns on the wide session, as with one
    worker. They are released once none has run a batch for `load_sessions_idle_s` seconds
    (0: kept once made), and the heap they held is handed back to the system."""

    def __init__(
        self,
        files: ModelFiles,
        *,
        max_tokens: int,
        quantization: str = "fp32",
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
        workers: int = 1,
        load_sessions_idle_s: float = 300.0,
    ) -> None:
        self.files = files
        self.tokenizer = load_tokenizer(files.tokenizer_path, max_tokens)
        pad = self.tokenizer.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else pad
        threads = intra_op_threads or available_cores()
        self.concurrency = max(1, workers)
        # Pinned: it runs only when no other batch does, never from two threads at once.
        self.session = load_session(
            files.onnx_path,
            intra_op_threads=threads,
            inter_op_threads=inter_op_threads,
            pin=True,
        )
        release_freed_memory()
        metrics.SESSIONS.inc()
        # Guards the counters and the load sessions' state; never held during inference.
        self._lock = threading.Lock()
        self._in_flight = 0
        # Held by whoever runs the wide session: a batch alone, or one that came beside another
        # before the load sessions were ready (they take turns instead of sharing its threads).
        self._wide_lock = threading.Lock()
        self._load = (
            _LoadSessions(
                files.onnx_path,
                self._shrink_arena,
                count=self.concurrency,
                intra_op_threads=max(1, threads // self.concurrency),
                inter_op_threads=inter_op_threads,
                idle_s=load_sessions_idle_s,
            )
            if self.concurrency > 1
            else None
        )
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
        load_sessions_idle_s: float = 300.0,
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
            load_sessions_idle_s=load_sessions_idle_s,
        )

    @property
    def load_thread(self) -> threading.Thread | None:
        """The thread that loads the load sessions and then watches them, once one was started."""
        return self._load.thread if self._load is not None else None

    @property
    def sessions(self) -> int:
        """onnxruntime sessions loaded now: the wide one, plus the load sessions while they exist."""
        return 1 + (self._load.loaded if self._load is not None else 0)

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
            beside = self._in_flight > 0
            self._in_flight += 1
        try:
            load = self._load
            narrow = load.take() if beside and load is not None else None
            if narrow is None or load is None:
                self._wide_batches.inc()
                with self._wide_lock:
                    (vectors,) = self.session.run(["embeddings"], feeds)
            else:
                self._narrow_batches.inc()
                try:
                    (vectors,) = narrow.run(["embeddings"], feeds)
                finally:
                    load.give_back(narrow)
        finally:
            with self._lock:
                self._in_flight -= 1
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        # The truncating tokenizer counts what it cuts off too: no second tokenizer (~8 MB).
        return count_without_specials(self.tokenizer, list(texts))

    def _shrink_arena(self) -> None:
        """Free the regions of the process's arena that no tensor uses, with a one-text run on the
        wide session (onnxruntime shrinks an arena only at the end of a run asked to). Batches on
        three sessions grow that arena to the sum of their working memory and it keeps all of it:
        measured in one process, after batches of 32 on the three, releasing the load sessions
        freed 82 MB of PSS and shrinking the arena then another 199 MB."""
        options = ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        feeds = self.feeds(self.prepare([""]))
        with self._wide_lock:
            self.session.run(["embeddings"], feeds, options)

    def close(self) -> None:
        """Release the load sessions now; the wide session's threads go with the process."""
        if self._load is not None:
            self._load.close()


class _LoadSessions:
    """The narrow sessions of an OnnxProvider, loaded on first need and released when idle.

    take() hands out a session for a batch that runs beside another, or None while there is none
    ready, in which case the batch runs on the wide session; the first such call starts a thread
    that loads them (and then watches them: it releases them after `idle_s` seconds without a
    batch, and exits). A failed load is logged once and not retried: batches keep taking turns on
    the wide session."""

    def __init__(
        self,
        path: Path,
        shrink_arena: Callable[[], None],
        *,
        count: int,
        intra_op_threads: int,
        inter_op_threads: int,
        idle_s: float,
    ) -> None:
        self.path = path
        self.weights: SharedWeights | None = None  # while the sessions exist
        self.shrink_arena = shrink_arena
        self.count = count
        self.intra_op_threads = intra_op_threads
        self.inter_op_threads = inter_op_threads
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle: list[PinnedSession] = []  # loaded and not running a batch
        self.loaded = 0  # sessions that exist: idle or running a batch
        self._loading = False
        self._failed = False
        self._last_used = 0.0  # time.monotonic() when a batch last ended on one of them
        self._closed = threading.Event()
        self.thread: threading.Thread | None = None  # the loader and watcher, once started

    def take(self) -> PinnedSession | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self.loaded or self._loading or self._failed or self._closed.is_set():
                return None  # all busy (callers beyond `count`), on their way, or not to be had
            self._loading = True
        self.thread = threading.Thread(target=self._lifetime, name="embed_load_sessions", daemon=True)
        self.thread.start()
        return None

    def give_back(self, session: PinnedSession) -> None:
        with self._lock:
            self._last_used = time.monotonic()
            if not self._closed.is_set():
                self._idle.append(session)
                return
            self.loaded -= 1  # closed while this batch ran: nobody will take it again
        metrics.SESSIONS.dec()

    def close(self) -> None:
        self._closed.set()
        self._release(force=True)

    def _lifetime(self) -> None:
        try:
            self._make()
        finally:
            with self._lock:
                self._loading = False
        if self.loaded and self.idle_s > 0:
            self._watch()

    def _make(self) -> None:
        started = time.monotonic()
        try:
            weights = SharedWeights(self.path)
            sessions = [
                load_session(
                    self.path,
                    intra_op_threads=self.intra_op_threads,
                    inter_op_threads=self.inter_op_threads,
                    weights=weights,
                )
                for _ in range(self.count)
            ]
        except Exception:
            with self._lock:
                self._failed = True
            log.exception(
                "could not load the embedder's %d load sessions; batches keep taking turns on the "
                "lone session (not retried)",
                self.count,
            )
            return
        release_freed_memory()  # what parsing the model file left on the heap
        with self._lock:
            if self._closed.is_set():
                return
            self._idle = sessions
            self.weights = weights
            self.loaded = len(sessions)
            self._last_used = time.monotonic()
        metrics.SESSIONS.inc(len(sessions))
        log.info(
            "loaded %d load sessions (%d intra-op thread%s each) in %.2f s, for batches running side by side",
            len(sessions),
            self.intra_op_threads,
            "" if self.intra_op_threads == 1 else "s",
            time.monotonic() - started,
        )

    def _watch(self) -> None:
        """Until the sessions have gone `idle_s` seconds without a batch; then release them."""
        while not self._closed.is_set():
            with self._lock:
                due = self._last_used + self.idle_s - time.monotonic()
            if due <= 0 and self._release(force=False):
                return
            self._closed.wait(max(due, 0.05))

    def _release(self, *, force: bool) -> bool:
        """Drop the sessions if none is running a batch (or `force`: closing) and none ran one
        for `idle_s`. True once they are gone."""
        with self._lock:
            if not self.loaded:
                return True
            idle_for = time.monotonic() - self._last_used
            if not force and (len(self._idle) < self.loaded or idle_for < self.idle_s):
                return False  # a batch is running on one, or one ended since the check
            released, self._idle = self._idle, []
            self.loaded -= len(released)
            weights, self.weights = self.weights, None
        count = len(released)
        del released, weights  # the last references: onnxruntime frees each session here
        if not force:
            try:
                self.shrink_arena()
            except Exception:  # the arena keeps its regions; the sessions are gone all the same
                log.warning("could not shrink the embedder's arena after releasing", exc_info=True)
        release_freed_memory()  # their prepacked weights and the arena's freed regions
        metrics.SESSIONS.dec(count)
        log.info("released %d idle load sessions after %.0f s without a batch", count, idle_for)
        return True
