"""The 3D memory map's read: Viz.Graph, the visible subgraph of the scopes a
caller may read, within a node budget (services/retrieval/viz_repo.py has its SQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import grpc

from hypermnesia import validation
from hypermnesia.errors import InvalidArgument
from hypermnesia.grpc_server import Registration
from hypermnesia.scopes import require
from hypermnesia.times import field_time, timestamp
from hypermnesia.v1 import viz_pb2, viz_pb2_grpc
from services.retrieval import viz_repo
from services.retrieval.replica import ReadRouter
from services.retrieval.scoring import recency

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "SERVICE_NAME", "VizServicer", "registration"]

SERVICE_NAME = viz_pb2.DESCRIPTOR.services_by_name["Viz"].full_name
DEFAULT_LIMIT = 2000
# A browser draws 5,000 nodes with their edges smoothly; the SQL stays well within a second there.
MAX_LIMIT = 5000
LABEL_CHARS = 80


def _label(row: asyncpg.Record) -> str:
    text = row["description"] or row["head"]
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


class VizServicer(viz_pb2_grpc.VizServicer):
    def __init__(self, router: ReadRouter) -> None:
        self.router = router

    def _filter(self, request: viz_pb2.VizGraphRequest) -> viz_repo.GraphFilter:
        scopes = list(request.scopes)
        if not scopes:
            raise InvalidArgument("no scope to read; name a scope or grant the token one")
        for scope in scopes:
            validation.check_scope(scope)
        require(request.caller.grants, scopes)
        for kind in request.kinds:
            validation.check_kind(kind)
        limit = request.limit or DEFAULT_LIMIT
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidArgument(f"limit is {limit}; the map draws 1 to {MAX_LIMIT:,} nodes")
        since, until = field_time(request, "since"), field_time(request, "until")
        if since is not None and until is not None and since >= until:
            raise InvalidArgument("since must be before until")
        return viz_repo.GraphFilter(scopes, list(request.kinds), since, until, limit)

    async def Graph(
        self, request: viz_pb2.VizGraphRequest, context: grpc.aio.ServicerContext
    ) -> viz_pb2.VizGraphResponse:
        f = self._filter(request)

        async def load(pool: asyncpg.Pool) -> tuple[list[asyncpg.Record], int, str, list[asyncpg.Record]]:
            rows, total, method = await viz_repo.nodes(pool, f)
            return rows, total, method, await viz_repo.edges(pool, [r["id"] for r in rows])

        # The map may trail the caller's last write by the replica's lag (its request has no min_lsn).
        rows, total, method, edges = await self.router.read(0, load)
        now = datetime.now(UTC)
        nodes = []
        for r in rows:
            x, y, z = r["position"] or (0.0, 0.0, 0.0)
            node = viz_pb2.VizNode(
                id=str(r["id"]),
                kind=r["kind"],
                type=r["type"],
                scope=r["scope"],
                x=x,
                y=y,
                z=z,
                importance=float(r["importance"]),
                decay=recency(r["decay_class"], r["last_accessed_at"], now),
                label=_label(r),
                superseded_by=str(r["superseded_by"] or ""),
                stale=r["stale"],
            )
            node.created_at.CopyFrom(timestamp(r["created_at"]))
            if r["archived_at"] is not None:
                node.archived_at.CopyFrom(timestamp(r["archived_at"]))
            nodes.append(node)
        return viz_pb2.VizGraphResponse(
            nodes=nodes,
            edges=[
                viz_pb2.VizEdge(
                    source=str(e["source"]),
                    target=str(e["target"]),
                    relation=e["relation"],
                    weight=e["weight"],
                )
                for e in edges
            ],
            total=total,
            truncated=total > len(nodes),
            projection=method,
        )


def registration(router: ReadRouter) -> Registration:
    """The entry for `create_server([...])` in services/retrieval/server.py."""
    return (viz_pb2_grpc.add_VizServicer_to_server, VizServicer(router), SERVICE_NAME)
