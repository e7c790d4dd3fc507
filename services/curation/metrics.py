"""Prometheus metrics of curation's intelligence: consolidation runs and the proposals queue."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CONSOLIDATION_RUNS = Counter(
    "hm_consolidation_runs_total",
    "Consolidation runs, by job and outcome (ran|skipped|failed)",
    ["job", "outcome"],
)
CONSOLIDATION_SECONDS = Histogram(
    "hm_consolidation_seconds",
    "Duration of a consolidation run (one job over one scope)",
    ["job"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
)
PROPOSALS_MADE = Counter("hm_proposals_made_total", "Proposals the Dreamer made, by kind", ["kind"])
PROPOSALS_DECIDED = Counter("hm_proposals_decided_total", "Proposals decided, by decision", ["decision"])
PROPOSALS_PENDING = Gauge("hm_proposals_pending", "Proposals waiting for a decision (all scopes)")
LLM_FALLBACKS = Counter(
    "hm_llm_fallbacks_total", "Steps that fell back to extractive mode, by step", ["step"]
)
