"""The embedder's micro-batching through the real service on loopback: each caller gets its own
vectors in order, a failing batch fails all its waiters, a full queue answers RESOURCE_EXHAUSTED
at once, and the input edge cases behave as documented."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client import REGISTRY

from hypermnesia.embedder_client import DOCUMENT, QUERY, EmbedderClient
from hypermnesia.errors import Unavailable
from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.batching import pick_batch
from services.embedder.engine import BatchLimits, EmbeddingEngine
from services.embedder.model import count_without_specials, load_counter
from services.embedder.onnx_provider import OnnxProvider
from services.embedder.provider import Prepared
from services.embedder.server import running
from tests.helpers import onnx_provider_for

POISON = "\u2620 poisoned text"


class GatedProvider:
    """The real ONNX provider with two test hooks, injected through the engine's constructor:
    a gate that holds batches until the test opens it, and a fault for any batch that holds
    POISON. It records the size of every batch it runs."""

    def __init__(self, inner: OnnxProvider) -> None:
        self.inner = inner
        self.info = inner.info
        self.concurrency = 1
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.batches: list[list[str]] = []

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        return self.inner.prepare(texts)

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        self.started.set()
        if not self.gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        self.batches.append([p.text for p in batch])
        if any(p.text == POISON for p in batch):
            raise RuntimeError("injected fault")
        return self.inner.embed(batch)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def onnx_provider(model_cache: Path) -> OnnxProvider:
    return onnx_provider_for(model_cache)


@asynccontextmanager
async def serving(provider: object, limits: BatchLimits, max_texts: int = 2048) -> AsyncIterator[str]:
    settings = EmbedderSettings(
        embedder_port=0, embed_max_texts=max_texts, embed_max_queue=max(limits.max_queue, max_texts)
    )
    engine = EmbeddingEngine(provider, limits=limits, cache_size=64)  # type: ignore[arg-type]
    async with running(settings, engine) as (_server, port, _engine):
        yield f"127.0.0.1:{port}"


@asynccontextmanager
async def ready_client(address: str) -> AsyncIterator[EmbedderClient]:
    """The shared embedder client, once the service answers."""
    client = EmbedderClient(address)
    try:
        await client.wait_for_info(10)
        yield client
    finally:
        await client.close()


async def embed_call(
    stub: embedder_pb2_grpc.EmbedderStub, texts: list[str], timeout: float = 30
) -> embedder_pb2.EmbedResponse:
    return await stub.Embed(embedder_pb2.EmbedRequest(texts=texts), timeout=timeout)


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def sentence(i: int) -> str:
    words = ["memory", "agent", "cache", "rule", "token", "vector", "session", "build", "query", "file"]
    # Lengths vary from 1 to 60 words so batches mix short and long texts.
    return f"text {i}: " + " ".join(words[(i * 7 + k) % len(words)] for k in range(1 + (i * 13) % 60))


# -- batch selection (pure) -------------------------------------------------------------------


def test_pick_batch_respects_budgets_and_keeps_the_oldest() -> None:
    lengths = [40, 10, 12, 200, 11, 9, 41, 39, 250]
    chosen = pick_batch(lengths, 0, max_size=4, max_tokens=200)
    assert 0 in chosen and len(chosen) <= 4
    assert len(chosen) * max(lengths[i] for i in chosen) <= 200
    assert {lengths[i] for i in chosen} <= {39, 40, 41, 12, 11, 10, 9}  # never a 200+ token text
    # A text longer than the whole budget still goes, alone.
    assert pick_batch([500, 10, 10], 0, max_size=8, max_tokens=100) == [0]
    # Similar lengths are grouped: the anchor of length 10 takes the short ones, not the 200s.
    assert sorted(pick_batch([10, 200, 11, 210, 9], 0, max_size=3, max_tokens=10_000)) == [0, 2, 4]


# -- through the service ----------------------------------------------------------------------


async def test_each_caller_gets_its_own_vectors_in_order_under_concurrency(
    onnx_provider: OnnxProvider,
) -> None:
    texts = [sentence(i) for i in range(96)]
    expected = np.vstack([onnx_provider.embed(onnx_provider.prepare([t])) for t in texts])
    gated = GatedProvider(onnx_provider)
    async with serving(
        gated, BatchLimits(max_batch_size=16, max_batch_tokens=4096, max_wait_ms=20)
    ) as address:
        async with ready_client(address) as client:
            # 40 callers at once: each sends 1-4 texts drawn across the whole set.
            calls = [[texts[(c * 5 + k * 31) % len(texts)] for k in range(1 + c % 4)] for c in range(40)]
            results = await asyncio.gather(*(client.embed(call, DOCUMENT, 60) for call in calls))
    for call, vectors in zip(calls, results, strict=True):
        assert vectors.shape == (len(call), 384)
        for text, vector in zip(call, vectors, strict=True):
            assert float(vector @ expected[texts.index(text)]) > 0.99999, text
    assert max(len(b) for b in gated.batches) > 1, "concurrent calls were never batched together"
    assert max(len(b) for b in gated.batches) <= 16


async def test_parallel_sessions_give_every_caller_the_vectors_of_a_lone_call(model_cache: Path) -> None:
    """Two workers (the default on two cores): batches that run side by side use the narrow
    sessions, and their vectors are those of the wide session running alone."""
    provider = onnx_provider_for(model_cache, workers=2)
    texts = [sentence(i) for i in range(64)]
    expected = np.vstack([provider.embed(provider.prepare([t])) for t in texts])
    narrow = {"session": "narrow"}
    try:
        async with serving(
            provider, BatchLimits(max_batch_size=8, max_batch_tokens=4096, max_wait_ms=2)
        ) as address:
            async with ready_client(address) as client:
                # The narrow sessions load on a thread of their own at the first batches that run
                # side by side (~0.6 s): bring them up before the round that is checked.
                deadline = time.monotonic() + 60
                while provider.sessions < 3:
                    assert time.monotonic() < deadline, "the narrow sessions never loaded"
                    await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in texts[:16]))
                before = metric("hm_embed_session_batches_total", narrow)
                results = await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in texts * 2))
    finally:
        provider.close()  # its load sessions go now, not at a random moment of a later test
    for text, vectors in zip(texts * 2, results, strict=True):
        assert float(vectors[0] @ expected[texts.index(text)]) > 0.99999, text
    assert metric("hm_embed_session_batches_total", narrow) > before, "no two batches ever ran at once"


async def test_a_failing_batch_fails_every_waiter_and_the_service_recovers(
    onnx_provider: OnnxProvider,
) -> None:
    gated = GatedProvider(onnx_provider)
    limits = BatchLimits(max_batch_size=64, max_batch_tokens=1_000_000, max_wait_ms=0)
    async with serving(gated, limits) as address:
        client = EmbedderClient(address)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            try:
                await client.wait_for_info(10)
                # Hold the provider on a first batch so the next callers queue up together.
                gated.gate.clear()
                gated.started.clear()
                blocker = asyncio.create_task(client.embed(["first batch"], DOCUMENT, 60))
                assert await asyncio.to_thread(gated.started.wait, 10)
                innocent = [f"innocent {i}" for i in range(6)]
                calls = [asyncio.create_task(embed_call(stub, [t])) for t in innocent]
                calls.append(asyncio.create_task(embed_call(stub, ["fine", POISON, "also fine"])))
                await asyncio.sleep(0.3)  # all of them are queued behind the held batch
                failures_before = metric("hm_embed_batch_failures_total")
                gated.gate.set()
                assert (await blocker).shape == (1, 384)
                outcomes = await asyncio.gather(*calls, return_exceptions=True)
                assert metric("hm_embed_batch_failures_total") == failures_before + 1
                # One batch held all seven calls, and every one of them got the error, none hung.
                assert any(POISON in b and "innocent 0" in b for b in gated.batches)
                for outcome in outcomes:
                    assert isinstance(outcome, grpc.aio.AioRpcError), outcome
                    assert outcome.code() == grpc.StatusCode.INTERNAL
                    assert "batch this request was part of failed" in (outcome.details() or "")
                # The next calls are served normally.
                assert (await client.embed(["after the failure"], DOCUMENT, 30)).shape == (1, 384)
            finally:
                gated.gate.set()
                await client.close()


async def test_overload_answers_resource_exhausted_at_once(onnx_provider: OnnxProvider) -> None:
    gated = GatedProvider(onnx_provider)
    limits = BatchLimits(max_batch_size=4, max_batch_tokens=4096, max_wait_ms=0, max_queue=8)
    async with serving(gated, limits, max_texts=8) as address:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            try:
                gated.gate.clear()
                gated.started.clear()
                held = asyncio.create_task(embed_call(stub, ["held"]))
                assert await asyncio.to_thread(gated.started.wait, 10)
                queued = [asyncio.create_task(embed_call(stub, [f"q{i}a", f"q{i}b"])) for i in range(4)]
                await asyncio.sleep(0.3)  # 8 texts wait: the queue is full
                rejected_before = metric("hm_embed_rejected_total")
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    # A short deadline: the refusal must come at once, not after a wait.
                    await stub.Embed(embedder_pb2.EmbedRequest(texts=["one too many"]), timeout=2)
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "HM_EMBED_MAX_QUEUE" in (err.value.details() or "")
                assert metric("hm_embed_rejected_total") == rejected_before + 1
                # The shared client backs off and retries a busy embedder while its deadline allows.
                client = EmbedderClient(address)
                patient = asyncio.create_task(client.embed(["patient"], DOCUMENT, 20))
                await asyncio.sleep(0.3)
                assert not patient.done()
                gated.gate.set()
                assert len((await held).vectors) == 384 * 4
                for reply in await asyncio.gather(*queued):
                    assert len(reply.vectors) == 2 * 384 * 4
                assert (await patient).shape == (1, 384)
                await client.close()
            finally:
                gated.gate.set()


async def test_limits_and_edge_cases(embedder: str) -> None:
    async with grpc.aio.insecure_channel(embedder) as channel:
        stub = embedder_pb2_grpc.EmbedderStub(channel)
        empty = await stub.Embed(embedder_pb2.EmbedRequest(texts=[]), timeout=10)
        assert (empty.vectors, empty.dimension, list(empty.token_counts)) == (b"", 384, [])
        huge = "lorem ipsum dolor " * 6000  # ~100 KB: truncated, not refused
        assert len(huge.encode()) > 100_000
        reply = await stub.Embed(embedder_pb2.EmbedRequest(texts=["", huge, "short"]), timeout=60)
        vectors = np.frombuffer(reply.vectors, dtype="<f4").reshape(3, 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
        assert list(reply.truncated) == [False, True, False]
        assert list(reply.token_counts) == [2, 256, 3]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Embed(embedder_pb2.EmbedRequest(texts=["x"] * 10_000), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "10,000 texts in one call; the limit is 2,048 (HM_EMBED_MAX_TEXTS)" in (
            err.value.details() or ""
        )
        counts = await stub.CountTokens(
            embedder_pb2.CountTokensRequest(texts=[huge, "hello world"]), timeout=30
        )
        assert counts.counts[0] > 256 and counts.counts[1] == 2  # untruncated, no special tokens
        info = await stub.Info(embedder_pb2.InfoRequest(), timeout=5)
        assert (info.provider, info.quantization, info.pooling, info.max_tokens) == (
            "onnx",
            "fp32",
            "mean",
            256,
        )


async def test_the_limit_itself_is_accepted(onnx_provider: OnnxProvider) -> None:
    async with serving(onnx_provider, BatchLimits(), max_texts=16) as address:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            reply = await stub.Embed(
                embedder_pb2.EmbedRequest(texts=[f"t{i}" for i in range(16)]), timeout=30
            )
            assert len(reply.token_counts) == 16
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Embed(embedder_pb2.EmbedRequest(texts=[f"t{i}" for i in range(17)]), timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_query_cache_hits_and_queries_jump_the_queue(onnx_provider: OnnxProvider) -> None:
    gated = GatedProvider(onnx_provider)
    async with serving(gated, BatchLimits(max_batch_size=4, max_wait_ms=0)) as address:
        client = EmbedderClient(address)
        try:
            await client.wait_for_info(10)
            hits, misses = metric("hm_embed_cache_hits_total"), metric("hm_embed_cache_misses_total")
            first = await client.embed(["where is the build config"], QUERY, 30)
            again = await client.embed(["where is the build config"], QUERY, 30)
            assert np.array_equal(first, again)
            assert metric("hm_embed_cache_misses_total") == misses + 1
            assert metric("hm_embed_cache_hits_total") == hits + 1
            # Documents are never cached.
            await client.embed(["a document"], DOCUMENT, 30)
            await client.embed(["a document"], DOCUMENT, 30)
            assert metric("hm_embed_cache_hits_total") == hits + 1

            gated.gate.clear()
            gated.started.clear()
            held = asyncio.create_task(client.embed(["held"], DOCUMENT, 30))
            assert await asyncio.to_thread(gated.started.wait, 10)
            bulk = asyncio.create_task(client.embed([f"doc {i}" for i in range(12)], DOCUMENT, 30))
            await asyncio.sleep(0.2)
            query = asyncio.create_task(client.embed(["an urgent query"], QUERY, 30))
            await asyncio.sleep(0.2)
            gated.gate.set()
            await asyncio.gather(held, bulk, query)
            after_held = gated.batches[gated.batches.index(["held"]) + 1 :]
            assert "an urgent query" in after_held[0], "the query waited behind the bulk documents"
            assert len(after_held) == 4  # 13 texts in batches of at most 4
        finally:
            gated.gate.set()
            await client.close()


async def test_shutdown_answers_waiting_and_running_callers(onnx_provider: OnnxProvider) -> None:
    gated = GatedProvider(onnx_provider)
    engine = EmbeddingEngine(gated, limits=BatchLimits(max_batch_size=2, max_wait_ms=0))  # type: ignore[arg-type]
    engine.start()
    gated.gate.clear()
    running_call = asyncio.create_task(engine.embed(["in the running batch"]))
    assert await asyncio.to_thread(gated.started.wait, 10)
    waiting_call = asyncio.create_task(engine.embed(["still queued", "also queued", "third"]))
    await asyncio.sleep(0.1)
    await engine.close()
    gated.gate.set()
    for call in (running_call, waiting_call):
        with pytest.raises(Unavailable, match="shutting down"):
            await asyncio.wait_for(call, 10)


def test_counts_are_the_untruncated_tokenizers_though_the_provider_keeps_only_the_truncating_one(
    onnx_provider: OnnxProvider,
) -> None:
    """The provider counts with its truncating tokenizer (one tokenizer less in memory): what it
    cuts off is counted from the overflowing pieces, the same as a tokenizer that never truncates."""
    counter = load_counter(onnx_provider.files.tokenizer_path)
    words = "the office plants need watering every Tuesday, réunion à 9h 😀 naïve café".split()
    texts = [
        "",
        "a",
        *(" ".join(words[i % len(words)] for i in range(n)) for n in (1, 200, 255, 256, 257, 3000)),
    ]
    counts = onnx_provider.count_tokens(texts)
    assert counts == count_without_specials(counter, texts)
    assert counts[-1] > 3 * 256  # cut into several pieces by the truncating tokenizer
