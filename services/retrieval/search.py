"""The search pipeline: prefilter + candidates -> fusion -> blend -> gates -> top k, with the
query embedding under a short deadline (lexical-only and `degraded` when it misses it)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

import asyncpg

from hypermnesia import validation
from hypermnesia.embedder_client import QUERY, EmbedderClient
from hypermnesia.errors import InvalidArgument, Unavailable
from hypermnesia.scopes import require
from hypermnesia.settings import RetrievalSettings
from services.retrieval import metrics, repo
from services.retrieval.lexical import or_query, query_terms
from services.retrieval.scoring import Candidate, Weights, apply_gates, blend, fuse

log = logging.getLogger(__name__)

FUSIONS = ("rrf", "boost", "weighted")
EMBEDDER_UNAVAILABLE = "embedder_unavailable"


@dataclass(frozen=True)
class SearchInput:
    principal: str
    grants: tuple[str, ...]
    query: str
    scopes: list[str]
    tags: list[str]
    k: int
    min_similarity: float | None = None
    relative_cutoff: float | None = None
    fusion: str = ""


@dataclass
class SearchOutput:
    hits: list[Candidate]
    degraded: list[str] = field(default_factory=list)
    candidates: int = 0


class Searcher:
    def __init__(self, pool: asyncpg.Pool, embedder: EmbedderClient, settings: RetrievalSettings) -> None:
        self.pool = pool
        self.embedder = embedder
        self.settings = settings
        self.weights = Weights(
            similarity=settings.score_weight_similarity,
            recency=settings.score_weight_recency,
            importance=settings.score_weight_importance,
            lexical_boost=settings.hybrid_lexical_boost,
            rank_decay_k=settings.hybrid_rank_decay_k,
        )
        self._background: set[asyncio.Task] = set()

    def _validate(self, q: SearchInput) -> str:
        validation.check_query(q.query)
        validation.check_k(q.k, self.settings.search_max_k)
        if not q.scopes:
            raise InvalidArgument("no scope to search; name a scope or grant the token one")
        for scope in q.scopes:
            validation.check_scope(scope)
        validation.check_tags(q.tags)
        require(q.grants, q.scopes)
        fusion = q.fusion or self.settings.fusion
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion {fusion!r} is unknown; use one of {', '.join(FUSIONS)}")
        for name, value in (("min_similarity", q.min_similarity), ("relative_cutoff", q.relative_cutoff)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise InvalidArgument(f"{name} must be between 0 and 1")
        return fusion

    async def search(self, q: SearchInput) -> SearchOutput:
        fusion = self._validate(q)
        started = time.perf_counter()
        stages: dict[str, float] = {}
        degraded: list[str] = []
        cq = repo.CandidateQuery(
            scopes=q.scopes,
            tags=q.tags,
            limit=max(self.settings.search_candidates, q.k),
            tsquery=or_query(query_terms(q.query)) if self.settings.hybrid_search else "",
        )
        vector = None
        try:
            (vector,) = await self.embedder.embed([q.query], QUERY, self.settings.embed_timeout_ms / 1000)
        except Unavailable as exc:
            log.warning("searching lexical-only: %s", exc.message)
            degraded.append(EMBEDDER_UNAVAILABLE)
            metrics.DEGRADED.inc()
        stages["embed_ms"] = (time.perf_counter() - started) * 1000
        t = time.perf_counter()
        if vector is not None:
            rows = await repo.hybrid_candidates(self.pool, vector, cq, ef_search=max(40, 2 * cq.limit))
        else:
            rows = await repo.lexical_candidates(self.pool, cq)
        stages["candidates_ms"] = (time.perf_counter() - t) * 1000
        candidates = [
            Candidate(
                row=r,
                similarity=max(0.0, float(r["similarity"])) if r["similarity"] is not None else 0.0,
                lex_score=float(r["lex_score"]) if r["lex_score"] is not None else None,
                dense_rank=0 if r["in_dense"] else None,
            )
            for r in rows
        ]
        fuse(candidates, fusion, self.weights)
        blend(candidates, self.weights)
        floor = self.settings.search_min_similarity if q.min_similarity is None else q.min_similarity
        cutoff = self.settings.search_relative_cutoff if q.relative_cutoff is None else q.relative_cutoff
        if vector is None:
            floor = cutoff = 0.0  # with no cosine there is nothing to gate on
        kept = apply_gates(candidates, floor, cutoff)
        kept.sort(key=lambda c: c.score, reverse=True)
        hits = kept[: q.k]
        total_ms = (time.perf_counter() - started) * 1000
        stages["total_ms"] = total_ms
        metrics.SEARCH_SECONDS.observe(total_ms / 1000)
        self._after_search(q, hits, len(candidates), stages, degraded)
        return SearchOutput(hits=hits, degraded=degraded, candidates=len(candidates))

    def _after_search(
        self, q: SearchInput, hits: list[Candidate], candidates: int, stages: dict, degraded: list[str]
    ) -> None:
        """Access bumps and the search_log row, off the hot path."""
        ids = [uuid.UUID(str(c.row["id"])) for c in hits]  # type: ignore[index]
        entry = {
            "principal": q.principal,
            "scopes": q.scopes,
            "query": q.query,
            "k": q.k,
            "candidates": candidates,
            "hits": len(hits),
            "top_score": hits[0].score if hits else None,
            "top_similarity": hits[0].similarity if hits else None,
            "latency_ms": stages["total_ms"],
            "stage_ms": json.dumps(stages),
            "degraded": degraded,
        }

        async def work() -> None:
            try:
                if ids:
                    await repo.bump_access(self.pool, ids)
                if self.settings.search_log_enabled:
                    await repo.log_search(self.pool, entry)
            except Exception:  # never let bookkeeping fail a search
                log.exception("search bookkeeping failed")

        task = asyncio.create_task(work())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for pending bookkeeping (shutdown, tests)."""
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
