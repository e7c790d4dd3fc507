"""Embedder metrics (bounded label sets; names carry their unit). Served on the embedder
process's /metrics (HM_EMBEDDER_METRICS_PORT)."""

from prometheus_client import Counter, Gauge, Histogram

_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256)
_TOKENS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

TEXTS = Counter("hm_embed_texts_total", "Texts embedded (cache hits included)")
BATCH_SIZE = Histogram("hm_embed_batch_size", "Texts per inference batch", buckets=_SIZES)
BATCH_TOKENS = Histogram(
    "hm_embed_batch_tokens", "Padded tokens per inference batch (texts x longest text)", buckets=_TOKENS
)
QUEUE_WAIT = Histogram("hm_embed_queue_wait_seconds", "Time a text waited for its batch", buckets=_SECONDS)
INFERENCE = Histogram("hm_embed_inference_seconds", "Provider time per batch", buckets=_SECONDS)
SESSION_BATCHES = Counter(
    "hm_embed_session_batches_total",
    "Batches run by the onnx provider, by session: wide (alone, every thread) or narrow (beside another)",
    ["session"],
)
SESSIONS = Gauge(
    "hm_embed_sessions",
    "onnxruntime sessions loaded: the lone one, plus the load sessions while there is load",
)
QUEUE_DEPTH = Gauge("hm_embed_queue_depth", "Texts waiting for a batch")
CACHE_HITS = Counter("hm_embed_cache_hits_total", "Query embeddings answered from the cache")
CACHE_MISSES = Counter("hm_embed_cache_misses_total", "Query embeddings not in the cache")
REJECTED = Counter("hm_embed_rejected_total", "Embed calls refused because the queue was full")
BATCH_FAILURES = Counter("hm_embed_batch_failures_total", "Batches whose inference raised")
RERANK_PAIRS = Counter("hm_rerank_pairs_total", "Query-document pairs scored by the cross-encoder")
RERANK_SECONDS = Histogram("hm_rerank_seconds", "Cross-encoder time per Rerank call", buckets=_SECONDS)
