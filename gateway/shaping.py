"""Proto <-> JSON: the one place where request values become protobuf and service messages become the
JSON both REST and MCP answer with (the drop-in memory shape, plus the record and structure shapes)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel

from gateway.auth import Session
from hypermnesia.errors import InvalidArgument
from hypermnesia.memory_rows import FIELDS, MemoryField
from hypermnesia.times import stamp_iso, timestamp
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2,
    deliveries_pb2,
    intelligence_pb2,
    retrieval_pb2,
    structure_pb2,
    viz_pb2,
)

M = TypeVar("M", bound=Message)
# What each protobuf integer field can carry. A request number beyond it cannot reach the service
# that would refuse it with its own message, so the gateway refuses it here (else protobuf raises).
_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, (1 << 64) - 1),
}


def caller(session: Session) -> common_pb2.Caller:
    return common_pb2.Caller(principal=session.principal.id, grants=list(session.grants))


def to_proto(message: M, request: BaseModel, **values: Any) -> M:
    """Fill `message` from the request's fields of the same name, then from `values` (what the
    gateway decides: the caller, the session's scopes, renamed fields). A field left None stays
    unset, which the service reads as its default; fields the message lacks are the gateway's own."""
    given = {name: getattr(request, name) for name in type(request).model_fields}
    for name, value in {**given, **values}.items():
        spec = message.DESCRIPTOR.fields_by_name.get(name)
        if value is None or spec is None:
            continue
        target = spec.message_type.full_name if spec.message_type is not None else ""
        if spec.message_type is not None and spec.message_type.GetOptions().map_entry:
            for item in value.values():
                _check_int_range(spec.message_type.fields_by_name["value"].cpp_type, name, item)
            getattr(message, name).clear()
            getattr(message, name).update(value)
        elif spec.is_repeated:
            del getattr(message, name)[:]
            getattr(message, name).extend(value)
        elif target == "google.protobuf.Struct":
            getattr(message, name).CopyFrom(struct(value))
        elif target == "google.protobuf.Timestamp":
            getattr(message, name).CopyFrom(timestamp(value))
        elif isinstance(value, Message):
            getattr(message, name).CopyFrom(value)
        else:
            _check_int_range(spec.cpp_type, name, value)
            setattr(message, name, value)
    return message


def _check_int_range(cpp_type: int, name: str, value: Any) -> None:
    bounds = _INT_RANGES.get(cpp_type)
    if bounds is None or not isinstance(value, int):
        return
    low, high = bounds
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be between {low} and {high}; got {value}")


def struct(value: dict[str, Any] | None) -> Struct:
    message = Struct()
    if value:
        try:
            message.update(value)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"metadata is not plain JSON: {exc}") from exc
    return message


def _json_value(m: common_pb2.Memory, f: MemoryField) -> Any:
    value = getattr(m, f.proto or "")
    if f.codec == "time":
        return stamp_iso(value) if m.HasField(f.proto or "") else None
    if f.codec == "list":
        return list(value)
    if f.codec == "json":
        return MessageToDict(value)
    return value


def memory_json(m: common_pb2.Memory) -> dict[str, Any]:
    """The memory shape (seed 001's, plus our fields), key by key from the field table: a field
    shown `set` only when it holds something, `if_stale` only on a stale memory."""
    out: dict[str, Any] = {}
    for f in FIELDS:
        if f.json is None:
            continue
        value = _json_value(m, f)
        if f.shown == "always" or (f.shown == "set" and value) or (f.shown == "if_stale" and m.stale):
            out[f.json] = value
    if m.HasField("redacted"):  # an update's answer: the secrets it masked
        out["redacted"] = redacted_json(m.redacted)
    return out


def redacted_json(r: common_pb2.Redacted) -> dict[str, Any]:
    """The secrets a write masked (HM_REDACT=mask): how many, and how many of each kind."""
    return {"count": r.count, "kinds": dict(sorted(r.kinds.items()))}


