"""Retrieval metrics."""

from prometheus_client import Counter, Gauge, Histogram

SEARCH_SECONDS = Histogram(
    "hm_search_seconds",
    "Search latency inside the retrieval service, query embedding included",
    buckets=(0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5),
)
DEGRADED = Counter("hm_search_degraded_total", "Searches answered lexical-only because the embedder missed")
# The stages of Searcher.search, as it times them: the query embedding, the one candidate round
# trip, scoring (fusion, context, gates, rerank), structural signals, and the evidence walk.
SEARCH_STAGES = ("embed", "candidates", "score", "signals", "evidence")
SEARCH_STAGE_SECONDS = Histogram(
    "hm_search_stage_seconds",
    "Time a search spent in each stage inside the retrieval service",
    ["stage"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5),
)
SEARCH_EMPTY = Counter("hm_search_empty_total", "Searches that returned no memory at all")
for _stage in SEARCH_STAGES:
    SEARCH_STAGE_SECONDS.labels(_stage)

# Read replica (HM_DATABASE_READ_URL, services/retrieval/replica.py); absent without one.
REPLICA_LAG_BYTES = Gauge(
    "hm_replica_lag_bytes",
    "WAL the read replica has not replayed yet (primary's position minus the replica's), probed each second",
)
REPLICA_UP = Gauge(
    "hm_replica_up", "1 while retrieval reads from its replica, 0 while it reads from the primary"
)
READS_ON_PRIMARY = Counter(
    "hm_replica_reads_on_primary_total",
    "Reads a replica would have served that ran on the primary, by reason: behind (the caller's "
    "last write was not replayed within HM_REPLICA_WAIT_MS), replica_down, replica_error",
    ["reason"],
)
REPLICA_READS = Counter("hm_replica_reads_total", "Reads served by the read replica")
REPLICA_WAIT_SECONDS = Histogram(
    "hm_replica_wait_seconds",
    "How long a read waited for the replica to replay its caller's last write (reads that waited)",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2.5),
)
