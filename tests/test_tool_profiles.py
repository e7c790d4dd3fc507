"""The MCP tool surface an agent pays for (issue 29 items 2 and 3), through the official SDK client
over HTTP: the default profile's tools/list is at most 12 KB with seed 001's tools and parameters;
the full profile (per session here, per server in the security sweep) lists the rest; a call outside
the session's profile names the profile that has it; enums are JSON Schema enums; a request that
fails validation reads the same over REST and MCP; a malformed id is answered as an unknown one."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from gateway.tool_profiles import DEFAULT_TOOLS, FULL_ONLY_PARAMETERS
from hypermnesia.recall_depth import DEPTHS
from hypermnesia.settings import GatewaySettings, describe_settings_error
from hypermnesia.validation import KINDS
from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json
from tests.test_dropin import SEED_001_TOOLS

# Issue 29's bound on what the default tools/list costs an agent.
MAX_DEFAULT_LIST_BYTES = 12 * 1024
ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "profiles"}
NOBODY = "00000000-0000-0000-0000-000000000000"


def wire_bytes(listed: Any) -> int:
    """tools/list's result as compact JSON, the way the client received it."""
    data = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())


def error_text(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)


async def test_default_tools_list_is_lean_and_keeps_seed_001s_contract(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "profiles") as client:
        default = await client.list_tools()
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="full") as client:
        full = await client.list_tools()
    size = wire_bytes(default)
    assert size <= MAX_DEFAULT_LIST_BYTES, f"the default tools/list is {size:,} bytes"
    assert wire_bytes(full) > size
    listed = {t.name: t for t in default.tools}
    assert set(listed) == DEFAULT_TOOLS and set(SEED_001_TOOLS) <= set(listed)
    everything = {t.name: t for t in full.tools}
    assert set(listed) < set(everything) and "project_map" in everything
    for name, parameters in SEED_001_TOOLS.items():
        assert parameters <= set(listed[name].input_schema["properties"]), name
    # memory_search lists seed 001's parameters; the advanced ones are the full profile's.
    assert set(listed["memory_search"].input_schema["properties"]) == SEED_001_TOOLS["memory_search"]
    for name, hidden in FULL_ONLY_PARAMETERS.items():
        assert not hidden & set(listed[name].input_schema["properties"]), name
        assert hidden <= set(everything[name].input_schema["properties"]), name
    for name, tool in listed.items():
        # A sentence or two on when to call it, and no generated titles.
        assert tool.description and len(tool.description) <= 300, name
        assert "title" not in tool.input_schema, name
        assert all("title" not in p for p in tool.input_schema["properties"].values()), name


async def test_enum_like_parameters_are_json_schema_enums(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="full") as client:
        tools = {t.name: t.input_schema["properties"] for t in (await client.list_tools()).tools}
    search = tools["memory_search"]
    assert search["depth"]["enum"] == list(DEPTHS) and search["depth"]["default"] == "derived"
    assert set(search["fusion"]["enum"]) == {"adaptive", "weighted", "boost", "rrf", "dense", "bm25"}
    assert search["mode"]["enum"] == ["answer", "manager"]
    assert search["kinds"]["type"] == "array" and search["kinds"]["items"]["enum"] == list(KINDS)
    assert tools["memory_save"]["kind"]["enum"] == list(KINDS)
    assert tools["memory_update"]["decay_class"]["enum"] == ["none", "slow", "medium", "fast"]
    assert tools["memory_context"]["mode"]["enum"] == ["answer", "manager", "auto"]
    assert tools["memory_usage_guide"]["section"]["enum"] == ["claude_md", "setup", "session"]
    assert tools["task_decide"]["decision"]["enum"] == ["confirm", "dismiss"]
    assert tools["proposal_decide"]["decision"]["enum"] == ["approve", "reject"]
    assert tools["proposals_list"]["status"]["enum"] == ["pending", "approved", "rejected", "all"]
    # The service stays the authority: a value outside the enum is refused with the values listed.
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="full") as client:
        refused = await client.call_tool("memory_search", {"query": "anything", "fusion": "magic"})
    assert "adaptive" in error_text(refused)