def with_redacted(out: dict[str, Any], response: Any) -> dict[str, Any]:
    """`out` plus `redacted` when the write's response says it masked secrets (only then, so a
    write without any keeps its drop-in shape)."""
    if response.HasField("redacted"):
        out["redacted"] = redacted_json(response.redacted)
    return out


def save_json(response: curation_pb2.SaveResponse) -> dict[str, Any]:
    """Seed 001's save answer, `{created, memory}` or `{created: false, memory, replaced}`, plus
    `similar` when a near-duplicate states a different fact (only then, so the drop-in shape holds)."""
    out: dict[str, Any] = {"created": response.created, "memory": memory_json(response.memory)}
    if response.HasField("replaced"):
        out["replaced"] = memory_json(response.replaced)
    if response.similar:
        out["similar"] = [
            {"id": s.id, "content": s.content, "differences": list(s.differences)} for s in response.similar
        ]
    return with_redacted(out, response)


def deleted_json(deleted: bool) -> dict[str, Any]:
    """A delete's answer: false when no such memory was in the caller's scopes."""
    return {"deleted": deleted}


def archived_json(m: common_pb2.Memory) -> dict[str, Any]:
    return {"archived": True, "memory": memory_json(m)}


def restored_json(m: common_pb2.Memory) -> dict[str, Any]:
    return {"restored": True, "memory": memory_json(m)}


def updated_json(m: common_pb2.Memory, *, description_may_be_stale: bool) -> dict[str, Any]:
    """An update's answer: the memory, flagged when its kept description may describe the old text."""
    out = memory_json(m)
    if description_may_be_stale:
        out["description_may_be_stale"] = True
    return out


def superseded_json(response: curation_pb2.SaveResponse, *, description_may_be_stale: bool) -> dict[str, Any]:
    """A supersede's answer: `{created, memory}`, flagged like an update's."""
    out: dict[str, Any] = {"created": response.created, "memory": memory_json(response.memory)}
    if description_may_be_stale:
        out["description_may_be_stale"] = True
    return with_redacted(out, response)


def hit_json(h: retrieval_pb2.SearchHit, degraded: list[str]) -> dict[str, Any]:
    """A search hit: the memory, its scores, and what was missing from the answer when something was."""
    out = {
        **memory_json(h.memory),
        "similarity": round(h.similarity, 6),
        "score": round(h.score, 6),
        "lexical_match": h.lexical_match,
        "entity_overlap": round(h.entity_overlap, 6),
        "active_task": h.active_task,
        "topic_match": h.topic_match,
    }
    if h.HasField("length_weight"):
        # A long assistant turn: its relevance was multiplied by this (HM_ASSISTANT_TURN_WORDS).
        out["length_weight"] = round(h.length_weight, 6)
    if h.premise_of:
        # Evidence a recall depth appended after the hits: not a match itself, so no scores.
        for name in ("similarity", "score", "lexical_match", "entity_overlap", "active_task", "topic_match"):
            del out[name]
        out["via"] = {"premise_of": h.premise_of, "hops": h.hops}
    if h.HasField("time_match"):
        # Why a date the query names lifted this hit (services/retrieval/time_window.py).
        t = h.time_match
        out["time_match"] = {
            "phrase": t.phrase,
            "start": stamp_iso(t.start),
            "end": stamp_iso(t.end),
            "event": t.event_phrase or t.event_source,
            "boost": round(t.boost, 6),
        }
    if degraded:
        # Never silently half-answer: a hit read on its own still says what was missing.
        out["degraded"] = degraded
    return out


