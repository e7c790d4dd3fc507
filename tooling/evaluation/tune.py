"""Choosing the adaptive fusion's parameters by leave-one-dataset-out on the service's own candidate
pools: each dev set is imported once through the real path, every question's pool is gathered
once by the service's own `Searcher.gather` (embedding + the one SQL round trip) and structural
signals, then re-scored in process under each setting with the service's own fusion, context,
blend and diversity functions (the gates are off, as in the eval). For each held-out set the
setting best on the mean of the other sets' measures is chosen, and its held-out figure reported.

The eval asks 8 questions at once, so the scope's evidence (fusion.ScopeEvidence) sees them in an
order that is chance within about 8 places. Each setting is measured in the eval's order and in
`--orders - 1` such jittered orders, and judged on the mean; the spread is reported.

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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypermnesia import recall_depth
from services.retrieval import fusion, scoring
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
                scopes=[scope],
                k=k,
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


def measure(
    dataset: str,
    pools: list[Pool],
    mode: str,
    weights: Weights,
    params: fusion.AdaptiveParams,
    now: datetime,
    warm_up: int = 1,
    seed: int = 0,
) -> dict[str, float]:
    k = depth_for(dataset)
    rows: dict[str, list[float]] = {"R@10": [], "MRR": [], "nDCG@10": []}
    # Fresh per setting, each corpus its own scope.
    evidence = fusion.ScopeEvidence(warm_up=warm_up)
    for pool in arrival(pools, seed):
        cands = pool.candidates
        for c in cands:
            c.extras = {}
        fuse(cands, mode, weights, pool.have_vectors, pool.terms, params, (evidence, (str(id(pool.refs)),)))
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
# cosine) are fixed at the defaults; these are swept. `warm_up`: ScopeEvidence's plain-mean start
# (1, the default: a running mean seeded with the first query; 20: the plain mean of the first 20).
GRID: dict[str, tuple[Any, ...]] = {
    "gamma": (4.0, 8.0, 12.0, 16.0),
    "scope_share": (0.7, 1.0),
    "scope_prior_count": (0.0, 4.0, 16.0),
    "warm_up": (1, 20),
}


@dataclass(frozen=True)
class Setting:
    params: fusion.AdaptiveParams
    warm_up: int

    def describe(self) -> dict[str, Any]:
        return {**asdict(self.params), "warm_up": self.warm_up}


def settings() -> list[Setting]:
    keys = list(GRID)
    out = []
    for values in itertools.product(*GRID.values()):
        chosen = dict(zip(keys, values, strict=True))
        warm_up = chosen.pop("warm_up")
        out.append(Setting(fusion.AdaptiveParams(**chosen), warm_up))
    return out


def measure_orders(
    dataset: str, pools: list[Pool], weights: Weights, setting: Setting, now: datetime, orders: int
) -> dict[str, Any]:
    """The setting's measures averaged over `orders` arrival orders, with the primary measure's
    spread."""
    runs = [
        measure(dataset, pools, "adaptive", weights, setting.params, now, setting.warm_up, seed)
        for seed in range(orders)
    ]
    mean = {name: sum(r[name] for r in runs) / len(runs) for name in runs[0]}
    primary = [r[PRIMARY[dataset]] for r in runs]
    return {**mean, "min": min(primary), "max": max(primary), "in_order": primary[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["locomo", "locomo-proactive", "scifact", "wordnet"])
    parser.add_argument("--data-dir", default=str(Path.cwd().parent / "shared" / "data"))
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", default="/tmp/hm-tune.json")
    parser.add_argument("--pools", default="/tmp/hm-tune-pools", help="folder for the gathered pools")
    parser.add_argument("--orders", type=int, default=3, help="arrival orders each setting is measured in")
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
            f" (orders {fold['held_out']['min']:.3f}-{fold['held_out']['max']:.3f})",
            " ".join(f"{m} {fixed[m][primary[held]]:.3f}" for m in FIXED),
        )


if __name__ == "__main__":
    main()
