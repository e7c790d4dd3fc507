"""Adaptive fusion: each leg's weight follows evidence of how informative it is for this store
and query, and what each leg reads of a long query (docs/EVAL.md, "Adaptive fusion").

The evidence comes from the candidate pool the one SQL round trip already returns (each
candidate's cosine and BM25) and the searched scopes' stored estimate, which comes back in that
same round trip; nothing is looked up again:
- clarity of each leg: how far its best candidate stands above the leg's own list, in that
  list's standard deviations (the top-score gap, scale-free);
- the log ratio of the two clarities: each search observes its own (`observe`, kept in
  search_log), and the weights follow the searched scopes' estimate, fit from their recent
  observations at explicit refits (hypermnesia/fusion_estimate.py) and read from Postgres in the
  candidates' round trip: one query's clarities hardly tell which leg will win it, a store's tell
  what kind of store it is, and a search never changes what the next one reads;
- measured and off by default: the peak of the top 10 (1 - normalised entropy), the legs' top-10
  agreement, damping the lexical clarity of long queries, min-max scaled cosine.

The lexical weight is prior * e^(g r) / (prior * e^(g r) + 1 - prior) for the log ratio r (capped
at 0 by default, so evidence only hands weight to the dense leg): a share of two non-negative
numbers, so it lies in [0, 1] and the dense weight is its complement. With no evidence either way
it is the prior, the `weighted` fusion's 0.4.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hypermnesia.words import STOPWORDS

TOP = 10  # the depth the clarity and agreement signals look at (the metrics' k)
POOL = 50  # a leg's own list: what each leg returns at the default HM_SEARCH_CANDIDATES
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class AdaptiveParams:
    """Chosen by leave-one-dataset-out on four dev sets (docs/EVAL.md, tooling/evaluation/tune.py);
    the signals off by default were measured and did not help there."""

    prior: float = 0.4  # lexical share with no evidence either way: `weighted`'s 0.4
    gamma: float = 8.0  # how far the clarities' log ratio moves the weights (0: the fixed prior)
    clarity: str = "gap"  # gap | peak | both: which distribution signal measures a leg's clarity
    agreement: bool = False  # pull toward the prior as far as the legs' top 10 agree
    long_terms: int = 10_000  # distinct content words past which the lexical clarity is scaled down
    z_max: float = 8.0  # a gap counts up to this many standard deviations
    # Cosine min-max scaled over the dense leg's own list, as BM25 is divided by its best: raw
    # cosines of the top 50 span ~0.1 where BM25 / max spans 0-1.
    dense_scaled: bool = False
    # How much the searched scopes' stored estimate counts against this query's own ratio: one
    # query's clarities hardly tell which leg will win it, a store's tell which kind it is.
    scope_share: float = 1.0
    # Whether clarity may raise the lexical weight above the prior or only lower it: on raw cosine
    # the prior's 0.4 already lets BM25 order most candidates.
    upward: bool = False


DEFAULT = AdaptiveParams()


@dataclass(frozen=True)
class LegWeights:
    dense: float
    lexical: float
    dense_floor: float = 0.0  # the dense leg's relevance is (cosine - floor) / span, clipped to [0, 1]
    dense_span: float = 1.0
    # The signals that set them, kept for the eval's explanation and the tests.
    dense_clarity: float = 0.0
    lexical_clarity: float = 0.0
    agreement: float = 0.0
    length_factor: float = 1.0


def gap(scores: Sequence[float]) -> float:
    """The best score's distance above the pool's mean in the pool's standard deviations (0 when
    flat)."""
    n = len(scores)
    if n < 2:
        return 0.0
    mean = sum(scores) / n
    var = sum((s - mean) ** 2 for s in scores) / n
    if var <= 1e-18:
        return 0.0
    return max(0.0, (max(scores) - mean) / math.sqrt(var))


def peak(scores: Sequence[float], depth: int = TOP) -> float:
    """1 - the normalised entropy of the top `depth` scores above the pool's floor: 0 when they are
    equal (nothing stands out), towards 1 when one carries all the mass."""
    if len(scores) < 2:
        return 0.0
    floor = min(scores)
    top = sorted(scores, reverse=True)[:depth]
    mass = [s - floor for s in top]
    total = sum(mass)
    if total <= 0 or len(top) < 2:
        return 0.0
    entropy = -sum(m / total * math.log(m / total) for m in mass if m > 0)
    return max(0.0, 1.0 - entropy / math.log(len(top)))


def clarity(scores: Sequence[float], p: AdaptiveParams) -> float:
    z = min(gap(scores), p.z_max) / p.z_max
    if p.clarity == "gap":
        return z
    if p.clarity == "peak":
        return peak(scores)
    return math.sqrt(z * peak(scores))


def top_overlap(dense: Sequence[float], lexical: Sequence[float], depth: int = TOP) -> float:
    """Share of the two legs' top `depth` (by index into the same candidate list) they have in
    common; a leg's zero scores are not in its top."""

    def top(scores: Sequence[float]) -> set[int]:
        order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i])
        return set(order[:depth])

    a, b = top(dense), top(lexical)
    if not a or not b:
        return 0.0
    return len(a & b) / min(depth, len(a), len(b))


def own_pool(scores: Sequence[float], depth: int = POOL) -> list[float]:
    """A leg's own result list: its `depth` best non-zero scores. Read over the whole candidate
    pool, the lexical leg's zeros (candidates it did not match) would make any match look like a
    clear winner, and the dense leg's tail would do the same for cosine."""
    return sorted((s for s in scores if s > 0), reverse=True)[:depth]


