"""Choosing the adaptive fusion's constants by leave-one-dataset-out on the service's own candidate
pools: each dev set is imported once through the real path, every question's pool is gathered
once by the service's own `Searcher.gather` (embedding + the one SQL round trip) and structural
signals, then re-scored in process under each setting with the service's own fusion, context,
blend and diversity functions (the gates are off, as in the eval). For each held-out set the
setting best on the mean of the other sets' measures is chosen, and its held-out figure reported.

Each setting is scored as the eval runs the service (tooling/evaluation/run.py): a calibration
pass logs every question's observation (fusion.observe; no labels), a refit fits each scope's
estimate from them (hypermnesia/fusion_estimate.py), and the measured pass reads it. The eval asks
8 questions at once, so the observations are logged in an order that is chance within about 8
places, which a running mean feels: each setting is calibrated in the eval's order and in
`--orders - 1` such jittered orders, and judged on the mean; the spread is reported. The chosen
settings are also scored cross-fitted (each half of a scope's questions measured with the estimate
fit on the other half), so that no question's own observation is in the estimate it is ranked with.

    python -m tooling.evaluation.tune --datasets locomo locomo-proactive scifact wordnet
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import pickle
import random
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypermnesia import fusion_estimate, recall_depth
from services.retrieval import fusion, scoring
from services.retrieval.filters import Prefilter
from services.retrieval.scoring import Candidate, Weights, add_context, blend, fuse, penalise_duplicates
from services.retrieval.search import SearchInput
from tooling.evaluation import datasets
from tooling.evaluation.metrics import ndcg_at, recall_at, reciprocal_rank
from tooling.evaluation.run import PRIMARY, depth_for, loaded

FIXED = ("dense", "bm25", "weighted", "boost", "rrf")
# What scoring reads of a candidate's row.
ROW_KEYS = ("id", "content", "thread_id", "scope", "decay_class", "last_accessed_at", "importance")
# Re-scoring the same pools many times: a candidate's word set (for the diversity penalty) is
# computed once.
scoring._word_set = functools.lru_cache(maxsize=None)(scoring._word_set)


@dataclass
class Pool:
    question: datasets.Question
    refs: dict[str, str]
    candidates: list[Candidate]
    have_vectors: bool
    terms: int


async def gather_pools(
    dataset: str, data_dir: Path, database_url: str | None, concurrency: int = 4
) -> tuple[list[Pool], Weights]:
    k = depth_for(dataset)
    async with loaded(dataset, data_dir, database_url) as run:
        searcher = run.searcher
        weights = searcher.weights["answer"]
        limit = asyncio.Semaphore(concurrency)

        async def one(question: datasets.Question, scope: str, refs: dict[str, str]) -> Pool:
            q = SearchInput(
                principal="eval",
                grants=("eval:*",),
                query=question.text,
                k=k,
                filters=Prefilter(scopes=[scope]),
                min_similarity=0.0,
                relative_cutoff=0.0,
            )
            async with limit:
                _rows, candidates, have = await searcher.gather(q, recall_depth.DERIVED, [], {})
                await searcher._structural_signals(searcher.pool, q, candidates, weights)
            for c in candidates:
                c.row = {key: c.row[key] for key in ROW_KEYS}
            return Pool(question, refs, candidates, have, fusion.content_terms(question.text))

        pools = []
        for corpus, refs in zip(run.corpora, run.refs, strict=True):
            pools += await asyncio.gather(*(one(q, f"eval:{corpus.name}", refs) for q in corpus.questions))
        return pools, weights


CONCURRENCY = 8  # the eval's searches at once


def arrival(pools: list[Pool], seed: int) -> list[Pool]:
    """The order the searches reach the fusion: the eval's order (seed 0), or each question late by
    up to CONCURRENCY places at random, as when 8 searches run at once."""
    if seed == 0:
        return pools
    rng = random.Random(seed)
    return [
        p
        for _, p in sorted(
            ((i + rng.uniform(0, CONCURRENCY), p) for i, p in enumerate(pools)), key=lambda t: t[0]
        )
    ]


def calibrate(pools: list[Pool], params: fusion.AdaptiveParams, seed: int = 0) -> dict[int, list[float]]:
    """The calibration pass: each scope's observations (its corpus: `id(refs)`) as the service
    logs them, in arrival order."""
    logged: dict[int, list[float]] = defaultdict(list)
    for pool in arrival(pools, seed):
        ratio = fusion.observe(
            [c.similarity for c in pool.candidates],
            [c.bm25 for c in pool.candidates],
            pool.terms,
            pool.have_vectors,
            params,
        )
        if ratio is not None:
            logged[id(pool.refs)].append(ratio)
    return logged


def measure(
    dataset: str,
    pools: list[Pool],
    mode: str,
    weights: Weights,
    params: fusion.AdaptiveParams,
    now: datetime,
    estimates: dict[int, float] | None = None,
) -> dict[str, float]:
    """The measured pass: every pool ranked under `mode`, adaptive with its scope's estimate."""
    k = depth_for(dataset)
    rows: dict[str, list[float]] = {"R@10": [], "MRR": [], "nDCG@10": []}
    for pool in pools:
        cands = pool.candidates
        for c in cands:
            c.extras = {}
        estimate = (estimates or {}).get(id(pool.refs), 0.0)
        fuse(cands, mode, weights, pool.have_vectors, pool.terms, params, estimate)
        add_context(cands, weights)
        blend(cands, weights, now)
        ranked = penalise_duplicates(sorted(cands, key=lambda c: c.score, reverse=True), window=k * 2)
        order = [pool.refs.get(str(c.id), "") for c in ranked[:k]]
        rel = pool.question.relevant
        rows["R@10"].append(recall_at(order, rel, 10))
        rows["MRR"].append(reciprocal_rank(order, rel))
        rows["nDCG@10"].append(ndcg_at(order, rel, 10))
    return {name: sum(v) / len(v) for name, v in rows.items()}


