"""Bearer tokens kept in the store: made and revoked by the admin CLI, resolved for the gateway.

A token is `hm_` + 43 URL-safe characters (256 random bits); the store keeps its sha256 only, so
the text is shown once, when it is made. The Tokens RPC answers who a token hash stands for.
"""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC, datetime

import asyncpg
import grpc

from hypermnesia import validation
from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.grpc_server import Registration
from hypermnesia.scopes import token_sha256
from hypermnesia.v1 import tokens_pb2, tokens_pb2_grpc
from services.curation import tokens_repo

SERVICE_NAME = tokens_pb2.DESCRIPTOR.services_by_name["Tokens"].full_name
PREFIX = "hm_"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_PRINCIPAL_CHARS = 200


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def _check_grant(grant: str) -> str:
    # A grant is a scope, or a scope prefix ending in '*' ('project:*'), or '*' for every scope.
    if grant != "*":
        validation.check_scope(grant[:-1] if grant.endswith("*") and len(grant) > 1 else grant)
    return grant


async def create(
    pool: asyncpg.Pool, principal: str, scopes: list[str], description: str = ""
) -> tuple[str, asyncpg.Record]:
    """A new token for `principal` with these grants; returns (token text, its row)."""
    principal = principal.strip()
    if not principal or len(principal) > MAX_PRINCIPAL_CHARS:
        raise InvalidArgument(f"the principal must be 1-{MAX_PRINCIPAL_CHARS} characters, e.g. 'alice'")
    if not scopes:
        raise InvalidArgument(
            "give the token at least one scope (--scope user:alice, --scope 'project:*' ...)"
        )
    grants = [_check_grant(s) for s in scopes]
    validation.check_description(description)
    token = new_token()
    row = await tokens_repo.insert(pool, token_sha256(token), principal, grants, description)
    return token, row


async def revoke(pool: asyncpg.Pool, token_id: str) -> asyncpg.Record:
    try:
        parsed = uuid.UUID(token_id)
    except ValueError as exc:
        raise InvalidArgument(
            f"{token_id[:60]!r} is not a token id; `hypermnesia token list` shows them"
        ) from exc
    row = await tokens_repo.revoke(pool, parsed, datetime.now(UTC))
    if row is None:
        raise NotFound(f"no token {token_id}; `hypermnesia token list` shows the ids")
    return row


class TokensServicer(tokens_pb2_grpc.TokensServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def Resolve(
        self, request: tokens_pb2.ResolveTokenRequest, context: grpc.aio.ServicerContext
    ) -> tokens_pb2.ResolveTokenResponse:
        if not _SHA256_HEX.match(request.token_sha256):
            raise InvalidArgument("token_sha256 must be 64 lower-case hex digits")
        row = await tokens_repo.active(self.pool, request.token_sha256)
        if row is None:
            return tokens_pb2.ResolveTokenResponse(found=False)
        return tokens_pb2.ResolveTokenResponse(
            found=True, principal=row["principal"], scopes=list(row["scopes"])
        )


def registration(pool: asyncpg.Pool) -> Registration:
    """The entry for `create_server([...])` in services/curation/server.py."""
    return (tokens_pb2_grpc.add_TokensServicer_to_server, TokensServicer(pool), SERVICE_NAME)
