"""REST routes of the read path beside search: list, lineage, stats."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from gateway import operations


class ContextBody(BaseModel):
    query: str = ""
    path: str = ""
    repo: str | None = None
    mode: str = "auto"
    thread_id: str = ""
    scope: str | None = None
    budgets: dict[str, int] | None = None


def build_router() -> APIRouter:
    router = APIRouter()

    @router.get("/memories")
    async def list_memories(
        request: Request,
        scope: str | None = None,
        tags: list[str] | None = Query(default=None),
        limit: int = 50,
        offset: int = 0,
        include_archived: bool = False,
        full: bool = False,
        kind: list[str] | None = Query(default=None),
        type: list[str] | None = Query(default=None),
        as_of: datetime | None = None,
    ) -> dict[str, Any]:
        state = request.app.state
        return await operations.list_memories(
            state.backends,
            state.auth.session(request.headers),
            scope=scope,
            tags=tags,
            limit=limit,
            offset=offset,
            include_archived=include_archived,
            full=full,
            kinds=kind,
            types=type,
            as_of=as_of,
        )

    @router.get("/memories/{memory_id}/lineage")
    async def memory_lineage(memory_id: str, request: Request) -> dict[str, Any]:
        state = request.app.state
        return await operations.lineage(state.backends, state.auth.session(request.headers), memory_id)

    @router.get("/stats")
    async def stats(request: Request, scope: str | None = None, days: int = 7) -> dict[str, Any]:
        state = request.app.state
        return await operations.stats(
            state.backends, state.auth.session(request.headers), scope=scope, days=days
        )

    @router.post("/records/context")
    async def context(body: ContextBody, request: Request) -> dict[str, Any]:
        """The layered context block (seed 002) within token budgets, citing the ids it used."""
        state = request.app.state
        return await operations.assemble_context(
            state.backends, state.auth.session(request.headers), **body.model_dump()
        )

    return router
