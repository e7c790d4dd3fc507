"""The vertical slice through the real path: MCP/REST -> gateway -> gRPC -> Postgres, real model."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "slice"}
MEMORY_KEYS = {
    "id",
    "owner_id",
    "scope",
    "type",
    "kind",
    "content",
    "description",
    "tags",
    "metadata",
    "importance",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "archived_at",
}

FACTS = [
    ("The staging cluster runs on three Raspberry Pi 5 nodes with k3s", "homelab staging cluster"),
    ("Alice prefers pytest fixtures over unittest setUp methods", "testing style preference"),
    ("Error E4012 means the license key expired; renew it in the admin console", "E4012 license error"),
    ("Backups of the Postgres volume run nightly at 02:00 with restic to the NAS", "backup schedule"),
]


async def test_mcp_save_then_search_returns_it_first(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "mcp-slice") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_save", "memory_search", "memory_get"} <= tools
        for content, description in FACTS:
            saved = tool_json(
                await client.call_tool("memory_save", {"content": content, "description": description})
            )
            assert saved["created"] is True
            assert MEMORY_KEYS <= set(saved["memory"])
            assert saved["memory"]["scope"] == "project:mcp-slice"
            assert saved["memory"]["owner_id"] == "alice"
        results = tool_json(
            await client.call_tool("memory_search", {"query": "when do backups happen?", "k": 5})
        )
        assert results, "search returned nothing"
        assert results[0]["content"] == FACTS[3][0]
        assert 0.0 <= results[0]["similarity"] <= 1.0
        assert results[0]["score"] >= results[-1]["score"]
        assert "degraded" not in results[0]
        got = tool_json(await client.call_tool("memory_get", {"memory_id": results[0]["id"]}))
        assert got["content"] == FACTS[3][0]


async def test_mcp_exact_token_is_found(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "mcp-slice") as client:
        results = tool_json(await client.call_tool("memory_search", {"query": "E4012"}))
        assert results and results[0]["description"] == "E4012 license error"


async def test_mcp_bad_input_is_a_tool_error(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "mcp-slice") as client:
        result = await client.call_tool("memory_save", {"content": "   ", "description": "blank"})
        assert result.is_error
        assert "content is empty" in result.content[0].text
        result = await client.call_tool("memory_search", {"query": "anything", "k": 0})
        assert result.is_error and "k must be between 1 and 100" in result.content[0].text


async def test_mcp_requires_a_valid_token(stack: Stack) -> None:
    """The session opens without one (seed 001); each tool call is refused, naming the header."""
    async with mcp_session(stack.mcp_url, None, "mcp-slice") as client:
        result = await client.call_tool("memory_search", {"query": "E4012"})
        assert result.is_error and "missing bearer token" in result.content[0].text


async def test_rest_save_and_search_shapes(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post(
            "/memories",
            json={
                "content": "The gateway listens on port 8765 and serves MCP at /mcp",
                "description": "gateway port",
                "tags": ["ops"],
                "metadata": {"source": "test"},
                "importance": 3,
            },
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"created", "memory"} and body["created"] is True
        memory = body["memory"]
        assert MEMORY_KEYS <= set(memory)
        assert memory["tags"] == ["ops"] and memory["metadata"] == {"source": "test"}
        assert memory["importance"] == 3 and memory["scope"] == "project:slice"

        response = await http.post(
            "/memories/search", json={"query": "which port does the gateway use", "k": 3}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"results", "degraded"} and body["degraded"] == []
        assert body["results"][0]["id"] == memory["id"]
        assert {"similarity", "score"} <= set(body["results"][0])
        assert "degraded" not in body["results"][0]  # a hit says `degraded` only when something was missing

        response = await http.post("/memories/search", json={"query": "gateway port", "tags": ["nope"]})
        assert response.json()["results"] == []

        response = await http.get(f"/memories/{memory['id']}")
        assert response.status_code == 200 and response.json()["id"] == memory["id"]


async def test_near_duplicate_save_updates_instead_of_inserting(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        first = (
            await http.post(
                "/memories",
                json={
                    "content": "The CI runners use Python 3.11 on Debian bookworm",
                    "description": "CI python version",
                },
            )
        ).json()
        again = (
            await http.post(
                "/memories",
                json={
                    "content": "The CI runners use Python 3.11 on Debian bookworm.",
                    "description": "CI python version",
                },
            )
        ).json()
        assert again["created"] is False
        assert again["memory"]["id"] == first["memory"]["id"]
        assert again["replaced"]["content"] == "The CI runners use Python 3.11 on Debian bookworm"
        other = (
            await http.post(
                "/memories",
                json={
                    "content": "The CI runners use Node 20 for the front-end build",
                    "description": "CI node version",
                },
            )
        ).json()
        assert other["created"] is True and other["memory"]["id"] != first["memory"]["id"]


async def test_scopes_isolate_tokens(stack: Stack) -> None:
    bob = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        saved = (
            await http.post(
                "/memories",
                headers=bob,
                json={
                    "content": "Bob's secret: the wifi password is hunter2",
                    "description": "wifi password",
                },
            )
        ).json()
        assert saved["memory"]["scope"] == "project:bobs"
        # Alice searching her own project never sees Bob's project.
        results = (await http.post("/memories/search", headers=ALICE, json={"query": "wifi password"})).json()
        assert all(r["scope"] != "project:bobs" for r in results["results"])
        # Bob cannot write or read a scope he was not granted.
        denied = await http.post("/memories", headers=bob, json={"content": "x", "scope": "shared"})
        assert denied.status_code == 403 and "not granted" in denied.json()["error"]["message"]
        denied = await http.post(
            "/memories/search", headers=bob, json={"query": "x", "scope": "project:slice"}
        )
        assert denied.status_code == 403
        missing = await http.get(f"/memories/{saved['memory']['id']}", headers=ALICE)
        # Alice holds project:* so she may read it by id; an unknown token may not.
        assert missing.status_code == 200
        unknown = await http.get(
            f"/memories/{saved['memory']['id']}", headers={"Authorization": "Bearer nope"}
        )
        assert unknown.status_code == 401


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"content": "", "description": "d"}, 400, "content is empty"),
        ({"content": "x" * 2_000_000, "description": "d"}, 400, "the limit is 65,536"),
        ({"content": "fine", "scope": ""}, 400, "scope is empty"),
        ({"content": "fine", "scope": "   "}, 400, "scope is empty"),
        ({"content": "fine", "scope": "project:\u0007bell"}, 400, "control characters"),
        ({"content": "fine", "scope": "s" * 201}, 400, "the limit is 200"),
        ({"content": "fine", "importance": 99}, 400, "importance must be between"),
        ({"description": "no content"}, 400, "content"),
    ],
)
async def test_rest_bad_save_changes_nothing(stack: Stack, body: dict, status: int, fragment: str) -> None:
    before = await stack.pool.fetchval("SELECT count(*) FROM records")
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post("/memories", json=body)
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]["message"]
    assert await stack.pool.fetchval("SELECT count(*) FROM records") == before


async def test_rest_non_utf8_body_is_rejected(stack: Stack) -> None:
    before = await stack.pool.fetchval("SELECT count(*) FROM records")
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post(
            "/memories",
            content=b'{"content": "caf\xe9 latin-1"}',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400, response.text
    assert "UTF-8" in response.json()["error"]["message"] or "JSON" in response.json()["error"]["message"]
    assert await stack.pool.fetchval("SELECT count(*) FROM records") == before


async def test_rest_lone_surrogate_is_rejected(stack: Stack) -> None:
    """A JSON escape of a lone surrogate decodes to text Postgres cannot store."""
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post(
            "/memories",
            content=b'{"content": "bad \\ud800 surrogate"}',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400, response.text
    assert "not valid UTF-8" in response.json()["error"]["message"]


@pytest.mark.parametrize("k", [0, -1, 101, 10_000])
async def test_rest_k_out_of_range(stack: Stack, k: int) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post("/memories/search", json={"query": "anything", "k": k})
    assert response.status_code == 400
    assert "k must be between 1 and 100" in response.json()["error"]["message"]


async def test_tool_schemas_and_openapi_come_from_one_model(stack: Stack) -> None:
    """Every tool parameter is described, with its bounds; a REST body and its tool (in the full
    profile, which lists every parameter) share one schema."""
    async with mcp_session(stack.mcp_url, "alice-token", "mcp-slice", tools="full") as client:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    for name, schema in tools.items():
        for parameter, spec in schema.get("properties", {}).items():
            assert spec.get("description"), f"{name}.{parameter} has no description"
    search = tools["memory_search"]["properties"]
    assert search["k"]["default"] == 10 and search["k"]["minimum"] == 1
    assert search["min_similarity"]["minimum"] == 0 and search["min_similarity"]["maximum"] == 1
    assert search["query"]["maxLength"] == 16384 and tools["memory_search"]["required"] == ["query"]
    assert tools["memory_forget"]["properties"]["limit"]["default"] == 100
    assert tools["memory_list"]["properties"]["limit"]["default"] == 50
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        openapi = (await http.get("/openapi.json")).json()
    body = openapi["components"]["schemas"]["SearchMemories"]["properties"]
    assert set(body) == set(search)
    assert all(body[name]["description"] == search[name]["description"] for name in body)
