"""The REST routes: each takes its operation's request model (the body, or the query string for a
GET), folds in the ids the URL path carries, and calls the operation (gateway.memories, .records,
.structure, .intelligence). The OpenAPI document comes from the same models as the MCP tool schemas.

No `from __future__ import annotations` here: FastAPI reads the route annotations at runtime, and
some name values local to the function that declares the routes."""

import inspect
import json
import uuid
from collections.abc import Awaitable, Callable
from copy import copy
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, create_model

from gateway import fields, intelligence, memories, provenance, records, structure
from gateway.auth import Session
from gateway.backends import Backends
from hypermnesia.errors import InvalidArgument
from hypermnesia.structure_map import MAX_SOURCE_BYTES

__all__ = ["build_router"]

M = TypeVar("M", bound=BaseModel)
Operation = Callable[[Backends, Session, M], Awaitable[dict[str, Any]]]


def without(model: type[BaseModel], *names: str) -> type[BaseModel]:
    """The model minus the fields the URL path carries: REST names a memory in its path, MCP in the
    tool's arguments, and both reach the operation as the one model."""
    kept = {
        name: (info.annotation, copy(info)) for name, info in model.model_fields.items() if name not in names
    }
    return create_model(f"{model.__name__}Body", __base__=fields.Request, __doc__=model.__doc__, **kept)  # type: ignore[call-overload]


def described(model: type[BaseModel], name: str) -> Any:
    """A path parameter documented as the model's field is."""
    return Path(description=model.model_fields[name].description)


async def call(http: Request, operation: Operation[M], request: M) -> dict[str, Any]:
    state = http.app.state
    return await operation(state.backends, await state.auth.session(http.headers), request)


def complete(model: type[M], body: BaseModel, **path: Any) -> M:
    """The operation's request: the body's fields plus the path's."""
    return model.model_validate({**body.model_dump(exclude_unset=True), **path})


def doc(operation: Callable[..., Any]) -> str:
    return inspect.cleandoc(operation.__doc__ or "")


# Built at import, so type checkers cannot see them as classes: their uses carry `type: ignore`.
UpdateBody = without(memories.UpdateMemory, "memory_id")
SupersedeBody = without(memories.SupersedeMemory, "memory_id")
ResolveQuery = without(structure.ResolvePath, "repo")
StateQuery = without(records.StateObject, "kind", "key", "history")
DecisionBody = without(intelligence.DecideProposal, "proposal_id", "decision")
EvidenceQuery = without(intelligence.MemoryEvidence, "memory_id")

_JSON_TYPES = ("application/json", "+json")


async def _map_text(http: Request) -> str:
    """The body as map text: YAML as sent, or JSON (checked as JSON, so its errors read as JSON errors)."""
    raw = await http.body()
    # The one limit checked before the wire: a body this large would not fit in a gRPC message.
    if len(raw) > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"the map is larger than {MAX_SOURCE_BYTES:,} bytes; split it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument("the body is not UTF-8 text; send the map file encoded as UTF-8") from exc
    content_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type.endswith(_JSON_TYPES):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from exc
        # JSON is YAML, except that YAML refuses tab indentation; outside strings (where JSON
        # escapes them) tabs are only whitespace, so this keeps every line number.
        text = text.replace("\t", " ")
    return text


