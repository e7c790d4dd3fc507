"""Store tokens (`hypermnesia token create | list | revoke`) at the gateway, beside HM_AUTH_TOKENS:
they work over REST, MCP (HTTP) and `hypermnesia mcp` (stdio); a revoked one is refused once the
gateway's cache time has passed; an unknown one names the header to send; a token that cannot be
checked because curation is down is a 503 that says so, not "unknown"."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import pytest
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError as FastToolError
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

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


async def fastmcp_refusal(url: str, headers: dict[str, str]) -> str:
    """What the fastmcp client raises when a tool call is refused for its token: the session opens
    and lists the tools (seed 001's behaviour), the call fails."""
    async with FastClient(StreamableHttpTransport(url, headers=headers), timeout=30) as client:
        assert await client.list_tools()
        with pytest.raises(FastToolError) as caught:
            await client.call_tool("memory_list", {})
    return str(caught.value)


async def mcp_refusal(url: str, headers: dict[str, str]) -> str:
    """What the official SDK client shows when a tool call is refused for its token."""
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            assert (await client.list_tools()).tools
            result = await client.call_tool("memory_search", {"query": "anything"})
    assert result.is_error, result
    text: str = result.content[0].text
    return text


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
    for message in (
        await mcp_refusal(stack.mcp_url, bearer(token)),
        await fastmcp_refusal(stack.mcp_url, bearer(token)),
    ):
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
    ("headers", "fragment"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer not-a-token"}, "unknown bearer token"),
        ({"Authorization": "Basic YWxpY2U6cHc="}, "not a bearer token"),
    ],
)
async def test_refusals_name_the_header(token_stack: Stack, headers: dict[str, str], fragment: str) -> None:
    """REST answers 401 with its error object; MCP opens the session and answers each tool call
    with a tool error (seed 001's behaviour), and both say what to send."""
    async with httpx.AsyncClient(base_url=token_stack.base_url, timeout=60) as http:
        rest = await http.get("/memories", headers=headers)
        assert rest.status_code == 401
        error = rest.json()["error"]
        assert set(rest.json()) == {"error"} and error["code"] == "UNAUTHENTICATED"
        assert fragment in error["message"] and HEADER in error["message"]
    for message in (
        await mcp_refusal(token_stack.mcp_url, headers),
        await fastmcp_refusal(token_stack.mcp_url, headers),
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


async def test_a_store_token_reaches_the_projects_it_is_granted(token_stack: Stack) -> None:
    """A store token opens only the projects it is granted, and `token create` says so; a token of
    HM_AUTH_TOKENS keeps seed 001's rule (its session's project is its own). `project:*` also covers
    the default scope, where a session without a project lands (the first-run token holds it)."""
    made = cli(token_stack, "create", "--principal", "frank", "--scope", "user:frank").stdout
    assert "It reaches user:frank and no project" in made and "--scope 'project:*'" in made, made
    frank = next(line for line in made.splitlines() if line.startswith("hm_"))
    every = json.loads(
        cli(token_stack, "create", "--principal", "gina", "--scope", "project:*", "--json").stdout
    )
    assert every["reaches"] == "every project"

    async with httpx.AsyncClient(base_url=token_stack.base_url, timeout=60) as http:
        fact = {"content": "The fenced project's deploy key rotates on Mondays", "description": "key"}
        saved = await http.post("/memories", headers=bearer("alice-token", "fenced"), json=fact)
        assert saved.status_code == 200, saved.text
        memory_id = saved.json()["memory"]["id"]

        read = await http.get(f"/memories/{memory_id}", headers=bearer(frank, "fenced"))
        assert read.status_code == 404, read.text
        write = await http.post("/memories", headers=bearer(frank, "fenced"), json={"content": "frank's"})
        assert write.status_code == 403 and "project:fenced" in write.json()["error"]["message"]
        found = await http.post(
            "/memories/search",
            headers=bearer(frank, "fenced"),
            json={"query": "deploy key", "min_similarity": 0, "relative_cutoff": 0},
        )
        assert found.status_code == 200 and memory_id not in found.text, found.text

        # bob (HM_AUTH_TOKENS, granted no such project) reads it by header, as in seed 001.
        bob = await http.get(f"/memories/{memory_id}", headers=bearer("bob-token", "fenced"))
        assert bob.status_code == 200, bob.text
        gina = await http.get(f"/memories/{memory_id}", headers=bearer(every["token"], "fenced"))
        assert gina.status_code == 200, gina.text
        # No project header: the default scope, which `project:*` covers and frank's grants do not.
        nowhere = {"Authorization": f"Bearer {every['token']}"}
        landed = await http.post("/memories", headers=nowhere, json={"content": "gina's default note"})
        assert landed.status_code == 200 and landed.json()["memory"]["scope"] == "default", landed.text
        refused = await http.post(
            "/memories", headers={"Authorization": f"Bearer {frank}"}, json={"content": "frank's note"}
        )
        assert refused.status_code == 403, refused.text

    async with mcp_session(token_stack.mcp_url, frank, "fenced") as client:
        assert tool_json(await client.call_tool("memory_get", {"memory_id": memory_id})) is None


def test_token_list_says_revoked_tokens_are_hidden(token_stack: Stack) -> None:
    made = json.loads(
        cli(token_stack, "create", "--principal", "hal", "--scope", "user:hal", "--json").stdout
    )
    cli(token_stack, "revoke", made["id"])
    listed = cli(token_stack, "list").stdout
    assert made["id"] not in listed
    assert re.search(r"\d+ revoked tokens? not shown \(`hypermnesia token list --all` lists them\)", listed)
    everything = cli(token_stack, "list", "--all").stdout
    assert made["id"] in everything and "revoked" in everything and "not shown" not in everything
