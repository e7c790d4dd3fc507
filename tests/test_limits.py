"""Limits that protect a shared box (issue 20): body size, per-principal rate limits on writes and
searches (REST 429 with Retry-After, an MCP tool error, nothing half-written, counted in /metrics
without a principal label), and error answers that never show internals."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.operations import SEARCH
from tests.conftest import Stack, start_stack
from tests.helpers import mcp_session

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "limits"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
# One token a second, three at once: a test drains a bucket in three calls and refills it in one second.
PER_MIN = 60
BURST = 3
MAX_BODY = 64 * 1024
# What an answer must never show: a stack trace, SQL, a file path, a driver's name.
LEAKS = re.compile(
    r"Traceback|File \"|\.py\b|site-packages|/work/|/tmp/|/home/|SELECT |INSERT |UPDATE |DELETE FROM|asyncpg|"
    r"psycopg|grpc\._|StatusCode\.|_pb2|line \d+, in",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
async def limited(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(
        pg_server_url,
        embedder,
        model_cache,
        rate_writes_per_min=PER_MIN,
        rate_writes_burst=BURST,
        rate_searches_per_min=PER_MIN,
        rate_searches_burst=BURST,
        max_body_bytes=MAX_BODY,
    ) as running:
        yield running


def _refused_count(text: str, kind: str) -> float:
    match = re.search(rf'^hm_rate_limited_total\{{kind="{kind}"\}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def test_searches_past_the_bucket_answer_429_and_recover(limited: Stack) -> None:
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        before = _refused_count((await http.get("/metrics")).text, SEARCH)
        await asyncio.sleep(BURST * 60 / PER_MIN)  # a full bucket, whatever ran before
        for _ in range(BURST):
            response = await http.post("/memories/search", json={"query": "backups"}, headers=ALICE)
            assert response.status_code == 200, response.text
        refused = await http.post("/memories/search", json={"query": "backups"}, headers=ALICE)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        message = refused.json()["error"]["message"]
        assert message == "rate limit: 60 searches a minute for this token; retry in 1 s"
        # Another principal has a bucket of its own.
        other = await http.post("/memories/search", json={"query": "backups"}, headers=BOB)
        assert other.status_code == 200, other.text
        await asyncio.sleep(float(refused.headers["retry-after"]) + 0.1)
        again = await http.post("/memories/search", json={"query": "backups"}, headers=ALICE)
        assert again.status_code == 200, again.text
        metrics = (await http.get("/metrics")).text
    assert _refused_count(metrics, SEARCH) == before + 1
    lines = [line for line in metrics.splitlines() if line.startswith("hm_rate_limited_total")]
    assert lines and all(
        re.fullmatch(r'hm_rate_limited_total\{kind="(write|search)"\} \S+', x) for x in lines
    )
    assert "alice" not in "\n".join(lines)


async def test_mcp_over_the_limit_is_a_tool_error(limited: Stack) -> None:
    await asyncio.sleep(BURST * 60 / PER_MIN)
    async with mcp_session(limited.mcp_url, "bob-token", "bobs") as client:
        for _ in range(BURST):
            result = await client.call_tool("memory_search", {"query": "homelab"})
            assert not result.is_error, result.content[0].text
        result = await client.call_tool("memory_search", {"query": "homelab"})
        assert result.is_error
        assert result.content[0].text == "rate limit: 60 searches a minute for this token; retry in 1 s"
        await asyncio.sleep(1.1)
        result = await client.call_tool("memory_search", {"query": "homelab"})
        assert not result.is_error, result.content[0].text


async def test_a_refused_write_leaves_nothing_behind(limited: Stack) -> None:
    await asyncio.sleep(BURST * 60 / PER_MIN)
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        for i in range(BURST):
            body = {"content": f"Limit test fact number {i} about the staging cluster"}
            response = await http.post("/memories", json=body, headers=ALICE)
            assert response.status_code == 200, response.text
        records = await limited.pool.fetchval("SELECT count(*) FROM records")
        refused = await http.post("/memories", json={"content": "The refused write"}, headers=ALICE)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "writes a minute" in refused.json()["error"]["message"]
    async with mcp_session(limited.mcp_url, "alice-token", "limits") as client:
        result = await client.call_tool("memory_save", {"content": "The refused tool write"})
        assert result.is_error and "rate limit: 60 writes a minute" in result.content[0].text
    stored = await limited.pool.fetchval(
        "SELECT count(*) FROM memories WHERE content IN ('The refused write', 'The refused tool write')"
    )
    assert stored == 0
    assert await limited.pool.fetchval("SELECT count(*) FROM records") == records


async def _chunks(size: int) -> AsyncIterator[bytes]:
    yield b'{"content": "'
    sent = 0
    while sent < size:
        yield b"x" * 8192
        sent += 8192
    yield b'"}'


async def test_an_oversized_body_is_413(limited: Stack) -> None:
    big = {"content": "x" * (MAX_BODY + 1)}
    # A client each: the gateway closes a connection whose body it refused unread.
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        response = await http.post("/memories", json=big, headers=BOB)
        assert response.status_code == 413 and response.headers["connection"] == "close"
        error = response.json()["error"]
        assert error["code"] == "PAYLOAD_TOO_LARGE" and "HM_MAX_BODY_BYTES" in error["message"]
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        # Sent without a length (chunked): refused once it grows past the limit.
        response = await http.post(
            "/memories",
            content=_chunks(MAX_BODY + 16 * 1024),
            headers={**BOB, "Content-Type": "application/json"},
        )
        assert response.status_code == 413 and response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "memory_save", "arguments": big},
        }
        response = await http.post(
            "/mcp", json=call, headers={**BOB, "Accept": "application/json, text/event-stream"}
        )
        assert response.status_code == 413
        assert "HM_MAX_BODY_BYTES" in response.json()["error"]["message"]
    assert not await limited.pool.fetchval(
        "SELECT count(*) FROM memories WHERE length(content) > $1", MAX_BODY
    )


async def test_error_answers_never_show_internals(limited: Stack) -> None:
    probes: list[tuple[str, str, dict[str, object]]] = [
        ("GET", "/memories/not-a-uuid", {}),
        ("GET", "/memories/00000000-0000-0000-0000-000000000000", {}),
        ("GET", "/memories", {"params": {"limit": "lots"}}),
        ("GET", "/memories", {"params": {"as_of": "yesterday"}}),
        ("GET", "/memories", {"params": {"scope": "project:elsewhere"}}),
        ("GET", "/viz/graph", {"params": {"since": "soon"}}),
        ("GET", "/records/query", {"params": {"limit": -1}}),
        ("GET", "/records/00000000-0000-0000-0000-000000000000", {}),
        (
            "POST",
            "/records/query",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        ),
        (
            "POST",
            "/memories/search",
            {"content": b"\xff\xfe", "headers": {"Content-Type": "application/json"}},
        ),
        ("POST", "/memories", {"json": {"content": "x", "importance": "high"}}),
        ("POST", "/map/repo%2F..%2Fetc", {"content": b"components: [", "headers": {}}),
        ("PUT", "/memories", {}),
        ("GET", "/no/such/route", {}),
        (
            "POST",
            "/mcp",
            {"content": b"{broken", "headers": {"Accept": "application/json, text/event-stream"}},
        ),
    ]
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        for method, path, extra in probes:
            await asyncio.sleep(60 / PER_MIN / BURST)  # stays within the buckets
            headers = {**BOB, **extra.pop("headers", {})}  # type: ignore[dict-item]
            response = await http.request(method, path, headers=headers, **extra)  # type: ignore[arg-type]
            assert 400 <= response.status_code < 500, (method, path, response.status_code, response.text)
            assert not LEAKS.search(response.text), (method, path, response.text)
