"""The gateway's ASGI app: REST routes, the MCP endpoint at /mcp, /health and /metrics, the web UI
at /ui and the API's documentation at /docs (gateway.pages)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.auth import Authenticator
from gateway.backends import Backends
from gateway.deliveries import DeliveryLog
from gateway.errors import error_body, http_status, invalid_request, names_an_unknown_field
from gateway.limits import MCP_PATH, Limits, RateLimiter
from gateway.mcp_tools import build_mcp
from gateway.operations import OPERATIONS, Operation
from gateway.pages import McpOnly, add_pages, no_such_path
from gateway.rest import build_router, lean_parameters
from hypermnesia import __version__
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

log = logging.getLogger(__name__)

UI_DIR = Path(__file__).parent / "static" / "ui"


# What every check says when all is well (hypermnesia/status.py, which the gateway does not import:
# it reaches the database driver).
OK = "ok"
# /health asks retrieval and curation within this time; a service slower than it is "unreachable".
HEALTH_DEADLINE_S = 2.0
# Dependencies without which nothing is stored or found: any of them down makes /health 503.
ESSENTIAL = ("database", "retrieval", "curation")


async def health_report(backends: Backends) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of /health: every check `ok` or what is wrong, and each part's build.
    200 `ok`; 200 `degraded` when only the embedder is down (searches still answer from the keyword
    index, marked degraded); 503 `unavailable` when the database, retrieval or curation is."""
    answers = await backends.status(HEALTH_DEADLINE_S)
    checks: dict[str, str] = {}
    problems: dict[str, list[str]] = {}
    versions = {"gateway": __version__}
    for service, answer in answers.items():
        if isinstance(answer, str):
            checks[service] = answer
            continue
        checks[service] = OK
        versions[service] = answer.version
        for name, value in sorted(answer.checks.items()):
            if value == OK:
                checks.setdefault(name, OK)
            else:
                problems.setdefault(name, []).append(f"{value} (seen by {service})")
    for name, seen in problems.items():
        checks[name] = "; ".join(seen)
    for name in ("database", "embedder"):
        checks.setdefault(name, "unknown: neither retrieval nor curation answered, and they check it")
    if any(checks[name] != OK for name in ESSENTIAL):
        status, code = "unavailable", 503
    elif any(value != OK for value in checks.values()):
        status, code = "degraded", 200
    else:
        status, code = OK, 200
    return code, {"status": status, "version": __version__, "checks": checks, "versions": versions}


def create_app(
    settings: GatewaySettings, backends: Backends | None = None, operations: Sequence[Operation] = OPERATIONS
) -> FastAPI:
    """The app serving `operations` (gateway.operations' table) over REST and MCP."""
    backends = backends or Backends(
        settings.retrieval_address, settings.curation_address, settings.rpc_timeout_s
    )
    auth = Authenticator.from_settings(settings, backends.resolve_token)
    limiter = RateLimiter.from_settings(settings)
    deliveries = DeliveryLog(backends, enabled=settings.delivery_log)
    mcp = build_mcp(backends, auth, settings, limiter=limiter, operations=operations, deliveries=deliveries)
    mcp_app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=settings.host)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield
        await deliveries.close()
        await backends.close()

    # The documentation pages are gateway.pages' (from shipped assets), not FastAPI's CDN ones.
    app = FastAPI(title="hypermnesia", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.backends = backends
    app.state.auth = auth
    app.state.deliveries = deliveries
    app.state.settings = settings

    @app.exception_handler(HypermnesiaError)
    async def on_service_error(request: Request, exc: HypermnesiaError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=http_status(exc))

    # A route also builds its operation's request from the body plus the URL path (gateway.rest).
    # A field the operation does not take is 422 (the request is well formed, but not this
    # operation's); every other shape error is 400, as the services answer theirs.
    @app.exception_handler(RequestValidationError)
    @app.exception_handler(ValidationError)
    async def on_bad_request(request: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
        errors = exc.errors()
        message = invalid_request(errors, "/docs")
        status = 422 if names_an_unknown_field(errors) else 400
        return JSONResponse({"error": {"code": "INVALID_ARGUMENT", "message": message}}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the request body is not valid JSON in UTF-8; send a JSON object encoded as UTF-8"
        if exc.status_code == 404 and message == "Not Found":
            message = no_such_path(request.method, request.url.path)
        code = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
        return JSONResponse(
            {"error": {"code": code.get(exc.status_code, "HTTP_ERROR"), "message": message}},
            status_code=exc.status_code,
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        code, body = await health_report(backends)
        return JSONResponse(body, status_code=code)

    @app.get("/health/live")
    async def live() -> dict[str, Any]:
        """The process answers (a liveness probe: restarting the gateway mends no dependency)."""
        return {"status": OK, "version": __version__}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)

    tool_names = [op.tool.name for op in operations if op.tool is not None]
    app.include_router(build_router(operations, [op.bind(settings, tool_names) for op in operations]))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            lean_parameters(FastAPI.openapi(app))
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]

    # The web UI (built from ui/ into static/ui, shipped in the package): public files; every call
    # it makes carries the token the person signs in with. Before "/", where MCP answers /mcp and
    # any other path no route took is a 404.
    @app.get("/ui", include_in_schema=False)
    async def ui_index() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True, check_dir=False), name="ui")
    add_pages(app)
    # No token check in front of MCP (seed 001's behaviour): a session opens and lists its tools
    # without one, and every tool call fails with a message naming the header (gateway.mcp_tools).
    app.mount("/", McpOnly(mcp_app, MCP_PATH))
    # Outside every route and the MCP endpoint: a refused request reaches no operation.
    app.add_middleware(
        Limits,
        max_body_bytes=settings.max_body_bytes,
        limiter=limiter,
        auth=auth,
        operations=operations,
    )
    return app


# uvicorn's HTTP parser: httptools (C) answered a bare request (what /health/live is) in 0.5 ms against 1.1 ms with the
# pure-Python h11, from a keep-alive socket to a gateway process of its own (docs/PERFORMANCE.md).
HTTP_PARSER = "httptools"


async def serve(settings: GatewaySettings) -> None:
    import uvicorn

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.gateway_port,
        log_level="warning",
        lifespan="on",
        http=HTTP_PARSER,
    )
    server = uvicorn.Server(config)
    log.info("gateway on http://%s:%d (MCP at /mcp)", settings.host, settings.gateway_port)
    await server.serve()