def _memory_routes(router: APIRouter) -> None:
    mid = described(memories.MemoryRef, "memory_id")

    @router.post("/memories", description=doc(memories.save))
    async def save_memory(body: memories.SaveMemory, http: Request) -> dict[str, Any]:
        return await call(http, memories.save, body)

    @router.post("/memories/search", description=doc(memories.search))
    async def search_memories(body: memories.SearchMemories, http: Request) -> dict[str, Any]:
        return await call(http, memories.search, body)

    @router.get("/memories", description=doc(memories.list_memories))
    async def list_memories(
        query: Annotated[memories.ListMemories, Query()], http: Request
    ) -> dict[str, Any]:
        return await call(http, memories.list_memories, query)

    @router.post("/memories/forget", description=doc(memories.forget))
    async def forget(body: memories.ForgetMemories, http: Request) -> dict[str, Any]:
        return await call(http, memories.forget, body)

    @router.get("/memories/{memory_id}", description=doc(memories.get))
    async def get_memory(memory_id: Annotated[str, mid], http: Request) -> dict[str, Any]:
        return await call(http, memories.get, memories.MemoryRef(memory_id=memory_id))

    @router.patch("/memories/{memory_id}", description=doc(memories.update))
    async def update(memory_id: Annotated[str, mid], body: UpdateBody, http: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        return await call(http, memories.update, complete(memories.UpdateMemory, body, memory_id=memory_id))

    @router.delete("/memories/{memory_id}", description=doc(memories.delete))
    async def delete(memory_id: Annotated[str, mid], http: Request) -> dict[str, Any]:
        return await call(http, memories.delete, memories.MemoryRef(memory_id=memory_id))

    @router.post("/memories/{memory_id}/archive", description=doc(memories.archive))
    async def archive(memory_id: Annotated[str, mid], http: Request) -> dict[str, Any]:
        return await call(http, memories.archive, memories.MemoryRef(memory_id=memory_id))

    @router.post("/memories/{memory_id}/restore", description=doc(memories.restore))
    async def restore(memory_id: Annotated[str, mid], http: Request) -> dict[str, Any]:
        return await call(http, memories.restore, memories.MemoryRef(memory_id=memory_id))

    @router.post("/memories/{memory_id}/supersede", description=doc(memories.supersede))
    async def supersede(memory_id: Annotated[str, mid], body: SupersedeBody, http: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        request = complete(memories.SupersedeMemory, body, memory_id=memory_id)
        return await call(http, memories.supersede, request)

    @router.get("/memories/{memory_id}/lineage", description=doc(memories.lineage))
    async def memory_lineage(memory_id: Annotated[str, mid], http: Request) -> dict[str, Any]:
        return await call(http, memories.lineage, memories.MemoryRef(memory_id=memory_id))

    @router.get("/stats", description=doc(memories.stats))
    async def stats(query: Annotated[memories.MemoryStats, Query()], http: Request) -> dict[str, Any]:
        return await call(http, memories.stats, query)

    @router.post("/records/context", description=doc(memories.assemble_context))
    async def context(body: memories.GetContext, http: Request) -> dict[str, Any]:
        return await call(http, memories.assemble_context, body)

    @router.post("/tasks/{task_id}/{decision}", description=doc(memories.decide_task))
    async def decide_task(
        task_id: Annotated[str, described(memories.DecideTask, "task_id")],
        decision: Annotated[str, described(memories.DecideTask, "decision")],
        http: Request,
    ) -> dict[str, Any]:
        request = memories.DecideTask(task_id=task_id, decision=decision)
        return await call(http, memories.decide_task, request)


def _record_routes(router: APIRouter) -> None:
    # `:uuid` so that the fixed paths under /records (context, query, state) never match here.
    rid = described(records.RecordRef, "record_id")

    @router.post("/records", description=doc(records.append_record))
    async def append_record(body: records.AppendRecord, http: Request) -> dict[str, Any]:
        return await call(http, records.append_record, body)

    @router.post("/records/import", description=doc(records.import_records))
    async def import_records(body: records.ImportRecords, http: Request) -> dict[str, Any]:
        return await call(http, records.import_records, body)

    @router.get("/records/query", description=doc(records.query_records))
    async def query_records_get(
        query: Annotated[records.QueryRecords, Query()], http: Request
    ) -> dict[str, Any]:
        return await call(http, records.query_records, query)

    @router.post("/records/query", description=doc(records.query_records))
    async def query_records_post(body: records.QueryRecords, http: Request) -> dict[str, Any]:
        return await call(http, records.query_records, body)

    @router.post("/records/rebuild", description=doc(records.rebuild))
    async def rebuild(body: records.RebuildRecords, http: Request) -> dict[str, Any]:
        return await call(http, records.rebuild, body)

    @router.get("/records/state/{kind}/{key}", description=doc(records.state))
    async def state_current(
        kind: str,
        key: str,
        query: Annotated[StateQuery, Query()],  # type: ignore[valid-type]
        http: Request,
    ) -> dict[str, Any]:
        request = complete(records.StateObject, query, kind=kind, key=key, history=False)
        return await call(http, records.state, request)

    @router.get("/records/state/{kind}/{key}/history", description=doc(records.state))
    async def state_history(
        kind: str,
        key: str,
        query: Annotated[StateQuery, Query()],  # type: ignore[valid-type]
        http: Request,
    ) -> dict[str, Any]:
        request = complete(records.StateObject, query, kind=kind, key=key, history=True)
        return await call(http, records.state, request)

    @router.get("/records/{record_id:uuid}", description=doc(records.get_record))
    async def get_record(record_id: Annotated[uuid.UUID, rid], http: Request) -> dict[str, Any]:
        return await call(http, records.get_record, records.RecordRef(record_id=str(record_id)))

    @router.get("/records/{record_id:uuid}/lineage", description=doc(records.lineage))
    async def lineage(record_id: Annotated[uuid.UUID, rid], http: Request) -> dict[str, Any]:
        return await call(http, records.lineage, records.RecordRef(record_id=str(record_id)))

    @router.get("/records/{record_id:uuid}/derivations", description=doc(records.derivations))
    async def derivations(record_id: Annotated[uuid.UUID, rid], http: Request) -> dict[str, Any]:
        return await call(http, records.derivations, records.RecordRef(record_id=str(record_id)))


def _structure_routes(router: APIRouter) -> None:
    repo_in_path = described(structure.ProjectMap, "repo")
    source_name = structure.LoadMap.model_fields["source_name"]

    @router.get("/map/{repo}", description=doc(structure.project_map))
    async def get_map(repo: Annotated[str, repo_in_path], http: Request) -> dict[str, Any]:
        return await call(http, structure.project_map, structure.ProjectMap(repo=repo))

    @router.get("/map/{repo}/resolve", description=doc(structure.resolve))
    async def resolve_path(
        repo: Annotated[str, repo_in_path],
        query: Annotated[ResolveQuery, Query()],  # type: ignore[valid-type]
        http: Request,
    ) -> dict[str, Any]:
        return await call(http, structure.resolve, complete(structure.ResolvePath, query, repo=repo))

    @router.post(
        "/map/{repo}", description=doc(structure.load) + "\n\nThe body is the map file (YAML or JSON)."
    )
    async def load_map(
        repo: Annotated[str, repo_in_path],
        http: Request,
        name: Annotated[str, Query(description=source_name.description)] = source_name.default,
    ) -> dict[str, Any]:
        request = structure.LoadMap(repo=repo, source=await _map_text(http), source_name=name)
        return await call(http, structure.load, request)


def _intelligence_routes(router: APIRouter) -> None:
    pid = described(intelligence.DecideProposal, "proposal_id")

    @router.get("/proposals", description=doc(intelligence.list_proposals))
    async def list_proposals(
        query: Annotated[intelligence.ListProposals, Query()], http: Request
    ) -> dict[str, Any]:
        return await call(http, intelligence.list_proposals, query)

    async def decide(
        http: Request, proposal_id: str, decision: str, body: BaseModel | None
    ) -> dict[str, Any]:
        # The body is optional: an approval needs nothing, and a rejection without a reason is
        # answered by the service with what to send.
        given = body.model_dump(exclude_unset=True) if body is not None else {}
        request = intelligence.DecideProposal.model_validate(
            {**given, "proposal_id": proposal_id, "decision": decision}
        )
        return await call(http, intelligence.decide_proposal, request)

    @router.post("/proposals/{proposal_id}/approve", description=doc(intelligence.decide_proposal))
    async def approve(
        proposal_id: Annotated[str, pid],
        http: Request,
        body: DecisionBody | None = None,  # type: ignore[valid-type]
    ) -> dict[str, Any]:
        return await decide(http, proposal_id, "approve", body)

    @router.post(
        "/proposals/{proposal_id}/reject",
        description=doc(intelligence.decide_proposal) + '\n\nThe body is {"reason": "why"}.',
    )
    async def reject(
        proposal_id: Annotated[str, pid],
        http: Request,
        body: DecisionBody | None = None,  # type: ignore[valid-type]
    ) -> dict[str, Any]:
        return await decide(http, proposal_id, "reject", body)

    @router.post("/dialectic/ask", description=doc(intelligence.ask))
    async def ask(body: intelligence.AskQuestion, http: Request) -> dict[str, Any]:
        return await call(http, intelligence.ask, body)

    @router.get("/memories/{memory_id}/evidence", description=doc(intelligence.evidence))
    async def memory_evidence(
        memory_id: Annotated[str, described(intelligence.MemoryEvidence, "memory_id")],
        query: Annotated[EvidenceQuery, Query()],  # type: ignore[valid-type]
        http: Request,
    ) -> dict[str, Any]:
        request = complete(intelligence.MemoryEvidence, query, memory_id=memory_id)
        return await call(http, intelligence.evidence, request)

    @router.get("/memories/{memory_id}/provenance", description=doc(provenance.provenance))
    async def memory_provenance(
        memory_id: Annotated[str, described(provenance.MemoryProvenance, "memory_id")], http: Request
    ) -> dict[str, Any]:
        return await call(http, provenance.provenance, provenance.MemoryProvenance(memory_id=memory_id))


def build_router() -> APIRouter:
    router = APIRouter()
    _memory_routes(router)
    _record_routes(router)
    _structure_routes(router)
    _intelligence_routes(router)
    return router
