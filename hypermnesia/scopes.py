"""The auth and scope model: bearer tokens -> principal + grants, and who may touch which scope.

A grant is a scope (`user:alice`, `shared`) or a prefix ending in `*` (`project:*`). Scopes are
otherwise free-form strings; `validation.check_scope` bounds their shape. A folder's project (the
one rule the hooks, MCP roots, `connect`, `map load` and `import` share) is `folder_project`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

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
    # Imported here: the hooks import this module on every prompt, and the errors bring in grpc.
    from hypermnesia.errors import PermissionDenied

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


# The headers that name a session's project and the agent's session (Claude Code's session id, sent
# by the hooks; the delivery log files what it delivers under it), and the file a folder records its
# project in.
PROJECT_HEADER = "X-Hypermnesia-Project"
SESSION_HEADER = "X-Hypermnesia-Session"
MCP_CONFIG = ".mcp.json"
CONNECT_SERVER = "hypermnesia"


@dataclass(frozen=True)
class FolderProject:
    """The project of a folder (docs/PROJECTS.md): `name` is its slug (scope `project:<name>`, and
    the repo of its map); `root` the folder it belongs to (where it is recorded, else the folder
    itself); `recorded_in` the .mcp.json that names it, or None when it is derived from the path."""

    name: str
    root: str
    recorded_in: str | None


def derived_project_name(path: str) -> str:
    """`<slug of basename>-<first 8 hex of sha256(path)>`: two checkouts with the same folder name
    stay apart. What a folder that records no project is called."""
    name = path.rsplit("/", 1)[-1] or "root"
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"{project_slug(name)}-{digest}"


def recorded_project(config: Any) -> str | None:
    """The project a parsed .mcp.json names for this server: the X-Hypermnesia-Project header of a
    server entry (HTTP), or `--project NAME` after `mcp` in its args (stdio). The entry named
    `hypermnesia` (what `hypermnesia connect` writes) is read first. A value that needs the
    environment (`${VAR}`) names nothing here: it could differ between the places that read it."""
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        return None
    ordered = sorted(servers.items(), key=lambda item: item[0] != CONNECT_SERVER)
    for _name, entry in ordered:
        if not isinstance(entry, dict):
            continue
        found = None
        headers = entry.get("headers")
        if isinstance(headers, dict):
            found = next(
                (v for k, v in headers.items() if isinstance(k, str) and k.lower() == PROJECT_HEADER.lower()),
                None,
            )
        args = entry.get("args")
        if found is None and isinstance(args, list) and "mcp" in args:
            words = [a for a in args if isinstance(a, str)]
            for i, word in enumerate(words):
                if word == "--project" and i + 1 < len(words):
                    found = words[i + 1]
                elif word.startswith("--project="):
                    found = word.split("=", 1)[1]
        if isinstance(found, str) and found.strip() and "${" not in found:
            return project_slug(found)
    return None


def _candidate_folders(folder: str) -> list[str]:
    """The folder and, inside a git work tree, each parent up to its root: where a project may be
    recorded. Outside a git work tree, the folder alone (a stray .mcp.json in a parent folder such
    as the home directory must not claim every folder under it)."""
    chain = [folder]
    while True:
        if os.path.exists(os.path.join(chain[-1], ".git")):
            return chain
        parent = os.path.dirname(chain[-1])
        if parent == chain[-1]:
            return [folder]
        chain.append(parent)


def folder_project(root_uri: str) -> FolderProject:
    """The one rule for a folder's project, shared by the hooks (their project folder), an MCP
    workspace root, `hypermnesia connect`, `map load` and `import`: the project recorded in the
    nearest .mcp.json (the folder, then its parents up to the git root), else the name derived from
    the folder's path."""
    folder = root_path(root_uri)
    for candidate in _candidate_folders(folder):
        config_file = os.path.join(candidate, MCP_CONFIG)
        try:
            with open(config_file, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError):
            continue
        name = recorded_project(config)
        if name:
            return FolderProject(name, candidate, config_file)
    return FolderProject(derived_project_name(folder), folder, None)


def project_name_for_root(root_uri: str) -> str:
    """The project (slug) of a folder or workspace root: `folder_project(root_uri).name`."""
    return folder_project(root_uri).name


def project_scope_for_root(root_uri: str) -> str:
    """`project:<project of the folder>`: step 2 of finding a session's project."""
    return PROJECT_PREFIX + project_name_for_root(root_uri)
