"""Limits that protect a shared box (issue 20): the request body's size, and per-principal rate
limits on writes and on searches (token buckets), for REST and MCP alike.

One ASGI middleware in front of every route, so a refused request never reaches an operation:
nothing is half-written. The body is refused (413) from its Content-Length, or as soon as a body
sent without one grows past HM_MAX_BODY_BYTES, before it is read whole. A REST request over its
bucket answers 429 with Retry-After from this middleware; an MCP tool call takes its token in the
tool itself (gateway.mcp_tools), before its arguments are read or any service is called, and over
its bucket answers a tool error (a result with isError, what an MCP client shows the model as the
tool's answer). Refusals are counted in `hm_rate_limited_total{kind}`, never labelled by principal
(an unbounded label set).

Which operations are writes and which are searches is each operation's `limit` in the operation
table (gateway.operations). Anything else (reads by id, listings, health) is not rate limited.
MCP over stdio (`hypermnesia mcp`) is one local client's own process and is not.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import Authenticator
from gateway.operations import SEARCH, WRITE, Operation
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

__all__ = ["Bucket", "Limits", "RateLimiter", "Refusal", "rest_kinds"]


def rest_kinds(operations: Sequence[Operation]) -> list[tuple[str, re.Pattern[str], str]]:
    """(method, path pattern, kind) of every rate-limited REST route, matched as the router matches paths."""
    return [
        (route.method, compile_path(route.path)[0], operation.limit)
        for operation in operations
        if operation.limit is not None
        for route in operation.rest
    ]


RATE_LIMITED = Counter(
    "hm_rate_limited_total", "Requests refused by a rate limit (429 or an MCP tool error)", ["kind"]
)
for _kind in (WRITE, SEARCH):
    RATE_LIMITED.labels(kind=_kind)  # both series at 0 from the start, so a dashboard sees them
# JSON-RPC's "invalid request", for an MCP body refused for its size.
MCP_INVALID_REQUEST = -32600
MCP_PATH = "/mcp"
# A refused body is drained up to this many times the limit before the connection closes.
DRAIN_FACTOR = 4
# Idle buckets are dropped past this many (a burst of distinct principals must not grow memory).
MAX_BUCKETS = 10_000


class Bucket:
    """A token bucket: `per_min` tokens a minute, refilled continuously, holding at most `burst`."""

    def __init__(self, per_min: float, burst: int, now: float) -> None:
        self.rate = per_min / 60.0
        self.burst = float(burst)
        self.tokens = float(burst)
        self.at = now

    def take(self, now: float) -> float:
        """0 when a token was taken; else the seconds until one will be there."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def full(self, now: float) -> bool:
        return self.tokens + (now - self.at) * self.rate >= self.burst


@dataclass(frozen=True)
class Refusal:
    kind: str
    per_min: float
    retry_after_s: float

    @property
    def retry_after(self) -> int:
        """Whole seconds for the Retry-After header (rounded up: retrying on time succeeds)."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def message(self) -> str:
        plural = "writes" if self.kind == WRITE else "searches"
        return f"rate limit: {self.per_min:g} {plural} a minute for this token; retry in {self.retry_after} s"


class RateLimiter:
    """One bucket per (principal, kind); kinds whose rate is 0 are not limited."""

    def __init__(self, limits: Mapping[str, tuple[float, int]]) -> None:
        self.limits = {kind: limit for kind, limit in limits.items() if limit[0] > 0}
        self._buckets: dict[tuple[str, str], Bucket] = {}

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> RateLimiter:
        return cls(
            {
                WRITE: (settings.rate_writes_per_min, settings.rate_writes_burst),
                SEARCH: (settings.rate_searches_per_min, settings.rate_searches_burst),
            }
        )

    def limits_kind(self, kind: str | None) -> bool:
        return kind is not None and kind in self.limits

    def take(self, principal: str, kind: str) -> Refusal | None:
        per_min, burst = self.limits[kind]
        now = time.monotonic()
        bucket = self._buckets.get((principal, kind))
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._buckets = {k: b for k, b in self._buckets.items() if not b.full(now)}
            bucket = self._buckets[(principal, kind)] = Bucket(per_min, burst, now)
        wait = bucket.take(now)
        if wait <= 0:
            return None
        RATE_LIMITED.labels(kind=kind).inc()
        return Refusal(kind, per_min, wait)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


class BodyTooLarge(Exception):
    pass


class Limits:
    """The ASGI middleware (gateway/app.py adds it around the whole app)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        limiter: RateLimiter,
        auth: Authenticator,
        operations: Sequence[Operation],
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter
        self.auth = auth
        self.routes = rest_kinds(operations)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        mcp = scope["path"].rstrip("/") == MCP_PATH
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large(scope, receive, send, mcp)
            return
        if length is None and _header(scope, b"transfer-encoding"):
            # A body without a length is read here, up to the limit, and handed on as it came.
            try:
                body = await self._read_body(receive)
            except BodyTooLarge:
                await self._too_large(scope, receive, send, mcp)
                return
            receive = _replay(body, receive)
        # An MCP tool call takes its token where the tool is called (gateway.mcp_tools), which
        # knows the tool without reading the JSON-RPC body here.
        kind = None if mcp else self._rest_kind(scope)
        if self.limiter.limits_kind(kind):
            assert kind is not None
            refusal = await self.check(scope, kind)
            if refusal is not None:
                await _json(send, 429, _error("RESOURCE_EXHAUSTED", refusal.message), refusal.retry_after)
                return
        await self.app(scope, receive, send)

    def _rest_kind(self, scope: Scope) -> str | None:
        for method, pattern, kind in self.routes:
            if scope["method"] == method and pattern.match(scope["path"]):
                return kind
        return None

    async def check(self, scope: Scope, kind: str) -> Refusal | None:
        """A refusal when the caller's `kind` bucket is empty; the caller is the request's
        (Authenticator.identity_of), found once and kept in its scope."""
        try:
            identity = await self.auth.identity_of(scope)
        except HypermnesiaError:
            return None  # the route answers 401 (or 503) itself, saying what to send
        return self.limiter.take(identity.principal.id, kind)

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, mcp: bool) -> None:
        message = (
            f"the request body is larger than {self.max_body_bytes:,} bytes (HM_MAX_BODY_BYTES); send "
            "less in one request (split an import into batches), or raise HM_MAX_BODY_BYTES"
        )
        body = _error("PAYLOAD_TOO_LARGE", message)
        if mcp:
            # Also a JSON-RPC error, which an MCP client shows (for a bare HTTP error it shows no message).
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": MCP_INVALID_REQUEST,
                    "message": message,
                    "data": {"code": "PAYLOAD_TOO_LARGE"},
                },
            }
        await _json(send, 413, body, drain=lambda: self._discard(receive))

    async def _discard(self, receive: Receive) -> None:
        """Read and drop what the client still sends of a refused body, up to DRAIN_FACTOR times
        the limit: closing a socket with unread data resets it, and the client may then lose the
        413 it was sent. Past that bound the connection is closed regardless."""
        size = 0
        while size <= self.max_body_bytes * DRAIN_FACTOR:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


async def _json(
    send: Send,
    status: int,
    body: dict[str, Any],
    retry_after: int | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Answer `body`. With `drain`, the connection closes after the answer, and `drain` runs between
    the answer's bytes and its end (a server reads no request body once a response is complete)."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    if drain is not None:
        # Whatever of a refused body was not drained must not be parsed as the next request.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": drain is not None})
    if drain is not None:
        await drain()
        await send({"type": "http.response.body", "body": b""})
