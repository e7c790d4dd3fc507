"""Fusion of the dense and lexical legs, the recency/importance blend, and the two gates.

Fusion modes:
- `boost` (seed 001): relevance = cosine + a bounded bonus for a lexical match that decays with
  lexical rank, so exact tokens surface without wording overruling meaning.
- `rrf` (seed 000): relevance = sum of 1/(60 + rank) over the legs a candidate appears in.
- `weighted` (seed 002): w_sem * cosine + w_kw * normalised lexical score.
Scores then add recency (per decay class half-life) and importance as small tie-breakers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hypermnesia.kinds import HALF_LIFE_DAYS

RRF_K = 60.0
IMPORTANCE_SCALE = 10.0


@dataclass
class Candidate:
    row: object
    similarity: float  # cosine, 0-1 (0 when the embedder was unavailable)
    lex_score: float | None  # ts_rank_cd when the lexical leg matched
    dense_rank: int | None = None
    lex_rank: int | None = None
    relevance: float = 0.0
    score: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def lexical_match(self) -> bool:
        return self.lex_score is not None


@dataclass(frozen=True)
class Weights:
    similarity: float
    recency: float
    importance: float
    lexical_boost: float
    rank_decay_k: float


def assign_ranks(candidates: list[Candidate]) -> None:
    dense = sorted((c for c in candidates if c.dense_rank is not None), key=lambda c: -c.similarity)
    for rank, c in enumerate(dense):
        c.dense_rank = rank
    lexical = sorted((c for c in candidates if c.lex_score is not None), key=lambda c: -(c.lex_score or 0))
    for rank, c in enumerate(lexical):
        c.lex_rank = rank


def fuse(candidates: list[Candidate], mode: str, w: Weights) -> None:
    """Set each candidate's relevance according to the fusion mode."""
    assign_ranks(candidates)
    if mode == "rrf":
        for c in candidates:
            c.relevance = sum(1.0 / (RRF_K + r + 1) for r in (c.dense_rank, c.lex_rank) if r is not None)
        return
    if mode == "weighted":
        top = max((c.lex_score or 0.0 for c in candidates), default=0.0) or 1.0
        for c in candidates:
            c.relevance = 0.7 * c.similarity + 0.3 * ((c.lex_score or 0.0) / top)
        return
    for c in candidates:  # boost
        bonus = 0.0
        if c.lex_rank is not None:
            bonus = w.lexical_boost * w.rank_decay_k / (w.rank_decay_k + c.lex_rank)
        c.relevance = c.similarity + bonus


def recency(decay_class: str, last_accessed: datetime, now: datetime) -> float:
    half_life = HALF_LIFE_DAYS.get(decay_class)
    if half_life is None:
        return 1.0
    days = max(0.0, (now - last_accessed).total_seconds() / 86400.0)
    return math.exp(-math.log(2) * days / half_life)


def blend(candidates: list[Candidate], w: Weights, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    for c in candidates:
        row = c.row
        c.score = (
            w.similarity * c.relevance
            + w.recency * recency(row["decay_class"], row["last_accessed_at"], now)  # type: ignore[index]
            + w.importance * float(row["importance"]) / IMPORTANCE_SCALE  # type: ignore[index]
        )


def apply_gates(candidates: list[Candidate], min_similarity: float, relative_cutoff: float) -> list[Candidate]:
    """Seed 001's gates. The absolute floor drops hits whose cosine is below `min_similarity`;
    the relative cutoff drops hits more than `relative_cutoff` below the best similarity. Lexical
    hits bypass both. When results are flat (no hit stands out by the cutoff) nothing is cut by
    the relative gate: it narrows a good answer's neighbourhood rather than inventing one."""
    kept = [c for c in candidates if c.lexical_match or c.similarity >= min_similarity]
    if relative_cutoff <= 0 or not kept:
        return kept
    best = max(c.similarity for c in kept)
    return [c for c in kept if c.lexical_match or c.similarity >= best - relative_cutoff]
