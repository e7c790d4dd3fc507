"""An LRU of query embeddings: agents repeat the same queries, and a hit skips the model."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from services.embedder import metrics

CacheKey = tuple[str, int, str]  # (model id, input type, text)


@dataclass(frozen=True, slots=True)
class Cached:
    vector: np.ndarray
    tokens: int
    truncated: bool


class QueryCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[CacheKey, Cached] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> Cached | None:
        entry = self._entries.get(key)
        if entry is None:
            metrics.CACHE_MISSES.inc()
            return None
        self._entries.move_to_end(key)
        metrics.CACHE_HITS.inc()
        return entry

    def put(self, key: CacheKey, entry: Cached) -> None:
        if not self.enabled:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
