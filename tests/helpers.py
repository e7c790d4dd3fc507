"""Test helpers: a real MCP client session over streamable HTTP, JSON from tool results, and the
default model's onnx provider."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from services.embedder.onnx_provider import OnnxProvider


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


def onnx_provider_for(model_cache: Path, quantization: str = "fp32", workers: int = 1) -> OnnxProvider:
    """The default model in-process (threads: the cores); the service uses default_workers()."""
    return OnnxProvider.from_settings(
        None,
        model_cache / "models",
        max_tokens=256,
        quantization=quantization,
        intra_op_threads=0,
        inter_op_threads=0,
        workers=workers,
    )
