"""Stores larger than the real model can embed in a session: the first `real` memories are real
(their texts embedded by the model, cached between runs); each one after them joins the head of one
real memory's text to the tail of another's, and its vector is the normalised sum of theirs plus a
little Gaussian noise (so no two derived vectors coincide). Queries are always embedded for real.

On two cores the model embeds ~110 texts/s: 100,000 take ~15 minutes, a million would take 2.5 hours.
`fidelity` measures how far a derived vector lies from the one the model gives its text."""

from __future__ import annotations

import random
import statistics

import numpy as np

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient

__all__ = ["REAL_MEMORIES", "derived_text", "derived_vectors", "fidelity"]

# Memories with real vectors; those after them are derived. The search bench's 100,000 (whose
# vectors are cached under HM_DATA_DIR/bench-vectors once embedded).
REAL_MEMORIES = 100_000
# The noise's norm (relative to a unit vector): enough that every derived vector is its own point,
# small against the distance between two real memories (cosine ~0.3-0.8 apart).
NOISE = 0.05
_CHUNK = 50_000


def _split(text: str) -> tuple[list[str], str]:
    """A synthetic text's words before its '(TICKET, note i)' suffix, and that ticket."""
    stem, _, suffix = text.rpartition(" (")
    return stem.split(), suffix.split(",", 1)[0]


def derived_text(first: str, second: str, i: int) -> str:
    """The head of `first` (its first half of words) and the tail of `second`, as memory i."""
    head, ticket = _split(first)
    tail, other = _split(second)
    return f"{' '.join(head[: len(head) // 2] + tail[len(tail) // 2 :])} ({ticket}/{other}, note {i})"


def derived_pairs(rng: random.Random, real: int, count: int) -> list[tuple[int, int]]:
    """`count` pairs of distinct real memories' indexes, each derived memory's parents."""
    return [tuple(rng.sample(range(real), 2)) for _ in range(count)]  # type: ignore[misc]


def derived_vectors(real_vectors: np.ndarray, pairs: list[tuple[int, int]], seed: int) -> np.ndarray:
    """Unit vectors: each pair's normalised sum plus noise of norm ~NOISE, normalised again."""
    if not pairs:
        return np.empty((0, real_vectors.shape[1]), dtype=np.float32)
    index = np.asarray(pairs)
    out = np.empty((len(pairs), real_vectors.shape[1]), dtype=np.float32)
    noise = np.random.default_rng(seed)
    for start in range(0, len(pairs), _CHUNK):  # a chunk's temporaries at a time, not a million's
        part = real_vectors[index[start : start + _CHUNK, 0]] + real_vectors[index[start : start + _CHUNK, 1]]
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        part += noise.standard_normal(part.shape, dtype=np.float32) * (NOISE / np.sqrt(part.shape[1]))
        out[start : start + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return out


async def fidelity(embedder: EmbedderClient, texts: list[str], vectors: np.ndarray) -> dict[str, float]:
    """Cosine between each derived vector and the model's own vector for its text (a sample), and,
    for scale, between the model's vectors of each sampled text and the next one."""
    real = await embedder.embed(texts, DOCUMENT, timeout_s=600)
    own = np.sum(real * vectors, axis=1)
    neighbours = np.sum(real * np.roll(real, 1, axis=0), axis=1)
    return {
        "sample": float(len(texts)),
        "cosine_p50": float(statistics.median(own)),
        "cosine_min": float(own.min()),
        "unrelated_cosine_p50": float(statistics.median(neighbours)),
    }
