"""Context assembly on the real stack: layers, budgets (counted with the real tokenizer), cited
ids, tier 0/1 rules, recent turns and auto mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from hypermnesia.embedder_client import EmbedderClient
from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json

HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "ctx"}
MAP = Path(__file__).resolve().parent.parent / "deploy" / "examples" / "hypermnesia-map.yaml"


@pytest.fixture(scope="module")
async def ctx_stack(stack: Stack) -> Stack:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        saves = [
            (
                "Deploys go through the release checklist: tests, tag, build image, helm upgrade",
                "deploy procedure",
                "procedural",
            ),
            ("The user is Alice, a backend engineer who prefers concise answers", "who the user is", "core"),
            ("Never push directly to main; open a pull request", "branch rule", "core"),
            ("The payments service was migrated to Postgres 17 in March", "payments migration", "semantic"),
            ("Alice is halfway through refactoring the ingestion pipeline", "current work", "working"),
        ]
        for i in range(30):
            saves.append(
                (
                    f"Incident {i}: the nightly batch job {i} timed out because the queue backed up "
                    f"behind export number {i * 7}",
                    f"incident {i}",
                    "episodic",
                )
            )
        for content, description, kind in saves:
            response = await http.post(
                "/memories", json={"content": content, "description": description, "kind": kind}
            )
            assert response.status_code == 200, response.text
        base = datetime(2025, 1, 1, tzinfo=UTC)
        turns = [
            {
                "type": "conversation",
                "scope": "project:ctx",
                "content": f"Alice: step {i} of the rollout",
                "source_ref": f"roll-{i}",
                "thread_id": "rollout",
                "created_at": (base + timedelta(minutes=i)).isoformat(),
            }
            for i in range(8)
        ]
        response = await http.post("/records/import", json={"records": turns})
        assert response.status_code == 200, response.text
        response = await http.post(
            "/map/ctx",
            content=MAP.read_text(),
            params={"name": MAP.name},
            headers={"content-type": "application/yaml"},
        )
        assert response.status_code == 200, response.text
    return stack


async def _context(stack: Stack, **body) -> dict:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        response = await http.post("/records/context", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_layers_stay_within_budgets_counted_by_the_tokenizer(ctx_stack: Stack) -> None:
    budgets = {
        "procedural": 40,
        "project": 60,
        "memories": 90,
        "documents": 30,
        "recent": 50,
        "path_rules": 80,
    }
    body = await _context(
        ctx_stack,
        query="why did the nightly batch job time out",
        budgets=budgets,
        thread_id="rollout",
        path="services/retrieval/search.py",
        repo="ctx",
    )
    client = EmbedderClient(ctx_stack.embedder_address)
    try:
        for name, layer in body["layers"].items():
            assert layer["budget"] == budgets[name]
            assert layer["tokens"] <= layer["budget"], (name, layer)
            if layer["text"]:
                (real,) = await client.count_tokens([layer["text"]], timeout_s=10)
                assert real == layer["tokens"]
    finally:
        await client.close()
    memories = body["layers"]["memories"]
    assert memories["dropped"] > 0  # thirty incidents do not fit in 90 tokens
    assert memories["cited_ids"] and all(i[:8] in memories["text"] for i in memories["cited_ids"])
    assert body["total_tokens"] == sum(layer["tokens"] for layer in body["layers"].values())


async def test_default_layers_cite_what_they_use(ctx_stack: Stack) -> None:
    body = await _context(ctx_stack, query="how do we deploy the payments service?", thread_id="rollout")
    layers = body["layers"]
    assert "release checklist" in layers["procedural"]["text"]
    assert "Never push directly to main" in layers["project"]["text"]
    assert "Postgres 17" in layers["memories"]["text"]
    assert "halfway through refactoring" in layers["recent"]["text"]
    # The thread's latest turns, oldest first.
    recent = layers["recent"]["text"]
    assert recent.index("step 5") < recent.index("step 6") < recent.index("step 7")
    assert body["mode"] == "answer" and body["mode_reason"].startswith("auto")


async def test_path_rules_are_deterministic_tier_1(ctx_stack: Stack) -> None:
    first = await _context(ctx_stack, path="hypermnesia/v1/retrieval_pb2.py", repo="ctx")
    second = await _context(ctx_stack, path="hypermnesia/v1/retrieval_pb2.py", repo="ctx")
    rules = first["layers"]["path_rules"]
    assert rules == second["layers"]["path_rules"]
    assert "never edited by hand" in rules["text"]
    assert "generated-not-edited" in rules["cited_ids"]
    assert "Project map of ctx" in first["layers"]["project"]["text"]


async def test_no_repo_named_is_the_sessions_project(ctx_stack: Stack) -> None:
    """The map is loaded for repo `ctx`, the slug of the session's project `project:ctx`: the
    context (REST and MCP) and the tier 0/1 tools find it without naming the repo."""
    rest = await _context(ctx_stack, query="how do we deploy the payments service?")
    assert "Project map of ctx: " in rest["layers"]["project"]["text"]
    assert "only through the gRPC contracts" in rest["layers"]["project"]["text"]  # an invariant
    # A path's rules need no repo either; '' names none (the map is then left out).
    edit = await _context(ctx_stack, path="hypermnesia/v1/retrieval_pb2.py")
    assert "generated-not-edited" in edit["layers"]["path_rules"]["cited_ids"]
    bare = await _context(ctx_stack, query="how do we deploy the payments service?", repo="")
    assert "Project map of" not in bare["layers"]["project"]["text"]
    assert "Never push directly to main" in bare["layers"]["project"]["text"]
    async with mcp_session(ctx_stack.mcp_url, "alice-token", "ctx") as client:
        tool = tool_json(await client.call_tool("memory_context", {"query": "how do we deploy?"}))
        assert "Project map of ctx: " in tool["layers"]["project"]["text"]
        overview = tool_json(await client.call_tool("project_map", {}))
        assert overview["repo"] == "ctx" and overview["components"]
        path = {"path": "hypermnesia/v1/retrieval_pb2.py"}
        rules = tool_json(await client.call_tool("rules_for_path", path))
        assert rules["repo"] == "ctx" and rules["matched"] is True
        assert "generated-not-edited" in {c["id"] for c in rules["constraints"]}
    # Another session's project has no map: its context's project layer holds no map.
    async with mcp_session(ctx_stack.mcp_url, "alice-token", "ctx-elsewhere") as client:
        tool = tool_json(await client.call_tool("memory_context", {"query": "how do we deploy?"}))
        assert "Project map of" not in tool["layers"]["project"]["text"]


async def test_session_start_is_manager_mode(ctx_stack: Stack) -> None:
    body = await _context(ctx_stack)
    assert body["mode"] == "manager" and "no query" in body["mode_reason"]
    body = await _context(ctx_stack, query="where were we with the rollout?")
    assert body["mode"] == "manager" and "state" in body["mode_reason"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"budgets": {"feelings": 10}}, "unknown layer 'feelings'"),
        ({"budgets": {"memories": -1}}, "between 0 and 32,000"),
        ({"mode": "boss"}, "mode 'boss' is unknown"),
        ({"query": "x" * 20_000}, "the limit is 16,384"),
    ],
)
async def test_bad_context_input(ctx_stack: Stack, body: dict, fragment: str) -> None:
    async with httpx.AsyncClient(base_url=ctx_stack.base_url, headers=HEADERS) as http:
        response = await http.post("/records/context", json=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]["message"]


async def test_a_context_call_with_a_query_logs_one_search(ctx_stack: Stack) -> None:
    """Three layers search (procedural, memories, documents), but the caller asked one question:
    one search_log row, with the hits of all three."""
    query = "which export held up the nightly batch job queue"
    body = await _context(ctx_stack, query=query)
    cited = sum(
        len(layer["cited_ids"])
        for name, layer in body["layers"].items()
        if name in ("procedural", "memories")
    )
    await ctx_stack.searcher.drain()  # search_log rows are written off the hot path
    logged = await ctx_stack.pool.fetch(
        "SELECT k, hits, principal, scopes FROM search_log WHERE query = $1", query
    )
    assert len(logged) == 1
    row = logged[0]
    assert row["k"] == 20 + 30 + 20 and row["hits"] >= cited > 0
    assert row["principal"] == "alice" and "project:ctx" in row["scopes"]
