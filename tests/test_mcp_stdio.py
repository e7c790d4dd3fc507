"""`hypermnesia mcp`: MCP over stdio, spawned by a real MCP client as its subprocess, calling the
same running services as the HTTP gateway."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from gateway.tool_profiles import DEFAULT_TOOLS
from tests.conftest import TOKENS, Stack
from tests.helpers import tool_json

ROOT = Path(__file__).resolve().parent.parent


def stdio_env(stack: Stack, token: str) -> dict[str, str]:
    return {
        "HM_TOKEN": token,
        "HM_AUTH_TOKENS": json.dumps(TOKENS),
        "HM_REQUIRE_AUTH": "true",
        "HM_RETRIEVAL_ADDRESS": stack.retrieval_address,
        "HM_CURATION_ADDRESS": stack.curation_address,
    }


async def test_stdio_session_saves_and_searches_in_its_project(stack: Stack) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hypermnesia", "mcp", "--project", "stdio-slice"],
        env=stdio_env(stack, "alice-token"),
        cwd=ROOT,
    )
    async with Client(stdio_client(server)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        # The server's default profile (HM_MCP_TOOLS unset): a stdio session sends no header.
        assert tools == DEFAULT_TOOLS
        saved = tool_json(
            await client.call_tool(
                "memory_save",
                {
                    "content": "The NAS exports the media share over NFSv4 only; SMB is switched off",
                    "description": "NAS media share protocol",
                },
            )
        )
        assert saved["created"] is True
        assert saved["memory"]["scope"] == "project:stdio-slice"
        assert saved["memory"]["owner_id"] == "alice"
        found = tool_json(
            await client.call_tool("memory_search", {"query": "how is the media share exported?"})
        )
        assert found and found[0]["id"] == saved["memory"]["id"]
        unrelated = {"query": "volcano eruption forecast", "min_similarity": 0.99, "relative_cutoff": 0.0}
        assert tool_json(await client.call_tool("memory_search", unrelated)) == []
        # memory_search's topic filter is the full profile's (HM_MCP_TOOLS=full for a stdio process).
        elsewhere = {
            "query": "how is the media share exported?",
            "topic": "no-such-topic",
            "topic_only": True,
        }
        refused = await client.call_tool("memory_search", elsewhere)
        assert refused.is_error and "HM_MCP_TOOLS=full" in refused.content[0].text
        bad = await client.call_tool("memory_search", {"query": "anything", "k": 0})
        assert bad.is_error and "k must be between 1 and 100" in bad.content[0].text

    # The HTTP gateway sees the same memory in the same project: one store, two transports.
    headers = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "stdio-slice"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers) as http:
        response = await http.get(f"/memories/{saved['memory']['id']}")
        assert response.status_code == 200, response.text
        assert response.json()["description"] == "NAS media share protocol"


def start_and_wait(stack: Stack, token: str, project: str) -> subprocess.CompletedProcess[str]:
    """`hypermnesia mcp` run to its end with no client on stdin (it should refuse to start)."""
    return subprocess.run(
        [sys.executable, "-m", "hypermnesia", "mcp", "--project", project],
        env={"PATH": "/usr/bin:/bin", **stdio_env(stack, token)},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_stdio_refuses_an_unknown_token_at_start(stack: Stack) -> None:
    # In a thread: the process asks curation (served from this test's event loop) about the token.
    done = await asyncio.to_thread(start_and_wait, stack, "not-a-token", "stdio-slice")
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""  # nothing on the protocol channel
    assert "unknown bearer token" in done.stderr and "HM_TOKEN" in done.stderr


async def test_stdio_project_names_are_slugged_like_the_header(stack: Stack) -> None:
    # `--project X` is the header of a stdio session: project:<slug of X> (step 1 of finding its project).
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hypermnesia", "mcp", "--project", "No Spaces Allowed"],
        env=stdio_env(stack, "alice-token"),
        cwd=ROOT,
    )
    async with Client(stdio_client(server)) as client:
        saved = tool_json(
            await client.call_tool("memory_save", {"content": "Slugged projects keep their memories apart"})
        )
    assert saved["memory"]["scope"] == "project:no-spaces-allowed"
