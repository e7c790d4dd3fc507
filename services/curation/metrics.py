"""Prometheus metrics of curation: consolidation runs, the proposals queue, the raw-log verify."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CONSOLIDATION_RUNS = Counter(
    "hm_consolidation_runs_total",
    "Consolidation runs, by schedule (daily, weekly, ...) and outcome (ran|skipped|failed)",
    ["schedule", "outcome"],
)
CONSOLIDATION_SECONDS = Histogram(
    "hm_consolidation_seconds",
    "Duration of a consolidation run (one schedule's job over one scope)",
    ["schedule"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
)
PROPOSALS_MADE = Counter("hm_proposals_made_total", "Proposals the Dreamer made, by kind", ["kind"])
PROPOSALS_DECIDED = Counter("hm_proposals_decided_total", "Proposals decided, by decision", ["decision"])
PROPOSALS_PENDING = Gauge("hm_proposals_pending", "Proposals waiting for a decision (all scopes)")
LLM_FALLBACKS = Counter(
    "hm_llm_fallbacks_total", "Steps that fell back to extractive mode, by step", ["step"]
)
RAWLOG_VERIFY_RUNS = Counter(
    "hm_rawlog_verify_runs_total",
    "Scheduled walks of the raw log's hash chain, by outcome (ok|broken|failed: could not run)",
    ["outcome"],
)
RAWLOG_VERIFY_SECONDS = Histogram(
    "hm_rawlog_verify_seconds",
    "Duration of a scheduled raw-log verify",
    buckets=(0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
)
RAWLOG_VERIFIED_RECORDS = Gauge("hm_rawlog_verified_records", "Records the last verify that held walked")
RAWLOG_LAST_OK = Gauge(
    "hm_rawlog_verify_last_ok_timestamp_seconds", "When a scheduled verify last found the chain whole"
)
# Every outcome is a series from the start, so an alert on `broken` has something to read at 0.
for _outcome in ("ok", "broken", "failed"):
    RAWLOG_VERIFY_RUNS.labels(_outcome)
IMPORT_STAGE_SECONDS = Counter(
    "hm_import_stage_seconds",
    "Time record imports (POST /records/import, AppendRecord) spent in each stage of the write path",
    ["stage"],
)
