"""Tiers 0 and 1 (the structural model), deterministic: the project map, and path -> component -> constraints.

A path belongs to the component with the most specific matching glob (the rule is in
hypermnesia.structure_glob); equal specificity goes to the higher priority, and a remaining tie to
the alphabetically first slug, which the answer says. The rules for a path are that component's
active constraints, the active must/should constraints of the components it has a relationship
to (one hop, never two), and the global invariants; each says why it applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc

from hypermnesia.errors import NotFound
from hypermnesia.grpc_server import Registration
from hypermnesia.structure_glob import GlobError, compile_glob, normalize_path
from hypermnesia.structure_map import check_repo
from hypermnesia.times import timestamp
from hypermnesia.v1 import structure_pb2, structure_pb2_grpc
from services.retrieval import structure_repo
from services.retrieval.replica import ReadRouter

SERVICE_NAME = structure_pb2.DESCRIPTOR.services_by_name["Structure"].full_name
GLOBAL_REASON = "global invariant"


@dataclass(frozen=True)
class Match:
    slug: str
    glob: str
    rank: tuple[int, int, int]  # (literal prefix, literal characters, priority)


def _best_glob(row: Any, path: str) -> Match | None:
    best: Match | None = None
    for pattern in row["globs"]:
        try:
            glob = compile_glob(pattern)
        except GlobError:
            continue  # validated at load; a glob the rules no longer accept matches nothing
        if glob.matches(path):
            rank = (*glob.specificity, row["priority"])
            if best is None or rank > best.rank:
                best = Match(row["slug"], pattern, rank)
    return best


def match_reason(match: Match) -> str:
    return f"matched glob {match.glob!r} of component {match.slug!r}"


def choose_component(rows: Sequence[Any], path: str) -> tuple[Match | None, str, str]:
    """The winning match, the sentence saying why it won, and a note when a tie needed the slug."""
    matches = [m for m in (_best_glob(row, path) for row in rows) if m is not None]
    if not matches:
        return None, "", ""
    # Highest rank first; among equal ranks the alphabetically first slug, so answers are stable.
    matches.sort(key=lambda m: (tuple(-x for x in m.rank), m.slug))
    win = matches[0]
    reason = match_reason(win)
    note = ""
    if len(matches) > 1:
        runner = matches[1]
        if runner.rank == win.rank:
            note = (
                f"components {win.slug!r} and {runner.slug!r} match equally specifically "
                "with the same priority; "
                f"{win.slug!r} was chosen by slug order. Give one of them a higher priority to decide"
            )
        elif runner.rank[:2] == win.rank[:2]:
            reason += (
                f" (as specific as {runner.slug!r}'s {runner.glob!r}; "
                f"priority {win.rank[2]} beats {runner.rank[2]})"
            )
        else:
            reason += f" (the most specific of {len(matches)} matching components)"
    return win, reason, note


def _component(row: Any, depends_on: list[str]) -> structure_pb2.Component:
    return structure_pb2.Component(
        slug=row["slug"],
        name=row["name"],
        parent=row["parent_slug"] or "",
        responsibility=row["responsibility"],
        globs=list(row["globs"]),
        priority=row["priority"],
        depends_on=depends_on,
    )


def _constraint(row: Any, reason: str = "") -> structure_pb2.Constraint:
    return structure_pb2.Constraint(
        id=row["id"],
        component=row["component_slug"] or "",
        kind=row["kind"],
        severity=row["severity"],
        status=row["status"],
        text=row["rule_text"],
        rationale=row["rationale"],
        reason=reason,
    )


def _edges(rels: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for rel in rels:
        out.setdefault(rel["from_slug"], []).append(rel)
    return out


def _no_map(repo: str) -> NotFound:
    return NotFound(
        f"no structure map is loaded for repo {repo!r}; load one with "
        f"`hypermnesia map load FILE --repo {repo}` or POST /map/{repo}"
    )


async def project_map(pool: asyncpg.Pool, repo: str) -> structure_pb2.ProjectMapResponse:
    """Tier 0: the repo's components, relationships and global invariants (NotFound without a map)."""
    repo = check_repo(repo)
    async with structure_repo.snapshot(pool) as conn:
        info = await structure_repo.map_info(conn, repo)
        if info is None:
            raise _no_map(repo)
        rows = await structure_repo.components(conn, repo)
        rels = await structure_repo.relationships(conn, repo)
        invariants = await structure_repo.global_invariants(conn, repo)
    edges = _edges(rels)
    response = structure_pb2.ProjectMapResponse(
        repo=repo,
        components=[_component(r, [e["to_slug"] for e in edges.get(r["slug"], [])]) for r in rows],
        invariants=[_constraint(c, GLOBAL_REASON) for c in invariants],
        relationships=[
            structure_pb2.Relationship(
                from_component=e["from_slug"], to_component=e["to_slug"], kind=e["kind"]
            )
            for e in rels
        ],
        source_name=info["source_name"],
        source_sha256=info["source_sha256"],
        loaded_by=info["loaded_by"],
    )
    response.loaded_at.CopyFrom(timestamp(info["loaded_at"]))
    return response


