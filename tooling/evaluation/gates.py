"""Measuring the relative cutoff (HM_SEARCH_RELATIVE_CUTOFF) on the service's own candidate pools.

The gate's job (seed 001): drop hits far below the best one without dropping relevant ones. Each
dev set is imported once through the real path and every question's pool gathered by the service's
own `Searcher.gather` (tooling/evaluation/tune.py), then ranked in process with the default fusion,
context and blend, gated with the default floor and each cutoff, and cut to the top `k` (what a
`memory_search` returns by default). Per cutoff: the relevant hits still in the top k against the
ungated top k ("relevant kept"), the irrelevant ones gone ("irrelevant cut"), and the questions that
lost a relevant hit.

The cutoff is chosen by leave-one-dataset-out: on the other set(s), the smallest cutoff that keeps
every relevant hit of every question (seed 001's gate kept all 11 of its relevant hits: "without
dropping relevant ones" is its job); its figures on the held-out set are reported beside the
in-sample ones.

    python -m tooling.evaluation.gates --datasets locomo scifact
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hypermnesia import fusion_estimate
from hypermnesia.settings import RetrievalSettings
from services.retrieval import fusion
from services.retrieval.scoring import (
    Candidate,
    Weights,
    add_context,
    apply_gates,
    blend,
    fuse,
    penalise_duplicates,
)
from tooling.evaluation.tune import Pool, calibrate, fitted, gather_pools

# What a search returns by default (memory_search k=10).
K = 10
CUTOFFS = tuple(round(0.05 * i, 2) for i in range(0, 17))  # 0 (off) to 0.80


@dataclass
class GateFigures:
    cutoff: float
    relevant: int  # relevant hits in the gated top k, summed over questions
    irrelevant: int
    relevant_ungated: int
    irrelevant_ungated: int
    questions: int
    questions_losing: int  # questions with fewer relevant hits than ungated

    @property
    def kept(self) -> float:
        return self.relevant / self.relevant_ungated if self.relevant_ungated else 1.0

    @property
    def cut(self) -> float:
        ungated = self.irrelevant_ungated
        return (ungated - self.irrelevant) / ungated if ungated else 0.0

    def row(self, name: str) -> str:
        q = self.questions
        return (
            f"| {name} | {self.cutoff:.2f} | {self.relevant}/{self.relevant_ungated} ({self.kept:.3f}) "
            f"| {self.irrelevant_ungated - self.irrelevant}/{self.irrelevant_ungated} ({self.cut:.3f}) "
            f"| {self.relevant_ungated / q:.2f} -> {self.relevant / q:.2f} "
            f"| {self.irrelevant_ungated / q:.2f} -> {self.irrelevant / q:.2f} | {self.questions_losing} |"
        )


HEADER = (
    "| set | cutoff | relevant kept | irrelevant cut | relevant per question | irrelevant per question "
    "| questions losing a relevant hit |\n|---|---|---|---|---|---|---|"
)


def scored(pools: list[Pool], weights: Weights, now: datetime) -> list[list[Candidate]]:
    """Each question's candidates scored by the default fusion, context and blend, adaptive at its
    scope's refit estimate (calibrated on these pools, as a store in use is refit from its logged
    searches), so every cutoff sees the same scores."""
    estimates = fitted(calibrate(pools, fusion.DEFAULT), fusion_estimate.DEFAULT)
    out = []
    for pool in pools:
        cands = pool.candidates
        for c in cands:
            c.extras = {}
        fuse(
            cands,
            "adaptive",
            weights,
            pool.have_vectors,
            pool.terms,
            fusion.DEFAULT,
            estimates.get(id(pool.refs), 0.0),
        )
        add_context(cands, weights)
        blend(cands, weights, now)
        out.append(cands)
    return out


def top(pool: Pool, cands: list[Candidate], floor: float, cutoff: float) -> tuple[int, int]:
    """(relevant, irrelevant) hits in the top K the search returns under these gates."""
    if not pool.have_vectors:  # lexical-only: the search gates nothing (services/retrieval/search.py)
        floor = cutoff = 0.0
    kept = apply_gates(cands, floor, cutoff)
    scores = [c.score for c in kept]  # the diversity penalty lowers scores in place: put them back
    kept.sort(key=lambda c: c.score, reverse=True)
    ranked = penalise_duplicates(list(kept), window=K * 2)[:K]
    rel = sum(1 for c in ranked if pool.refs.get(str(c.id), "") in pool.question.relevant)
    irr = len(ranked) - rel
    for c, score in zip(apply_gates(cands, floor, cutoff), scores, strict=True):
        c.score = score
    return rel, irr


def measure(
    pools: list[Pool], weights: Weights, floor: float, cutoffs: tuple[float, ...]
) -> list[GateFigures]:
    counts = {c: [0, 0, 0] for c in cutoffs}  # relevant, irrelevant, questions losing
    base_rel = base_irr = 0
    for pool, cands in zip(pools, scored(pools, weights, datetime.now(UTC)), strict=True):
        rel0, irr0 = top(pool, cands, floor, 0.0)
        base_rel += rel0
        base_irr += irr0
        for cutoff in cutoffs:
            rel, irr = top(pool, cands, floor, cutoff)
            counts[cutoff][0] += rel
            counts[cutoff][1] += irr
            counts[cutoff][2] += int(rel < rel0)
    return [
        GateFigures(c, counts[c][0], counts[c][1], base_rel, base_irr, len(pools), counts[c][2])
        for c in cutoffs
    ]


def choose(figures: list[list[GateFigures]]) -> float:
    """The smallest cutoff (0, the gate off, aside) with which no question of any given set loses a
    relevant hit."""
    for i, row in enumerate(figures[0]):
        if row.cutoff > 0 and all(f[i].questions_losing == 0 for f in figures):
            return row.cutoff
    return figures[0][-1].cutoff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["locomo", "scifact"])
    parser.add_argument("--data-dir", default=str(Path.cwd().parent / "shared" / "data"))
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--pools", default="/tmp/hm-tune-pools", help="folder for the gathered pools")
    args = parser.parse_args()
    floor = RetrievalSettings.model_fields["search_min_similarity"].default
    folder = Path(args.pools)
    folder.mkdir(parents=True, exist_ok=True)
    tables: dict[str, list[GateFigures]] = {}
    for d in args.datasets:
        saved = folder / f"{d}.pickle"
        if not saved.exists():  # gathered once; re-runs re-read it (tune.py shares the folder)
            saved.write_bytes(
                pickle.dumps(asyncio.run(gather_pools(d, Path(args.data_dir), args.database_url)))
            )
        pools, weights = pickle.loads(saved.read_bytes())
        lexical_only = sum(not p.have_vectors for p in pools)
        print(f"{d}: {len(pools)} questions, {lexical_only} lexical-only", file=sys.stderr)
        tables[d] = measure(pools, weights, floor, CUTOFFS)
    print(f"floor {floor}, top {K}\n")
    print(HEADER)
    for d, figures in tables.items():
        for f in figures:
            print(f.row(d))
    print()
    for held in args.datasets:
        train = [d for d in args.datasets if d != held] or [held]
        cutoff = choose([tables[d] for d in train])
        chosen = next(f for f in tables[held] if f.cutoff == cutoff)
        print(f"held out {held}: chosen on {', '.join(train)} -> cutoff {cutoff:.2f}")
        print(chosen.row(f"{held} (held out)"))
    both = choose(list(tables.values()))
    print(f"chosen on {', '.join(args.datasets)} together: {both:.2f}")


if __name__ == "__main__":
    main()