def version_json(number: int, v: retrieval_pb2.MemoryVersion) -> dict[str, Any]:
    """One version of a memory (lineage's `versions`), numbered from 1 along the chain. content and
    description are null when they cannot be read (`text` says why: purged or deleted; or the
    value was carried over from a purged version)."""
    return {
        "version": number,
        "memory_id": v.memory_id,
        "record_id": v.record_id,
        "seq": v.seq,
        "operation": v.operation,
        "reason": v.reason or None,
        "at": stamp_iso(v.at),
        "author": v.author,
        "text": v.text,
        "content": v.content if v.HasField("content") else None,
        "description": v.description if v.HasField("description") else None,
        "changed": list(v.changed),
    }


def record_json(view: curation_pb2.RecordView) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": view.id,
        "seq": view.seq,
        "scope": view.scope,
        "type": view.type,
        "operation": view.operation,
        "target_id": view.target_id or None,
        "author": view.author,
        "source_ref": view.source_ref or None,
        "prev_source_ref": view.prev_source_ref or None,
        "thread_id": view.thread_id or None,
        "topic_id": view.topic_id or None,
        "created_at": stamp_iso(view.created_at),
        "payload": json.loads(view.payload) if view.payload else None,
        "purged": view.purged,
        "record_hash": view.record_hash,
    }
    if view.HasField("memory"):
        out["memory"] = memory_json(view.memory)
    return out


def record_list_json(out: curation_pb2.RecordList) -> dict[str, Any]:
    return {
        "memories": [memory_json(m) for m in out.memories],
        "records": [record_json(r) for r in out.records],
    }


def appended_json(response: curation_pb2.ImportRecordsResponse) -> dict[str, Any]:
    """One appended record: its id, and whether it is new (not a source_ref seen before)."""
    out: dict[str, Any] = {"id": response.ids[0], "created": response.imported == 1}
    if response.left_out:
        out["left_out"] = response.left_out  # an assistant turn, HM_STORE_ASSISTANT_TURNS=false
    return with_redacted(out, response)


def imported_json(response: curation_pb2.ImportRecordsResponse) -> dict[str, Any]:
    out = {"imported": response.imported, "skipped": response.skipped, "ids": list(response.ids)}
    if response.left_out:
        out["left_out"] = response.left_out  # assistant turns, HM_STORE_ASSISTANT_TURNS=false
    return with_redacted(out, response)


def records_json(out: curation_pb2.RecordList) -> dict[str, Any]:
    """A query's records (without the memories a RecordList may carry)."""
    return {"records": [record_json(r) for r in out.records]}


def state_json(out: curation_pb2.RecordList, *, history: bool) -> dict[str, Any]:
    """A state object's history (oldest first), or its current value (the newest)."""
    memories = [memory_json(m) for m in out.memories]
    return {"history": memories} if history else {"current": memories[-1]}


def rebuild_json(out: curation_pb2.RebuildResponse) -> dict[str, Any]:
    return {
        "replayed": out.replayed,
        "live": out.live,
        "inserted": out.inserted,
        "updated": out.updated,
        "deleted": out.deleted,
        "reembedded": out.reembedded,
        "differences": list(out.differences),
        "applied": out.applied,
    }


def component_json(c: structure_pb2.Component) -> dict[str, Any]:
    return {
        "slug": c.slug,
        "name": c.name,
        "parent": c.parent or None,
        "responsibility": c.responsibility,
        "globs": list(c.globs),
        "priority": c.priority,
        "depends_on": list(c.depends_on),
    }


def constraint_json(c: structure_pb2.Constraint, *, with_reason: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": c.id,
        "component": c.component or None,
        "kind": c.kind,
        "severity": c.severity,
        "status": c.status,
        "text": c.text,
        "rationale": c.rationale,
    }
    if with_reason:
        out["applies_because"] = c.reason
    return out


def node_json(n: intelligence_pb2.GraphNode) -> dict[str, Any]:
    """A memory as an evidence-graph node: stale (a premise changed, and which) and how many hops
    from the memory asked about."""
    out = {**memory_json(n.memory), "stale": n.stale, "hops": n.hops}
    if n.stale_because:
        out["stale_because"] = n.stale_because
    return out


