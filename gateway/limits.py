"""Limits that protect a shared box (issue 20): the request body's size, and per-principal rate
limits on writes and on searches (token buckets), for REST and MCP alike.

One ASGI middleware in front of every route, so a refused request never reaches an operation:
nothing is half-written. The body is refused (413) from its Content-Length, or as soon as a body
sent without one grows past HM_MAX_BODY_BYTES, before it is read whole. A request over its bucket
answers 429 with Retry-After on REST, and a tool error on MCP (a JSON-RPC result with isError, what
an MCP client shows the model as the tool's answer). Refusals are counted in
`hm_rate_limited_total{kind}`, never labelled by principal (an unbounded label set).

Which operations are writes and which are searches is OPERATIONS, the one table: MCP tools by name,
REST routes by method and path template. Anything not in it (reads by id, listings, health) is not
rate limited. MCP over stdio (`hypermnesia mcp`) is one local client's own process and is not.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from prometheus_client import Counter
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import Authenticator
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

__all__ = ["OPERATIONS", "SEARCH", "WRITE", "Bucket", "Limits", "RateLimiter"]

WRITE = "write"
SEARCH = "search"

OPERATIONS: dict[str, str] = {
    # MCP tool                      # REST route (method and path template)
    "memory_save": WRITE,           "POST /memories": WRITE,
    "memory_update": WRITE,         "PATCH /memories/{memory_id}": WRITE,
    "memory_delete": WRITE,         "DELETE /memories/{memory_id}": WRITE,
    "memory_forget": WRITE,         "POST /memories/forget": WRITE,
    "memory_restore": WRITE,        "POST /memories/{memory_id}/restore": WRITE,
                                    "POST /memories/{memory_id}/archive": WRITE,
    "memory_supersede": WRITE,      "POST /memories/{memory_id}/supersede": WRITE,
    "task_decide": WRITE,           "POST /tasks/{task_id}/{decision}": WRITE,
    "proposal_decide": WRITE,       "POST /proposals/{proposal_id}/approve": WRITE,
                                    "POST /proposals/{proposal_id}/reject": WRITE,
                                    "POST /records": WRITE,
                                    "POST /records/import": WRITE,
                                    "POST /records/rebuild": WRITE,
                                    "POST /map/{repo}": WRITE,
    "memory_search": SEARCH,        "POST /memories/search": SEARCH,
    "memory_context": SEARCH,       "POST /records/context": SEARCH,
    "memory_ask": SEARCH,           "POST /dialectic/ask": SEARCH,
    # The 3D map reads up to 5,000 memories and their edges: as costly as a search.
                                    "GET /viz/graph": SEARCH,
}  # fmt: skip

# The REST side of OPERATIONS: (method, path pattern, kind), matched as the router matches paths.
_ROUTES = [
    (method, compile_path(path)[0], kind)
    for key, kind in OPERATIONS.items()
    if " " in key
    for method, path in [key.split(" ", 1)]
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
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        mcp = scope["path"].rstrip("/") == MCP_PATH
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large(scope, receive, send, mcp)
            return
        kind = _rest_kind(scope) if not mcp else None
        body: bytes | None = None
        if mcp and scope["method"] == "POST" or (length is None and _header(scope, b"transfer-encoding")):
            # A body without a length is read here, up to the limit, and handed on as it came;
            # an MCP call's body tells which tool it calls.
            try:
                body = await self._read_body(receive)
            except BodyTooLarge:
                await self._too_large(scope, receive, send, mcp)
                return
            receive = _replay(body, receive)
        request_id: Any = None
        if mcp and body:
            kind, request_id = _tool_kind(body)
        if self.limiter.limits_kind(kind):
            assert kind is not None
            refusal = await self._check(scope, kind)
            if refusal is not None:
                if mcp:
                    await _tool_error(send, request_id, refusal, _header(scope, b"mcp-protocol-version"))
                else:
                    await _json(send, 429, _error("RESOURCE_EXHAUSTED", refusal.message), refusal.retry_after)
                return
        await self.app(scope, receive, send)

    async def _check(self, scope: Scope, kind: str) -> Refusal | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            principal = await self.auth.principal(headers)
        except HypermnesiaError:
            return None  # the route answers 401 (or 503) itself, saying what to send
        return self.limiter.take(principal.id, kind)

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
            # Also a JSON-RPC error, which an MCP client shows (gateway.app.RequireToken).
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


def _rest_kind(scope: Scope) -> str | None:
    for method, pattern, kind in _ROUTES:
        if scope["method"] == method and pattern.match(scope["path"]):
            return kind
    return None


def _tool_kind(body: bytes) -> tuple[str | None, Any]:
    """The kind of the tool an MCP request calls (None for any other request) and the request's id."""
    try:
        request = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(request, dict) or request.get("method") != "tools/call":
        return None, None
    params = request.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return (OPERATIONS.get(name) if isinstance(name, str) else None), request.get("id")


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


async def _tool_error(send: Send, request_id: Any, refusal: Refusal, version: str | None) -> None:
    answer: dict[str, Any] = {"content": [{"type": "text", "text": refusal.message}], "isError": True}
    if version in MODERN_PROTOCOL_VERSIONS:
        # Required from 2026-07-28 on; older clients were never sent it.
        answer["resultType"] = "complete"
    result = {"jsonrpc": "2.0", "id": request_id, "result": answer}
    await _json(send, 200, result, refusal.retry_after)
