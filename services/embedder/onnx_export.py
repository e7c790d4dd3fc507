"""Torch-free BERT -> ONNX converter.

Why this exists: the usual export path (``torch.onnx.export`` or Hugging Face
``optimum``) needs torch and usually the model hub.  hypermnesia runs offline
and must not pull in torch just to produce an inference graph, so this module
writes the BERT encoder out by hand with ``onnx.helper``, taking the weights
straight from ``model.safetensors`` via ``safetensors.numpy``.

Two heads are supported:

* ``mean_pool`` -- sentence-transformers semantics (e.g. all-MiniLM-L6-v2):
  attention-mask-weighted mean of the last hidden states, then L2 normalised.
  Output ``embeddings`` float32 ``[batch, hidden]``.
* ``classifier`` -- Hugging Face ``BertForSequenceClassification`` semantics
  (e.g. cross-encoder rerankers): ``classifier(tanh(pooler(h[:, 0])))``.
  Output ``logits`` float32 ``[batch, num_labels]``.

Graph inputs are ``input_ids``, ``attention_mask`` and ``token_type_ids``, all
int64 ``[batch, seq]`` with dynamic dimensions.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper
from safetensors.numpy import load_file

__all__ = ["build_bert_onnx"]

# Opset 17 gives us LayerNormalization as a single op; it is also the newest
# opset where ReduceL2 still takes ``axes`` as an attribute (ReduceSum has
# taken it as an input since opset 13), which the pooling code relies on.
OPSET = 17

# Added to attention scores of padding positions.  Original BERT uses -10000;
# after softmax exp(-10000) underflows to exactly 0 in float32, so padded
# tokens contribute nothing, and unlike finfo.min it cannot overflow to -inf
# when added to a large negative score.
MASK_NEGATIVE = -10000.0

# F.normalize's default eps in sentence-transformers' Normalize module.
L2_EPS = 1e-12
# Keeps the mean-pool divisor non-zero for an all-padding row (same value
# sentence-transformers clamps with).
COUNT_EPS = 1e-9

Head = Literal["mean_pool", "classifier"]


@dataclass(frozen=True)
class BertConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    layer_norm_eps: float
    max_position_embeddings: int
    type_vocab_size: int
    vocab_size: int | None
    num_labels: int | None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# --------------------------------------------------------------------------
# Config and weights
# --------------------------------------------------------------------------


def _read_config(model_dir: Path) -> BertConfig:
    path = model_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"{path} not found; expected a BERT config.json next to model.safetensors")
    raw = json.loads(path.read_text(encoding="utf-8"))

    def need(key: str) -> int:
        if key not in raw:
            raise ValueError(f"{path}: missing required BERT config key {key!r}")
        return int(raw[key])

    # Only exact (erf) GELU is implemented; silently emitting it for a model
    # trained with the tanh approximation would give subtly wrong outputs.
    act = raw.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"{path}: hidden_act={act!r} is not supported (only exact 'gelu')")
    pos_type = raw.get("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise ValueError(f"{path}: position_embedding_type={pos_type!r} is not supported")

    cfg = BertConfig(
        hidden_size=need("hidden_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=need("num_attention_heads"),
        intermediate_size=need("intermediate_size"),
        layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
        max_position_embeddings=need("max_position_embeddings"),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        vocab_size=int(raw["vocab_size"]) if "vocab_size" in raw else None,
        num_labels=_config_num_labels(raw),
    )
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(
            f"{path}: hidden_size {cfg.hidden_size} is not divisible by num_attention_heads {cfg.num_heads}"
        )
    return cfg


def _config_num_labels(raw: dict) -> int | None:
    # HF stores the label count implicitly through id2label; num_labels is
    # only sometimes written out explicitly.
    if "id2label" in raw and raw["id2label"]:
        return len(raw["id2label"])
    if "num_labels" in raw:
        return int(raw["num_labels"])
    return None


def _load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    path = model_dir / "model.safetensors"
    if not path.is_file():
        raise ValueError(f"{path} not found")
    raw = load_file(str(path))
    # BertForSequenceClassification nests the encoder under "bert." while a
    # bare BertModel (sentence-transformers) does not; the classifier weights
    # stay at top level either way, so strip only the encoder prefix.
    has_prefix = any(k.startswith("bert.") for k in raw)
    weights: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        name = key[len("bert.") :] if has_prefix and key.startswith("bert.") else key
        # Very old TF-converted checkpoints call LayerNorm params gamma/beta.
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        weights[name] = value
    return weights


class _Weights:
    """Name-checked access to the checkpoint so failures say what is missing."""

    def __init__(self, tensors: dict[str, np.ndarray], source: Path) -> None:
        self._tensors = tensors
        self._source = source

    def get(self, name: str, shape: tuple[int | None, ...]) -> np.ndarray:
        if name not in self._tensors:
            raise ValueError(
                f"{self._source} is not a BERT checkpoint: missing tensor {name!r} (also tried 'bert.{name}')"
            )
        arr = self._tensors[name]
        if arr.ndim != len(shape) or any(
            want is not None and got != want for got, want in zip(arr.shape, shape, strict=False)
        ):
            raise ValueError(
                f"{self._source}: tensor {name!r} has shape {tuple(arr.shape)}, expected {shape}"
            )
        # fp16 checkpoints are upcast so the whole graph stays float32.
        return np.ascontiguousarray(arr, dtype=np.float32)


# --------------------------------------------------------------------------
# Graph building
# --------------------------------------------------------------------------


class _Graph:
    """Accumulates nodes/initializers and hands out unique tensor names.

    Everything is written straight into one ModelProto: protobuf copies on
    every ``extend``/``CopyFrom``, and helper.make_graph + make_model would
    copy the ~90 MB of MiniLM weights twice more for no benefit.
    """

    def __init__(self) -> None:
        self.model = onnx.ModelProto()
        self.graph = self.model.graph
        self._counter = 0

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    def const(self, name: str, value: np.ndarray) -> str:
        tensor = self.graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        tensor.dims.extend(value.shape)
        tensor.raw_data = np.ascontiguousarray(value).tobytes()
        return name

    def node(self, op_type: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.graph.node.append(helper.make_node(op_type, inputs, [output], name=f"{output}_node", **attrs))
        return output

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        return self.node(op_type, inputs, self._fresh(hint or op_type.lower()), **attrs)


def _linear(g: _Graph, x: str, weight: np.ndarray, bias: np.ndarray, name: str) -> str:
    # PyTorch Linear stores W as [out, in]; transpose once at build time so the
    # graph is a plain MatMul with no runtime Transpose.
    w = g.const(f"{name}.weight_t", np.ascontiguousarray(weight.T))
    b = g.const(f"{name}.bias", bias)
    return g.op("Add", [g.op("MatMul", [x, w], hint=f"{name}_mm"), b], hint=name)


def _layer_norm(g: _Graph, x: str, weight: np.ndarray, bias: np.ndarray, eps: float, name: str) -> str:
    w = g.const(f"{name}.weight", weight)
    b = g.const(f"{name}.bias", bias)
    return g.op("LayerNormalization", [x, w, b], hint=name, axis=-1, epsilon=eps)


def _gelu_exact(g: _Graph, x: str, name: str) -> str:
    # BERT's "gelu" is x * 0.5 * (1 + erf(x / sqrt(2))); opset 17 has no Gelu op.
    inv_sqrt2 = g.const(f"{name}.inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    one = g.const(f"{name}.one", np.array(1.0, dtype=np.float32))
    half = g.const(f"{name}.half", np.array(0.5, dtype=np.float32))
    erf = g.op("Erf", [g.op("Mul", [x, inv_sqrt2])])
    return g.op("Mul", [g.op("Mul", [x, half]), g.op("Add", [erf, one])], hint=name)


def _embeddings(g: _Graph, w: _Weights, cfg: BertConfig) -> str:
    h = cfg.hidden_size
    word = g.const("word_embeddings", w.get("embeddings.word_embeddings.weight", (cfg.vocab_size, h)))
    pos = g.const(
        "position_embeddings",
        w.get("embeddings.position_embeddings.weight", (cfg.max_position_embeddings, h)),
    )
    typ = g.const(
        "token_type_embeddings",
        w.get("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, h)),
    )

    # Position ids are a constant 0..max_pos range cut to the sequence length
    # with Slice; a Range+Gather formulation failed at run time in ORT 1.32.
    all_pos = g.const("all_position_ids", np.arange(cfg.max_position_embeddings, dtype=np.int64))
    seq_len = g.op("Shape", ["input_ids"], hint="seq_len", start=1, end=2)
    zero = g.const("slice_start_0", np.array([0], dtype=np.int64))
    axis0 = g.const("slice_axis_0", np.array([0], dtype=np.int64))
    pos_ids = g.op("Slice", [all_pos, zero, seq_len, axis0], hint="position_ids")

    x = g.op("Gather", [word, "input_ids"], hint="word_emb")
    x = g.op("Add", [x, g.op("Gather", [typ, "token_type_ids"], hint="type_emb")])
    # [seq, hidden] broadcasts over the batch dimension.
    x = g.op("Add", [x, g.op("Gather", [pos, pos_ids], hint="pos_emb")])
    return _layer_norm(
        g,
        x,
        w.get("embeddings.LayerNorm.weight", (h,)),
        w.get("embeddings.LayerNorm.bias", (h,)),
        cfg.layer_norm_eps,
        "embeddings.LayerNorm",
    )


def _attention_bias(g: _Graph, mask_f: str) -> str:
    # (1 - mask) * NEG, shaped [batch, 1, 1, seq] to broadcast over heads and
    # query positions; computed once and shared by every layer.
    one = g.const("mask_one", np.array(1.0, dtype=np.float32))
    neg = g.const("mask_negative", np.array(MASK_NEGATIVE, dtype=np.float32))
    bias = g.op("Mul", [g.op("Sub", [one, mask_f]), neg])
    axes = g.const("mask_unsqueeze_axes", np.array([1, 2], dtype=np.int64))
    return g.op("Unsqueeze", [bias, axes], hint="attention_bias")


def _encoder_layer(g: _Graph, w: _Weights, cfg: BertConfig, x: str, attn_bias: str, i: int) -> str:
    p = f"encoder.layer.{i}"
    h, nh, hd, inter = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size
    split_shape = g.const(f"{p}.split_heads_shape", np.array([0, 0, nh, hd], dtype=np.int64))
    merge_shape = g.const(f"{p}.merge_heads_shape", np.array([0, 0, h], dtype=np.int64))

    # Fold the 1/sqrt(head_dim) score scaling into the query projection: it
    # is linear, so this is exact up to rounding and saves a Mul per layer.
    scale = 1.0 / math.sqrt(hd)
    q_w = w.get(f"{p}.attention.self.query.weight", (h, h)) * scale
    q_b = w.get(f"{p}.attention.self.query.bias", (h,)) * scale

    def heads(weight: np.ndarray, bias: np.ndarray, name: str, perm: list[int]) -> str:
        y = _linear(g, x, weight, bias, f"{p}.attention.self.{name}")
        y = g.op("Reshape", [y, split_shape])  # [b, s, nh, hd]
        return g.op("Transpose", [y], hint=f"{p}_{name}_heads", perm=perm)

    q = heads(q_w, q_b, "query", [0, 2, 1, 3])  # [b, nh, s, hd]
    # Key goes straight to [b, nh, hd, s] so the score MatMul needs no extra Transpose.
    k = heads(
        w.get(f"{p}.attention.self.key.weight", (h, h)),
        w.get(f"{p}.attention.self.key.bias", (h,)),
        "key",
        [0, 2, 3, 1],
    )
    v = heads(
        w.get(f"{p}.attention.self.value.weight", (h, h)),
        w.get(f"{p}.attention.self.value.bias", (h,)),
        "value",
        [0, 2, 1, 3],
    )

    scores = g.op("Add", [g.op("MatMul", [q, k]), attn_bias], hint=f"{p}_scores")
    probs = g.op("Softmax", [scores], hint=f"{p}_probs", axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, merge_shape], hint=f"{p}_context")

    attn_out = _linear(
        g,
        ctx,
        w.get(f"{p}.attention.output.dense.weight", (h, h)),
        w.get(f"{p}.attention.output.dense.bias", (h,)),
        f"{p}.attention.output.dense",
    )
    x = _layer_norm(
        g,
        g.op("Add", [attn_out, x]),
        w.get(f"{p}.attention.output.LayerNorm.weight", (h,)),
        w.get(f"{p}.attention.output.LayerNorm.bias", (h,)),
        cfg.layer_norm_eps,
        f"{p}.attention.output.LayerNorm",
    )

    ff = _linear(
        g,
        x,
        w.get(f"{p}.intermediate.dense.weight", (inter, h)),
        w.get(f"{p}.intermediate.dense.bias", (inter,)),
        f"{p}.intermediate.dense",
    )
    ff = _gelu_exact(g, ff, f"{p}.intermediate.gelu")
    ff = _linear(
        g,
        ff,
        w.get(f"{p}.output.dense.weight", (h, inter)),
        w.get(f"{p}.output.dense.bias", (h,)),
        f"{p}.output.dense",
    )
    return _layer_norm(
        g,
        g.op("Add", [ff, x]),
        w.get(f"{p}.output.LayerNorm.weight", (h,)),
        w.get(f"{p}.output.LayerNorm.bias", (h,)),
        cfg.layer_norm_eps,
        f"{p}.output.LayerNorm",
    )


def _mean_pool_head(g: _Graph, hidden: str, mask_f: str) -> str:
    m = g.op("Unsqueeze", [mask_f, g.const("pool_unsqueeze_axes", np.array([2], dtype=np.int64))])
    axis1 = g.const("pool_axis_1", np.array([1], dtype=np.int64))
    summed = g.op("ReduceSum", [g.op("Mul", [hidden, m]), axis1], keepdims=0)  # [b, h]
    count = g.op("ReduceSum", [m, axis1], keepdims=0)  # [b, 1]
    count = g.op("Max", [count, g.const("count_eps", np.array(COUNT_EPS, dtype=np.float32))])
    mean = g.op("Div", [summed, count], hint="mean_pooled")
    # ReduceL2 keeps axes as an attribute in opset 17.
    norm = g.op("ReduceL2", [mean], axes=[1], keepdims=1)
    norm = g.op("Max", [norm, g.const("l2_eps", np.array(L2_EPS, dtype=np.float32))])
    return g.node("Div", [mean, norm], "embeddings")


def _classifier_head(g: _Graph, w: _Weights, cfg: BertConfig, hidden: str) -> tuple[str, int]:
    h = cfg.hidden_size
    cls_w = w.get("classifier.weight", (None, h))
    num_labels = cls_w.shape[0]
    # The checkpoint is the source of truth, but a config that disagrees
    # means the pair was mixed up, which is worth failing loudly over.
    if cfg.num_labels is not None and cfg.num_labels != num_labels:
        raise ValueError(
            f"config declares {cfg.num_labels} labels but classifier.weight has {num_labels} rows"
        )
    # A scalar index drops the seq axis: [b, s, h] -> [b, h] for the [CLS] token.
    cls_tok = g.op("Gather", [hidden, g.const("cls_index", np.array(0, dtype=np.int64))], axis=1)
    pooled = _linear(
        g, cls_tok, w.get("pooler.dense.weight", (h, h)), w.get("pooler.dense.bias", (h,)), "pooler.dense"
    )
    pooled = g.op("Tanh", [pooled], hint="pooled")
    cls_b = g.const("classifier.bias", w.get("classifier.bias", (num_labels,)))
    cls_wt = g.const("classifier.weight_t", np.ascontiguousarray(cls_w.T))
    mm = g.op("MatMul", [pooled, cls_wt], hint="classifier_mm")
    return g.node("Add", [mm, cls_b], "logits"), num_labels


def _build_model(w: _Weights, cfg: BertConfig, head: Head) -> onnx.ModelProto:
    g = _Graph()
    mask_f = g.op("Cast", ["attention_mask"], hint="mask_float", to=TensorProto.FLOAT)
    x = _embeddings(g, w, cfg)
    attn_bias = _attention_bias(g, mask_f)
    for i in range(cfg.num_layers):
        x = _encoder_layer(g, w, cfg, x, attn_bias, i)

    if head == "mean_pool":
        out_name = _mean_pool_head(g, x, mask_f)
        out_shape: list[str | int] = ["batch", cfg.hidden_size]
    else:
        out_name, num_labels = _classifier_head(g, w, cfg, x)
        out_shape = ["batch", num_labels]

    g.graph.name = f"bert_{head}"
    g.graph.input.extend(
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    )
    g.graph.output.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape))
    model = g.model
    model.opset_import.append(helper.make_opsetid("", OPSET))
    model.producer_name = "hypermnesia.onnx_export"
    # Pin the IR version to what opset 17 needs rather than the newest the
    # installed onnx knows, so older onnxruntime builds can still load it.
    model.ir_version = 8
    return model


def _write_checked(model: onnx.ModelProto, out_path: Path) -> None:
    """Write ``model`` to a temp file, validate it, then rename into place.

    Readers never see a half-written model, and an invalid graph never
    replaces a good file.  Checking the file (rather than the in-memory
    proto) avoids serialising the weights a second time.
    """
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(model.SerializeToString())
            fh.flush()
            os.fsync(fh.fileno())
        # full_check also runs strict shape inference over the whole graph.
        onnx.checker.check_model(tmp, full_check=True)
        # mkstemp creates 0600; make it world-readable like a normal file so
        # a serving process running as another user can load it.  (Reading
        # the umask would need os.umask(), which is process-wide and racy.)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_bert_onnx(
    model_dir: Path, out_path: Path, *, head: Literal["mean_pool", "classifier"] = "mean_pool"
) -> Path:
    """Convert a BERT safetensors checkpoint in ``model_dir`` to one ONNX file.

    Weights are embedded in the file.  Raises ``ValueError`` if the config or
    checkpoint is not BERT-shaped (the message names the missing tensor) or if
    ``head`` is unknown.  Returns ``out_path``.
    """
    if head not in ("mean_pool", "classifier"):
        raise ValueError(f"head must be 'mean_pool' or 'classifier', got {head!r}")
    model_dir, out_path = Path(model_dir), Path(out_path)
    cfg = _read_config(model_dir)
    weights = _Weights(_load_weights(model_dir), model_dir / "model.safetensors")
    _write_checked(_build_model(weights, cfg, head), out_path)
    return out_path