# The structural choices (gap clarity, downwards only, agreement and length damping off, raw
# cosine) are fixed at the defaults; these are swept. `warm_up`: the refit's running mean seeded
# by its first observation (1), the plain mean of the first 20, or the plain mean of the whole
# window (200); `prior_count`: its shrinkage toward the prior.
GRID: dict[str, tuple[Any, ...]] = {
    "gamma": (4.0, 8.0, 12.0, 16.0),
    "scope_share": (0.7, 1.0),
    "prior_count": (0.0, 4.0, 16.0),
    "warm_up": (1, 20, 200),
}


@dataclass(frozen=True)
class Setting:
    params: fusion.AdaptiveParams
    estimator: fusion_estimate.EstimateParams

    def describe(self) -> dict[str, Any]:
        return {"gamma": self.params.gamma, "scope_share": self.params.scope_share, **asdict(self.estimator)}


def settings() -> list[Setting]:
    keys = list(GRID)
    out = []
    for values in itertools.product(*GRID.values()):
        chosen = dict(zip(keys, values, strict=True))
        estimator = fusion_estimate.EstimateParams(
            prior_count=chosen["prior_count"], warm_up=chosen["warm_up"]
        )
        out.append(
            Setting(
                fusion.AdaptiveParams(gamma=chosen["gamma"], scope_share=chosen["scope_share"]), estimator
            )
        )
    return out


def fitted(logged: dict[int, list[float]], estimator: fusion_estimate.EstimateParams) -> dict[int, float]:
    return {key: fusion_estimate.fit(ratios, estimator).value for key, ratios in logged.items()}


def measure_orders(
    dataset: str, pools: list[Pool], weights: Weights, setting: Setting, now: datetime, orders: int
) -> dict[str, Any]:
    """The setting's measures averaged over `orders` calibration orders, with the primary
    measure's spread."""
    runs = [
        measure(
            dataset,
            pools,
            "adaptive",
            weights,
            setting.params,
            now,
            fitted(calibrate(pools, setting.params, seed), setting.estimator),
        )
        for seed in range(orders)
    ]
    mean = {name: sum(r[name] for r in runs) / len(runs) for name in runs[0]}
    primary = [r[PRIMARY[dataset]] for r in runs]
    return {**mean, "min": min(primary), "max": max(primary), "in_order": primary[0]}


def cross_fitted(dataset: str, pools: list[Pool], weights: Weights, setting: Setting, now: datetime) -> float:
    """The primary measure with each half of every scope's questions (alternate questions) ranked
    under the estimate fit on the other half: no question's own observation counts for it."""
    halves = [pools[0::2], pools[1::2]]
    scores = []
    for measured, calibration in ((halves[0], halves[1]), (halves[1], halves[0])):
        estimates = fitted(calibrate(calibration, setting.params), setting.estimator)
        result = measure(dataset, measured, "adaptive", weights, setting.params, now, estimates)
        scores.append((result[PRIMARY[dataset]], len(measured)))
    return sum(score * n for score, n in scores) / sum(n for _, n in scores)


# What each signal does at the chosen setting (docs/EVAL.md, "Adaptive fusion"): the default, and
# one change each. Scored in the eval's order.
VARIANTS: dict[str, dict[str, Any]] = {
    "adaptive, the chosen setting": {},
    "per-query only (scope_share 0)": {"scope_share": 0.0},
    "no adaptation (gamma 0 = weighted)": {"gamma": 0.0},
    "+ agreement": {"agreement": True},
    "+ length damping (32 terms)": {"long_terms": 32},
    "peak instead of gap": {"clarity": "peak"},
    "upward allowed": {"upward": True},
    "dense min-max scaled": {"dense_scaled": True},
}


def variants(pools: dict[str, list[Pool]], weights: Weights, now: datetime) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, change in VARIANTS.items():
        params = replace(fusion.DEFAULT, **change)
        out[name] = {}
        for d, ps in pools.items():
            estimates = fitted(calibrate(ps, params), fusion_estimate.DEFAULT)
            out[name][d] = measure(d, ps, "adaptive", weights, params, now, estimates)[PRIMARY[d]]
        print(name, {d: round(v, 3) for d, v in out[name].items()}, file=sys.stderr)
    return out


