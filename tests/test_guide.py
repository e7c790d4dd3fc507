"""memory_usage_guide over a real MCP session: generated from the live settings and tools."""

from __future__ import annotations

from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json


async def test_guide_reflects_live_settings_and_tools(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "guide") as client:
        guide = tool_json(await client.call_tool("memory_usage_guide", {}))
        tools = {t.name for t in (await client.list_tools()).tools}
    assert guide["warnings"] == []
    assert guide["session"]["project_scope"] == "project:guide"
    assert guide["session"]["principal"] == "alice"
    claude_md = guide["claude_md"]
    assert "cosine 0.15" in claude_md and "0.92" in claude_md
    assert all(f"`{name}`" in claude_md for name in tools)
    assert "<token>" in guide["setup"]["claude_code"] and "alice-token" not in str(guide)


async def test_guide_warns_when_projects_are_not_isolated(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token") as client:
        guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "session"}))
        assert set(guide) == {"session", "warnings"}
        assert guide["session"]["project_source"] == "default"
        assert any("X-Hypermnesia-Project" in w for w in guide["warnings"])
        bad = await client.call_tool("memory_usage_guide", {"section": "everything"})
        assert bad.is_error and "section must be one of" in bad.content[0].text