def evidence_json(r: intelligence_pb2.EvidenceResponse) -> dict[str, Any]:
    return {
        "memory": node_json(r.memory),
        "premises": [node_json(n) for n in r.premises],
        "derived": [node_json(n) for n in r.derived],
    }


# A proposal carries these only once they hold something (decided ones, supersede suggestions).
_PROPOSAL_OPTIONAL = ("supersedes", "decided_by", "decision_reason", "result_id")


def proposal_json(p: intelligence_pb2.Proposal) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": p.id,
        "scope": p.scope,
        "kind": p.kind,
        "status": p.status,
        "content": p.content,
        "description": p.description,
        "rationale": p.rationale,
        "evidence": list(p.evidence),
        "mode": p.mode,
        "created_at": stamp_iso(p.created_at) if p.HasField("created_at") else None,
    }
    for name in _PROPOSAL_OPTIONAL:
        if getattr(p, name):
            out[name] = getattr(p, name)
    if p.HasField("decided_at"):
        out["decided_at"] = stamp_iso(p.decided_at)
    return out


def proposals_json(response: intelligence_pb2.ProposalList) -> dict[str, Any]:
    return {"proposals": [proposal_json(p) for p in response.proposals]}


def decision_json(response: intelligence_pb2.DecideProposalResponse) -> dict[str, Any]:
    """A decided proposal, and the memory approving it wrote (None when rejected)."""
    return {"proposal": proposal_json(response.proposal), "memory_id": response.memory_id or None}


def ask_json(r: intelligence_pb2.AskResponse) -> dict[str, Any]:
    """The Dialectic's answer: claims that cite live ids (or none, and why: `abstained`), what the
    validator dropped and why, the depth used and why, and the evidence the claims were drawn from."""
    return {
        "mode": r.mode,
        "claims": [{"text": c.text, "citations": list(c.citations)} for c in r.claims],
        "abstained": r.abstained or None,
        "dropped": [{"text": d.text, "citations": list(d.citations), "reason": d.reason} for d in r.dropped],
        "depth": r.depth,
        "depth_reason": r.depth_reason,
        "notes": list(r.notes),
        "evidence": [node_json(n) for n in r.evidence],
    }


def consolidate_report_json(r: intelligence_pb2.ConsolidateReport) -> dict[str, Any]:
    """What one consolidation job did in one scope (or why it was skipped)."""
    return {
        "job": r.job,
        "scope": r.scope,
        "skipped": r.skipped,
        "skipped_reason": r.skipped_reason or None,
        "mode": r.mode,
        "promoted": r.promoted,
        "expired": r.expired,
        "marked_stale": r.marked_stale,
        "proposals_made": r.proposals_made,
        "made_by_kind": dict(sorted(r.made_by_kind.items())),
        "pending": r.pending,
        "duration_ms": round(r.duration_ms, 1),
        "notes": list(r.notes),
        "coverage": r.coverage or None,
        "read": r.read,
    }


def thread_groups(hits: list[dict[str, Any]], groups: list[int]) -> list[dict[str, Any]]:
    """group_by=thread: the hits as their threads, best first (the service numbered each hit's
    thread), each with its best turns; evidence rows (group 0) follow as they are."""
    threads: dict[int, dict[str, Any]] = {}
    rest = []
    for hit, group in zip(hits, groups, strict=True):
        if not group:
            rest.append(hit)
            continue
        thread = threads.setdefault(
            group,
            {"thread_id": hit.get("thread_id"), "scope": hit["scope"], "score": hit["score"], "turns": []},
        )
        thread["turns"].append(hit)
    return [threads[g] for g in sorted(threads)] + rest


