"""Adaptive fusion: the leg weights stay in [0, 1] and sum to 1 whatever the score distributions,
a scope's estimate is a function of its observations alone, long queries are read in part by each
leg, and odd queries (5,000 characters, one rare token, stop words only) get a sane answer through
the real service (REST search). Refits and the estimate's life in Postgres: test_fusion_refits.py."""

from __future__ import annotations

import random
import uuid

import httpx
import pytest

from hypermnesia import fusion_estimate
from hypermnesia.validation import MAX_QUERY_CHARS
from services.retrieval import fusion
from services.retrieval.scoring import Candidate, Weights, fuse
from tests.conftest import Stack

HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "fusion"}
WEIGHTS = Weights(
    relevance=1.0, recency=0.0, importance=0.0, lexical_boost=0.1, rank_decay_k=10, neighbour=0.0, thread=0.0
)


def _distribution(rng: random.Random, n: int) -> list[float]:
    shape = rng.choice(("flat", "peaked", "zeros", "uniform", "one", "tied"))
    if shape == "flat":
        return [0.5] * n
    if shape == "zeros":
        return [0.0] * n
    if shape == "one":
        return [0.0] * (n - 1) + [rng.uniform(0, 30)]
    if shape == "tied":
        return [rng.choice((0.0, 3.0))] * n
    if shape == "peaked":
        return [rng.expovariate(1.0) ** 3 for _ in range(n)]
    return [rng.uniform(0, rng.choice((1.0, 40.0))) for _ in range(n)]


def test_adaptive_weights_stay_in_bounds_and_sum_to_one() -> None:
    rng = random.Random(19)
    settings = [fusion.DEFAULT] + [
        fusion.AdaptiveParams(
            prior=rng.choice((0.0, 0.3, 0.4, 1.0)),
            gamma=rng.choice((0.0, 0.5, 1.0, 3.0)),
            clarity=rng.choice(("gap", "peak", "both")),
            agreement=rng.random() < 0.5,
            long_terms=rng.choice((1, 16, 32)),
            scope_share=rng.choice((0.0, 0.5, 1.0)),
            upward=rng.random() < 0.5,
            dense_scaled=rng.random() < 0.5,
        )
        for _ in range(30)
    ]
    for trial in range(3000):
        n = rng.randint(0, 120)
        sims = [min(1.0, s) for s in _distribution(rng, n)]
        bm25s = _distribution(rng, n)
        p = settings[trial % len(settings)]
        estimate = rng.uniform(-fusion.LOG_RATIO_MAX, fusion.LOG_RATIO_MAX) if trial % 2 else 0.0
        legs = fusion.leg_weights(sims, bm25s, rng.randint(0, 400), rng.random() < 0.9, p, estimate)
        assert 0.0 <= legs.dense <= 1.0 and 0.0 <= legs.lexical <= 1.0, (legs, p)
        assert legs.dense + legs.lexical == pytest.approx(1.0), (legs, p)
        assert 0.0 <= legs.agreement <= 1.0


def test_a_leg_with_nothing_to_say_gets_no_weight_and_the_prior_holds_without_evidence() -> None:
    assert fusion.leg_weights([0.5, 0.4], [0.0, 0.0], 3, True).dense == 1.0
    assert fusion.leg_weights([0.5, 0.4], [2.0, 1.0], 3, False).lexical == 1.0
    flat = fusion.leg_weights([0.5] * 20, [1.0] * 20, 3, True)
    assert flat.lexical == pytest.approx(fusion.DEFAULT.prior)


def test_the_clearer_leg_gets_more_weight_when_the_legs_disagree() -> None:
    """Read per query (scope_share 0: the query's own ratio alone; the default reads the scope's
    estimate instead, below)."""
    per_query = fusion.AdaptiveParams(scope_share=0.0)
    # One memory stands out lexically (a rare name), dense sees a flat field; the top 10 differ.
    sims = [0.50 - 0.001 * i for i in range(50)]
    bm25s = [0.0] * 40 + [1.0] * 9 + [12.0]
    upward = fusion.AdaptiveParams(scope_share=0.0, upward=True)
    assert fusion.leg_weights(sims, bm25s, 4, True, upward).lexical > fusion.DEFAULT.prior
    # By default clarity only lowers the lexical weight: on raw cosine its prior already leads.
    assert fusion.leg_weights(sims, bm25s, 4, True, per_query).lexical == pytest.approx(fusion.DEFAULT.prior)
    # The mirror: dense stands out, the lexical leg is flat.
    sims = [0.9] + [0.3] * 49
    bm25s = [0.0] * 25 + [1.0] * 25
    dense_clear = fusion.leg_weights(sims, bm25s, 4, True, per_query)
    assert dense_clear.lexical < fusion.DEFAULT.prior
    assert fusion.lexical_share(fusion.observe(sims, bm25s, 4, True) or 0.0) == pytest.approx(
        dense_clear.lexical
    )


