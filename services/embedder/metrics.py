"""Embedder metrics (bounded label sets; names carry their unit)."""

from prometheus_client import Counter

TEXTS = Counter("hm_embed_texts_total", "Texts embedded")