async def resolve_path(pool: asyncpg.Pool, repo: str, path: str) -> structure_pb2.ResolvePathResponse:
    """Tier 1: the component a path belongs to and the rules that apply to it, each with its reason."""
    repo = check_repo(repo)
    path = normalize_path(path)
    async with structure_repo.snapshot(pool) as conn:
        if await structure_repo.map_info(conn, repo) is None:
            raise _no_map(repo)
        rows = await structure_repo.components(conn, repo)
        win, reason, note = choose_component(rows, path)
        out_edges = _edges(await structure_repo.relationships(conn, repo)).get(win.slug, []) if win else []
        neighbours = [e["to_slug"] for e in out_edges]
        found = await structure_repo.applicable_constraints(conn, repo, win.slug if win else None, neighbours)
    response = structure_pb2.ResolvePathResponse(repo=repo, path=path, matched=win is not None, note=note)
    if win is None:
        response.note = f"no component's globs match {path!r}; only the global invariants apply"
    else:
        row = next(r for r in rows if r["slug"] == win.slug)
        response.component.CopyFrom(_component(row, neighbours))
        response.matched_glob = win.glob
        response.reason = reason
        own = match_reason(win)
        response.constraints.extend(_constraint(c, own) for c in found if c["component_slug"] == win.slug)
        for edge in out_edges:
            via = f"via dependency {win.slug} -> {edge['to_slug']}"
            if edge["kind"] != "depends_on":
                via += f" ({edge['kind']})"
            response.constraints.extend(
                _constraint(c, via) for c in found if c["component_slug"] == edge["to_slug"]
            )
    response.constraints.extend(_constraint(c, GLOBAL_REASON) for c in found if c["component_slug"] is None)
    return response


class StructureServicer(structure_pb2_grpc.StructureServicer):
    """Reads need no scope: the gateway admits any valid token to the map (it holds rules, not memories).
    Context assembly calls the same functions (project_map, resolve_path) directly."""

    def __init__(self, router: ReadRouter) -> None:
        self.router = router

    # These requests carry no min_lsn: a map just loaded may show up the replica's lag later.
    async def ProjectMap(
        self, request: structure_pb2.ProjectMapRequest, context: grpc.aio.ServicerContext
    ) -> structure_pb2.ProjectMapResponse:
        return await self.router.read(0, lambda pool: project_map(pool, request.repo))

    async def ResolvePath(
        self, request: structure_pb2.ResolvePathRequest, context: grpc.aio.ServicerContext
    ) -> structure_pb2.ResolvePathResponse:
        return await self.router.read(0, lambda pool: resolve_path(pool, request.repo, request.path))


def registration(router: ReadRouter) -> Registration:
    """The entry for `create_server([...])` in services/retrieval/server.py."""
    return (structure_pb2_grpc.add_StructureServicer_to_server, StructureServicer(router), SERVICE_NAME)