def content_terms(query: str) -> int:
    return len({w for w in _WORD.findall(query.lower()) if w not in STOPWORDS})


LOG_RATIO_MAX = 3.0  # |log(c_lex / c_dense)| counted up to this


def log_ratio(c_lex: float, c_dense: float) -> float:
    if c_lex <= 0 and c_dense <= 0:
        return 0.0
    if c_lex <= 0:
        return -LOG_RATIO_MAX
    if c_dense <= 0:
        return LOG_RATIO_MAX
    return max(-LOG_RATIO_MAX, min(LOG_RATIO_MAX, math.log(c_lex / c_dense)))


def _clarities(
    similarities: Sequence[float], bm25s: Sequence[float], query_terms: int, p: AdaptiveParams
) -> tuple[float, float, float]:
    """(dense clarity, lexical clarity, the long-query factor applied to the lexical one)."""
    c_dense = clarity(own_pool(similarities), p)
    length = min(1.0, p.long_terms / query_terms) if query_terms > p.long_terms else 1.0
    matched = own_pool(bm25s)
    # One memory alone holds any query term: the lexical leg could not be clearer.
    c_lex = (1.0 if len(matched) == 1 else clarity(matched, p)) * length
    return c_dense, c_lex, length


def observe(
    similarities: Sequence[float],
    bm25s: Sequence[float],
    query_terms: int,
    have_vectors: bool,
    p: AdaptiveParams = DEFAULT,
) -> float | None:
    """This query's evidence for its scopes' estimate: the log ratio of the legs' clarities; None
    when one leg said nothing (no vector, or no lexical match), which tells nothing of the store."""
    if not have_vectors or not any(b > 0 for b in bm25s):
        return None
    c_dense, c_lex, _length = _clarities(similarities, bm25s, query_terms, p)
    return log_ratio(c_lex, c_dense)


def lexical_share(ratio: float, p: AdaptiveParams = DEFAULT) -> float:
    """The lexical weight for a log ratio of the clarities: prior * r^g / (prior * r^g + 1 - prior)
    with r the clarities' ratio, a share of two non-negative numbers, so within [0, 1]; the prior
    itself when the legs are equally clear (and for any ratio above 0 unless `p.upward`)."""
    if not p.upward:
        ratio = min(ratio, 0.0)
    a = p.prior * math.exp(p.gamma * ratio)
    return a / (a + 1.0 - p.prior)


def leg_weights(
    similarities: Sequence[float],
    bm25s: Sequence[float],
    query_terms: int,
    have_vectors: bool,
    p: AdaptiveParams = DEFAULT,
    estimate: float = 0.0,
) -> LegWeights:
    """The dense and lexical weights for one query (each in [0, 1], summing to 1). `estimate`: the
    searched scopes' stored estimate of the clarities' log ratio (0, no evidence, before any refit)."""
    if not have_vectors:
        return LegWeights(dense=0.0, lexical=1.0)
    if not any(b > 0 for b in bm25s):  # raw cosine: the order is the dense leg's either way
        return LegWeights(dense=1.0, lexical=0.0)
    c_dense, c_lex, length = _clarities(similarities, bm25s, query_terms, p)
    lexical = lexical_share(p.scope_share * estimate + (1.0 - p.scope_share) * log_ratio(c_lex, c_dense), p)
    agreement = top_overlap(similarities, bm25s)
    if p.agreement:
        lexical = p.prior + (1.0 - agreement) * (lexical - p.prior)
    lexical = min(1.0, max(0.0, lexical))
    floor, span = 0.0, 1.0
    own = own_pool(similarities)
    if p.dense_scaled and len(own) > 1 and own[0] > own[-1]:
        floor, span = own[-1], own[0] - own[-1]
    return LegWeights(
        dense=1.0 - lexical,
        lexical=lexical,
        dense_floor=floor,
        dense_span=span,
        dense_clarity=c_dense,
        lexical_clarity=c_lex,
        agreement=agreement,
        length_factor=length,
    )


# What each leg reads of a long query. The embedder keeps the first HM_EMBEDDING_MAX_TOKENS (256)
# tokens of what it is given; a prompt hook sends the conversation so far, whose most recent part
# is what the next turn is about: the dense leg embeds the last DENSE_TAIL_WORDS words (about 200
# tokens of English, leaving room for sub-word splits). The lexical leg gets the query's distinct
# content words, the most recent LEXICAL_TERMS of them: the SQL scores BM25 over the rarest 16
# of those, and its input stays bounded however long the query.
LONG_QUERY_WORDS = 160
DENSE_TAIL_WORDS = 160
LEXICAL_TERMS = 64


def dense_text(query: str) -> str:
    words = query.split()
    if len(words) <= LONG_QUERY_WORDS:
        return query
    return " ".join(words[-DENSE_TAIL_WORDS:])


def lexical_text(query: str) -> str:
    if len(query.split()) <= LONG_QUERY_WORDS:
        return query
    seen: dict[str, None] = {}
    for word in reversed(_WORD.findall(query.lower())):
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
            if len(seen) == LEXICAL_TERMS:
                break
    return " ".join(reversed(seen))


def dense_relevance(similarity: float, legs: LegWeights) -> float:
    return min(1.0, max(0.0, (similarity - legs.dense_floor) / legs.dense_span))
