"""Retrieval RPCs."""

from __future__ import annotations

import uuid

import grpc

from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.memory_rows import memory_from_row
from hypermnesia.scopes import permits
from hypermnesia.v1 import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from services.retrieval import repo
from services.retrieval.search import Searcher, SearchInput


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
        )

    async def Get(self, request: retrieval_pb2.GetRequest, context: grpc.aio.ServicerContext) -> common_pb2.Memory:
        row = await repo.get_memory(self.searcher.pool, parse_id(request.id))
        # A memory outside the caller's scopes is reported exactly like a missing one.
        if row is None or not permits(request.caller.grants, row["scope"]):
            raise NotFound(f"no memory {request.id} in your scopes")
        return memory_from_row(row)
