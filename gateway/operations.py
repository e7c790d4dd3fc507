"""The memory operations behind both the MCP tools and the REST routes: validate at the edge,
call the service, and shape the answer as JSON (seed 001's shapes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from gateway.auth import Session
from gateway.backends import Backends
from hypermnesia import validation
from hypermnesia.errors import InvalidArgument
from hypermnesia.scopes import readable_scopes
from hypermnesia.v1 import common_pb2, curation_pb2, retrieval_pb2

DEFAULT_K = 10
MAX_LIST_LIMIT = 500  # services/retrieval/reads.py MAX_LIST_LIMIT, checked here first

# Seed 001's memory shape; lifecycle fields are added only when they carry something.
_BASE_FIELDS = (
    "id",
    "owner_id",
    "scope",
    "type",
    "kind",
    "content",
    "description",
    "tags",
    "metadata",
    "importance",
)
_TIME_FIELDS = ("created_at", "updated_at", "last_accessed_at", "archived_at")
_OPTIONAL_FIELDS = ("decay_class", "supersedes", "superseded_by", "source_ref", "repo", "thread_id")
_OPTIONAL_TIMES = ("expires_at",)


def _iso(message: common_pb2.Memory, name: str) -> str | None:
    if not message.HasField(name):
        return None
    return getattr(message, name).ToDatetime().isoformat() + "Z"


def memory_json(m: common_pb2.Memory) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "owner_id": m.owner_id,
        "scope": m.scope,
        "type": m.type,
        "kind": m.kind,
        "content": m.content,
        "description": m.description,
        "tags": list(m.tags),
        "metadata": MessageToDict(m.metadata),
        "importance": m.importance,
    }
    for name in _TIME_FIELDS:
        out[name] = _iso(m, name)
    for name in _OPTIONAL_FIELDS:
        if getattr(m, name):
            out[name] = getattr(m, name)
    for name in _OPTIONAL_TIMES:
        if m.HasField(name):
            out[name] = _iso(m, name)
    return out


def timestamp(value: datetime) -> Timestamp:
    """A Timestamp from an aware datetime (naive ones are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _caller(session: Session) -> common_pb2.Caller:
    return common_pb2.Caller(principal=session.principal.id, grants=list(session.principal.grants))


def _metadata(value: Any) -> Struct:
    if value is None:
        return Struct()
    if not isinstance(value, dict):
        raise InvalidArgument("metadata must be a JSON object")
    if len(str(value).encode()) > validation.MAX_METADATA_BYTES:
        raise InvalidArgument(f"metadata is larger than {validation.MAX_METADATA_BYTES:,} bytes")
    message = Struct()
    try:
        message.update(value)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"metadata is not plain JSON: {exc}") from exc
    return message


