"""The `openai` provider against a real local HTTP server speaking the OpenAI `/v1/embeddings`
protocol (as Ollama, TEI and vLLM do). Batching, ordering and error status come from the
service above the provider, so they hold here too."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import pytest

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.server import running

DIM = 12


def fake_vector(text: str) -> list[float]:
    """Deterministic, deliberately not unit length (the provider must normalise)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 128) / 16 for b in digest[:DIM]]


class EmbeddingsEndpoint(BaseHTTPRequestHandler):
    batches: list[list[str]] = []
    tokens_seen: set[str] = set()

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.tokens_seen.add(self.headers.get("Authorization", ""))
        if self.path != "/v1/embeddings" or body.get("model") != "test-embed":
            return self._reply(404, {"error": {"message": "no such model"}})
        texts = body["input"]
        self.batches.append(texts)
        if any("FAIL" in t for t in texts):
            return self._reply(500, {"error": {"message": "boom"}})
        # Reversed on purpose: clients must order by `index`, not by position.
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(texts)]
        return self._reply(200, {"object": "list", "model": "test-embed", "data": data[::-1]})

    def _reply(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EmbeddingsEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
async def openai_embedder(endpoint: str, model_cache: object) -> AsyncIterator[str]:
    settings = EmbedderSettings(
        data_dir=model_cache,
        embedder_port=0,
        embedding_provider="openai",
        embedding_api_url=endpoint,
        embedding_api_model="test-embed",
        embedding_api_key="sk-test",
        embed_max_wait_ms=50,
    )
    async with running(settings) as (_server, port, _engine):
        yield f"127.0.0.1:{port}"


async def test_openai_provider_serves_ordered_unit_vectors_in_batches(openai_embedder: str) -> None:
    client = EmbedderClient(openai_embedder)
    try:
        info = await client.wait_for_info(10)
        assert (info.provider, info.model_id, info.dimension) == ("openai", "test-embed", DIM)
        EmbeddingsEndpoint.batches.clear()
        calls = [[f"note {c}-{k}" for k in range(1 + c % 3)] for c in range(20)]
        results = await asyncio.gather(*(client.embed(call, DOCUMENT, 30) for call in calls))
    finally:
        await client.close()
    for call, vectors in zip(calls, results, strict=True):
        for text, vector in zip(call, vectors, strict=True):
            want = np.array(fake_vector(text))
            assert np.allclose(vector, want / np.linalg.norm(want), atol=1e-6)
    assert sum(len(b) for b in EmbeddingsEndpoint.batches) == sum(len(c) for c in calls)
    assert len(EmbeddingsEndpoint.batches) < len(calls), "calls were not batched together"
    assert EmbeddingsEndpoint.tokens_seen == {"Bearer sk-test"}


async def test_openai_endpoint_failure_fails_the_batch_with_unavailable(openai_embedder: str) -> None:
    async with grpc.aio.insecure_channel(openai_embedder) as channel:
        stub = embedder_pb2_grpc.EmbedderStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Embed(embedder_pb2.EmbedRequest(texts=["ok", "FAIL now"]), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "HTTP 500" in (err.value.details() or "")
        counts = await stub.CountTokens(embedder_pb2.CountTokensRequest(texts=["hello world"]), timeout=5)
        assert list(counts.counts) == [2]
        reply = await stub.Embed(embedder_pb2.EmbedRequest(texts=["still fine"]), timeout=10)
        assert len(reply.vectors) == DIM * 4
