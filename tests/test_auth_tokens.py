"""Store tokens (`hypermnesia token create | list | revoke`) at the gateway, beside HM_AUTH_TOKENS:
they work over REST, MCP (HTTP) and `hypermnesia mcp` (stdio); a revoked one is refused once the
gateway's cache time has passed; an unknown one names the header to send; a token that cannot be
checked because curation is down is a 503 that says so, not "unknown"."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from gateway.app import create_app
from hypermnesia.settings import GatewaySettings
from tests.conftest import TOKENS, Stack, start_stack
from tests.helpers import mcp_session, tool_json
from tests.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parent.parent
CACHE_S = 0.5
HEADER = "Authorization: Bearer <token>"


@pytest.fixture(scope="module")
async def token_stack(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache, token_cache_s=CACHE_S) as running:
        yield running


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """`hypermnesia token ...` against the stack's database, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["HM_DATABASE_URL"] = stack.database_url
    done = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "token", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def bearer(token: str, project: str = "tokens") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Hypermnesia-Project": project}


def stdio_server(stack: Stack, token: str) -> StdioServerParameters:
    # No HM_AUTH_TOKENS: the stdio process knows the token only through curation.
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hypermnesia", "mcp", "--project", "tokens"],
        env={
            "HM_TOKEN": token,
            "HM_RETRIEVAL_ADDRESS": stack.retrieval_address,
            "HM_CURATION_ADDRESS": stack.curation_address,
        },
        cwd=ROOT,
    )


