"""memory_usage_guide over a real MCP session: generated from the live settings and tools."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Stack, start_stack
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
    # Seed 001's shapes: setup is Markdown to write down (this server's address, a placeholder for
    # the token, this session's project), session says what the connection resolved to.
    setup = guide["setup"]
    assert isinstance(setup, str) and f"hypermnesia {stack.mcp_url} " in setup
    assert "X-Hypermnesia-Project: guide" in setup and '"X-Hypermnesia-Project": "guide"' in setup
    assert "<token>" in setup and "alice-token" not in str(guide)
    assert guide["session"]["project_isolation"] == "active"
    assert guide["session"]["saves_default_to"] == "project:guide"
    assert guide["session"]["workspace_roots_detected"] is False
    assert guide["session"]["scopes_you_can_read"][0] == "project:guide"


async def test_guide_warns_when_projects_are_not_isolated(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token") as client:
        guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "session"}))
        assert set(guide) == {"session", "warnings"}
        assert guide["session"]["project_source"] == "default"
        assert guide["session"]["project_isolation"].startswith("NOT ACTIVE")
        assert any("X-Hypermnesia-Project" in w and "NOT isolated" in w for w in guide["warnings"])
        bad = await client.call_tool("memory_usage_guide", {"section": "everything"})
        assert bad.is_error
        assert "unknown section 'everything'; use one of claude_md, setup, session" in bad.content[0].text


async def test_guide_states_the_services_settings_not_the_gateways(
    pg_server_url: str, embedder: str, model_cache: Path
) -> None:
    """The services run with their own settings (here overrides the gateway's environment lacks):
    the guide asks them (GetLiveSettings) instead of reading its own environment."""
    overrides = {"search_min_similarity": 0.33, "dedupe_threshold": 0.81, "forget_after_days": 45}
    async with start_stack(pg_server_url, embedder, model_cache, **overrides) as stack:
        async with mcp_session(stack.mcp_url, "alice-token", "guide") as client:
            guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "claude_md"}))
    claude_md = guide["claude_md"]
    assert "cosine 0.33" in claude_md and "cosine 0.15" not in claude_md
    assert "similarity >= 0.81" in claude_md and "0.92" not in claude_md
    assert "not recalled for 45 days" in claude_md
