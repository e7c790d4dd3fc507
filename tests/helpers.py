"""Test helpers: a real MCP client session over streamable HTTP, and JSON from tool results."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_session(url: str, token: str | None, project: str | None = None) -> AsyncIterator[Client]:
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if project:
        headers["X-Hypermnesia-Project"] = project
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def tool_json(result: Any) -> Any:
    """The structured result of a tool call (unwrapping MCP's {"result": ...} for lists)."""
    assert not result.is_error, result.content[0].text if result.content else result
    data = result.structured_content
    if isinstance(data, dict) and set(data) == {"result"}:
        return data["result"]
    if data is not None:
        return data
    return json.loads(result.content[0].text)
