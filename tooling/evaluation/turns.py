"""Turns in their session, measured part by part on LoCoMo (docs/EVAL.md, "Turns in their session").

`python -m tooling.evaluation.turns`: LoCoMo imported once through the real service path and
calibrated as `hypermnesia eval` does (run.py), then every question asked again under each variant
of the context settings, switched in the running retrieval service between passes (nothing else
moves: the refit estimate is the calibration's). Scored at turn level on dev (conversations 1-5,
where the weights are chosen) and held out (6-10), per question category.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from tooling.evaluation import run
from tooling.evaluation.metrics import ndcg_at, recall_at, reciprocal_rank

DEV = slice(0, 5)
HELD_OUT = slice(5, 10)
# name -> RetrievalSettings changed from the defaults (the weights' fields are the settings').
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no neighbour": {"context_neighbour_weight": 0.0},
    "no thread best": {"context_thread_weight": 0.0},
    "no neighbour, no thread": {"context_neighbour_weight": 0.0, "context_thread_weight": 0.0},
    "session 0.1": {"context_session_weight": 0.1},
    "session 0.2": {"context_session_weight": 0.2},
    "session 0.4": {"context_session_weight": 0.4},
    "opening 0.1": {"context_opening_weight": 0.1},
    "opening 0.2": {"context_opening_weight": 0.2},
    "assistant weight off": {"assistant_turn_words": 0},
}
_WEIGHT_OF = {
    "context_neighbour_weight": "neighbour",
    "context_thread_weight": "thread",
    "context_session_weight": "session",
    "context_opening_weight": "opening",
}


def use_variant(searcher: Any, defaults: Any, changes: dict[str, Any]) -> None:
    """The running searcher's settings and both modes' weights as `changes` says."""
    searcher.settings = defaults.model_copy(update=changes)
    fields = {_WEIGHT_OF[k]: v for k, v in changes.items() if k in _WEIGHT_OF}
    base = {w: getattr(defaults, k) for k, w in _WEIGHT_OF.items()}
    searcher.weights = {
        mode: dataclasses.replace(weights, **{**base, **fields}) for mode, weights in searcher.weights.items()
    }


def score(corpora: list, ranked: list, refs: list) -> dict[str, float]:
    rows: dict[str, list[float]] = {}
    for corpus, runs, mapping in zip(corpora, ranked, refs, strict=True):
        for question, (ids, _degraded) in zip(corpus.questions, runs, strict=True):
            order = [mapping.get(i, "") for i in ids]
            rel = question.relevant
            for name, value in (
                ("R@5", recall_at(order, rel, 5)),
                ("R@10", recall_at(order, rel, 10)),
                ("MRR", reciprocal_rank(order, rel)),
                ("nDCG@10", ndcg_at(order, rel, 10)),
                (f"R@10 cat {question.category}", recall_at(order, rel, 10)),
            ):
                rows.setdefault(name, []).append(value)
    return {name: sum(v) / len(v) for name, v in rows.items()}


async def measure(
    data_dir: Path, database_url: str | None, variants: list[str]
) -> list[tuple[str, dict, dict, int]]:
    out = []
    async with run.loaded("locomo", data_dir, database_url) as loaded:
        await run.calibrate(loaded, 10, 8)
        defaults = loaded.searcher.settings
        for name in variants:
            use_variant(loaded.searcher, defaults, VARIANTS[name])
            started = time.perf_counter()
            ranked = [
                await run._search_all(loaded.retrieval, c, f"eval:{c.name}", "adaptive", 10, 8)
                for c in loaded.corpora
            ]
            degraded = sum(int(d) for runs in ranked for _, d in runs)
            dev = score(loaded.corpora[DEV], ranked[DEV], loaded.refs[DEV])
            held = score(loaded.corpora[HELD_OUT], ranked[HELD_OUT], loaded.refs[HELD_OUT])
            print(
                f"{name}: dev R@10 {dev['R@10']:.3f}, held-out R@10 {held['R@10']:.3f}"
                f" ({time.perf_counter() - started:.0f} s, lexical-only {degraded})",
                file=sys.stderr,
            )
            out.append((name, dev, held, degraded))
        use_variant(loaded.searcher, defaults, {})
    return out


def table(results: list[tuple[str, dict, dict, int]]) -> str:
    names = ["R@5", "R@10", "MRR", "nDCG@10", *(f"R@10 cat {c}" for c in (1, 2, 3, 4))]
    header = ["variant", "set", *names, "lexical-only"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, dev, held, degraded in results:
        for label, figures in (("dev", dev), ("held out", held)):
            cells = [name, label, *(f"{figures.get(n, 0.0):.3f}" for n in names), str(degraded)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    from hypermnesia.settings import RetrievalSettings

    database_url = RetrievalSettings().database_url
    print(table(asyncio.run(measure(args.data_dir, database_url, args.variants))))


if __name__ == "__main__":
    main()