async def test_a_call_outside_the_profile_names_the_profile_that_has_it(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "profiles") as client:
        hidden = error_text(await client.call_tool("project_map", {}))
        assert "project_map is in the full tool profile" in hidden
        assert "HM_MCP_TOOLS=full" in hidden and "X-Hypermnesia-Tools: full" in hidden
        advanced = error_text(
            await client.call_tool("memory_search", {"query": "deploys", "depth": "premises", "topic": "x"})
        )
        assert "depth, topic: parameters of memory_search in the full tool profile" in advanced
        # Within the profile the same tool answers.
        assert tool_json(await client.call_tool("memory_search", {"query": "deploys"})) == []
        guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "claude_md"}))
    assert "`X-Hypermnesia-Tools: full`" in guide["claude_md"] and "`project_map`" in guide["claude_md"]
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="FULL") as client:
        assert "project_map" in {t.name for t in (await client.list_tools()).tools}
        # Called now: what answers is the structure service (no map loaded here), not the profile.
        called = error_text(await client.call_tool("project_map", {}))
        assert "no structure map is loaded for repo 'profiles'" in called and "tool profile" not in called
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="lean") as client:
        with pytest.raises(Exception, match="X-Hypermnesia-Tools is 'lean'; send default"):
            await client.list_tools()
        refused = await client.call_tool("memory_get", {"memory_id": NOBODY})
        assert "X-Hypermnesia-Tools is 'lean'" in error_text(refused)


def test_an_unknown_server_profile_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HM_MCP_TOOLS", "Full")
    assert GatewaySettings().mcp_tools == "full"
    monkeypatch.setenv("HM_MCP_TOOLS", "lean")
    with pytest.raises(ValidationError) as caught:
        GatewaySettings()
    message = describe_settings_error(caught.value)
    assert message.startswith("invalid settings: HM_MCP_TOOLS: 'lean' is not a tool profile")
    assert "default (" in message and "full (" in message


async def test_bad_requests_read_the_same_over_rest_and_mcp(stack: Stack) -> None:
    cases = [
        ({"content": ["not", "text"]}, "content must be a valid string"),
        ({"description": "no content"}, "content is required"),
        ({"content": "x", "importanse": 7}, "importanse is not a field of this operation; remove it"),
        ({"content": "x", "importance": "high"}, "importance must be a valid number"),
        ({"content": "a\x00b"}, "content holds a NUL character"),
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        rest = [(await http.post("/memories", json=body)).json()["error"]["message"] for body, _ in cases]
    async with mcp_session(stack.mcp_url, "alice-token", "profiles") as client:
        tool = [error_text(await client.call_tool("memory_save", body)) for body, _ in cases]
    for (_body, expected), over_rest, over_mcp in zip(cases, rest, tool, strict=True):
        sentence = f"invalid request: {expected}"
        assert over_rest.startswith(sentence), over_rest
        assert over_mcp == f"Error executing tool memory_save: {over_rest}".replace("/docs", "tools/list")
        for pydantic_says in ("input_value", "input_type", "[type=", "pydantic", "validation error for"):
            assert pydantic_says not in over_mcp, over_mcp
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        listed = (await http.get("/memories", params={"scope": "project:profiles"})).json()
    assert listed["total"] == 0, "a refused save stored something"


async def test_a_malformed_id_is_answered_as_an_unknown_one(stack: Stack) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_get", {}),
        ("memory_update", {"content": "x"}),
        ("memory_restore", {}),
        ("memory_delete", {}),
        ("memory_evidence", {}),
        ("memory_provenance", {}),
        ("memory_lineage", {}),
        ("memory_supersede", {"content": "x"}),
    ]
    async with mcp_session(stack.mcp_url, "alice-token", "profiles", tools="full") as client:
        for tool, arguments in calls:
            unknown = await client.call_tool(tool, {"memory_id": NOBODY, **arguments})
            malformed = await client.call_tool(tool, {"memory_id": "not-an-id", **arguments})
            assert malformed.is_error == unknown.is_error, tool
            if unknown.is_error:
                # A refusal either way; the malformed one says what is wrong with it.
                assert "'not-an-id' is not a memory id (a UUID)" in error_text(malformed), tool
            else:
                assert tool_json(malformed) == tool_json(unknown), tool
    expected = {"deleted": False}
    async with mcp_session(stack.mcp_url, "alice-token", "profiles") as client:
        assert tool_json(await client.call_tool("memory_delete", {"memory_id": "not-an-id"})) == expected
        assert tool_json(await client.call_tool("memory_get", {"memory_id": "not-an-id"})) is None
