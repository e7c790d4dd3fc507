"""The auth and scope model: bearer tokens -> principal + grants, and who may touch which scope.

A grant is a scope (`user:alice`, `shared`) or a prefix ending in `*` (`project:*`). Scopes are
otherwise free-form strings; `validation.check_scope` bounds their shape.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hypermnesia.errors import PermissionDenied

ANONYMOUS = "anonymous"
PROJECT_PREFIX = "project:"


@dataclass(frozen=True)
class Principal:
    id: str
    grants: tuple[str, ...]

    def may(self, scope: str) -> bool:
        return permits(self.grants, scope)


def permits(grants: Iterable[str], scope: str) -> bool:
    """True when some grant names the scope exactly or is a `*` prefix of it."""
    for grant in grants:
        if grant == "*" or grant == scope:
            return True
        if grant.endswith("*") and scope.startswith(grant[:-1]):
            return True
    return False


def require(grants: Iterable[str], scopes: Iterable[str]) -> None:
    """Raise PermissionDenied naming the first scope the grants do not cover."""
    grants = tuple(grants)
    for scope in scopes:
        if not permits(grants, scope):
            raise PermissionDenied(f"scope {scope!r} is not granted to this token")


def token_table(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, Principal]:
    return {
        token: Principal(id=entry["principal"], grants=tuple(entry.get("scopes", ())))
        for token, entry in raw.items()
    }


def project_scope_for_root(root_uri: str) -> str:
    """`project:<dirname>-<hash>` for an MCP workspace root (seed 001's step 2)."""
    path = root_uri.removeprefix("file://").rstrip("/")
    name = path.rsplit("/", 1)[-1] or "root"
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"{PROJECT_PREFIX}{name}-{digest}"


def readable_scopes(principal: Principal, project_scope: str) -> list[str]:
    """The scopes a search or listing reads when the caller names none: the session's project
    plus every concrete grant that is not another project (seed 001: never another project's)."""
    scopes = [project_scope] if principal.may(project_scope) else []
    for grant in principal.grants:
        if grant.endswith("*") or grant in scopes:
            continue
        if grant.startswith(PROJECT_PREFIX) and grant != project_scope:
            continue
        scopes.append(grant)
    return scopes
