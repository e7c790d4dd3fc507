"""The diversity penalty: near-duplicates (word Jaccard > 0.8) of a better hit are pushed down,
and the pairs it finds are exactly those a comparison of every pair finds."""

from __future__ import annotations

import random
import uuid

from services.retrieval.scoring import DUPLICATE_JACCARD, Candidate, _similar_pairs, penalise_duplicates


def _brute_force(sets: list[frozenset[str]], threshold: float) -> list[tuple[int, int]]:
    pairs = []
    for j in range(len(sets)):
        for i in range(j):
            union = len(sets[i] | sets[j])
            if union and len(sets[i] & sets[j]) / union > threshold:
                pairs.append((i, j))
    return sorted(pairs)


def test_similar_pairs_are_those_of_every_pair_compared() -> None:
    rng = random.Random(7)
    vocabulary = [f"w{n}" for n in range(300)]
    sets = []
    for _ in range(150):
        if sets and rng.random() < 0.4:
            # A variant of an earlier set: a few words swapped, so some pairs are near the threshold.
            base = set(rng.choice(sets))
            for _ in range(rng.randint(0, 6)):
                base.discard(rng.choice(sorted(base)))
                base.add(rng.choice(vocabulary))
            sets.append(frozenset(base))
        else:
            sets.append(frozenset(rng.sample(vocabulary, rng.randint(0, 40))))
    expected = _brute_force(sets, DUPLICATE_JACCARD)
    assert len(expected) > 20, "the generator should produce near-duplicates"
    assert sorted(_similar_pairs(sets, DUPLICATE_JACCARD)) == expected


def _hit(content: str, score: float) -> Candidate:
    c = Candidate(row={"id": uuid.uuid4(), "content": content}, similarity=score, bm25=0.0, all_terms=False)
    c.score = score
    return c


def test_a_near_duplicate_is_pushed_below_distinct_hits() -> None:
    original = _hit("the nightly backup of the nas runs at two and keeps seven days of snapshots", 0.9)
    copy = _hit("The nightly backup of the NAS runs at two, and keeps seven days of snapshots!", 0.85)
    other = _hit("alice prefers tea in the afternoon", 0.6)
    ranked = penalise_duplicates([original, copy, other], window=10)
    assert ranked == [original, other, copy]
    assert copy.extras["duplicate"] and "duplicate" not in other.extras
    assert copy.score == 0.85 * 0.5


def test_rrf_relevance_is_on_the_zero_to_one_scale_of_the_other_fusions() -> None:
    """First in both legs is 1, so the additive recency/importance/entity/topic terms weigh the
    same whatever the fusion (unscaled RRF tops out at 2/61 and an entity term swamped it)."""
    from services.retrieval.scoring import Weights, fuse

    weights = Weights(
        relevance=1, recency=0, importance=0, lexical_boost=0.1, rank_decay_k=5, neighbour=0, thread=0
    )
    both = Candidate(row={"id": uuid.uuid4()}, similarity=0.9, bm25=5.0, all_terms=True)
    dense_only = Candidate(row={"id": uuid.uuid4()}, similarity=0.5, bm25=0.0, all_terms=False)
    fuse([both, dense_only], "rrf", weights, have_vectors=True)
    assert both.relevance == 1.0
    assert abs(dense_only.relevance - (1 / 62) / (2 / 61)) < 1e-12
    lexical = Candidate(row={"id": uuid.uuid4()}, similarity=0.0, bm25=3.0, all_terms=True)
    fuse([lexical], "rrf", weights, have_vectors=False)
    assert lexical.relevance == 1.0
