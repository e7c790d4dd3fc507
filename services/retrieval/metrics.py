"""Retrieval metrics."""

from prometheus_client import Counter, Histogram

SEARCH_SECONDS = Histogram(
    "hm_search_seconds",
    "Search latency inside the retrieval service, query embedding included",
    buckets=(0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5),
)
DEGRADED = Counter("hm_search_degraded_total", "Searches answered lexical-only because the embedder missed")