async def save(
    backends: Backends,
    session: Session,
    *,
    content: str,
    description: str = "",
    scope: str | None = None,
    type: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    importance: float | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    scope = session.project_scope if scope is None else scope
    validation.check_content(content)
    validation.check_description(description)
    validation.check_scope(scope)
    validation.check_tags(tags or [])
    request = curation_pb2.SaveRequest(
        caller=_caller(session),
        content=content,
        description=description,
        scope=scope,
        type=type or "",
        tags=tags or [],
        metadata=_metadata(metadata),
        kind=kind or "",
    )
    if importance is not None:
        request.importance = validation.check_importance(float(importance))
    response = await backends.call(backends.curation.Save, request)
    out: dict[str, Any] = {"created": response.created, "memory": memory_json(response.memory)}
    if response.HasField("replaced"):
        out["replaced"] = memory_json(response.replaced)
    return out


async def search(
    backends: Backends,
    session: Session,
    *,
    query: str,
    scope: str | None = None,
    tags: list[str] | None = None,
    k: int = DEFAULT_K,
    min_similarity: float | None = None,
    relative_cutoff: float | None = None,
    fusion: str | None = None,
    kinds: list[str] | None = None,
    types: list[str] | None = None,
    repo: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    as_of: datetime | None = None,
    mode: str | None = None,
    include_archived: bool = False,
    rerank: bool = False,
    topic: str | None = None,
    topic_only: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    validation.check_query(query)
    if scope is not None:
        scopes = [validation.check_scope(scope)]
    else:
        scopes = readable_scopes(session.principal, session.project_scope)
    request = retrieval_pb2.SearchRequest(
        caller=_caller(session),
        query=query,
        scopes=scopes,
        tags=tags or [],
        k=k,
        fusion=fusion or "",
        kinds=kinds or [],
        types=types or [],
        repo=repo or "",
        mode=mode or "",
        include_archived=include_archived,
        rerank=rerank,
        topic=topic or "",
        topic_only=topic_only,
    )
    for name, value in (("since", since), ("until", until), ("as_of", as_of)):
        if value is not None:
            getattr(request, name).CopyFrom(timestamp(value))
    if min_similarity is not None:
        request.min_similarity = min_similarity
    if relative_cutoff is not None:
        request.relative_cutoff = relative_cutoff
    response = await backends.call(backends.retrieval.Search, request)
    results = [
        {
            **memory_json(h.memory),
            "similarity": round(h.similarity, 6),
            "score": round(h.score, 6),
            "lexical_match": h.lexical_match,
            "entity_overlap": round(h.entity_overlap, 6),
            "active_task": h.active_task,
            "topic_match": h.topic_match,
        }
        for h in response.hits
    ]
    return results, list(response.degraded)


async def get(backends: Backends, session: Session, memory_id: str) -> dict[str, Any]:
    request = retrieval_pb2.GetRequest(caller=_caller(session), id=memory_id)
    return memory_json(await backends.call(backends.retrieval.Get, request))


def _scopes_for(session: Session, scope: str | None) -> list[str]:
    if scope is not None:
        return [validation.check_scope(scope)]
    return readable_scopes(session.principal, session.project_scope)


async def list_memories(
    backends: Backends,
    session: Session,
    *,
    scope: str | None = None,
    tags: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
    include_archived: bool = False,
    full: bool = False,
    kinds: list[str] | None = None,
    types: list[str] | None = None,
    as_of: datetime | None = None,
) -> dict[str, Any]:
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}")
    request = retrieval_pb2.ListRequest(
        caller=_caller(session),
        scopes=_scopes_for(session, scope),
        tags=tags or [],
        limit=limit,
        offset=offset,
        include_archived=include_archived,
        full=full,
        kinds=kinds or [],
        types=types or [],
    )
    if as_of is not None:
        request.as_of.CopyFrom(timestamp(as_of))
    response = await backends.call(backends.retrieval.List, request)
    memories = []
    for m in response.memories:
        item = memory_json(m)
        if not full:
            item.pop("content")
        memories.append(item)
    return {
        "memories": memories,
        "total": response.total,
        "truncated": offset + len(memories) < response.total,
    }


async def lineage(backends: Backends, session: Session, memory_id: str) -> dict[str, Any]:
    request = retrieval_pb2.GetRequest(caller=_caller(session), id=memory_id)
    response = await backends.call(backends.retrieval.Lineage, request)
    return {"lineage": [memory_json(m) for m in response.memories]}


async def stats(
    backends: Backends, session: Session, *, scope: str | None = None, days: int = 7
) -> dict[str, Any]:
    request = retrieval_pb2.StatsRequest(
        caller=_caller(session), scopes=_scopes_for(session, scope), days=days
    )
    response = await backends.call(backends.retrieval.Stats, request)
    return {
        "scopes": [
            {"scope": s.scope, "live": s.live, "archived": s.archived, "superseded": s.superseded}
            for s in response.scopes
        ],
        "days": response.days,
        "searches": response.searches,
        "empty_rate": round(response.empty_rate, 4),
        "avg_hits": round(response.avg_hits, 3),
        "avg_top_score": round(response.avg_top_score, 4),
        "latency_ms": {
            "p50": round(response.p50_ms, 2),
            "p95": round(response.p95_ms, 2),
            "p99": round(response.p99_ms, 2),
        },
        "degraded_rate": round(response.degraded_rate, 4),
        "recent_misses": list(response.recent_misses),
    }


async def assemble_context(
    backends: Backends,
    session: Session,
    *,
    query: str = "",
    path: str = "",
    repo: str | None = None,
    mode: str = "auto",
    thread_id: str = "",
    scope: str | None = None,
    budgets: dict[str, int] | None = None,
) -> dict[str, Any]:
    if query:
        validation.check_query(query)
    if repo is None and path:
        # The session's project is the natural repo of a path being edited.
        repo = session.project_scope.removeprefix("project:")
    request = retrieval_pb2.ContextRequest(
        caller=_caller(session),
        scopes=_scopes_for(session, scope),
        query=query,
        path=path,
        repo=repo or "",
        mode=mode,
        thread_id=thread_id,
        budgets=budgets or {},
    )
    response = await backends.call(backends.retrieval.AssembleContext, request)
    return {
        "layers": {
            layer.name: {
                "text": layer.text,
                "tokens": layer.tokens,
                "budget": layer.budget,
                "cited_ids": list(layer.cited_ids),
                "dropped": layer.dropped,
            }
            for layer in response.layers
        },
        "context": "\n\n".join(layer.text for layer in response.layers if layer.text),
        "total_tokens": response.total_tokens,
        "mode": response.mode,
        "mode_reason": response.mode_reason,
        "degraded": list(response.degraded),
    }