# A young store: every scope refit after only its first n searches (in the eval's order), each
# question then ranked with that estimate. The dev sets' scopes all have 16 or more questions, so
# the leave-one-out sees mature estimates only; this is where the shrinkage toward the prior
# (prior_count) shows.
YOUNG = (1, 2, 4, 8)


def young_stores(pools: dict[str, list[Pool]], weights: Weights, now: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for prior_count in GRID["prior_count"]:
        estimator = replace(fusion_estimate.DEFAULT, prior_count=prior_count)
        for n in YOUNG:
            row = {}
            for d, ps in pools.items():
                logged = {k: v[:n] for k, v in calibrate(ps, fusion.DEFAULT).items()}
                estimates = fitted(logged, estimator)
                row[d] = measure(d, ps, "adaptive", weights, fusion.DEFAULT, now, estimates)[PRIMARY[d]]
            out[f"prior_count {prior_count:g}, first {n}"] = row
            print("young:", prior_count, n, {d: round(v, 3) for d, v in row.items()}, file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["locomo", "locomo-proactive", "scifact", "wordnet"])
    parser.add_argument("--data-dir", default=str(Path.cwd().parent / "shared" / "data"))
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", default="/tmp/hm-tune.json")
    parser.add_argument("--pools", default="/tmp/hm-tune-pools", help="folder for the gathered pools")
    parser.add_argument("--orders", type=int, default=3, help="arrival orders each setting is measured in")
    parser.add_argument(
        "--no-grid", action="store_true", help="only the defaults' variants, lexical weights and young stores"
    )
    args = parser.parse_args()
    now = datetime.now(UTC)
    pools = {}
    folder = Path(args.pools)
    folder.mkdir(parents=True, exist_ok=True)
    for d in args.datasets:
        saved = folder / f"{d}.pickle"
        if not saved.exists():  # gathered once; the sweep re-reads it
            saved.write_bytes(
                pickle.dumps(asyncio.run(gather_pools(d, Path(args.data_dir), args.database_url)))
            )
        pools[d], weights = pickle.loads(saved.read_bytes())
        print(
            d,
            len(pools[d]),
            "pools,",
            sum(not p.have_vectors for p in pools[d]),
            "lexical-only",
            file=sys.stderr,
        )
    report: dict[str, Any] = {"fixed": {}, "adaptive": {}}
    for d in args.datasets:
        for mode in FIXED:
            report["fixed"].setdefault(d, {})[mode] = measure(d, pools[d], mode, weights, fusion.DEFAULT, now)
        print(d, json.dumps(report["fixed"][d]), file=sys.stderr)
    report["variants"] = variants(pools, weights, now)
    # The lexical weight each set's scopes get at the defaults (one per scope: the estimate sets it).
    report["lexical_weight"] = {}
    for d, ps in pools.items():
        shares = [
            fusion.lexical_share(e)
            for e in fitted(calibrate(ps, fusion.DEFAULT), fusion_estimate.DEFAULT).values()
        ]
        report["lexical_weight"][d] = {
            "mean": sum(shares) / len(shares),
            "min": min(shares),
            "max": max(shares),
        }
    print("lexical weight per scope", json.dumps(report["lexical_weight"]), file=sys.stderr)
    report["young"] = young_stores(pools, weights, now)
    if args.no_grid:
        Path(args.out).write_text(json.dumps(report, indent=1))
        return
    grid = settings()
    table = []
    for n, p in enumerate(grid):
        scores = {d: measure_orders(d, pools[d], weights, p, now, args.orders) for d in args.datasets}
        table.append((p, scores))
        print(p.describe(), {d: round(scores[d][PRIMARY[d]], 4) for d in args.datasets}, file=sys.stderr)
        if n % 20 == 0:
            print(f"{n}/{len(grid)}", file=sys.stderr)
    primary = {d: PRIMARY[d] for d in args.datasets}
    folds: dict[str, dict[str, Any]] = {}
    for held in args.datasets:
        train = [d for d in args.datasets if d != held]
        best = max(table, key=lambda row: sum(row[1][d][primary[d]] for d in train) / len(train))
        folds[held] = {
            "params": best[0].describe(),
            "held_out": best[1][held],
            "held_out_cross_fitted": cross_fitted(held, pools[held], weights, best[0], now),
            "train_mean": sum(best[1][d][primary[d]] for d in train) / len(train),
        }
    report["folds"] = folds
    report["grid"] = [{"params": p.describe(), "scores": s} for p, s in table]
    Path(args.out).write_text(json.dumps(report, indent=1))
    for held, fold in folds.items():
        fixed = report["fixed"][held]
        print(
            held,
            fold["params"],
            f"held-out {primary[held]} {fold['held_out'][primary[held]]:.3f}"
            f" (orders {fold['held_out']['min']:.3f}-{fold['held_out']['max']:.3f};"
            f" cross-fitted {fold['held_out_cross_fitted']:.3f})",
            " ".join(f"{m} {fixed[m][primary[held]]:.3f}" for m in FIXED),
        )


if __name__ == "__main__":
    main()
