"""What adaptive fusion knows of a scope key (the sorted searched scopes): an estimate of the log
ratio of its two legs' clarities, which tells what kind of store it is (names and rare tokens in
short turns favour the lexical leg; paraphrase favours dense). One query's ratio is noisy; a
store's queries together are steady.

Each search observes its query's ratio (services/retrieval/fusion.py `observe`) and search_log
keeps it. A refit (services/curation/fusion_refits.py: curation's schedule, an import, or
`hypermnesia fusion refit`) turns a key's recent observations into the estimate searches read.
Nothing else moves it, so ranking is a function of the store and the query: the same on every
retrieval replica and after a restart. The math lives here alone, shared by curation's refits and
the evaluation's offline choice of its constants (tooling/evaluation/tune.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT", "Estimate", "EstimateParams", "fit"]


@dataclass(frozen=True)
class EstimateParams:
    """Chosen by leave-one-dataset-out on four dev sets (docs/EVAL.md, tooling/evaluation/tune.py),
    prior_count on young stores (refit after a scope's first few searches) where leave-one-out,
    whose scopes all have many questions, cannot tell its values apart."""

    # A key's last `window` observations count; older ones have been replaced by the store's
    # present queries.
    window: int = 200
    # A running mean at `rate` over them in the order they were logged, seeded by the plain mean of
    # the first `warm_up` (1: the first observation; `window`: the plain mean of all of them).
    rate: float = 0.05
    warm_up: int = 1
    # Pseudo-observations of "no evidence" (ratio 0, the prior): a key that has seen few queries
    # leans toward the prior until it has seen about this many.
    prior_count: float = 4.0


DEFAULT = EstimateParams()


@dataclass(frozen=True)
class Estimate:
    value: float  # what searches read: the mean shrunk toward 0 by how few observations it rests on
    mean: float
    observations: int


def fit(observations: Sequence[float], p: EstimateParams = DEFAULT) -> Estimate:
    """The estimate of a key from its observations, oldest first (only the last `p.window` count).
    A function of them alone: the same observations give the same estimate wherever it is fit."""
    recent = list(observations)[-p.window :] if p.window > 0 else []
    mean = 0.0
    for n, value in enumerate(recent, start=1):
        rate = 1.0 / n if n <= p.warm_up else p.rate
        mean += rate * (value - mean)
    n = len(recent)
    shrink = n / (n + p.prior_count) if n else 0.0
    return Estimate(value=mean * shrink, mean=mean, observations=n)
