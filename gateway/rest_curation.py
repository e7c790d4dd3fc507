"""REST routes of the curation area (included by gateway.app.create_app): the records API of seed
002 and the memory lifecycle endpoints, over gateway.curation_ops."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from gateway import curation_ops
from gateway.auth import Session
from gateway.rest import SaveBody


class ImportBody(BaseModel):
    records: list[dict[str, Any]]


class UpdateBody(BaseModel):
    content: str | None = None
    description: str | None = None
    type: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    decay_class: str | None = None


class ForgetBody(BaseModel):
    scope: str | None = None
    tags: list[str] | None = None
    older_than_days: float | None = None
    importance_floor: float | None = None
    apply: bool = False
    limit: int = Field(default=100)


class QueryBody(BaseModel):
    scopes: list[str] | None = None
    types: list[str] | None = None
    since: str | None = None
    until: str | None = None
    thread_id: str | None = None
    limit: int = 100


class RebuildBody(BaseModel):
    scopes: list[str] | None = None
    check: bool = False


class SupersedeBody(SaveBody):
    """The replacement memory: the same fields as a save."""


def _session(request: Request) -> tuple[Any, Session]:
    state = request.app.state
    return state.backends, state.auth.session(request.headers)


def build_router() -> APIRouter:
    router = APIRouter()

    @router.post("/records")
    async def append_record(body: dict[str, Any], request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.append_record(backends, session, body)

    @router.post("/records/import")
    async def import_records(body: ImportBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.import_records(backends, session, body.records)

    @router.get("/records/query")
    async def query_records_get(
        request: Request,
        scope: list[str] | None = Query(default=None),
        type: list[str] | None = Query(default=None),
        since: str | None = None,
        until: str | None = None,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.query_records(
            backends,
            session,
            scopes=scope,
            types=type,
            since=since,
            until=until,
            thread_id=thread_id,
            limit=limit,
        )

    @router.post("/records/query")
    async def query_records_post(body: QueryBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.query_records(backends, session, **body.model_dump())

    @router.post("/records/rebuild")
    async def rebuild(body: RebuildBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.rebuild(backends, session, scopes=body.scopes, check=body.check)

    @router.get("/records/state/{kind}/{key}")
    async def state_current(
        kind: str, key: str, request: Request, scope: str | None = None
    ) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.state(backends, session, kind, key, scope=scope, history=False)

    @router.get("/records/state/{kind}/{key}/history")
    async def state_history(
        kind: str, key: str, request: Request, scope: str | None = None
    ) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.state(backends, session, kind, key, scope=scope, history=True)

    # `:uuid` so that other areas' fixed paths under /records (context, summaries) never match here.
    @router.get("/records/{record_id:uuid}")
    async def get_record(record_id: uuid.UUID, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.get_record(backends, session, str(record_id))

    @router.get("/records/{record_id:uuid}/lineage")
    async def lineage(record_id: uuid.UUID, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.lineage(backends, session, str(record_id))

    @router.get("/records/{record_id:uuid}/derivations")
    async def derivations(record_id: uuid.UUID, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.derivations(backends, session, str(record_id))

    @router.post("/memories/forget")
    async def forget(body: ForgetBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.forget(backends, session, **body.model_dump())

    @router.patch("/memories/{memory_id}")
    async def update(memory_id: str, body: UpdateBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.update(backends, session, memory_id, body.model_dump(exclude_unset=True))

    @router.delete("/memories/{memory_id}")
    async def delete(memory_id: str, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.delete(backends, session, memory_id)

    @router.post("/memories/{memory_id}/restore")
    async def restore(memory_id: str, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.restore(backends, session, memory_id)

    @router.post("/memories/{memory_id}/supersede")
    async def supersede(memory_id: str, body: SupersedeBody, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.supersede(backends, session, memory_id, **body.model_dump())

    @router.post("/tasks/{task_id}/{decision}")
    async def decide_task(task_id: str, decision: str, request: Request) -> dict[str, Any]:
        backends, session = _session(request)
        return await curation_ops.decide_task(backends, session, task_id, decision)

    return router
