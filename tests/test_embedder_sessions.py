"""The embedder's wide onnxruntime session keeps its threads on cores of their own (model.PinnedSession),
and that changes where the threads run, never what they compute or where the caller runs afterwards."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from services.embedder.model import (
    ModelFiles,
    load_session,
    load_tokenizer,
    pad_batch,
    resolve_model,
    thread_cores,
    worker_affinities,
)

CORES = sorted(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def minilm(model_cache: Path) -> ModelFiles:
    """The default model as the embedder builds it (converted once per test session)."""
    return resolve_model(None, model_cache / "models")


def _feeds(files: ModelFiles, texts: list[str]) -> dict[str, np.ndarray]:
    ids, mask = pad_batch([e.ids for e in load_tokenizer(files.tokenizer_path, 256).encode_batch(texts)])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _allowed(tid: int) -> set[int]:
    """The cores a thread of this process may run on, as the kernel reports them."""
    listed = Path(f"/proc/self/task/{tid}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
    cores: set[int] = set()
    for part in listed.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def _in_a_thread(work: Callable[[], object]) -> dict[str, object]:
    """Run `work` in a throwaway thread (so a broken restore cannot leave pytest's own thread
    pinned); return its result or exception and the thread's cores afterwards."""
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["result"] = work()
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc
        out["after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return out


def test_thread_cores_pin_only_a_session_that_uses_every_core() -> None:
    cpuset = {6, 4, 5}  # a container's cores that do not start at core 0
    assert thread_cores(3, cpuset) == [4, 5, 6]
    assert worker_affinities([4, 5, 6]) == "6;7"  # the two workers, numbered from 1; not the caller's
    assert thread_cores(1, cpuset) is None  # no pool worker to keep apart
    assert thread_cores(2, cpuset) is None  # cores left to others are not crowded
    assert thread_cores(4, cpuset) is None  # more threads than cores: pinning would stack them
    assert thread_cores(1, {0}) is None
    assert thread_cores(len(CORES)) == (CORES if len(CORES) >= 2 else None)  # this process's own


def test_a_pinned_session_pins_its_workers_and_its_caller_only_while_it_runs(minilm: ModelFiles) -> None:
    before = set(os.listdir("/proc/self/task"))
    session = load_session(minilm.onnx_path, intra_op_threads=len(CORES), inter_op_threads=1, pin=True)
    workers = {int(t) for t in set(os.listdir("/proc/self/task")) - before}
    if len(CORES) < 2:  # one core: nothing to keep apart, the session runs unpinned
        assert session.caller_cores is None
        return
    assert session.caller_cores == {CORES[0]}
    assert len(workers) == len(CORES) - 1, f"expected one pool worker per core after the first: {workers}"

    def pinned() -> list[tuple[int, ...]]:
        return sorted(tuple(sorted(_allowed(t))) for t in workers)

    deadline = time.monotonic() + 5  # each worker pins itself as it starts
    while pinned() != [(c,) for c in CORES[1:]] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pinned() == [(c,) for c in CORES[1:]], "each pool worker on a core of its own"

    # The caller is on its core while run() works, and back on every core after it.
    feeds = _feeds(minilm, ["memory consolidation replays recent experiences during sleep " * 20] * 48)
    seen: set[frozenset[int]] = set()
    caller: dict[str, int] = {}

    def call() -> np.ndarray:
        caller["tid"] = threading.get_native_id()
        return session.run(["embeddings"], feeds)[0]

    watcher_done = threading.Event()

    def watch() -> None:
        while not watcher_done.is_set():
            if "tid" in caller:
                try:
                    seen.add(frozenset(_allowed(caller["tid"])))
                except (OSError, IndexError):  # the thread ended between the two reads
                    pass
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out = _in_a_thread(call)
    watcher_done.set()
    watcher.join()
    assert "error" not in out, out.get("error")
    assert frozenset({CORES[0]}) in seen, f"the caller was never seen pinned: {seen}"
    assert out["after"] == set(CORES), "the caller is back on every core"

    # Pinning moves threads, not numbers: the same vectors as an unpinned session.
    plain = load_session(minilm.onnx_path, intra_op_threads=len(CORES), inter_op_threads=1)
    assert plain.caller_cores is None
    np.testing.assert_allclose(out["result"], plain.run(["embeddings"], feeds)[0], atol=1e-5)


def test_a_pinned_run_restores_the_callers_cores_when_it_fails(minilm: ModelFiles) -> None:
    session = load_session(minilm.onnx_path, intra_op_threads=len(CORES), inter_op_threads=1, pin=True)
    out = _in_a_thread(
        lambda: session.run(["embeddings"], {"attention_mask": np.ones((1, 3), dtype=np.int64)})
    )
    assert "input_ids" in str(out.get("error")), out
    assert out["after"] == set(CORES)


def test_sessions_are_unpinned_unless_asked(minilm: ModelFiles) -> None:
    """The reranker's and the narrow sessions may run from two threads at once, or beside the wide
    session: pinned, their callers would all be stacked on the first core."""
    session = load_session(minilm.onnx_path, intra_op_threads=len(CORES), inter_op_threads=1)
    assert session.caller_cores is None
    out = _in_a_thread(lambda: session.run(["embeddings"], _feeds(minilm, ["hello"]))[0])
    assert out["after"] == set(CORES) and "error" not in out
