"""Who is calling (bearer token -> principal) and which project the session belongs to.

The project scope of a session (seed 001's three steps): the `X-Hypermnesia-Project` header,
else the first workspace root the MCP client advertises, else `default` (with a warning logged
once per process, since projects then share one pool). The session's project scope is readable and
writable for any valid token; a token's grants add scopes. With HM_PROJECT_REQUIRES_GRANT=true the
project scope needs a grant like any other (projects as a security boundary).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from hypermnesia.errors import HypermnesiaError
from hypermnesia.scopes import (
    ANONYMOUS,
    PROJECT_PREFIX,
    Principal,
    permits,
    project_scope,
    project_scope_for_root,
    token_table,
)
from hypermnesia.settings import GatewaySettings

__all__ = ["PROJECT_HEADER", "Authenticator", "Session", "Unauthenticated"]

log = logging.getLogger(__name__)

PROJECT_HEADER = "x-hypermnesia-project"
AUTH_HINT = "send the header 'Authorization: Bearer <token>'"


class Unauthenticated(HypermnesiaError):
    code = grpc.StatusCode.UNAUTHENTICATED


@dataclass(frozen=True)
class Session:
    principal: Principal
    project_scope: str
    project_source: str  # "header" | "roots" | "default"
    project_needs_grant: bool = False

    @property
    def grants(self) -> tuple[str, ...]:
        """What this session may touch: the token's grants plus its own project scope (unless
        projects need a grant)."""
        grants = self.principal.grants
        if self.project_needs_grant or permits(grants, self.project_scope):
            return grants
        return (*grants, self.project_scope)

    def readable_scopes(self) -> list[str]:
        """The scopes a search or listing reads when the caller names none: the session's project
        plus every concrete grant that is not another project (seed 001: never another project's)."""
        scopes = [self.project_scope] if permits(self.grants, self.project_scope) else []
        for grant in self.principal.grants:
            if grant.endswith("*") or grant in scopes:
                continue
            if grant.startswith(PROJECT_PREFIX) and grant != self.project_scope:
                continue
            scopes.append(grant)
        return scopes


class Authenticator:
    def __init__(
        self,
        tokens: Mapping[str, Mapping],
        *,
        require_auth: bool,
        default_project: str,
        project_requires_grant: bool = False,
    ) -> None:
        self.tokens = token_table(tokens)
        self.require_auth = require_auth
        self.default_project = default_project
        self.project_requires_grant = project_requires_grant
        self._warned_default = False

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Authenticator:
        return cls(
            settings.auth_tokens,
            require_auth=settings.require_auth,
            default_project=settings.default_project,
            project_requires_grant=settings.project_requires_grant,
        )

    async def principal(self, headers: Mapping[str, str]) -> Principal:
        raw = headers.get("authorization", "")
        scheme, _, token = raw.partition(" ")
        token = token.strip()
        if token and scheme.lower() == "bearer" and token in self.tokens:
            return self.tokens[token]
        if not self.require_auth:
            return Principal(ANONYMOUS, ("*",))
        if not raw:
            raise Unauthenticated(f"missing bearer token; {AUTH_HINT}")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(f"the Authorization header is not a bearer token; {AUTH_HINT}")
        raise Unauthenticated(
            "unknown bearer token; use a token listed in HM_AUTH_TOKENS or made by `hypermnesia token create` "
            f"({AUTH_HINT})"
        )

    async def session(self, headers: Mapping[str, str], root: str | None = None) -> Session:
        """The session of a request: its principal and project. `root` is the first workspace root
        the MCP client advertised (None over REST, or when the client has none)."""
        principal = await self.principal(headers)
        name = headers.get(PROJECT_HEADER, "").strip()
        if name:
            return Session(principal, project_scope(name), "header", self.project_requires_grant)
        if root:
            return Session(principal, project_scope_for_root(root), "roots", self.project_requires_grant)
        if not self._warned_default:
            self._warned_default = True
            log.warning(
                "a session had neither an X-Hypermnesia-Project header nor a workspace root, so it uses "
                "the %r scope: every project sharing this server lands there. Set the header per project "
                "to isolate them",
                self.default_project,
            )
        return Session(principal, self.default_project, "default", self.project_requires_grant)
