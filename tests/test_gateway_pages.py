"""What a person or a program meets at the gateway's edges, on the real stack: `/` leads to the web
UI, a path that is nothing is a 404 in the gateway's JSON error shape (not MCP's 401), a field an
operation does not take is refused naming it (REST 422, an MCP tool error) and changes nothing, and
the documentation pages load only assets the gateway itself serves. tests/test_ui.py renders /docs
in a browser with every other address blocked."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "pages"}
SCOPE = "project:pages"


async def test_the_root_leads_to_the_web_ui(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
        response = await http.get("/")
        assert response.status_code == 307, response.text
        assert response.headers["location"] == "/ui/"
        page = await http.get("/", follow_redirects=True)
        assert page.status_code == 200 and "<title>hypermnesia</title>" in page.text


@pytest.mark.parametrize(
    ("method", "path", "token"),
    [
        ("GET", "/no-such-path", False),
        ("GET", "/no-such-path", True),
        ("POST", "/memorie", True),
        ("GET", "/mcpx", False),
        ("GET", "/ui/no-such-file.js", False),
        ("GET", "/docs/assets/no-such-file.js", False),
    ],
)
async def test_a_path_that_is_nothing_is_a_json_404(
    stack: Stack, method: str, path: str, token: bool
) -> None:
    headers = ALICE if token else {}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
        response = await http.request(method, path, headers=headers)
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "NOT_FOUND"
    assert path in error["message"] and "/docs" in error["message"], error


async def test_mcp_still_answers_at_its_path(stack: Stack) -> None:
    """The 404 is for other paths only: /mcp without a token is still MCP's own refusal."""
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
        response = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    assert response.status_code == 401, response.text
    assert response.json()["id"] == 7 and "Authorization" in response.json()["error"]["message"]
    async with mcp_session(stack.mcp_url, "alice-token", "pages") as client:
        assert "memory_save" in {t.name for t in (await client.list_tools()).tools}


async def _count(stack: Stack) -> int:
    return int(await stack.pool.fetchval("SELECT count(*) FROM memories WHERE scope = $1", SCOPE))


async def test_rest_refuses_a_field_the_operation_does_not_take(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        before = await _count(stack)
        # `importanse` for `importance`: dropped silently, the save would store the default.
        response = await http.post(
            "/memories", json={"content": "The kiln fires at 1280 degrees", "importanse": 7}
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "INVALID_ARGUMENT" and "importanse" in error["message"], error
        assert await _count(stack) == before, "a refused save stored something"

        # Another problem in the same body is reported beside it.
        both = await http.post("/memories", json={"content": 5, "colour": "red"})
        assert both.status_code == 422 and "colour" in both.text and "content" in both.text, both.text

        saved = await http.post("/memories", json={"content": "The kiln fires at 1280 degrees"})
        assert saved.status_code == 200, saved.text
        memory = saved.json()["memory"]
        patch = await http.patch(f"/memories/{memory['id']}", json={"content": "x", "tag": ["kiln"]})
        assert patch.status_code == 422 and "tag" in patch.json()["error"]["message"], patch.text
        unchanged = (await http.get(f"/memories/{memory['id']}")).json()
        assert unchanged["content"] == memory["content"] and unchanged["tags"] == memory["tags"]

        # A query string is a request too.
        listing = await http.get("/memories", params={"limt": 5})
        assert listing.status_code == 422 and "limt" in listing.json()["error"]["message"], listing.text

        # Shape errors without an unknown field stay 400, as the services answer theirs.
        wrong_type = await http.post("/memories", json={"content": ["not", "text"]})
        assert wrong_type.status_code == 400, wrong_type.text


async def test_mcp_tools_refuse_an_unknown_argument_and_say_so(stack: Stack) -> None:
    async with mcp_session(stack.mcp_url, "alice-token", "pages") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # Every tool's input schema closes its properties, and still lists what clients send.
        for name, tool in tools.items():
            assert tool.input_schema.get("additionalProperties") is False, name
        assert {"content", "description", "importance"} <= set(
            tools["memory_save"].input_schema["properties"]
        )
        before = await _count(stack)
        refused = await client.call_tool(
            "memory_save", {"content": "The glaze needs 12 hours to cool", "importanse": 7}
        )
        assert refused.is_error
        assert "importanse" in refused.content[0].text, refused.content
        assert await _count(stack) == before
        saved = tool_json(
            await client.call_tool("memory_save", {"content": "The glaze needs 12 hours to cool"})
        )
        assert saved["created"] is True


def _asset_urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(
        r"""url:\s*['"]([^'"]+)['"]""", html
    )


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_documentation_pages_load_only_what_the_gateway_serves(stack: Stack, page: str) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
        response = await http.get(page)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        urls = _asset_urls(response.text)
        assert any(u.endswith(".js") for u in urls), urls
        assert "/openapi.json" in response.text
        for url in urls:
            assert url.startswith("/"), f"{page} loads {url} from elsewhere"
            asset = await http.get(url)
            assert asset.status_code == 200, f"{page} needs {url}: {asset.status_code}"
            assert len(asset.content) > 0
        spec: dict[str, Any] = (await http.get("/openapi.json")).json()
        assert "/memories/{memory_id}/archive" in spec["paths"]
