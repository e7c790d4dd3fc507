"""Who is calling (bearer token -> principal) and which project the session belongs to.

The project scope of a session, found in three steps: the `X-Hypermnesia-Project` header,
else the first workspace root the MCP client advertises, else `default` (with a warning logged
once per process, since projects then share one pool).

Which projects a token reaches depends on where it was made. A token of HM_AUTH_TOKENS keeps seed
001's rule, so its users change nothing: the session's project scope is readable and writable for
it, and its grants add scopes. A store token (`hypermnesia token create`) reaches only the projects
it is granted (`project:*` for all): a header naming another project opens nothing to it. With
HM_PROJECT_REQUIRES_GRANT=true every token needs the grant (projects as a security boundary).

Tokens come from HM_AUTH_TOKENS first, then from the store (`hypermnesia token create`): the gateway
holds no database connection, so it asks curation's Tokens.Resolve with the token's sha256 and
remembers the answer, found or not, for HM_TOKEN_CACHE_S seconds. A revoked token therefore stops
working within that time, and a flood of wrong tokens costs curation one lookup per token per period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import grpc
from starlette.types import Scope

from hypermnesia.errors import HypermnesiaError
from hypermnesia.scopes import (
    ANONYMOUS,
    PROJECT_PREFIX,
    Principal,
    permits,
    project_scope,
    project_scope_for_root,
    token_sha256,
    token_table,
)
from hypermnesia.settings import GatewaySettings

__all__ = [
    "AUTH_HINT",
    "PROJECT_HEADER",
    "Authenticator",
    "Identity",
    "Resolver",
    "Session",
    "Unauthenticated",
]

log = logging.getLogger(__name__)

PROJECT_HEADER = "x-hypermnesia-project"
AUTH_HINT = "send the header 'Authorization: Bearer <token>'"
# Cached answers kept at most; past it the expired ones go, and if none has expired, all of them
# (a burst of distinct wrong tokens must not grow the gateway's memory without bound).
MAX_CACHED_TOKENS = 10_000

# sha256 hex of a token -> its principal, or None when the store does not know it (or revoked it).
Resolver = Callable[[str], Awaitable[Principal | None]]


# Where identity_of keeps a request's caller in its ASGI scope's state.
IDENTITY_KEY = "hm_identity"


class Identity(NamedTuple):
    principal: Principal
    needs_grant: bool


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
        its project needs a grant: a store token's, or every token's under HM_PROJECT_REQUIRES_GRANT)."""
        grants = self.principal.grants
        if permits(grants, self.project_scope):
            return grants
        # The default scope is where sessions without a project land: a grant on every project
        # (`project:*`, what the first-run token holds) covers it too.
        every_project = self.project_source == "default" and permits(grants, PROJECT_PREFIX + "*")
        if self.project_needs_grant and not every_project:
            return grants
        return (*grants, self.project_scope)

    @property
    def project_repo(self) -> str:
        """The repo a request names when it names none: this session's project as a repo, the
        slug of its scope (`project:<slug>` -> `<slug>`), under which a folder's map is loaded."""
        return self.project_scope.removeprefix(PROJECT_PREFIX)

    def readable_scopes(self) -> list[str]:
        """The scopes a search or listing reads when the caller names none: the session's project
        plus every concrete grant that is not another project (a session never reads another project's)."""
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
        resolve: Resolver | None = None,
        cache_s: float = 10.0,
    ) -> None:
        """`resolve` looks a token's sha256 up in the store (None: HM_AUTH_TOKENS only); its
        answers are kept `cache_s` seconds."""
        self.tokens = token_table(tokens)
        self.require_auth = require_auth
        self.default_project = default_project
        self.project_requires_grant = project_requires_grant
        self.resolve = resolve
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._warned_default = False

    @classmethod
    def from_settings(cls, settings: GatewaySettings, resolve: Resolver | None = None) -> Authenticator:
        return cls(
            settings.auth_tokens,
            require_auth=settings.require_auth,
            default_project=settings.default_project,
            project_requires_grant=settings.project_requires_grant,
            resolve=resolve,
            cache_s=settings.token_cache_s,
        )

    async def identity_of(self, scope: Scope) -> Identity:
        """The caller of an HTTP request, resolved once and kept in the request's ASGI scope: the
        limiter, the route and the MCP tool all read it there. A failure is kept too, and raised
        again to whichever asks (the route answers it, naming the header to send)."""
        state = scope.setdefault("state", {})
        known = state.get(IDENTITY_KEY)
        if known is None:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            try:
                known = await self.identity(headers)
            except HypermnesiaError as exc:
                known = exc
            state[IDENTITY_KEY] = known
        if isinstance(known, HypermnesiaError):
            raise known
        assert isinstance(known, Identity)
        return known

    async def identity(self, headers: Mapping[str, str]) -> Identity:
        """The caller's principal, and whether its project scope needs a grant: true for a store
        token (and for every token under HM_PROJECT_REQUIRES_GRANT)."""
        raw = headers.get("authorization", "")
        scheme, _, token = raw.partition(" ")
        token = token.strip()
        bearer = bool(token) and scheme.lower() == "bearer"
        if bearer and token in self.tokens:
            return Identity(self.tokens[token], self.project_requires_grant)
        if not self.require_auth:
            return Identity(Principal(ANONYMOUS, ("*",)), self.project_requires_grant)
        if not raw:
            raise Unauthenticated(f"missing bearer token; {AUTH_HINT}")
        if not bearer:
            raise Unauthenticated(f"the Authorization header is not a bearer token; {AUTH_HINT}")
        stored = await self._stored(token)
        if stored is not None:
            return Identity(stored, True)
        raise Unauthenticated(
            "unknown bearer token (or a revoked one); use a token listed in HM_AUTH_TOKENS or made by "
            f"`hypermnesia token create` ({AUTH_HINT})"
        )

    async def _stored(self, token: str) -> Principal | None:
        """The store's answer for a token, from the cache while it is fresh. When curation cannot
        be asked, the resolver raises (503): the token may well be valid, so it is not "unknown"."""
        if self.resolve is None:
            return None
        digest = token_sha256(token)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        principal = await self.resolve(digest)
        if self.cache_s > 0:
            if len(self._cache) >= MAX_CACHED_TOKENS:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= MAX_CACHED_TOKENS:
                    self._cache.clear()
            self._cache[digest] = (now + self.cache_s, principal)
        return principal

    async def session(
        self, headers: Mapping[str, str], root: str | None = None, identity: Identity | None = None
    ) -> Session:
        """The session of a request: its principal and project. `root` is the first workspace root
        the MCP client advertised (None over REST, or when the client has none); `identity` the
        caller when already resolved (identity_of), else it is resolved from the headers."""
        principal, needs_grant = identity or await self.identity(headers)
        name = headers.get(PROJECT_HEADER, "").strip()
        if name:
            return Session(principal, project_scope(name), "header", needs_grant)
        if root:
            return Session(principal, project_scope_for_root(root), "roots", needs_grant)
        if not self._warned_default:
            self._warned_default = True
            log.warning(
                "a session had neither an X-Hypermnesia-Project header nor a workspace root, so it uses "
                "the %r scope: every project sharing this server lands there. Set the header per project "
                "to isolate them",
                self.default_project,
            )
        return Session(principal, self.default_project, "default", needs_grant)
