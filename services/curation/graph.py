"""The evidence graph (memory is a graph, but recall stays bounded).

Edges say why a conclusion exists (derived -> premise); the database refuses a cycle whoever
writes. Reads respect the caller's scopes hop by hop: a row the caller cannot read is neither
returned nor walked through, so an edge to it is not revealed, not even as a count. Walks stop at
fixed caps (MAX_HOPS, MAX_ROWS).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hypermnesia import validation
from hypermnesia.errors import InvalidArgument, NotFound, PermissionDenied
from hypermnesia.memory_rows import memory_from_row
from hypermnesia.recall_depth import MAX_HOPS, MAX_ROWS
from hypermnesia.scopes import permits
from hypermnesia.v1 import intelligence_pb2
from services.curation import graph_repo, payloads, rawlog

MAX_PREMISES = 100


@dataclass
class Walked:
    """Rows reached from a start set, each with its hop count, in the order reached."""

    rows: list[asyncpg.Record] = field(default_factory=list)
    hops: dict[uuid.UUID, int] = field(default_factory=dict)


def is_stale(row: Mapping[str, Any]) -> bool:
    return row["stale_at"] is not None


def node_message(row: Mapping[str, Any], hops: int = 0) -> intelligence_pb2.GraphNode:
    return intelligence_pb2.GraphNode(
        memory=memory_from_row(row),
        stale=is_stale(row),
        stale_because=row["stale_because"] or "",
        hops=hops,
    )


async def walk(
    conn: asyncpg.Connection,
    grants: Sequence[str],
    start: Sequence[uuid.UUID],
    *,
    upward: bool,
    max_hops: int = MAX_HOPS,
    max_rows: int = MAX_ROWS,
) -> Walked:
    """Premises (upward) or conclusions (downward) of `start`, breadth first, only through rows
    the grants permit, at most max_hops deep and max_rows in all."""
    out = Walked()
    seen = set(start)
    frontier = list(start)
    for hop in range(1, max_hops + 1):
        if not frontier or len(out.rows) >= max_rows:
            break
        edges = await graph_repo.edges(conn, frontier, upward=upward)
        wanted = []
        for edge in edges:
            other = edge["premise_id"] if upward else edge["derived_id"]
            if other not in seen:
                seen.add(other)
                wanted.append(other)
        rows = {r["id"]: r for r in await graph_repo.nodes(conn, wanted)}
        frontier = []
        for other in wanted:
            row = rows.get(other)
            # A deleted row or one outside the grants is skipped, and not walked through.
            if row is None or not permits(grants, row["scope"]):
                continue
            if len(out.rows) >= max_rows:
                break
            out.rows.append(row)
            out.hops[other] = hop
            frontier.append(other)
    return out


class Graph:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def add_evidence(
        self, principal: str, grants: Sequence[str], derived_text: str, premise_texts: Sequence[str]
    ) -> uuid.UUID:
        derived = validation.parse_id(derived_text)
        premises = list(dict.fromkeys(validation.parse_id(p) for p in premise_texts))
        if not premises:
            raise InvalidArgument("name at least one premise id the conclusion rests on")
        if len(premises) > MAX_PREMISES:
            raise InvalidArgument(f"{len(premises)} premises; at most {MAX_PREMISES} in one call")
        if derived in premises:
            raise InvalidArgument(f"{derived} cannot be its own premise")
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await rawlog.lock_head(conn)
                await add_edges_checked(conn, principal, grants, derived, premises, record=True)
        except asyncpg.CheckViolationError as exc:
            raise InvalidArgument(
                f"these edges would close a cycle in the evidence graph ({exc.args[0] if exc.args else exc}); "
                "a conclusion cannot rest, even indirectly, on itself"
            ) from exc
        return derived

    async def evidence(
        self, grants: Sequence[str], memory_text: str, depth: str = "premises"
    ) -> intelligence_pb2.EvidenceResponse:
        memory_id = validation.parse_id(memory_text)
        depth = depth or "premises"
        if depth not in ("premises", "ancestry"):
            raise InvalidArgument(f"depth {depth!r} is unknown here; use premises (direct) or ancestry")
        hops = 1 if depth == "premises" else MAX_HOPS
        async with self.pool.acquire() as conn:
            row = await graph_repo.node(conn, memory_id)
            if row is None or not permits(grants, row["scope"]):
                raise NotFound(f"no memory {memory_text} in your scopes")
            up = await walk(conn, grants, [memory_id], upward=True, max_hops=hops)
            down = await walk(conn, grants, [memory_id], upward=False, max_hops=hops)
        return intelligence_pb2.EvidenceResponse(
            memory=node_message(row),
            premises=[node_message(r, up.hops[r["id"]]) for r in up.rows],
            derived=[node_message(r, down.hops[r["id"]]) for r in down.rows],
        )

    async def create_identity(
        self, principal: str, grants: Sequence[str], scope: str, name: str
    ) -> asyncpg.Record:
        validation.check_scope(scope)
        if not permits(grants, scope):
            raise PermissionDenied(f"scope {scope!r} is not granted to this token")
        name = name.strip()
        if not name or len(name) > 200:
            raise InvalidArgument(
                "an identity's name must be 1-200 characters, e.g. 'alice' or 'the build bot'"
            )
        async with self.pool.acquire() as conn:
            row = await graph_repo.insert_identity(conn, uuid.uuid4(), scope, name, principal)
        if row is None:
            raise InvalidArgument(f"scope {scope!r} already has an identity named {name!r}")
        return row

    async def set_perspective(
        self, principal: str, grants: Sequence[str], memory_text: str, observer_text: str, observed_text: str
    ) -> tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None]:
        memory_id = validation.parse_id(memory_text)
        ids = [validation.parse_id(t, "identity") if t else None for t in (observer_text, observed_text)]
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            row = await graph_repo.node(conn, memory_id)
            if row is None or not permits(grants, row["scope"]):
                raise NotFound(f"no memory {memory_text} in your scopes")
            for identity_id in ids:
                if identity_id is None:
                    continue
                ident = await graph_repo.identity(conn, identity_id)
                # Identities are owned by their author: only the owner attaches them.
                if ident is None or not permits(grants, ident["scope"]):
                    raise NotFound(f"no identity {identity_id} in your scopes")
                if ident["owner_id"] != principal:
                    raise PermissionDenied(
                        f"identity {identity_id} belongs to {ident['owner_id']!r}; only its owner may attach it"
                    )
            await graph_repo.set_perspective(conn, memory_id, ids[0], ids[1])
            await rawlog.append(
                conn,
                scope=row["scope"],
                kind="memory",
                operation="perspective",
                author=principal,
                target_id=memory_id,
                payload={
                    "v": payloads.PAYLOAD_VERSION,
                    "op": "perspective",
                    "id": str(memory_id),
                    "observer": str(ids[0]) if ids[0] else None,
                    "observed": str(ids[1]) if ids[1] else None,
                },
            )
        return memory_id, ids[0], ids[1]


async def add_edges_checked(
    conn: asyncpg.Connection,
    principal: str,
    grants: Sequence[str],
    derived: uuid.UUID,
    premises: Sequence[uuid.UUID],
    *,
    record: bool,
) -> int:
    """Inside the caller's transaction (chain head held): check every endpoint is a memory the
    grants permit, insert the edges (the cycle trigger may raise CheckViolationError), and when
    `record`, append the raw-log record that lets a rebuild restore them."""
    rows = {r["id"]: r for r in await graph_repo.nodes(conn, [derived, *premises])}
    for memory_id in (derived, *premises):
        row = rows.get(memory_id)
        if row is None or not permits(grants, row["scope"]):
            raise NotFound(f"no memory {memory_id} in your scopes")
    added = await graph_repo.add_edges(conn, derived, premises, principal)
    if record:
        await rawlog.append(
            conn,
            scope=rows[derived]["scope"],
            kind="memory",
            operation="evidence",
            author=principal,
            target_id=derived,
            payload=payloads.evidence(derived, list(premises), datetime.now(UTC)),
        )
    return added
