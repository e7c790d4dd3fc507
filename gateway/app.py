"""The gateway's ASGI app: REST routes, the MCP endpoint at /mcp, /health and /metrics."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import Authenticator
from gateway.backends import Backends
from gateway.errors import error_body, http_status
from gateway.mcp_tools import build_mcp
from gateway.rest import build_router
from hypermnesia import __version__
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

log = logging.getLogger(__name__)


class RequireToken:
    """Rejects MCP requests without a valid bearer token before the MCP layer sees them."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            try:
                await self.auth.principal(headers)
            except HypermnesiaError as exc:
                response = JSONResponse(error_body(exc), status_code=http_status(exc))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(settings: GatewaySettings, backends: Backends | None = None) -> FastAPI:
    backends = backends or Backends(
        settings.retrieval_address, settings.curation_address, settings.rpc_timeout_s
    )
    auth = Authenticator.from_settings(settings)
    mcp = build_mcp(backends, auth, settings)
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp", host=settings.host)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield
        await backends.close()

    app = FastAPI(title="hypermnesia", version=__version__, lifespan=lifespan)
    app.state.backends = backends
    app.state.auth = auth
    app.state.settings = settings

    @app.exception_handler(HypermnesiaError)
    async def on_service_error(request: Request, exc: HypermnesiaError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=http_status(exc))

    # A route also builds its operation's request from the body plus the URL path (gateway.rest).
    @app.exception_handler(RequestValidationError)
    @app.exception_handler(ValidationError)
    async def on_bad_request(request: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {err.get('msg')}")
        message = "invalid request: " + "; ".join(problems)
        return JSONResponse({"error": {"code": "INVALID_ARGUMENT", "message": message}}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the request body is not valid JSON in UTF-8; send a JSON object encoded as UTF-8"
        code = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
        return JSONResponse(
            {"error": {"code": code.get(exc.status_code, "HTTP_ERROR"), "message": message}},
            status_code=exc.status_code,
        )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(build_router())
    app.mount("/", RequireToken(mcp_app, auth))
    return app


# uvicorn's HTTP parser: httptools (C) answered /health in 0.5 ms against 1.1 ms with the
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
