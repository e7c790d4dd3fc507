"""The auth and scope model: bearer tokens -> principal + grants, and who may touch which scope.

A grant is a scope (`user:alice`, `shared`) or a prefix ending in `*` (`project:*`). Scopes are
otherwise free-form strings; `validation.check_scope` bounds their shape.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

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


def token_sha256(token: str) -> str:
    """What the store keeps of a bearer token, and what the gateway asks curation about."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_table(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, Principal]:
    return {
        token: Principal(id=entry["principal"], grants=tuple(entry.get("scopes", ())))
        for token, entry in raw.items()
    }


_SLUG_RUN = re.compile(r"[^a-z0-9._-]+")


def project_slug(name: str) -> str:
    """A project name as a scope-safe slug: lower case, anything outside [a-z0-9._-] folded to
    '-', trimmed. A leading `project:` is dropped, so a slug of a slug is itself."""
    text = name.strip().removeprefix(PROJECT_PREFIX).lower()
    return _SLUG_RUN.sub("-", text).strip("-.") or "root"


def project_scope(name: str) -> str:
    """`project:<slug>` for a project named by the X-Hypermnesia-Project header (step 1 of finding
    a session's project)."""
    return PROJECT_PREFIX + project_slug(name)


def root_path(root_uri: str) -> str:
    """The filesystem path of a workspace root given as a file:// URI (or as a plain path)."""
    if root_uri.startswith("file://"):
        parsed = urlsplit(root_uri)
        path = unquote(parsed.path)
    else:
        path = root_uri
    return path.rstrip("/") or "/"


def project_name_for_root(root_uri: str) -> str:
    """`<slug of basename>-<first 8 hex of sha256(path)>`: two checkouts with the same folder name
    stay apart, and a hook started in the same folder names the same project (step 2 of finding a
    session's project)."""
    path = root_path(root_uri)
    name = path.rsplit("/", 1)[-1] or "root"
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"{project_slug(name)}-{digest}"


def project_scope_for_root(root_uri: str) -> str:
    return PROJECT_PREFIX + project_name_for_root(root_uri)
