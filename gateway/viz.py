"""The 3D memory map's data: `GET /viz/graph` (gateway.operations), one request model and one
operation, served by the retrieval process's Viz service."""

from __future__ import annotations

from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import IsoTime, field
from gateway.fields import Request as OperationRequest
from gateway.shaping import caller, viz_graph_json
from hypermnesia.times import timestamp
from hypermnesia.v1 import viz_pb2
from hypermnesia.validation import KINDS, MAX_SCOPE_CHARS

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "VizGraph", "graph"]

# The retrieval service's bounds (services/retrieval/viz.py), stated so a client sees them.
DEFAULT_LIMIT = 2000
MAX_LIMIT = 5000


class VizGraph(OperationRequest):
    scope: list[str] | None = field(
        f"Read only these scopes (repeat the parameter for several; each at most {MAX_SCOPE_CHARS} "
        "characters); by default this session's project plus the scopes the token is granted.",
        None,
    )
    since: IsoTime | None = field("Only memories created at or after this time (ISO 8601).", None)
    until: IsoTime | None = field("Only memories created before this time (ISO 8601).", None)
    limit: int = field(
        f"The node budget: at most this many memories (1-{MAX_LIMIT:,}), the most important first, "
        "then the most recent; `truncated` and `total` say when the filter holds more.",
        DEFAULT_LIMIT,
        nonzero=True,
        le=MAX_LIMIT,
    )
    kinds: list[str] | None = field(f"Only memories of these kinds ({' | '.join(KINDS)}).", None)


async def graph(backends: Backends, session: Session, request: VizGraph) -> dict[str, Any]:
    """The 3D memory map's visible subgraph: memories you may read as nodes (stored 3D position of
    the embedding, roughly in [-1, 1]; importance; decay, the recency factor of the decay class;
    archived, superseded and stale ones flagged) and the edges among them (supersedes, evidence,
    same_thread, entity_overlap with its Jaccard weight). Edges only join nodes in the answer."""
    message = viz_pb2.VizGraphRequest(
        caller=caller(session),
        scopes=request.scope if request.scope is not None else session.readable_scopes(),
        limit=request.limit,
        kinds=request.kinds or [],
    )
    if request.since is not None:
        message.since.CopyFrom(timestamp(request.since))
    if request.until is not None:
        message.until.CopyFrom(timestamp(request.until))
    response = await backends.call(backends.viz.Graph, message)
    return viz_graph_json(response)
