"""REST routes over the shared operations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from gateway import operations


class SaveBody(BaseModel):
    content: str
    description: str = ""
    scope: str | None = None
    type: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    kind: str | None = None


class SearchBody(BaseModel):
    query: str
    scope: str | None = None
    tags: list[str] | None = None
    k: int = Field(default=operations.DEFAULT_K)
    min_similarity: float | None = None
    relative_cutoff: float | None = None
    fusion: str | None = None
    kinds: list[str] | None = None
    types: list[str] | None = None
    repo: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    as_of: datetime | None = None
    mode: str | None = None
    include_archived: bool = False
    rerank: bool = False
    topic: str | None = None
    topic_only: bool = False


def build_router() -> APIRouter:
    router = APIRouter()

    @router.post("/memories", status_code=200)
    async def save_memory(body: SaveBody, request: Request) -> dict[str, Any]:
        state = request.app.state
        session = state.auth.session(request.headers)
        return await operations.save(state.backends, session, **body.model_dump())

    @router.post("/memories/search")
    async def search_memories(body: SearchBody, request: Request) -> dict[str, Any]:
        state = request.app.state
        session = state.auth.session(request.headers)
        results, degraded = await operations.search(state.backends, session, **body.model_dump())
        return {"results": results, "degraded": degraded}

    @router.get("/memories/{memory_id}")
    async def get_memory(memory_id: str, request: Request) -> dict[str, Any]:
        state = request.app.state
        session = state.auth.session(request.headers)
        return await operations.get(state.backends, session, memory_id)

    return router