async def fastmcp_refusal(url: str, token: str) -> str:
    """What the fastmcp client raises when the gateway refuses its token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with pytest.raises(Exception) as caught:
        async with FastClient(StreamableHttpTransport(url, headers=headers), timeout=30) as client:
            await client.list_tools()
    return str(caught.value)


async def mcp_refusal(url: str, token: str) -> str:
    """What the official SDK client raises when the gateway refuses its token."""
    with pytest.raises(BaseException) as caught:
        async with mcp_session(url, token, "tokens") as client:
            await client.list_tools()
    error: BaseException = caught.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return str(error)


async def test_store_token_lifecycle(token_stack: Stack) -> None:
    stack = token_stack
    made = json.loads(
        cli(
            stack,
            "create",
            "--principal",
            "carol",
            "--scope",
            "user:carol",
            "--scope",
            "project:*",
            "--description",
            "carol's laptop",
            "--json",
        ).stdout
    )
    token = made["token"]
    assert token.startswith("hm_") and made["principal"] == "carol"

    listed = cli(stack, "list", "--json").stdout
    assert token not in listed  # only its hash is kept
    rows = {row["id"]: row for row in json.loads(listed)}
    assert rows[made["id"]]["scopes"] == ["user:carol", "project:*"]
    assert rows[made["id"]]["description"] == "carol's laptop"

    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        # REST with the store token, and a HM_AUTH_TOKENS token beside it.
        saved = await http.post(
            "/memories",
            headers=bearer(token),
            json={
                "content": "Carol's build cache lives on the NVMe scratch disk",
                "description": "build cache",
            },
        )
        assert saved.status_code == 200, saved.text
        memory = saved.json()["memory"]
        assert memory["owner_id"] == "carol" and memory["scope"] == "project:tokens"
        alice = await http.get(f"/memories/{memory['id']}", headers=bearer("alice-token"))
        assert alice.status_code == 200, alice.text

        # A scope the token may not use is refused, naming the scope.
        denied = await http.post(
            "/memories", headers=bearer(token), json={"content": "not hers", "scope": "user:alice"}
        )
        assert denied.status_code == 403 and "user:alice" in denied.json()["error"]["message"], denied.text

    # MCP over HTTP with the store token.
    async with mcp_session(stack.mcp_url, token, "tokens") as client:
        found = tool_json(await client.call_tool("memory_search", {"query": "where is the build cache?"}))
        assert found and found[0]["id"] == memory["id"]
        denied_call = await client.call_tool(
            "memory_save", {"content": "not hers", "description": "x", "scope": "user:alice"}
        )
        assert denied_call.is_error and "user:alice" in denied_call.content[0].text

    # `hypermnesia mcp` (stdio) with the store token in HM_TOKEN.
    async with Client(stdio_client(stdio_server(stack, token))) as client:
        found = tool_json(await client.call_tool("memory_search", {"query": "build cache disk"}))
        assert found and found[0]["id"] == memory["id"] and found[0]["owner_id"] == "carol"

    revoked = cli(stack, "revoke", made["id"]).stdout
    assert made["id"] in revoked and "carol" in revoked
    listed = json.loads(cli(stack, "list", "--json").stdout)
    assert made["id"] not in {row["id"] for row in listed}
    everything = json.loads(cli(stack, "list", "--all", "--json").stdout)
    assert any(row["id"] == made["id"] and row["revoked_at"] for row in everything)

    await asyncio.sleep(CACHE_S * 2.5)  # past the gateway's cache of the token's answer
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        refused = await http.get(f"/memories/{memory['id']}", headers=bearer(token))
        assert refused.status_code == 401, refused.text
        message = refused.json()["error"]["message"]
        assert "unknown bearer token" in message and HEADER in message
        still = await http.get(f"/memories/{memory['id']}", headers=bearer("alice-token"))
        assert still.status_code == 200, still.text
    message = await mcp_refusal(stack.mcp_url, token)
    assert "unknown bearer token" in message and HEADER in message

    # stdio refuses the revoked token before its first call (in a thread: curation answers the
    # process's lookup from this test's event loop).
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "hypermnesia", "mcp", "--project", "tokens"],
        env={"PATH": os.environ["PATH"], **(stdio_server(stack, token).env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "unknown bearer token" in done.stderr and "HM_TOKEN" in done.stderr


@pytest.mark.parametrize(
    ("headers", "sdk_token", "fragment"),
    [
        ({}, "", "missing bearer token"),
        ({"Authorization": "Bearer not-a-token"}, "not-a-token", "unknown bearer token"),
        ({"Authorization": "Basic YWxpY2U6cHc="}, None, "not a bearer token"),
    ],
)
async def test_refusals_name_the_header(
    token_stack: Stack, headers: dict[str, str], sdk_token: str | None, fragment: str
) -> None:
    """REST answers its error object; MCP answers a JSON-RPC error (with the request's id) in the
    401's body, which is what the official SDK client shows its user."""
    async with httpx.AsyncClient(base_url=token_stack.base_url, timeout=60) as http:
        rest = await http.get("/memories", headers=headers)
        assert rest.status_code == 401
        error = rest.json()["error"]
        assert set(rest.json()) == {"error"} and error["code"] == "UNAUTHENTICATED"
        assert fragment in error["message"] and HEADER in error["message"]
        mcp = await http.post(
            "/mcp",
            headers={**headers, "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}},
        )
        assert mcp.status_code == 401
        body: dict[str, Any] = mcp.json()
        assert body["jsonrpc"] == "2.0" and body["id"] == 7
        assert fragment in body["error"]["message"] and HEADER in body["error"]["message"]
    if sdk_token is not None:
        for message in (
            await mcp_refusal(token_stack.mcp_url, sdk_token),
            await fastmcp_refusal(token_stack.mcp_url, sdk_token),
        ):
            assert fragment in message and HEADER in message


async def test_unreachable_curation_is_503_not_unknown(token_stack: Stack) -> None:
    """A gateway whose curation is cut off: a token it has cached keeps working for reads (served by
    retrieval); one it has not seen cannot be checked, and says so."""
    made = json.loads(
        cli(token_stack, "create", "--principal", "dave", "--scope", "project:*", "--json").stdout
    )
    other = json.loads(
        cli(token_stack, "create", "--principal", "erin", "--scope", "project:*", "--json").stdout
    )
    proxy = TcpProxy(token_stack.curation_address)
    await proxy.start()
    settings = GatewaySettings(
        retrieval_address=token_stack.retrieval_address,
        curation_address=proxy.address,
        auth_tokens=TOKENS,
        token_cache_s=600,
        rpc_timeout_s=5,
    )
    app = create_app(settings)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway", timeout=60
        ) as http:
            first = await http.get("/memories", headers=bearer(made["token"]))
            assert first.status_code == 200, first.text
            await proxy.stop()
            cached = await http.get("/memories", headers=bearer(made["token"]))
            assert cached.status_code == 200, cached.text
            unseen = await http.get("/memories", headers=bearer(other["token"]))
            assert unseen.status_code == 503, unseen.text
            message = unseen.json()["error"]["message"]
            assert "curation" in message and "unreachable" in message and "unknown" not in message
            listed = await http.get("/memories", headers=bearer("alice-token"))
            assert listed.status_code == 200, listed.text  # HM_AUTH_TOKENS need no lookup
    finally:
        await proxy.stop()
        await app.state.backends.close()