def test_a_scope_fit_from_its_observations_weighs_the_clearer_leg() -> None:
    """A store where dense stands out query after query gets an estimate that moves its lexical
    weight down; one where BM25 does keeps the prior (clarity only lowers it by default). A
    query's own evidence only counts through the estimate it was fit into."""
    sims_clear = [0.9] + [0.3] * 49
    bm25_flat = [1.0] * 50
    sims_flat = [0.5 - 0.0001 * i for i in range(50)]
    bm25_clear = [0.0] * 40 + [1.0] * 9 + [12.0]
    dense_seen = [fusion.observe(sims_clear, bm25_flat, 4, True) for _ in range(50)]
    lexical_seen = [fusion.observe(sims_flat, bm25_clear, 4, True) for _ in range(50)]
    assert dense_seen[0] == pytest.approx(-fusion.LOG_RATIO_MAX)
    assert lexical_seen[0] is not None and lexical_seen[0] > 0
    dense_store = fusion_estimate.fit([r for r in dense_seen if r is not None])
    lexical_store = fusion_estimate.fit([r for r in lexical_seen if r is not None])
    assert dense_store.observations == 50 and dense_store.mean == pytest.approx(-fusion.LOG_RATIO_MAX)
    assert fusion.leg_weights(sims_clear, bm25_flat, 4, True, estimate=dense_store.value).lexical < 0.05
    kept = fusion.leg_weights(sims_flat, bm25_clear, 4, True, estimate=lexical_store.value)
    assert kept.lexical == pytest.approx(fusion.DEFAULT.prior)
    # With no estimate (before any refit) the weights are the prior's, whatever this query shows.
    assert fusion.leg_weights(sims_clear, bm25_flat, 4, True).lexical == pytest.approx(fusion.DEFAULT.prior)
    # A leg that said nothing tells nothing of the store.
    assert fusion.observe(sims_clear, [0.0] * 50, 4, True) is None
    assert fusion.observe(sims_clear, bm25_flat, 4, False) is None


def test_an_estimate_is_a_function_of_its_window_and_a_warm_up_takes_the_plain_mean() -> None:
    """Over its warm-up the estimate is the plain mean of what it has seen, whatever the order; a
    running mean seeded with the first observation (warm_up=1) is not. Past the warm-up it
    follows at its rate; only the last `window` observations count."""
    ratios = [-3.0, 1.0, -2.0, 0.5, -1.5, -2.5, 0.0, -0.5]
    plain = fusion_estimate.EstimateParams(warm_up=len(ratios), prior_count=0.0)
    orders = [ratios, ratios[::-1], sorted(ratios)]
    assert [fusion_estimate.fit(o, plain).value for o in orders] == pytest.approx([sum(ratios) / 8] * 3)
    seeded_params = fusion_estimate.EstimateParams(warm_up=1, prior_count=0.0)
    seeded = [fusion_estimate.fit(o, seeded_params).value for o in orders]
    assert max(seeded) - min(seeded) > 1.0
    following = fusion_estimate.EstimateParams(rate=0.05, warm_up=20, prior_count=0.0)
    assert fusion_estimate.fit([-3.0] * 20 + [1.0], following).value == pytest.approx(-3.0 + 0.05 * 4.0)
    windowed = fusion_estimate.EstimateParams(window=3, warm_up=3, prior_count=0.0)
    assert fusion_estimate.fit([9.0, 9.0, -1.0, -2.0, -3.0], windowed).value == pytest.approx(-2.0)
    assert fusion_estimate.fit([]) == fusion_estimate.Estimate(0.0, 0.0, 0)


def test_a_new_scope_leans_toward_the_prior_until_it_has_seen_enough_queries() -> None:
    shrunk = fusion_estimate.EstimateParams(prior_count=4.0)
    first = fusion_estimate.fit([-2.0], shrunk)
    assert first.mean == pytest.approx(-2.0) and first.value == pytest.approx(-2.0 / 5)
    later = fusion_estimate.fit([-2.0] * 60, shrunk)
    assert later.value == pytest.approx(-2.0 * 60 / 64)
    sims = [0.9] + [0.3] * 49  # dense stands out
    bm25s = [0.0] * 25 + [1.0] * 25  # the lexical leg is flat
    weight = [fusion.leg_weights(sims, bm25s, 4, True, estimate=e.value).lexical for e in (first, later)]
    assert weight[1] < weight[0] < fusion.DEFAULT.prior


