"""REST routes of the structure area: tier 0 project map, tier 1 path rules
(included by gateway.app.create_app)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query, Request

from gateway import structure_ops
from hypermnesia.errors import InvalidArgument
from hypermnesia.structure_map import MAX_SOURCE_BYTES

_JSON_TYPES = ("application/json", "+json")


async def _map_text(request: Request) -> str:
    """The body as map text: YAML as sent, or JSON (checked as JSON, so its errors read as JSON errors)."""
    raw = await request.body()
    if len(raw) > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"the map is larger than {MAX_SOURCE_BYTES:,} bytes; split it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument("the body is not UTF-8 text; send the map file encoded as UTF-8") from exc
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type.endswith(_JSON_TYPES):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from exc
        # JSON is YAML, except that YAML refuses tab indentation; outside strings (where JSON
        # escapes them) tabs are only whitespace, so this keeps every line number.
        text = text.replace("\t", " ")
    return text


def build_router() -> APIRouter:
    router = APIRouter()

    @router.get("/map/{repo}")
    async def get_map(repo: str, request: Request) -> dict[str, Any]:
        state = request.app.state
        return await structure_ops.project_map(state.backends, state.auth.session(request.headers), repo)

    @router.get("/map/{repo}/resolve")
    async def resolve_path(repo: str, request: Request, path: str = Query(...)) -> dict[str, Any]:
        state = request.app.state
        return await structure_ops.resolve(state.backends, state.auth.session(request.headers), repo, path)

    @router.post("/map/{repo}")
    async def load_map(repo: str, request: Request, name: str = Query("request body")) -> dict[str, Any]:
        """Replace the repo's map with the body (the map file as YAML, or the same as JSON).
        `name` is the file name used in error messages. Needs a grant on project:<repo>."""
        state = request.app.state
        session = state.auth.session(request.headers)
        structure_ops.authorize_load(session, repo)  # refuse before reading a body we would not use
        text = await _map_text(request)
        return await structure_ops.load(state.backends, session, repo, text, name)

    return router
