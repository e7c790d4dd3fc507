"""Test helpers: a real MCP client session over streamable HTTP, JSON from tool results, the
default model's onnx provider, a store as it was before a given migration, and `hypermnesia up`
as a child process."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import psutil
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hypermnesia.migrator import migration_files
from services.embedder.onnx_provider import OnnxProvider


@asynccontextmanager
async def mcp_session(
    url: str, token: str | None, project: str | None = None, tools: str | None = None
) -> AsyncIterator[Client]:
    """`tools` names the session's tool profile (X-Hypermnesia-Tools), e.g. "full"."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if project:
        headers["X-Hypermnesia-Project"] = project
    if tools:
        headers["X-Hypermnesia-Tools"] = tools
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


class UpProcess:
    """A `hypermnesia up` child with its output collected line by line."""

    def __init__(self, env: dict[str, str], command: list[str] | None = None) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            command or [sys.executable, "-m", "hypermnesia", "up"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.append(raw.decode(errors="replace").rstrip())

    def wait_for(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if re.search(pattern, line):
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None and seen == len(self.lines):
                time.sleep(0.2)
                if not any(re.search(pattern, x) for x in self.lines):
                    raise AssertionError(
                        f"up exited ({self.proc.returncode}) before {pattern!r}:\n" + self.output()
                    )
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {pattern!r}:\n" + self.output())

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def children(self) -> dict[str, psutil.Process]:
        found = {}
        for child in psutil.Process(self.proc.pid).children():
            cmd = child.cmdline()
            if "serve" in cmd:
                found[cmd[cmd.index("serve") + 1]] = child
        return found

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        self._reader.join(10)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()
        return self.proc.returncode