def test_fuse_modes_give_single_legs_and_adaptive_mixes() -> None:
    cands = [
        Candidate(row={"id": uuid.uuid4()}, similarity=s, bm25=b, all_terms=False)
        for s, b in ((0.9, 0.0), (0.2, 8.0), (0.5, 4.0))
    ]
    fuse(cands, "dense", WEIGHTS, True)
    assert [c.relevance for c in cands] == [0.9, 0.2, 0.5]
    fuse(cands, "bm25", WEIGHTS, True)
    assert [c.relevance for c in cands] == [0.0, 1.0, 0.5]
    fuse(cands, "dense", WEIGHTS, False)  # no vector: the lexical leg is all there is
    assert [c.relevance for c in cands] == [0.0, 1.0, 0.5]
    legs = fuse(cands, "adaptive", WEIGHTS, True, query_terms=3)
    assert legs is not None
    for c in cands:
        assert c.relevance == pytest.approx(legs.dense * c.similarity + legs.lexical * c.bm25 / 8.0)


def test_a_long_query_is_read_in_part_by_each_leg() -> None:
    words = [f"word{n}" for n in range(900)]
    query = " ".join(words)
    dense = fusion.dense_text(query).split()
    assert dense == words[-fusion.DENSE_TAIL_WORDS :]  # the most recent part fills the model's window
    lexical = fusion.lexical_text(query).split()
    assert lexical == words[-fusion.LEXICAL_TERMS :]  # bounded, distinct, most recent
    short = "where did Caroline move from?"
    assert fusion.dense_text(short) == short and fusion.lexical_text(short) == short
    repeated = " ".join(["the cat sat on the mat"] * 100 + ["zebra"])
    assert fusion.lexical_text(repeated) == "cat sat mat zebra"


async def _search(http: httpx.AsyncClient, query: str, **extra) -> dict:
    response = await http.post("/memories/search", json={"query": query, "k": 5, **extra})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
async def seeded(stack: Stack) -> Stack:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        for content in (
            "The staging database password rotates every Monday via the vault job",
            "Grandma's apple pie needs two cups of sugar and cinnamon",
            "Deploys to production need a green CI run and a second reviewer",
            "The quokkaflux build flag turns on the experimental JIT",
            "Our Kubernetes cluster runs on three Raspberry Pi nodes",
        ):
            response = await http.post("/memories", json={"content": content})
            assert response.status_code == 200, response.text
    return stack


def _contents(body: dict) -> list[str]:
    return [hit["content"] for hit in body["results"]]


async def test_a_5000_character_query_is_answered(seeded: Stack) -> None:
    assert MAX_QUERY_CHARS >= 5000  # a prompt hook sends long prompts
    filler = "We talked about the weekend, the weather and the football results for a while. "
    tail = "Now, before I deploy to production, what does a deploy need?"
    query = (filler * 80)[: 5000 - len(tail)] + tail
    assert len(query) == 5000
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS, timeout=60) as http:
        for mode in ("adaptive", "weighted", "dense", "bm25"):
            body = await _search(http, query, fusion=mode, min_similarity=0, relative_cutoff=0)
            assert body["results"], mode
        # The recent part of the prompt is what the dense leg reads: the deploy rule comes first.
        assert (
            "Deploys to production" in _contents(body := await _search(http, query, fusion="adaptive"))[0]
        ), body


async def test_one_rare_token_finds_its_memory(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS, timeout=60) as http:
        for mode in ("adaptive", "weighted", "bm25", "dense"):
            body = await _search(http, "quokkaflux", fusion=mode)
            assert body["results"] and "quokkaflux" in _contents(body)[0], (mode, body)


async def test_stop_words_only_is_answered_without_error(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS, timeout=60) as http:
        for mode in ("adaptive", "weighted", "bm25", "dense"):
            body = await _search(
                http, "the and of to it is was", fusion=mode, min_similarity=0, relative_cutoff=0
            )
            # No content word: the lexical leg is empty, so the answer is dense's (or nothing for
            # bm25 alone), never an error.
            assert isinstance(body["results"], list)
            assert all(isinstance(h, dict) for h in body["results"])
        assert (await _search(http, "the and of to it is was", fusion="adaptive", min_similarity=0))[
            "results"
        ]
