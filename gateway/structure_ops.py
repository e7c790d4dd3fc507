"""The structure operations (tiers 0/1) behind both the MCP tools and the REST routes: pick the
repo, check the grant for loads, call the service, and shape the answer as JSON."""

from __future__ import annotations

from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from hypermnesia.errors import InvalidArgument
from hypermnesia.scopes import PROJECT_PREFIX, require
from hypermnesia.structure_glob import normalize_path
from hypermnesia.structure_map import MAX_SOURCE_BYTES, check_repo
from hypermnesia.v1 import common_pb2, structure_pb2, structure_pb2_grpc


def _stubs(
    backends: Backends,
) -> tuple[structure_pb2_grpc.StructureStub, structure_pb2_grpc.StructureAdminStub]:
    return backends.structure, backends.structure_admin


def repo_for(session: Session, repo: str | None) -> str:
    """The named repo, or the session's project (X-Hypermnesia-Project) when none is named."""
    if repo is None or repo == "":
        return check_repo(session.project_scope.removeprefix(PROJECT_PREFIX))
    return check_repo(repo)


def _caller(session: Session) -> common_pb2.Caller:
    return common_pb2.Caller(principal=session.principal.id, grants=list(session.principal.grants))


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


async def project_map(backends: Backends, session: Session, repo: str | None) -> dict[str, Any]:
    request = structure_pb2.ProjectMapRequest(caller=_caller(session), repo=repo_for(session, repo))
    r = await backends.call(_stubs(backends)[0].ProjectMap, request)
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
            "loaded_at": r.loaded_at.ToDatetime().isoformat() + "Z",
            "loaded_by": r.loaded_by,
        },
    }


async def resolve(backends: Backends, session: Session, repo: str | None, path: str) -> dict[str, Any]:
    # Checked here too: text protobuf cannot carry (lone surrogates) must not reach the wire.
    path = normalize_path(path)
    request = structure_pb2.ResolvePathRequest(
        caller=_caller(session), repo=repo_for(session, repo), path=path
    )
    r = await backends.call(_stubs(backends)[0].ResolvePath, request)
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


def authorize_load(session: Session, repo: str | None) -> str:
    """The repo to load, after checking the caller holds a grant on project:<repo>."""
    name = repo_for(session, repo)
    require(session.principal.grants, [PROJECT_PREFIX + name])
    return name


async def load(
    backends: Backends, session: Session, repo: str | None, source: str, source_name: str
) -> dict[str, Any]:
    name = authorize_load(session, repo)
    if not source.strip():
        raise InvalidArgument("the map is empty; send the map file's text (YAML or JSON) as the body")
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument("the map is not valid UTF-8 text; send UTF-8") from exc
    if size > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"the map is larger than {MAX_SOURCE_BYTES:,} bytes; split it")
    request = structure_pb2.LoadMapRequest(
        caller=_caller(session), repo=name, source=source, source_name=source_name
    )
    r = await backends.call(_stubs(backends)[1].LoadMap, request)
    return {
        "repo": r.repo,
        "components": r.components,
        "constraints": r.constraints,
        "relationships": r.relationships,
        "replaced": r.replaced,
        "sha256": r.source_sha256,
    }
