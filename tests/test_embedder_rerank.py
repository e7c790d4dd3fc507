"""Reranking through the real service: a tiny random-weight BERT cross-encoder (no reranker ships
on the package index) converted torch-free, checked against a float64 numpy forward pass."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.settings import EmbedderSettings
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.server import running

WORDS = "the cat sat on mat dog ran in park where is build config file rule token memory agent query".split()
HIDDEN, LAYERS, HEADS, INTER, MAX_POS = 32, 2, 4, 64, 64


def write_cross_encoder(folder: Path, seed: int = 7) -> None:
    """A BertForSequenceClassification checkpoint (HF naming) + a WordPiece tokenizer.json."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))

    rng = np.random.default_rng(seed)

    def mat(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    tensors = {
        "bert.embeddings.word_embeddings.weight": mat(len(vocab), HIDDEN, scale=1.0),
        "bert.embeddings.position_embeddings.weight": mat(MAX_POS, HIDDEN, scale=1.0),
        "bert.embeddings.token_type_embeddings.weight": mat(2, HIDDEN, scale=1.0),
        "bert.embeddings.LayerNorm.weight": 1 + mat(HIDDEN, scale=0.1),
        "bert.embeddings.LayerNorm.bias": mat(HIDDEN, scale=0.1),
        "bert.pooler.dense.weight": mat(HIDDEN, HIDDEN),
        "bert.pooler.dense.bias": mat(HIDDEN),
        "classifier.weight": mat(1, HIDDEN),
        "classifier.bias": mat(1),
    }
    for i in range(LAYERS):
        p = f"bert.encoder.layer.{i}"
        for name, (n_out, n_in) in {
            "attention.self.query": (HIDDEN, HIDDEN),
            "attention.self.key": (HIDDEN, HIDDEN),
            "attention.self.value": (HIDDEN, HIDDEN),
            "attention.output.dense": (HIDDEN, HIDDEN),
            "intermediate.dense": (INTER, HIDDEN),
            "output.dense": (HIDDEN, INTER),
        }.items():
            tensors[f"{p}.{name}.weight"] = mat(n_out, n_in)
            tensors[f"{p}.{name}.bias"] = mat(n_out, scale=0.1)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[f"{p}.{ln}.weight"] = 1 + mat(HIDDEN, scale=0.1)
            tensors[f"{p}.{ln}.bias"] = mat(HIDDEN, scale=0.1)
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INTER,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": MAX_POS,
        "type_vocab_size": 2,
        "vocab_size": len(vocab),
        "id2label": {"0": "LABEL_0"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "hypermnesia.json").write_text(json.dumps({"model_id": "test/tiny-cross-encoder"}))


def reference_scores(folder: Path, ids: list[int], types: list[int]) -> float:
    """sigmoid(classifier(tanh(pooler(BERT(ids)[CLS])))) in float64, one unpadded pair at a time."""
    from safetensors.numpy import load_file

    w = {
        k.removeprefix("bert."): v.astype(np.float64)
        for k, v in load_file(str(folder / "model.safetensors")).items()
    }
    ids_a, types_a = np.array(ids), np.array(types)
    hd = HIDDEN // HEADS

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]

    x = (
        w["embeddings.word_embeddings.weight"][ids_a]
        + w["embeddings.token_type_embeddings.weight"][types_a]
        + w["embeddings.position_embeddings.weight"][: len(ids)]
    )
    x = norm(x, "embeddings.LayerNorm")
    erf = np.vectorize(math.erf)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        q, k, v = (
            linear(x, f"{p}.attention.self.{n}").reshape(-1, HEADS, hd).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(-1, HIDDEN)
        x = norm(linear(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        h = h * 0.5 * (1 + erf(h / math.sqrt(2)))
        x = norm(linear(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    pooled = np.tanh(linear(x[0], "pooler.dense"))
    logit = float(linear(pooled, "classifier")[0])
    return 1 / (1 + math.exp(-logit))


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    write_cross_encoder(folder)
    return folder


@pytest.fixture(scope="module")
async def rerank_embedder(cross_encoder: Path, model_cache: Path) -> AsyncIterator[str]:
    # A small rerank token limit makes the long document below exercise pair truncation.
    settings = EmbedderSettings(
        data_dir=model_cache,
        embedder_port=0,
        rerank_model_dir=cross_encoder,
        rerank_max_tokens=24,
        embed_max_batch_tokens=64,
    )
    async with running(settings) as (_server, port, _engine):
        yield f"127.0.0.1:{port}"


async def test_rerank_matches_the_numpy_reference(rerank_embedder: str, cross_encoder: Path) -> None:
    query = "where is the build config"
    documents = [
        "the build config file",
        "the cat sat on the mat",
        "",
        "dog ran in the park where the agent is " * 8,  # longer than the 24-token pair limit
        "memory token rule query",
        "unknownword the cat",
    ]
    async with grpc.aio.insecure_channel(rerank_embedder) as channel:
        stub = embedder_pb2_grpc.EmbedderStub(channel)
        info = await stub.Info(embedder_pb2.InfoRequest(), timeout=5)
        assert info.rerank_model_id == "test/tiny-cross-encoder"
        reply = await stub.Rerank(embedder_pb2.RerankRequest(query=query, documents=documents), timeout=30)
        empty = await stub.Rerank(embedder_pb2.RerankRequest(query=query, documents=[]), timeout=30)
    assert reply.model_id == "test/tiny-cross-encoder" and list(empty.scores) == []
    client = EmbedderClient(rerank_embedder)
    try:
        assert np.allclose(await client.rerank(query, documents, 10), reply.scores)
    finally:
        await client.close()

    tokenizer = Tokenizer.from_file(str(cross_encoder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=24, strategy="longest_first")
    want = []
    for doc in documents:
        enc = tokenizer.encode(query, doc)
        # Pair encoding: [CLS] query [SEP] document [SEP], segment ids 0 then 1.
        first_sep = enc.ids.index(3)
        assert enc.ids[0] == 2 and enc.ids[-1] == 3 and len(enc.ids) <= 24
        assert enc.type_ids == [0] * (first_sep + 1) + [1] * (len(enc.ids) - first_sep - 1)
        want.append(reference_scores(cross_encoder, enc.ids, enc.type_ids))
    got = np.array(reply.scores)
    assert np.max(np.abs(got - np.array(want))) < 1e-5
    assert np.ptp(want) > 0.05  # the random model does tell the documents apart


async def test_rerank_is_off_without_a_model_and_bounded_with_one(
    embedder: str, rerank_embedder: str
) -> None:
    async with grpc.aio.insecure_channel(embedder) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await embedder_pb2_grpc.EmbedderStub(channel).Rerank(
                embedder_pb2.RerankRequest(query="q", documents=["d"]), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "HM_RERANK_MODEL_DIR" in (err.value.details() or "")
    async with grpc.aio.insecure_channel(rerank_embedder) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await embedder_pb2_grpc.EmbedderStub(channel).Rerank(
                embedder_pb2.RerankRequest(query="q", documents=["d"] * 3000), timeout=30
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "HM_EMBED_MAX_TEXTS" in (err.value.details() or "")
