"""The `sentence_transformers` provider (extra `[st]`, needs torch; run by `make test-st`): on the
same MiniLM weights it agrees with the default onnx provider, offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import onnx_provider_for

pytestmark = pytest.mark.st

TEXTS = [
    "",
    "The cat sits on the mat",
    "Café déjà vu — naïve résumé, 日本語のテキスト and emoji 🚀!",
    "where did we decide to keep the gateway configuration?",
    " ".join(["Memory consolidation during sleep replays recent experiences."] * 40),
]


def test_sentence_transformers_agrees_with_onnx(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any attempt to reach the hub fails the test instead of silently downloading.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from services.embedder.st_provider import SentenceTransformersProvider

    st = SentenceTransformersProvider(None, max_tokens=256)
    onnx = onnx_provider_for(model_cache)
    assert st.info.model_id == onnx.info.model_id and st.info.dimension == onnx.info.dimension == 384
    got = st.embed(st.prepare(TEXTS))
    want = onnx.embed(onnx.prepare(TEXTS))
    assert (got * want).sum(axis=1).min() > 0.999
    assert [p.tokens for p in st.prepare(TEXTS)] == [p.tokens for p in onnx.prepare(TEXTS)]
    assert st.count_tokens(TEXTS) == onnx.count_tokens(TEXTS)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
