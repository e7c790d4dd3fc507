"""Who is calling (bearer token -> principal) and which project the session belongs to."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from hypermnesia import validation
from hypermnesia.errors import HypermnesiaError, InvalidArgument
from hypermnesia.scopes import ANONYMOUS, PROJECT_PREFIX, Principal, token_table

log = logging.getLogger(__name__)

PROJECT_HEADER = "x-hypermnesia-project"
_SLUG = re.compile(r"^[\w.\-:/@]+$")


class Unauthenticated(HypermnesiaError):
    code = grpc.StatusCode.UNAUTHENTICATED


@dataclass(frozen=True)
class Session:
    principal: Principal
    project_scope: str
    project_source: str  # "header" | "default"


class Authenticator:
    def __init__(self, tokens: Mapping[str, Mapping], *, require_auth: bool, default_project: str) -> None:
        self.tokens = token_table(tokens)
        self.require_auth = require_auth
        self.default_project = default_project
        self._warned_default = False

    def principal(self, headers: Mapping[str, str]) -> Principal:
        raw = headers.get("authorization", "")
        scheme, _, token = raw.partition(" ")
        if token and scheme.lower() == "bearer" and token.strip() in self.tokens:
            return self.tokens[token.strip()]
        if not self.require_auth:
            return Principal(ANONYMOUS, ("*",))
        if not raw:
            raise Unauthenticated("missing bearer token; send the header 'Authorization: Bearer <token>'")
        raise Unauthenticated("unknown bearer token; use a token listed in HM_AUTH_TOKENS")

    def session(self, headers: Mapping[str, str]) -> Session:
        principal = self.principal(headers)
        slug = headers.get(PROJECT_HEADER, "").strip()
        if slug:
            if not _SLUG.match(slug):
                raise InvalidArgument(
                    "X-Hypermnesia-Project must be a slug (letters, digits, . - _ : / @), e.g. 'my-repo'"
                )
            scope = slug if slug.startswith(PROJECT_PREFIX) else f"{PROJECT_PREFIX}{slug}"
            return Session(principal, validation.check_scope(scope), "header")
        if not self._warned_default:
            self._warned_default = True
            log.warning(
                "a request carried no X-Hypermnesia-Project header, so it uses the %r scope: every "
                "project sharing this server lands there. Set the header per project to isolate them",
                self.default_project,
            )
        return Session(principal, self.default_project, "default")
