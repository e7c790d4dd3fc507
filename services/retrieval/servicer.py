"""Retrieval RPCs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import grpc

from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.memory_rows import memory_from_row
from hypermnesia.scopes import permits
from hypermnesia.v1 import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from services.retrieval import repo
from services.retrieval.search import Searcher, SearchInput


def _time(request: Any, name: str) -> datetime | None:
    if not request.HasField(name):
        return None
    return getattr(request, name).ToDatetime(tzinfo=UTC)


def parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise InvalidArgument(f"{value[:60]!r} is not a memory id (a UUID)") from exc


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServicer):
    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher

    async def Search(
        self, request: retrieval_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.SearchResponse:
        out = await self.searcher.search(
            SearchInput(
                principal=request.caller.principal,
                grants=tuple(request.caller.grants),
                query=request.query,
                scopes=list(request.scopes),
                tags=list(request.tags),
                k=request.k,
                min_similarity=request.min_similarity if request.HasField("min_similarity") else None,
                relative_cutoff=request.relative_cutoff if request.HasField("relative_cutoff") else None,
                fusion=request.fusion,
                kinds=list(request.kinds),
                types=list(request.types),
                repo=request.repo,
                since=_time(request, "since"),
                until=_time(request, "until"),
                as_of=_time(request, "as_of"),
                mode=request.mode,
                include_archived=request.include_archived,
            )
        )
        return retrieval_pb2.SearchResponse(
            hits=[
                retrieval_pb2.SearchHit(
                    memory=memory_from_row(c.row),  # type: ignore[arg-type]
                    similarity=c.similarity,
                    score=c.score,
                    lexical_match=c.lexical_match,
                )
                for c in out.hits
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
        )

    async def Get(self, request: retrieval_pb2.GetRequest, context: grpc.aio.ServicerContext) -> common_pb2.Memory:
        row = await repo.get_memory(self.searcher.pool, parse_id(request.id))
        # A memory outside the caller's scopes is reported exactly like a missing one.
        if row is None or not permits(request.caller.grants, row["scope"]):
            raise NotFound(f"no memory {request.id} in your scopes")
        return memory_from_row(row)
