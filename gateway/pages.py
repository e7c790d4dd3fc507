"""The gateway's answers for a person with a browser: the API's documentation (Swagger UI at /docs,
ReDoc at /redoc) from assets the gateway ships, `/` leading to the web UI, and a 404 in the
gateway's error shape for a path that is nothing.

FastAPI's own documentation pages load Swagger UI and ReDoc from a CDN, so they are blank on a
machine without internet; these serve the copies the fastapi-offline package ships (Swagger UI's
swagger-ui-dist bundle and ReDoc's standalone bundle) from this process."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DOCS_ASSETS_URL", "McpOnly", "add_pages", "no_such_path"]

DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
DOCS_ASSETS_URL = "/docs/assets"
UI_HOME = "/ui/"
# ReDoc's bundle always shows Redocly's logo from their CDN (hidden when it fails to load): the
# page's policy keeps the browser from asking, so nothing leaves the machine. Everything else it
# uses is its own script, inline styles and a worker it starts from a blob.
REDOC_POLICY = (
    "default-src 'self'; script-src 'self'; worker-src 'self' blob:; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'"
)
# How much of an unknown path a 404 repeats back.
MAX_PATH_SHOWN = 200


def add_pages(app: FastAPI) -> None:
    """/docs, /redoc and their assets, and `/` redirecting to the web UI. Create the app with
    docs_url=None and redoc_url=None (FastAPI's pages are the CDN ones), and call this before the
    catch-all mount at "/"."""
    openapi_url = app.openapi_url or "/openapi.json"

    def spec_url(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/") + openapi_url

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(UI_HOME)

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=spec_url(request),
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png",
            # Swagger UI would otherwise send the document to validator.swagger.io for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=spec_url(request),
            title=f"{app.title} API",
            redoc_js_url=f"{DOCS_ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = REDOC_POLICY
        return page

    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")


def no_such_path(method: str, path: str) -> str:
    """What a 404 for a path that is nothing says: where the things that exist are."""
    shown = path if len(path) <= MAX_PATH_SHOWN else path[:MAX_PATH_SHOWN] + "..."
    return (
        f"nothing answers {method} {shown}: the REST API is listed at /docs, the web UI is at /ui, "
        "and MCP is at /mcp"
    )


class McpOnly:
    """The MCP app, mounted at "/" below every route, reached only at its own path (/mcp). Any other
    path that falls through to it is a 404, which the gateway's handler answers in its JSON error
    shape: without this, an unknown path got MCP's answers (a JSON-RPC 401, or a text 404)."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _route_path(scope).rstrip("/") != self.path:
            raise HTTPException(status_code=404)
        await self.app(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path (a proxy's prefix), as the router matches it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path
