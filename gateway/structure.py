"""The structure operations (tiers 0/1: a repository's map and the rules for a path), one request model
and one function per operation. A repo left unnamed is the session's project."""

from __future__ import annotations

from typing import Any, TypeVar

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import Request, field
from gateway.shaping import caller, load_map_json, project_map_json, resolve_json, to_proto
from hypermnesia.scopes import PROJECT_PREFIX, permits, require
from hypermnesia.structure_map import MAX_SOURCE_BYTES
from hypermnesia.v1 import structure_pb2

__all__ = ["LoadMap", "ProjectMap", "ResolvePath", "load", "project_map", "resolve"]

M = TypeVar("M", structure_pb2.ProjectMapRequest, structure_pb2.ResolvePathRequest)

_REPO = "The repository, e.g. 'my-repo'; defaults to this session's project."


def _repo(session: Session, repo: str | None) -> str:
    """The named repo, or the session's project (X-Hypermnesia-Project) when none is named."""
    return repo or session.project_repo


def _readable_repo(session: Session, repo: str | None) -> str:
    """The repo of a read. A map holds rules, not memories, so any valid token may read one; but
    where projects are a security boundary (HM_PROJECT_REQUIRES_GRANT) a map is its project's."""
    name = _repo(session, repo)
    if session.project_needs_grant:
        require(session.grants, [PROJECT_PREFIX + name])
    return name


def _read(message: M, session: Session, request: ProjectMap | ResolvePath) -> M:
    """A read's message: the request's fields, the caller, and the repo it may read."""
    return to_proto(message, request, caller=caller(session), repo=_readable_repo(session, request.repo))


def _loaded_by(session: Session, repo: str, principal: str) -> str:
    """Who loaded the map, told only to a caller who may load it too: a principal's name is not
    for every token that may read the rules."""
    return principal if permits(session.grants, PROJECT_PREFIX + repo) else ""


class ProjectMap(Request):
    repo: str | None = field(_REPO, None)


async def project_map(backends: Backends, session: Session, request: ProjectMap) -> dict[str, Any]:
    """The repository's hand-curated map: its components (a tree through `parent`), what each
    is responsible for, their relationships, and the global invariants that always apply.
    Call it when you start working in a repository. repo defaults to this session's project."""
    r = await backends.call(
        backends.structure.ProjectMap, _read(structure_pb2.ProjectMapRequest(), session, request)
    )
    return project_map_json(r, _loaded_by(session, r.repo, r.loaded_by))


class ResolvePath(Request):
    path: str = field("A file path relative to the repository root, e.g. 'src/app.py'.")
    repo: str | None = field(_REPO, None)


async def resolve(backends: Backends, session: Session, request: ResolvePath) -> dict[str, Any]:
    """The rules to follow before editing a file: the component the path belongs to, its
    constraints, those of the components it depends on, and the global invariants, each with
    why it applies. path is relative to the repository root (e.g. 'src/app.py'); repo
    defaults to this session's project."""
    r = await backends.call(
        backends.structure.ResolvePath, _read(structure_pb2.ResolvePathRequest(), session, request)
    )
    return resolve_json(r)


class LoadMap(Request):
    repo: str | None = field(_REPO, None)
    source: str = field("The map file's text: YAML, or the same as JSON.", max_length=MAX_SOURCE_BYTES)
    source_name: str = field("The file's name, used in error messages.", "request body")


async def load(backends: Backends, session: Session, request: LoadMap) -> dict[str, Any]:
    """Replace the repository's map with this one, atomically: a map that fails validation leaves
    the previous one in place. Needs a grant on project:<repo>."""
    message = to_proto(
        structure_pb2.LoadMapRequest(), request, caller=caller(session), repo=_repo(session, request.repo)
    )
    r = await backends.call(backends.structure_admin.LoadMap, message)
    return load_map_json(r)
