"""Test helpers: a real MCP client session over streamable HTTP, JSON from tool results, the
default model's onnx provider, and a store as it was before a given migration."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hypermnesia.migrator import migration_files
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


async def migrate_before(
    conn: asyncpg.Connection, first_left: str, *, first: str = "", contents: dict[str, str] | None = None
) -> None:
    """A store as it was before migration `first_left`, recorded as the migrator kept its records
    then (names, no sha256): the migrations from `first` on applied and recorded. `contents` gives
    a file as it was applied then (name -> SQL), for one that was edited after it landed."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for name, sql in migration_files():
        if name < first:
            continue
        if name >= first_left:
            break
        await conn.execute((contents or {}).get(name, sql))
        await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", name)
