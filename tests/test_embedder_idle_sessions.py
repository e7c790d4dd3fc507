"""The onnx provider's load sessions (the narrow ones for batches running side by side) exist only
while there is load: concurrent batches through the real service load them, a quiet spell of
HM_EMBED_LOAD_SESSIONS_IDLE_S releases them (never while a batch runs on one), new load loads
them again, and every vector is the same whichever session computed it."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from hypermnesia.settings import EmbedderSettings
from services.embedder.engine import BatchLimits, EmbeddingEngine
from services.embedder.model import ModelFiles, resolve_model
from services.embedder.onnx_provider import OnnxProvider
from services.embedder.provider import Prepared
from services.embedder.server import running

IDLE_S = 1.0


@pytest.fixture(scope="module")
def minilm(model_cache: Path) -> ModelFiles:
    """The default model as the embedder builds it (converted once per test session)."""
    return resolve_model(None, model_cache / "models")


def provider_for(files: ModelFiles, workers: int) -> OnnxProvider:
    return OnnxProvider(files, max_tokens=256, workers=workers, load_sessions_idle_s=IDLE_S)


def gauge() -> float:
    return REGISTRY.get_sample_value("hm_embed_sessions") or 0.0


def narrow_batches() -> float:
    return REGISTRY.get_sample_value("hm_embed_session_batches_total", {"session": "narrow"}) or 0.0


def sentence(i: int) -> str:
    words = ["memory", "agent", "cache", "rule", "token", "vector", "session", "build", "query", "file"]
    return f"text {i}: " + " ".join(words[(i * 7 + k) % len(words)] for k in range(1 + (i * 13) % 40))


TEXTS = [sentence(i) for i in range(48)]


@asynccontextmanager
async def serving(provider: OnnxProvider) -> AsyncIterator[EmbedderClient]:
    """The real embedder service around `provider`, and a client once it answers."""
    settings = EmbedderSettings(embedder_port=0)
    engine = EmbeddingEngine(provider, limits=BatchLimits(max_batch_size=4, max_wait_ms=1), cache_size=0)
    async with running(settings, engine) as (_server, port, _engine):
        client = EmbedderClient(f"127.0.0.1:{port}")
        try:
            await client.wait_for_info(10)
            yield client
        finally:
            await client.close()


async def load_until(
    client: EmbedderClient, done: Callable[[], bool], seconds: float = 60
) -> dict[str, np.ndarray]:
    """Rounds of 48 one-text calls at once until `done()`; the vectors of the last round."""
    deadline = time.monotonic() + seconds
    while True:
        results = await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in TEXTS))
        if done():
            return {t: r[0] for t, r in zip(TEXTS, results, strict=True)}
        assert time.monotonic() < deadline, "the load never met the condition"


async def quiet_until(done: Callable[[], bool], seconds: float) -> float:
    """Seconds until `done()`, polling without any request."""
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < seconds, "never happened while quiet"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def loading(provider: OnnxProvider) -> bool:
    """Whether this provider's loader/watcher thread runs (other tests' providers may have theirs)."""
    thread = provider.load_thread
    return thread is not None and thread.is_alive()


async def test_load_sessions_come_with_load_go_when_quiet_and_come_back_with_the_same_vectors(
    minilm: ModelFiles,
) -> None:
    provider = provider_for(minilm, workers=2)
    base = gauge() - 1  # other providers of this test process count too
    assert provider.sessions == 1 and gauge() == base + 1, "no load session before any load"

    def loaded(count: int) -> bool:
        """The provider holds `count` sessions and the gauge says so (it follows just after)."""
        return provider.sessions == count and gauge() == base + count

    lone = {t: provider.embed(provider.prepare([t]))[0] for t in TEXTS}
    async with serving(provider) as client:
        await asyncio.sleep(3 * IDLE_S)
        assert provider.sessions == 1, "a lone caller's batches never load the load sessions"

        narrow_before = narrow_batches()
        first = await load_until(client, lambda: loaded(3) and narrow_batches() > narrow_before)

        # Quiet: released about IDLE_S after the last batch on them, the heap handed back.
        waited = await quiet_until(lambda: loaded(1), 10 * IDLE_S)
        assert waited > IDLE_S / 2

        # Load again: loaded again, and the same vectors as before the release.
        narrow_before = narrow_batches()
        second = await load_until(client, lambda: loaded(3) and narrow_batches() > narrow_before)
        await quiet_until(lambda: loaded(1), 10 * IDLE_S)
    for text in TEXTS:
        assert np.allclose(first[text], lone[text], atol=1e-6), text
        assert np.allclose(second[text], first[text], atol=1e-6), text
    assert gauge() == base + 1


async def test_a_load_session_running_a_batch_is_never_released(minilm: ModelFiles) -> None:
    """Batches on the load sessions that each outlast the idle time keep them loaded; once the
    batches stop, the sessions go."""
    provider = provider_for(minilm, workers=2)
    short = provider.prepare(TEXTS[:4])
    long_batch = provider.prepare(["memory consolidation replays recent experiences " * 30] * 64)
    stop = threading.Event()
    took: list[float] = []

    def hammer(batch: list[Prepared]) -> None:
        while not stop.is_set():
            started = time.monotonic()
            provider.embed(batch)
            took.append(time.monotonic() - started)

    # Two callers at once, as the batcher's two threads: short batches until the load sessions
    # are there, then batches longer than the idle time, on them.
    for batch in (short, long_batch):
        threads = [threading.Thread(target=hammer, args=(batch,)) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            if batch is short:
                await quiet_until(lambda: provider.sessions == 3, 60)
                continue
            took.clear()
            await asyncio.sleep(4 * IDLE_S)
            assert provider.sessions == 3
        finally:
            stop.set()
            for t in threads:
                t.join()
            stop.clear()
    assert max(took) > IDLE_S, f"no batch outlasted the idle time: {took}"
    assert provider.sessions == 3
    await quiet_until(lambda: provider.sessions == 1, 10 * IDLE_S)


async def test_one_worker_never_loads_load_sessions(minilm: ModelFiles) -> None:
    provider = provider_for(minilm, workers=1)
    before = gauge()
    narrow_before = narrow_batches()
    async with serving(provider) as client:
        await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in TEXTS * 4))
    # Called from two threads at once anyway: they take turns on the lone session.
    batch = provider.prepare(TEXTS[:8])
    threads = [threading.Thread(target=provider.embed, args=(batch,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert provider.sessions == 1
    assert gauge() == before
    assert narrow_batches() == narrow_before
    assert provider.load_thread is None


async def test_a_failed_load_is_logged_once_and_every_batch_still_served(
    minilm: ModelFiles, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The model file gone bad after start (say, a volume swapped under it): loading the load
    sessions fails, every caller still gets the lone session's vectors, and it is said once."""
    copy = tmp_path / "model.onnx"
    shutil.copyfile(minilm.onnx_path, copy)
    provider = provider_for(ModelFiles(minilm.model_id, copy, minilm.tokenizer_path), workers=2)
    lone = {t: provider.embed(provider.prepare([t]))[0] for t in TEXTS}
    copy.write_bytes(b"not an onnx model")
    caplog.set_level(logging.ERROR, logger="services.embedder.onnx_provider")
    async with serving(provider) as client:
        for _ in range(3):
            results = await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in TEXTS))
            for text, vectors in zip(TEXTS, results, strict=True):
                assert np.allclose(vectors[0], lone[text], atol=1e-6), text
            await quiet_until(lambda: not loading(provider), 30)
    assert provider.sessions == 1
    failures = [r for r in caplog.records if "could not load" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
