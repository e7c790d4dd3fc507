"""int8 weight-only quantization (MatMulNBits): agrees with fp32, and a text's vector does not
depend on its batch-mates; served end to end when HM_EMBEDDING_QUANTIZATION=int8."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest

from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.onnx_provider import OnnxProvider
from services.embedder.server import running
from tests.helpers import onnx_provider_for

TEXTS = [
    "",
    "hello",
    "The cat sits on the mat",
    "Café déjà vu — naïve résumé, 日本語のテキスト and emoji 🚀!",
    "In 2023, revenue grew 14.7% to $3.2B (ex-FX), per the 10-K filed on 2024-02-28.",
    "the retrieval service ranks memories by meaning, recency and importance " * 3,
    " ".join(["Memory consolidation during sleep replays recent experiences."] * 40),  # truncated
]


@pytest.fixture(scope="module")
def fp32_and_int8(model_cache: Path) -> tuple[OnnxProvider, OnnxProvider]:
    return onnx_provider_for(model_cache, "fp32"), onnx_provider_for(model_cache, "int8")


def test_int8_agrees_with_fp32_and_is_batch_invariant(
    fp32_and_int8: tuple[OnnxProvider, OnnxProvider], model_cache: Path
) -> None:
    fp32, int8 = fp32_and_int8
    exact = np.vstack([fp32.embed(fp32.prepare([t])) for t in TEXTS])
    alone = np.vstack([int8.embed(int8.prepare([t])) for t in TEXTS])
    cosines = (exact * alone).sum(axis=1)
    assert cosines.min() >= 0.998, cosines
    assert np.allclose(np.linalg.norm(alone, axis=1), 1, atol=1e-5)
    # Together in one padded batch (and in another order): each row as if it ran alone.
    for order in (list(range(len(TEXTS))), list(reversed(range(len(TEXTS))))):
        batch = int8.embed(int8.prepare([TEXTS[i] for i in order]))
        for row, i in enumerate(order):
            assert float(batch[row] @ alone[i]) >= 0.99999, TEXTS[i]
    # The graph really holds 8-bit MatMulNBits weights and no activation quantization.
    quantized = next((model_cache / "models").glob("*-int8-*/model.onnx"))
    ops = {n.op_type for n in onnx.load(str(quantized)).graph.node}
    assert "MatMulNBits" in ops and not ops & {"DynamicQuantizeLinear", "MatMulInteger", "QuantizeLinear"}
    bits = {
        a.i
        for n in onnx.load(str(quantized)).graph.node
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "bits"
    }
    assert bits == {8}


async def test_int8_is_served_and_reported(
    model_cache: Path, fp32_and_int8: tuple[OnnxProvider, OnnxProvider]
) -> None:
    fp32, _ = fp32_and_int8
    settings = EmbedderSettings(data_dir=model_cache, embedder_port=0, embedding_quantization="int8")
    async with running(settings) as (_server, port, _engine):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            info = await stub.Info(embedder_pb2.InfoRequest(), timeout=5)
            reply = await stub.Embed(embedder_pb2.EmbedRequest(texts=TEXTS[2:4]), timeout=30)
    assert (info.quantization, info.model_id) == ("int8", "sentence-transformers/all-MiniLM-L6-v2")
    got = np.frombuffer(reply.vectors, dtype="<f4").reshape(2, 384)
    want = fp32.embed(fp32.prepare(TEXTS[2:4]))
    assert (got * want).sum(axis=1).min() >= 0.998