def search_json(
    response: retrieval_pb2.SearchResponse, *, with_depth: bool, by_thread: bool = False
) -> dict[str, Any]:
    """A search's answer: the hits (evidence rows after them), or with `by_thread` their threads
    (thread_groups), `degraded`, and the depth used and why when the request named one."""
    degraded = list(response.degraded)
    results = [hit_json(h, degraded) for h in response.hits]
    if by_thread:
        results = thread_groups(results, [h.group for h in response.hits])
    out: dict[str, Any] = {"results": results, "degraded": degraded}
    if with_depth:
        # The envelope existing clients read stays as it was for a search that names no depth.
        out.update(depth=response.depth, depth_reason=response.depth_reason)
    if response.purged:
        out["purged"] = list(response.purged)  # as_of: present then, text purged since
    return out


def lineage_json(response: retrieval_pb2.LineageResponse) -> dict[str, Any]:
    return {
        "lineage": [memory_json(m) for m in response.memories],
        "versions": [version_json(n, v) for n, v in enumerate(response.versions, start=1)],
    }


def list_json(response: retrieval_pb2.ListResponse, *, full: bool, offset: int) -> dict[str, Any]:
    """A page of the index: without `full`, descriptions and metadata, no bodies."""
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


def stats_json(response: retrieval_pb2.StatsResponse) -> dict[str, Any]:
    """Recall health in the flat form REST's /stats answers (its UI reads it)."""
    return {
        "scopes": [
            {"scope": s.scope, "live": s.live, "archived": s.archived, "superseded": s.superseded}
            for s in response.scopes
        ],
        "days": response.days,
        "searches": response.searches,
        "empty": response.empty_searches,
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


def stats_answer(stats: dict[str, Any]) -> dict[str, Any]:
    """`memory_stats`' answer: `stats` in seed 001's shape, which its clients read (store size under
    `memories`, search health under `searches`, misses as `recent_empty_queries`). REST's /stats
    keeps the flat form its UI reads."""
    by_scope = [
        {"scope": s["scope"], "active": s["live"], "archived": s["archived"], "superseded": s["superseded"]}
        for s in stats["scopes"]
    ]
    latency = stats["latency_ms"]
    return {
        "days": stats["days"],
        "memories": {
            "active": sum(s["active"] for s in by_scope),
            "archived": sum(s["archived"] for s in by_scope),
            "superseded": sum(s["superseded"] for s in by_scope),
            "by_scope": by_scope,
        },
        "searches": {
            "total": stats["searches"],
            "empty": stats["empty"],
            "empty_rate": stats["empty_rate"],
            "avg_hits": stats["avg_hits"],
            "avg_top_score": stats["avg_top_score"],
            "p50_latency_ms": latency["p50"],
            "p95_latency_ms": latency["p95"],
            "p99_latency_ms": latency["p99"],
            "degraded_rate": stats["degraded_rate"],
        },
        "recent_empty_queries": [{"query": q} for q in stats["recent_misses"]],
    }


def context_json(response: retrieval_pb2.ContextResponse) -> dict[str, Any]:
    """The assembled context: each layer, the whole block, and how it was chosen."""
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
        "depth": response.depth,
        "depth_reason": response.depth_reason,
        "degraded": list(response.degraded),
        # as_of: memories present then whose text has been purged since (ids only).
        **({"purged": list(response.purged)} if response.purged else {}),
    }


def forget_json(out: curation_pb2.ForgetResponse) -> dict[str, Any]:
    return {
        "dry_run": not out.applied,
        "matched": out.matched,
        "archived": out.archived,
        "applied": out.applied,
        "truncated": out.truncated,
        "memories": [memory_json(m) for m in out.memories],
    }


def project_map_json(r: structure_pb2.ProjectMapResponse, loaded_by: str) -> dict[str, Any]:
    """A repository's map; `loaded_by` as the caller may see it (gateway/structure.py decides)."""
    return {
        "repo": r.repo,
        "components": [component_json(c) for c in r.components],
        "invariants": [constraint_json(c, with_reason=False) for c in r.invariants],
        "relationships": [
            {"from": e.from_component, "to": e.to_component, "kind": e.kind} for e in r.relationships
        ],
        "source": {
            "name": r.source_name,
            "sha256": r.source_sha256,
            "loaded_at": stamp_iso(r.loaded_at),
            "loaded_by": loaded_by,
        },
    }


