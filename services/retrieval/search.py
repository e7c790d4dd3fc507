"""The search pipeline: prefilter + candidates -> fusion -> context -> blend -> gates ->
diversity -> top k -> evidence (recall depth), with the query embedding under a short deadline
(lexical-only and `degraded` when the embedder misses it)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import cast

import asyncpg
import numpy as np

from hypermnesia import recall_depth, secrets, validation
from hypermnesia.embedder_client import DOCUMENT, QUERY, EmbedderClient
from hypermnesia.errors import FailedPrecondition, InvalidArgument, Unavailable
from hypermnesia.fusions import FUSIONS
from hypermnesia.scopes import require
from hypermnesia.settings import RetrievalSettings
from services.retrieval import as_of, metrics, repo, signals, time_window
from services.retrieval import fusion as fusion_signals
from services.retrieval.bookkeeping import Bookkeeper
from services.retrieval.filters import Prefilter
from services.retrieval.scoring import (
    Candidate,
    Weights,
    add_context,
    apply_gates,
    blend,
    fuse,
    group_by_thread,
    penalise_duplicates,
    weigh_assistant_turns,
)

log = logging.getLogger(__name__)

MODES = ("answer", "manager")
GROUP_BY = ("", "thread")
# An as-of read embeds the texts the store no longer has vectors for in batches this size, each
# with this deadline per text (a busy CPU embeds a document in well under one).
AS_OF_BATCH = 64
AS_OF_SECONDS_PER_TEXT = 1.0
EMBEDDER_UNAVAILABLE = "embedder_unavailable"
RERANK_UNAVAILABLE = "rerank_unavailable"


@dataclass(frozen=True)
class SearchInput:
    principal: str
    grants: tuple[str, ...]
    query: str
    k: int
    # Which rows may answer (scopes, tags, kinds, types, repo, time range, liveness), built once from
    # the request (filters.search_prefilter); the search adds the topic restriction and the depth.
    filters: Prefilter
    min_similarity: float | None = None
    relative_cutoff: float | None = None
    fusion: str = ""
    mode: str = ""
    rerank: bool = False
    topic: str = ""
    topic_only: bool = False  # an optional topic filter: only memories filed under `topic`
    depth: str = ""  # recall depth (hypermnesia/recall_depth.py); empty = derived
    # What the query's dates are read against (time_window.py); default as_of, else now.
    reference_time: datetime | None = None
    group_by: str = ""  # "thread": k threads with their best turns (scoring.group_by_thread)


@dataclass(frozen=True)
class Evidence:
    """A row a recall depth appended after the hits: evidence of a derived conclusion."""

    row: asyncpg.Record
    premise_of: uuid.UUID  # the conclusion it is direct evidence of
    hops: int  # evidence hops from the hit it was reached from (1 = a direct premise)


@dataclass
class SearchOutput:
    hits: list[Candidate]
    degraded: list[str]
    fusion: str
    candidates: int = 0
    dense_candidates: int = 0
    lexical_candidates: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    k: int = 0  # how many hits were asked for
    depth: str = recall_depth.DERIVED  # the fixed policy used (auto names the one it picked)
    depth_reason: str = recall_depth.REQUESTED
    evidence: list[Evidence] = field(default_factory=list)
    # Adaptive fusion's evidence from this search (fusion.observe), for search_log; None: none.
    observation: float | None = None
    # An as-of search: the memories present then whose text has since been purged (as_of.Past).
    purged: list[str] = field(default_factory=list)


def lift_scores(hits: list[Candidate]) -> None:
    """Existing clients are promised a hit's `score` is never below its `similarity` (there the
    score was the similarity plus recency and importance bonuses). Here the blend can go lower: a thread's
    context averages in weaker turns, manager mode weighs relevance at 0.35, the diversity penalty
    halves a near-copy, a cross-encoder has its own scale. Adding one constant to every score of a
    result set keeps that promise without touching the order (and the gaps) the ranking chose;
    only scores within one search compare, as before."""
    lift = max((c.similarity - c.score for c in hits), default=0.0)
    if lift > 0:
        for c in hits:
            c.score += lift


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class Searcher:
    def __init__(self, pool: asyncpg.Pool, embedder: EmbedderClient, settings: RetrievalSettings) -> None:
        self.pool = pool
        self.embedder = embedder
        self.settings = settings
        common = dict(
            lexical_boost=settings.hybrid_lexical_boost,
            rank_decay_k=settings.hybrid_rank_decay_k,
            neighbour=settings.context_neighbour_weight,
            thread=settings.context_thread_weight,
            time=settings.time_boost,
            session=settings.context_session_weight,
            opening=settings.context_opening_weight,
        )
        self.weights = {
            # Answer mode: relevance first, the active-task bonus off.
            "answer": Weights(
                relevance=settings.score_weight_similarity,
                recency=settings.score_weight_recency,
                importance=settings.score_weight_importance,
                entity=settings.score_weight_entity,
                topic=settings.score_weight_topic,
                **common,
            ),
            # Manager mode reconstructs "what is going on": the manager profile, whose
            # relevance is its reduced semantic weight (0.15) plus its keyword weight (0.20); recency,
            # entities, open tasks and the topic weigh more.
            "manager": Weights(
                relevance=0.35, recency=0.25, importance=0.1, entity=0.15, task=0.15, topic=0.2, **common
            ),
        }
        self.bookkeeper = Bookkeeper(pool)
        self.scope_sizes = repo.ScopeSizes()

    def _validate(self, q: SearchInput) -> tuple[str, str, str]:
        validation.check_query(q.query)
        validation.check_k(q.k, self.settings.search_max_k)
        f = q.filters
        if not f.scopes:
            raise InvalidArgument("no scope to search; name a scope or grant the token one")
        for scope in f.scopes:
            validation.check_scope(scope)
        validation.check_tags(f.tags)
        if q.topic:
            validation.check_topic(q.topic)
        elif q.topic_only:
            raise InvalidArgument("topic_only needs a topic: name the topic to restrict the search to")
        for kind in f.kinds:
            validation.check_kind(kind)
        for type_ in f.types:
            validation.check_type(type_)
        if f.repo:
            validation.check_ref(f.repo, "repo")
        require(q.grants, f.scopes)
        fusion = q.fusion or self.settings.fusion
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion {fusion!r} is unknown; use one of {', '.join(FUSIONS)}")
        mode = q.mode or "answer"
        if mode not in MODES:
            raise InvalidArgument(f"mode {mode!r} is unknown; use answer or manager")
        if q.group_by not in GROUP_BY:
            raise InvalidArgument(f"group_by {q.group_by!r} is unknown; use thread, or leave it empty")
        for name, value in (("min_similarity", q.min_similarity), ("relative_cutoff", q.relative_cutoff)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise InvalidArgument(f"{name} must be between 0 and 1")
        if f.since and f.until and f.since >= f.until:
            raise InvalidArgument("since must be earlier than until")
        if f.as_of is not None:
            as_of.check_instant(f.as_of)
        return fusion, mode, recall_depth.check_depth(q.depth, recall_depth.DERIVED)

    def past(self, scopes: list[str], at: datetime) -> contextlib.AbstractAsyncContextManager[as_of.Past]:
        """The store of `scopes` as it was at `at` (as_of.past), read from the primary."""
        return as_of.past(self.pool, scopes, at, self._embed_documents)

    async def _embed_documents(self, texts: list[str]) -> np.ndarray:
        vectors = []
        for start in range(0, len(texts), AS_OF_BATCH):
            batch = texts[start : start + AS_OF_BATCH]
            vectors.append(await self.embedder.embed(batch, DOCUMENT, AS_OF_SECONDS_PER_TEXT * len(batch)))
        return np.concatenate(vectors)

    async def _embed_query(self, query: str, degraded: list[str]) -> np.ndarray | None:
        try:
            (vector,) = await self.embedder.embed([query], QUERY, self.settings.embed_timeout_ms / 1000)
            return vector
        except Unavailable as exc:
            log.warning("searching lexical-only: %s", exc.message)
            if EMBEDDER_UNAVAILABLE not in degraded:  # an as-of read may have said so already
                degraded.append(EMBEDDER_UNAVAILABLE)
            metrics.DEGRADED.inc()
            return None

    async def gather(
        self,
        q: SearchInput,
        depth: str,
        degraded: list[str],
        stages: dict[str, float],
        *,
        pool: asyncpg.Pool | None = None,
        scope_estimate: bool = False,
    ) -> tuple[list, list[Candidate], bool]:
        """The query embedding and the one candidate round trip: (rows, candidates, whether the
        dense leg ran). A long query is read in part by each leg (fusion.dense_text, lexical_text).
        `pool` is where it reads (a read replica's; default the primary's); `scope_estimate` also
        reads the searched scopes' stored fusion estimate (each row's `scope_estimate`)."""
        started = time.perf_counter()
        vector = await self._embed_query(fusion_signals.dense_text(q.query), degraded)
        stages["embed_ms"] = (time.perf_counter() - started) * 1000
        t = time.perf_counter()
        cq = repo.CandidateQuery.from_settings(
            self.settings,
            fusion_signals.lexical_text(q.query) if self.settings.hybrid_search or vector is None else "",
            replace(
                q.filters,
                topic=q.topic if q.topic_only else "",
                stored_only=depth == recall_depth.EXPLICIT,
            ),
            q.k,
            # Only auto decides from which hits are derived; the default adds nothing to the query.
            flag_derived=depth == recall_depth.AUTO,
            scope_estimate=scope_estimate,
            opening=self.settings.context_opening_weight > 0,
        )
        if isinstance(pool, as_of.Past):
            rows = await as_of.candidates(pool, cq, vector)
        else:
            rows = await repo.candidates(pool or self.pool, cq, vector, self.scope_sizes)
        stages["candidates_ms"] = (time.perf_counter() - t) * 1000
        candidates = [
            Candidate(
                row=r,
                similarity=max(0.0, float(r["similarity"])) if r["similarity"] is not None else 0.0,
                bm25=float(r["bm25"] or 0.0),
                all_terms=bool(r["all_terms"]),
                prev_id=r["prev_id"],
                next_id=r["next_id"],
                opening_similarity=r.get("opening_similarity"),
            )
            for r in rows
        ]
        return rows, candidates, vector is not None

    async def search(
        self, q: SearchInput, *, log: bool = True, pool: asyncpg.Pool | None = None
    ) -> SearchOutput:
        """`log` False leaves the search_log row to the caller (context assembly logs one row for
        the several searches it runs: log_searches). `pool` is where it reads (a read replica's;
        default the primary's); bookkeeping is written to the primary either way. With `as_of` it
        reads the store as it was then (as_of.py), from the primary, unless `pool` is that already."""
        fusion, mode, depth = self._validate(q)
        if q.filters.as_of is not None and not isinstance(pool, as_of.Past):
            async with self.past(q.filters.scopes, q.filters.as_of) as past:
                return await self.search(q, log=log, pool=cast(asyncpg.Pool, past))
        pool = pool or self.pool
        weights = self.weights[mode]
        started = time.perf_counter()
        stages: dict[str, float] = {}
        degraded: list[str] = list(pool.degraded) if isinstance(pool, as_of.Past) else []
        # The SQL waits for the vector. Running the lexical leg during the embedding was tried and
        # measured 3-4 ms slower on 2 cores: its Postgres work slowed onnxruntime by more than it
        # saved (docs/PERFORMANCE.md, Search, "tried, not kept").
        rows, candidates, have_vectors = await self.gather(
            q, depth, degraded, stages, pool=pool, scope_estimate=fusion == "adaptive"
        )
        t = time.perf_counter()
        query_terms = fusion_signals.content_terms(q.query)
        # Adaptive fusion reads what the last refit stored for these scopes (0 before any: the
        # prior) and never changes it; this search's own evidence only goes to search_log, for
        # the next refit (hypermnesia/fusion_estimate.py).
        estimate = rows[0]["scope_estimate"] if rows and fusion == "adaptive" else None
        fuse(candidates, fusion, weights, have_vectors, query_terms, estimate=estimate or 0.0)
        observation = None
        if self.settings.search_log_enabled:
            observation = fusion_signals.observe(
                [c.similarity for c in candidates], [c.bm25 for c in candidates], query_terms, have_vectors
            )
        weigh_assistant_turns(candidates, self.settings.assistant_turn_words)
        add_context(candidates, weights)
        stages["score_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        await self._structural_signals(pool, q, candidates, weights)
        stages["signals_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        blend(candidates, weights, now=q.filters.as_of)
        floor = self.settings.search_min_similarity if q.min_similarity is None else q.min_similarity
        cutoff = self.settings.search_relative_cutoff if q.relative_cutoff is None else q.relative_cutoff
        if not have_vectors:
            floor = cutoff = 0.0  # with no cosine there is nothing to gate on
        kept = apply_gates(candidates, floor, cutoff)
        kept.sort(key=lambda c: c.score, reverse=True)
        kept = penalise_duplicates(kept, window=q.k * 2)
        if q.rerank and kept:
            kept = await self._rerank(q.query, kept, degraded)
        hits = group_by_thread(kept, q.k) if q.group_by == "thread" else kept[: q.k]
        lift_scores(hits)
        stages["score_ms"] += (time.perf_counter() - t) * 1000
        policy, reason = recall_depth.choose_depth(
            depth, [c.id for c in hits], {c.id for c in hits if c.row.get("derived")}
        )
        evidence: list[Evidence] = []
        if recall_depth.hops_for(policy) and hits:
            t = time.perf_counter()
            evidence = await self.evidence(q, [c.id for c in hits], recall_depth.hops_for(policy), pool=pool)
            stages["evidence_ms"] = (time.perf_counter() - t) * 1000
        stages["total_ms"] = (time.perf_counter() - started) * 1000
        metrics.SEARCH_SECONDS.observe(stages["total_ms"] / 1000)
        for stage in metrics.SEARCH_STAGES:
            if f"{stage}_ms" in stages:
                metrics.SEARCH_STAGE_SECONDS.labels(stage).observe(stages[f"{stage}_ms"] / 1000)
        if not hits:
            metrics.SEARCH_EMPTY.inc()
        out = SearchOutput(
            hits=hits,
            degraded=degraded,
            fusion=fusion,
            candidates=len(candidates),
            dense_candidates=int(rows[0]["dense_count"]) if rows else 0,
            lexical_candidates=int(rows[0]["lexical_count"]) if rows else 0,
            stages=stages,
            k=q.k,
            depth=policy,
            depth_reason=reason,
            evidence=evidence,
            observation=observation,
            purged=list(pool.purged) if isinstance(pool, as_of.Past) else [],
        )
        self._after_search(q, out, log=log)
        return out

    async def evidence(
        self, q: SearchInput, hits: list[uuid.UUID], hops: int, *, pool: asyncpg.Pool | None = None
    ) -> list[Evidence]:
        """The evidence of the derived rows among `hits` (best first), within `hops` and
        recall_depth.MAX_ROWS, in the searched scopes only and as live (or stale, archived, as of)
        as the hits were asked to be: one indexed query. A stored hit has no edges and adds
        nothing, so every hit may be passed."""
        rows = await repo.evidence(
            pool or self.pool,
            hits,
            hits,
            q.filters.liveness(),
            hops,
            recall_depth.MAX_ROWS,
        )
        return [Evidence(row=r, premise_of=r["premise_of"], hops=int(r["hops"])) for r in rows]

    async def _structural_signals(
        self, pool: asyncpg.Pool, q: SearchInput, candidates: list[Candidate], w: Weights
    ) -> None:
        """Topic match, entity overlap and the active-task bonus (signals.py), the last two looked
        up only when weighted; and the time match (time_window.py), when weighted."""
        ids = [c.id for c in candidates]
        if not ids:
            return
        if q.topic and w.topic > 0:
            for c in candidates:
                c.topic_match = signals.topic_match(q.topic, c.row["metadata"])
        wanted = signals.query_entities(q.query) if w.entity > 0 else frozenset()
        if wanted:
            linked = await signals.entity_sets(pool, ids)
            for c in candidates:
                c.entity_overlap = signals.jaccard(wanted, linked.get(c.id, frozenset()))
        if w.task > 0:
            active = await signals.active_task_ids(pool, q.filters.scopes, ids)
            for c in candidates:
                c.task_bonus = signals.TASK_BONUS if c.id in active else 0.0
        if w.time > 0:
            now = q.reference_time or q.filters.as_of or datetime.now(UTC)
            windows = time_window.windows(q.query, now)  # [] at once for a query naming no date
            for c in candidates if windows else []:
                found = time_window.match(windows, c.row["content"], c.row["created_at"])
                if found:
                    c.time_match = 1.0
                    c.extras["time_match"] = found
                    c.extras["time_boost"] = w.time  # what it added to the score

    async def _rerank(self, query: str, ranked: list[Candidate], degraded: list[str]) -> list[Candidate]:
        """Re-order the fused top-N by the embedder's cross-encoder; the rest keep their order."""
        head = ranked[: self.settings.rerank_top_n]
        texts = [f"{c.row['description']}\n{c.row['content']}".strip() for c in head]
        try:
            scores = await self.embedder.rerank(query, texts, self.settings.rerank_timeout_ms / 1000)
        except (FailedPrecondition, Unavailable) as exc:
            log.warning("rerank skipped: %s", exc.message)
            degraded.append(RERANK_UNAVAILABLE)
            return ranked
        for c, score in zip(head, scores, strict=True):
            c.extras["fused_score"] = c.score
            c.score = float(score)
        head.sort(key=lambda c: c.score, reverse=True)
        return head + ranked[len(head) :]

    def _after_search(self, q: SearchInput, out: SearchOutput, *, log: bool) -> None:
        """Access bumps and the search_log row, written off the hot path (bookkeeping.py)."""
        bump = q.filters.as_of is None and self.settings.search_bump_access
        accessed = [uuid.UUID(str(c.id)) for c in out.hits] if bump else []
        row = self._log_row(q, out) if log else None
        if accessed or row:
            self.bookkeeper.record(accessed, row)

    def log_searches(self, q: SearchInput, outs: list[SearchOutput], total_ms: float) -> None:
        """One search_log row for several searches made for one question (their hits and
        candidates together, k their ks summed, the mean of their observations), run with
        `log=False`; access bumps were made."""
        hits = sorted((c for out in outs for c in out.hits), key=lambda c: c.score, reverse=True)
        stages: dict[str, float] = {}
        for out in outs:
            for name, ms in out.stages.items():
                stages[name] = stages.get(name, 0.0) + ms
        stages["total_ms"] = total_ms
        merged = SearchOutput(
            hits=hits,
            degraded=sorted({flag for out in outs for flag in out.degraded}),
            fusion=outs[0].fusion if outs else "",
            candidates=sum(out.candidates for out in outs),
            stages=stages,
            k=sum(out.k for out in outs),
            observation=_mean([out.observation for out in outs if out.observation is not None]),
        )
        row = self._log_row(replace(q, k=merged.k), merged)
        if row:
            self.bookkeeper.record([], row)

    def _log_row(self, q: SearchInput, out: SearchOutput) -> dict | None:
        if not self.settings.search_log_enabled:
            return None
        return {
            "at": datetime.now(UTC),
            "principal": q.principal,
            "scopes": q.filters.scopes,
            # A secret typed into a search is masked here like one written (HM_REDACT; `refuse`
            # masks too: the search itself stores nothing).
            "query": q.query if self.settings.redact == "off" else secrets.masked(q.query),
            "k": q.k,
            "candidates": out.candidates,
            "hits": len(out.hits),
            "top_score": out.hits[0].score if out.hits else None,
            "top_similarity": out.hits[0].similarity if out.hits else None,
            "latency_ms": out.stages["total_ms"],
            "stage_ms": json.dumps(out.stages),
            "degraded": out.degraded,
            "clarity_log_ratio": out.observation,
        }

    async def drain(self) -> None:
        """Write pending bookkeeping now (tests)."""
        await self.bookkeeper.flush()

    async def close(self) -> None:
        """Write pending bookkeeping and stop its loop (shutdown)."""
        await self.bookkeeper.close()
