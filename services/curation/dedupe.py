"""The dedupe gate of a save: which live memory it merges into, if any, and which near-duplicates
state a different fact (the save answer's `similar`).

A near-duplicate passes seed 001's two cosine gates: the combined embedding (description and
content) reaches HM_DEDUPE_THRESHOLD and the contents themselves agree to
HM_DEDUPE_CONTENT_THRESHOLD. It is merged only when it is also a restatement: no difference in
a number, date, identifier, name, polarity or replaced word (services/curation/differences.py).
A near-duplicate that differs is a different fact: the save creates a new memory and names the
old one under `similar`, so the caller can supersede it; the daily consolidation proposes that
supersede when the change is one value of the same entity and attribute (dreamer.contradictions).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import numpy as np

from services.curation import repo
from services.curation.differences import describe, differences
from services.curation.embedding import BatchEmbedder, cosine

__all__ = ["NEIGHBOURS", "DedupeGate", "Similar", "Verdict"]

# The nearest live memories looked at: the merge target need not be the very nearest when the
# nearest states a different fact, and each near-duplicate that differs is worth naming.
NEIGHBOURS = 3


@dataclass(frozen=True)
class Similar:
    memory: asyncpg.Record
    differences: tuple[str, ...]  # older -> newer: "100 -> 1000", "not added"


@dataclass(frozen=True)
class Verdict:
    duplicate: asyncpg.Record | None  # the restated memory to merge into
    similar: tuple[Similar, ...] = ()


class DedupeGate:
    def __init__(
        self, pool: asyncpg.Pool, embeddings: BatchEmbedder, *, threshold: float, content_threshold: float
    ) -> None:
        self.pool = pool
        self.embeddings = embeddings
        self.threshold = threshold
        self.content_threshold = content_threshold

    async def check(
        self, scope: str, kind: str, description: str, content: str, vector: np.ndarray
    ) -> Verdict:
        """`vector` is the save's combined embedding (what memories are stored with)."""
        async with self.pool.acquire() as conn:
            nearest = await repo.nearest_active(conn, scope, vector, NEIGHBOURS)
        near = [(row, similarity) for row, similarity in nearest if similarity >= self.threshold]
        if not near:
            return Verdict(None)
        agreeing = await self._contents_agree(description, content, near)
        duplicate = None
        similar = []
        for row, agrees in zip((row for row, _ in near), agreeing, strict=True):
            if not agrees:
                continue  # two facts that merely share a description shape
            changes = differences(row["content"], content)
            if changes:
                similar.append(Similar(row, tuple(describe(changes))))
            elif duplicate is None and row["kind"] == kind:
                duplicate = row
        return Verdict(duplicate, tuple(similar))

    async def _contents_agree(
        self, description: str, content: str, near: list[tuple[asyncpg.Record, float]]
    ) -> list[bool]:
        """The second cosine gate, per near-duplicate: the contents themselves must agree. Where
        neither has a description the embedded texts are the contents, so the similarity already
        measured is theirs and nothing is embedded again; the other contents are embedded in one
        call with the save's."""
        out: list[bool | None] = []
        to_embed: list[str] = []
        for row, similarity in near:
            if content.strip() == row["content"].strip():
                out.append(True)
            elif not description and not row["description"]:
                out.append(similarity >= self.content_threshold)
            else:
                out.append(None)
                to_embed.append(row["content"])
        if to_embed:
            vectors = iter(await self.embeddings.many([content, *to_embed]))
            mine = next(vectors)
            out = [
                known if known is not None else cosine(mine, next(vectors)) >= self.content_threshold
                for known in out
            ]
        return [bool(v) for v in out]
