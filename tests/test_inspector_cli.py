"""The MCP Inspector CLI (Node, `@modelcontextprotocol/inspector --cli`) lists and calls every tool,
over streamable HTTP and over `hypermnesia mcp` (stdio): a third client implementation besides the
official Python SDK and fastmcp, in another language."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests import inspector
from tests.conftest import TOKENS, Stack

pytestmark = pytest.mark.timeout(600)

# Tools whose call here is refused on purpose, with what the refusal must say: there is no
# candidate task to decide on in a fresh project.
REFUSED = {"task_decide": "task", "proposal_decide": "proposal"}

Call = Callable[..., Any]


# Every tool is called, so every tool is listed: the full profile, asked by the HTTP session's header
# and by the stdio process's HM_MCP_TOOLS.
def http_caller(stack: Stack, project: str) -> Call:
    headers = {
        "Authorization": "Bearer alice-token",
        "X-Hypermnesia-Project": project,
        "X-Hypermnesia-Tools": "full",
    }

    async def call(method: str, tool: str | None = None, **arguments: Any) -> Any:
        return await asyncio.to_thread(inspector.http, stack.mcp_url, headers, method, tool, **arguments)

    return call


def stdio_caller(stack: Stack, project: str) -> Call:
    command = [sys.executable, "-m", "hypermnesia", "mcp", "--project", project]
    env = {
        "HM_TOKEN": "alice-token",
        "HM_AUTH_TOKENS": json.dumps(TOKENS),
        "HM_RETRIEVAL_ADDRESS": stack.retrieval_address,
        "HM_CURATION_ADDRESS": stack.curation_address,
        "HM_LOG_LEVEL": "WARNING",
        "HM_MCP_TOOLS": "full",
    }

    async def call(method: str, tool: str | None = None, **arguments: Any) -> Any:
        # In a thread: the services answer from this test's event loop.
        return await asyncio.to_thread(inspector.stdio, command, env, method, tool, **arguments)

    return call


async def every_tool(call: Call) -> dict[str, Any]:
    """List the tools, call each once with sensible arguments; the results by tool name."""
    listed = await call("tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    for name, tool in tools.items():
        assert tool.get("description"), f"{name} has no description"
        for param, schema in tool["inputSchema"].get("properties", {}).items():
            assert schema.get("description"), f"{name}.{param} has no description"

    results: dict[str, Any] = {}

    async def run(tool: str, **arguments: Any) -> Any:
        results[tool] = await call("tools/call", tool, **arguments)
        return results[tool]

    saved = inspector.result_json(
        await run(
            "memory_save",
            content="The inspector's marker plant is the quillwort, kept on the lab's north window",
            description="inspector marker plant",
            tags=["inspector"],
        )
    )
    memory_id = saved["memory"]["id"]
    found = inspector.result_json(await run("memory_search", query="which plant is the marker?"))
    assert found and found[0]["id"] == memory_id, found
    assert inspector.result_json(await run("memory_get", memory_id=memory_id))["id"] == memory_id
    updated = inspector.result_json(
        await run("memory_update", memory_id=memory_id, description="the inspector's marker plant")
    )
    assert updated["description"] == "the inspector's marker plant"
    listed_memories = inspector.result_json(await run("memory_list", tags=["inspector"]))
    assert memory_id in json.dumps(listed_memories)
    await run("memory_lineage", memory_id=memory_id)
    await run("memory_stats")
    await run("memory_context", query="marker plant")
    newer = inspector.result_json(
        await run(
            "memory_supersede",
            memory_id=memory_id,
            content="The inspector's marker plant is now the sundew, on the lab's east window",
            description="inspector marker plant (moved)",
        )
    )
    newer_id = newer["memory"]["id"]
    await run("memory_forget")
    await run("memory_delete", memory_id=newer_id)
    await run("memory_restore", memory_id=newer_id)
    await run("task_decide", task_id=str(uuid.uuid4()), decision="confirm")
    await run("project_map", repo="inspector-repo")
    await run("rules_for_path", path="src/app.py", repo="inspector-repo")
    guide = await run("memory_usage_guide")
    assert "memory_search" in json.dumps(guide)
    await run("memory_ask", question="which plant is the marker?")
    await run("proposals_list")
    await run("proposal_decide", proposal_id=str(uuid.uuid4()), decision="approve")
    evidence = inspector.result_json(await run("memory_evidence", memory_id=memory_id))
    assert evidence["memory"]["id"] == memory_id, evidence
    why = inspector.result_json(await run("memory_provenance", memory_id=memory_id))
    assert why["id"] == memory_id and why["records"], why
    given = inspector.result_json(await run("memory_deliveries"))
    assert isinstance(given["deliveries"], list), given

    missing = sorted(set(tools) - set(results))
    assert not missing, f"tools the Inspector test does not call yet: {missing}; add a call above"
    for name, result in results.items():
        if name in REFUSED:
            assert result["isError"] and REFUSED[name] in result["content"][0]["text"], result
        else:
            assert not result.get("isError"), (name, result)
    return results


@pytest.fixture(scope="module")
async def repo_map(stack: Stack) -> str:
    """A structure map for project_map and rules_for_path to read."""
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        response = await http.post(
            "/map/inspector-repo",
            headers={"Authorization": "Bearer alice-token", "content-type": "application/yaml"},
            content="components:\n  - slug: app\n    globs: ['src/**']\n",
        )
        assert response.status_code == 200, response.text
    return "inspector-repo"


async def test_inspector_over_http(stack: Stack, repo_map: str) -> None:
    await every_tool(http_caller(stack, "inspector-http"))


async def test_inspector_over_stdio(stack: Stack, repo_map: str) -> None:
    await every_tool(stdio_caller(stack, "inspector-stdio"))


async def test_inspector_shows_the_missing_token_message(stack: Stack) -> None:
    """Without a token the session opens and lists the tools (seed 001's behaviour); a call is
    refused with a message naming the header."""
    listed = await asyncio.to_thread(inspector.http, stack.mcp_url, {}, "tools/list")
    assert "memory_search" in {tool["name"] for tool in listed["tools"]}
    refused = await asyncio.to_thread(
        inspector.http, stack.mcp_url, {}, "tools/call", "memory_search", query="x"
    )
    assert refused["isError"] is True
    text = refused["content"][0]["text"]
    assert "missing bearer token" in text and "Authorization: Bearer <token>" in text, text
