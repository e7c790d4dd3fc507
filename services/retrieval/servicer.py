"""Retrieval RPCs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import grpc

from hypermnesia import status, validation
from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.memory_rows import memory_from_row
from hypermnesia.scopes import permits, require
from hypermnesia.times import field_time, timestamp
from hypermnesia.v1 import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from services.retrieval import reads, repo, versions
from services.retrieval.context import ContextAssembler, ContextInput
from services.retrieval.filters import Prefilter, search_prefilter
from services.retrieval.replica import ReadRouter
from services.retrieval.scoring import Candidate
from services.retrieval.search import Searcher, SearchInput

DEFAULT_LIST_LIMIT = 50
DEFAULT_STATS_DAYS = 7


def time_match_message(c: Candidate) -> retrieval_pb2.TimeMatch | None:
    """Why a hit was boosted for a date the query names (search.py sets `time_match`)."""
    found = c.extras.get("time_match")
    if found is None:
        return None
    return retrieval_pb2.TimeMatch(
        phrase=found.window.phrase,
        start=timestamp(found.window.start),
        end=timestamp(found.window.end),
        event_source=found.source,
        event_phrase=found.event.phrase if found.source == "content" else "",
        boost=c.extras["time_boost"],
    )


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServicer):
    def __init__(self, searcher: Searcher, assembler: ContextAssembler, router: ReadRouter) -> None:
        self.searcher = searcher
        self.assembler = assembler
        # Reads go through the router (a read replica when set, read-after-write by min_lsn).
        self.router = router

    async def Search(
        self, request: retrieval_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.SearchResponse:
        query = SearchInput(
            principal=request.caller.principal,
            grants=tuple(request.caller.grants),
            query=request.query,
            k=request.k,
            filters=search_prefilter(request),
            min_similarity=request.min_similarity if request.HasField("min_similarity") else None,
            relative_cutoff=request.relative_cutoff if request.HasField("relative_cutoff") else None,
            fusion=request.fusion,
            mode=request.mode,
            rerank=request.rerank,
            topic=request.topic,
            topic_only=request.topic_only,
            depth=request.depth,
            reference_time=field_time(request, "reference_time"),
            group_by=request.group_by,
        )
        out = await self.router.read(request.min_lsn, lambda pool: self.searcher.search(query, pool=pool))
        return retrieval_pb2.SearchResponse(
            hits=[
                retrieval_pb2.SearchHit(
                    memory=memory_from_row(c.row),
                    similarity=c.similarity,
                    score=c.score,
                    lexical_match=c.lexical_match,
                    entity_overlap=c.entity_overlap,
                    active_task=c.task_bonus > 0,
                    topic_match=c.topic_match > 0,
                    time_match=time_match_message(c),
                    length_weight=c.length_weight if c.length_weight < 1 else None,
                    group=c.group,
                )
                for c in out.hits
            ]
            # The evidence a recall depth adds comes after the hits, each naming what it supports.
            + [
                retrieval_pb2.SearchHit(
                    memory=memory_from_row(e.row), premise_of=str(e.premise_of), hops=e.hops
                )
                for e in out.evidence
            ],
            degraded=out.degraded,
            stats=retrieval_pb2.SearchStats(
                candidates=out.candidates,
                dense_candidates=out.dense_candidates,
                lexical_candidates=out.lexical_candidates,
                embed_ms=out.stages.get("embed_ms", 0.0),
                candidates_ms=out.stages.get("candidates_ms", 0.0),
                total_ms=out.stages.get("total_ms", 0.0),
                fusion=out.fusion,
            ),
            depth=out.depth,
            depth_reason=out.depth_reason,
            purged=out.purged,
        )

    async def Get(
        self, request: retrieval_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        memory_id = validation.parse_id(request.id)
        row = await self.router.read(request.min_lsn, lambda pool: repo.get_memory(pool, memory_id))
        # A memory outside the caller's scopes is reported exactly like a missing one.
        if row is None or not permits(request.caller.grants, row["scope"]):
            raise NotFound(f"no memory {request.id} in your scopes")
        return memory_from_row(row)

    def _scopes(self, caller: common_pb2.Caller, scopes: list[str]) -> list[str]:
        if not scopes:
            raise InvalidArgument("no scope to read; name a scope or grant the token one")
        for scope in scopes:
            validation.check_scope(scope)
        require(caller.grants, scopes)
        return scopes

    async def List(
        self, request: retrieval_pb2.ListRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ListResponse:
        scopes = self._scopes(request.caller, list(request.scopes))
        limit = request.limit or DEFAULT_LIST_LIMIT
        validation.check_limit(limit, validation.MAX_LIST_LIMIT)
        if request.offset < 0:
            raise InvalidArgument("offset must not be negative")
        for kind in request.kinds:
            validation.check_kind(kind)
        validation.check_tags(list(request.tags))
        for type_ in request.types:
            validation.check_type(type_)
        prefilter = Prefilter(
            scopes=scopes,
            tags=list(request.tags),
            kinds=list(request.kinds),
            types=list(request.types),
            as_of=field_time(request, "as_of"),
            include_archived=request.include_archived,
            include_stale=request.include_stale,
        )
        page = await self.router.read(
            request.min_lsn, lambda pool: reads.list_memories(pool, prefilter, limit, request.offset)
        )
        memories = []
        for row in page.rows:
            memory = memory_from_row(row)
            if not request.full:
                memory.content = ""  # an index: descriptions and metadata, bodies on request
            memories.append(memory)
        return retrieval_pb2.ListResponse(memories=memories, total=page.total)

    async def Lineage(
        self, request: retrieval_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.LineageResponse:
        memory_id = validation.parse_id(request.id)
        chain = await self.router.read(request.min_lsn, lambda pool: reads.lineage(pool, memory_id))
        grants = list(request.caller.grants)
        visible = [r for r in chain.memories if permits(grants, r["scope"])]
        if not visible:
            raise NotFound(f"no memory {request.id} in your scopes")
        stored = {r["id"] for r in chain.memories}
        return retrieval_pb2.LineageResponse(
            memories=[memory_from_row(r) for r in visible],
            versions=versions.of_chain(chain.ids, stored, chain.records, grants),
        )

    async def Stats(
        self, request: retrieval_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.StatsResponse:
        scopes = self._scopes(request.caller, list(request.scopes))
        days = request.days or DEFAULT_STATS_DAYS
        validation.check_limit(days, validation.MAX_STATS_DAYS, "days")
        since = datetime.now(UTC) - timedelta(days=days)

        async def load(pool: asyncpg.Pool) -> tuple[list[asyncpg.Record], asyncpg.Record]:
            return await reads.scope_counts(pool, scopes), await reads.search_health(pool, scopes, since)

        # The search log is written in batches (bookkeeping.py): write what is pending first, so a
        # caller's stats count the searches it has just made (seed 001's clients check exactly that).
        await self.searcher.drain()
        counts, health = await self.router.read(request.min_lsn, load)
        return retrieval_pb2.StatsResponse(
            scopes=[
                retrieval_pb2.ScopeCount(
                    scope=r["scope"], live=r["live"], archived=r["archived"], superseded=r["superseded"]
                )
                for r in counts
            ],
            days=days,
            searches=health["searches"],
            empty_searches=health["empty_searches"],
            empty_rate=float(health["empty_rate"]),
            avg_hits=float(health["avg_hits"]),
            avg_top_score=float(health["avg_top_score"]),
            p50_ms=float(health["p50"]),
            p95_ms=float(health["p95"]),
            p99_ms=float(health["p99"]),
            degraded_rate=float(health["degraded_rate"]),
            recent_misses=list(health["misses"]),
        )

    async def AssembleContext(
        self, request: retrieval_pb2.ContextRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.ContextResponse:
        scopes = self._scopes(request.caller, list(request.scopes))
        if request.query:
            validation.check_query(request.query)
        question = ContextInput(
            principal=request.caller.principal,
            grants=tuple(request.caller.grants),
            scopes=scopes,
            query=request.query,
            path=request.path,
            repo=request.repo,
            mode=request.mode,
            thread_id=request.thread_id,
            budgets=dict(request.budgets),
            include_stale=request.include_stale,
            depth=request.depth,
            as_of=field_time(request, "as_of"),
        )
        assembled = await self.router.read(
            request.min_lsn, lambda pool: self.assembler.assemble(question, pool)
        )
        return retrieval_pb2.ContextResponse(
            layers=[
                retrieval_pb2.ContextLayer(
                    name=layer.name,
                    text=layer.text,
                    tokens=layer.tokens,
                    budget=layer.budget,
                    cited_ids=layer.cited,
                    dropped=layer.dropped,
                )
                for layer in assembled.layers
            ],
            total_tokens=sum(layer.tokens for layer in assembled.layers),
            mode=assembled.mode,
            mode_reason=assembled.mode_reason,
            degraded=assembled.degraded,
            depth=assembled.depth,
            depth_reason=assembled.depth_reason,
            purged=assembled.purged,
        )

    async def GetLiveSettings(
        self, request: common_pb2.LiveSettingsRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.LiveSettings:
        s = self.searcher.settings
        return common_pb2.LiveSettings(
            values={
                "HM_SEARCH_MIN_SIMILARITY": f"{s.search_min_similarity:g}",
                "HM_SEARCH_RELATIVE_CUTOFF": f"{s.search_relative_cutoff:g}",
                "HM_HYBRID_SEARCH": str(s.hybrid_search).lower(),
                "HM_FUSION": s.fusion,
                "HM_SEARCH_MAX_K": str(s.search_max_k),
                "HM_SEARCH_LOG_ENABLED": str(s.search_log_enabled).lower(),
            }
        )

    async def GetStatus(
        self, request: common_pb2.StatusRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.ServiceStatus:
        return await status.service_status(self.searcher.pool, self.searcher.embedder)