def resolve_json(r: structure_pb2.ResolvePathResponse) -> dict[str, Any]:
    return {
        "repo": r.repo,
        "path": r.path,
        "matched": r.matched,
        "component": component_json(r.component) if r.matched else None,
        "matched_glob": r.matched_glob or None,
        "reason": r.reason or None,
        "constraints": [constraint_json(c) for c in r.constraints],
        "note": r.note or None,
    }


def load_map_json(r: structure_pb2.LoadMapResponse) -> dict[str, Any]:
    return {
        "repo": r.repo,
        "components": r.components,
        "constraints": r.constraints,
        "relationships": r.relationships,
        "replaced": r.replaced,
        "sha256": r.source_sha256,
    }


# A delivered memory no longer stored (deleted, purged) or never one (a map's rule) shows no text.
_GONE = ("deleted", "purged", "not_found")


def delivered_memory_json(m: deliveries_pb2.DeliveredMemory) -> dict[str, Any]:
    out: dict[str, Any] = {"id": m.id, "score": m.score if m.has_score else None, "state": m.state}
    if m.hash:
        out["hash"] = m.hash
    if m.scope:
        out["scope"] = m.scope
    if m.state not in _GONE:
        out.update(description=m.description, content=m.content)
        if m.superseded_by:
            out["superseded_by"] = m.superseded_by
    return out


def delivery_json(v: deliveries_pb2.DeliveryView) -> dict[str, Any]:
    """One delivery of the log: who was given what, when, for which request, the sha256 of the exact
    text sent, its place in the chain, and each memory as it is now."""
    d = v.delivery
    return {
        "seq": v.seq,
        "delivered_at": stamp_iso(d.delivered_at),
        "principal": d.principal,
        "session": d.session or None,
        "thread": d.thread or None,
        "operation": d.operation,
        "transport": d.transport,
        "request": json.loads(d.request_json) if d.request_json else None,
        "scopes": list(d.scopes),
        "text_sha256": d.text_sha256,
        "text_bytes": d.text_bytes,
        "memories": [delivered_memory_json(m) for m in v.memories],
        "prev_hash": v.prev_hash,
        "entry_hash": v.entry_hash,
    }


def deliveries_json(r: deliveries_pb2.DeliveryList) -> dict[str, Any]:
    return {"deliveries": [delivery_json(v) for v in r.deliveries], "truncated": r.truncated}


# Positions are roughly in [-1, 1]; four decimals are finer than any screen.
POSITION_DECIMALS = 4


def viz_graph_json(response: viz_pb2.VizGraphResponse) -> dict[str, Any]:
    return {
        "nodes": [viz_node_json(n) for n in response.nodes],
        "edges": [
            {"source": e.source, "target": e.target, "relation": e.relation, "weight": round(e.weight, 4)}
            for e in response.edges
        ],
        "total": response.total,
        "truncated": response.truncated,
        "projection": response.projection,
    }


def viz_node_json(n: viz_pb2.VizNode) -> dict[str, Any]:
    return {
        "id": n.id,
        "kind": n.kind,
        "type": n.type,
        "scope": n.scope,
        "position": [round(v, POSITION_DECIMALS) for v in (n.x, n.y, n.z)],
        "importance": round(n.importance, 4),
        "decay": round(n.decay, 4),
        "label": n.label,
        "created_at": stamp_iso(n.created_at),
        "archived_at": stamp_iso(n.archived_at) if n.HasField("archived_at") else None,
        "superseded_by": n.superseded_by or None,
        "stale": n.stale,
    }
