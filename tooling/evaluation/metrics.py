"""Ranking metrics: recall@k (share of a question's relevant docs in the top k), MRR, nDCG@k."""

from __future__ import annotations

import math


def recall_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    return sum(1 for ref in relevant if ref in ranked[:k]) / len(relevant)


def reciprocal_rank(ranked: list[str], relevant: dict[str, int]) -> float:
    for rank, ref in enumerate(ranked, start=1):
        if ref in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(ref, 0) / math.log2(i + 2) for i, ref in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0
