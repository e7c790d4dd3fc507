"""The delivery log (issue 30 item 3) on the real stack: a real MCP client's search, context block and
Dialectic answer (a real HTTP server standing in for the LLM) replayed by `hypermnesia replay` with
the sha256 of the exact text the client received; REST deliveries and the hooks' calls by the
X-Hypermnesia-Session header; each memory's state now after a supersede, a delete and a purge (a
purged memory's text never shown); retention by the daily job, after which the chain verifies."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hypermnesia.times import timestamp
from hypermnesia.v1 import deliveries_pb2, deliveries_pb2_grpc
from services.curation import admin
from tests.conftest import Stack, start_stack
from tests.helpers import tool_json
from tests.test_intelligence_interfaces import cli, cli_json
from tests.test_llm import FakeLlm, Scripted, fake_llm

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "deliv"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLlm]:
    with fake_llm([], default=Scripted({"claims": []})) as fake:
        yield fake


@pytest.fixture(scope="module")
async def stack(pg_server_url: str, embedder: str, model_cache: Path, llm: FakeLlm) -> AsyncIterator[Stack]:
    async with start_stack(
        pg_server_url, embedder, model_cache, llm_base_url=llm.url, llm_model="fake", llm_max_retries=0
    ) as running:
        yield running


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@asynccontextmanager
async def mcp_client(
    url: str, headers: dict[str, str], seen: dict[str, str], mode: str = "legacy"
) -> AsyncIterator[Client]:
    """A real MCP client, by default on the handshake-era protocol (what clients of today speak):
    `seen` gets the Mcp-Session-Id the server gave its session. The 2026 protocol has no session."""

    async def keep_session(response: Any) -> None:
        session = response.headers.get("mcp-session-id")
        if session:
            seen["session"] = session

    async with httpx2.AsyncClient(
        headers=headers, timeout=60, event_hooks={"response": [keep_session]}
    ) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def text_of(result: Any) -> str:
    assert not result.is_error, result.content[0].text
    text: str = result.content[0].text
    return text


async def listed(
    http: httpx.AsyncClient, headers: dict[str, str], want: int, **params: Any
) -> list[dict[str, Any]]:
    """GET /deliveries once it holds `want` deliveries (the gateway sends them in the background)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        answer = await http.get("/deliveries", params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["deliveries"]
        if len(found) >= want or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.1)


async def save(http: httpx.AsyncClient, content: str, headers: dict[str, str] = ALICE) -> str:
    answer = await http.post("/memories", json={"content": content}, headers=headers)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["memory"]["id"])


async def test_replay_of_an_mcp_session_lists_its_search_context_and_answer_with_the_hashes_received(
    stack: Stack, llm: FakeLlm
) -> None:
    seen: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        port = await save(http, "The kestrel metrics exporter listens on port 9464.")
        await save(http, "Lunch is served in the atrium on Fridays.")
        async with mcp_client(stack.mcp_url, ALICE, seen) as client:
            listed_tools = {t.name for t in (await client.list_tools()).tools}
            assert "memory_search" in listed_tools and "memory_deliveries" not in listed_tools
            searched = await client.call_tool("memory_search", {"query": "kestrel exporter port"})
            context = await client.call_tool("memory_context", {"query": "kestrel metrics exporter"})
            llm.script.append(
                Scripted({"claims": [{"text": "The exporter listens on port 9464.", "citations": [port]}]})
            )
            asked = await client.call_tool(
                "memory_ask", {"question": "Which port does the kestrel exporter use?"}
            )
        session = seen["session"]
        received = {name: text_of(r) for name, r in
                    (("memory_search", searched), ("memory_context", context), ("memory_ask", asked))}  # fmt: skip
        assert port in [r["id"] for r in tool_json(searched)]
        assert port in [c for claim in tool_json(asked)["claims"] for c in claim["citations"]]
        assert await listed(http, ALICE, 3, session=session)

    replay = await cli_json(stack, "replay", "--session", session)
    deliveries = replay["deliveries"]
    assert [d["operation"] for d in deliveries] == ["memory_search", "memory_context", "memory_ask"]
    for d in deliveries:
        text = received[d["operation"]].encode()
        assert d["text_sha256"] == sha(text) and d["text_bytes"] == len(text)
        assert d["principal"] == "alice" and d["transport"] == "mcp" and d["session"] == session
        assert port in [m["id"] for m in d["memories"]]
        assert all(m["state"] == "live" for m in d["memories"] if m["id"] == port)
    search, context, answer = deliveries
    scores = {r["id"]: r["score"] for r in tool_json(searched)}
    assert {m["id"]: m["score"] for m in search["memories"]} == scores
    assert search["request"]["query"] == "kestrel exporter port"
    assert answer["request"]["question"] == "Which port does the kestrel exporter use?"
    # The chain links them: each prev_hash is the entry before it (none else in this session between).
    assert all(d["seq"] > 0 and len(d["entry_hash"]) == 64 for d in deliveries)
    # The human-readable replay names the same.
    code, out, err = await cli(stack, "replay", "--session", session)
    assert code == 0, err
    assert search["text_sha256"] in out and port in out and "[live]" in out

    # The full profile's tool shows the same log.
    async with mcp_client(stack.mcp_url, {**ALICE, "X-Hypermnesia-Tools": "full"}, {}) as client:
        shown = tool_json(await client.call_tool("memory_deliveries", {"session": session}))
    assert [d["text_sha256"] for d in shown["deliveries"]] == [d["text_sha256"] for d in deliveries]


async def test_rest_deliveries_and_the_hooks_calls_are_recorded_by_the_session_header(stack: Stack) -> None:
    session = f"hook-{uuid.uuid4()}"
    h = {**ALICE, "X-Hypermnesia-Session": session}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        kept = await save(http, "Deploys of the heron service go through the blue-green pipeline.")
        loaded = await http.post(
            "/map/deliv",
            content="components:\n  - slug: heron\n    globs: ['heron/**']\n"
            "constraints:\n  - text: Never deploy heron on Fridays.\n    severity: must\n",
            headers=ALICE,
        )
        assert loaded.status_code == 200, loaded.text
        # What tooling/hooks.py calls: session start, before an edit, on a prompt; and a search.
        calls = [
            await http.post("/records/context", json={"mode": "manager", "repo": ""}, headers=h),
            await http.get("/map/deliv/resolve", params={"path": "heron/app.py"}, headers=h),
            await http.post(
                "/records/context", json={"query": "how do heron deploys go", "mode": "answer"}, headers=h
            ),
            await http.post("/memories/search", json={"query": "heron deploys pipeline"}, headers=h),
        ]
        assert all(c.status_code == 200 for c in calls), [c.text for c in calls]
        # An MCP client on the 2026 protocol has no MCP session: the header names it.
        async with mcp_client(stack.mcp_url, h, {}, mode="auto") as client:
            modern = text_of(await client.call_tool("memory_search", {"query": "heron deploys pipeline"}))
        found = await listed(http, ALICE, 5, session=session)
        # Another session's header and no header see none of them.
        assert not (await http.get("/deliveries", params={"session": "another"}, headers=ALICE)).json()[
            "deliveries"
        ]
    assert [d["operation"] for d in found] == [
        "memory_context",
        "rules_for_path",
        "memory_context",
        "memory_search",
        "memory_search",
    ]
    assert [d["text_sha256"] for d in found] == [sha(c.content) for c in calls] + [sha(modern.encode())]
    assert [d["transport"] for d in found] == ["rest"] * 4 + ["mcp"]
    assert all(d["principal"] == "alice" for d in found)
    rules = found[1]
    assert rules["memories"] and all(m["state"] == "not_found" for m in rules["memories"])
    assert kept in [m["id"] for m in found[2]["memories"]] and kept in [m["id"] for m in found[3]["memories"]]
    # Bob reads none of alice's deliveries, even naming her session and her.
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        for params in ({"session": session}, {"principal": "alice"}, {"since": "2000-01-01T00:00:00Z"}):
            seen_by_bob = (await http.get("/deliveries", params=params, headers=BOB)).json()["deliveries"]
            assert all(d["principal"] != "alice" for d in seen_by_bob)


async def test_each_memory_shows_its_state_now_and_a_purged_one_never_its_text(stack: Stack) -> None:
    session = f"states-{uuid.uuid4()}"
    h = {**ALICE, "X-Hypermnesia-Session": session}
    words = "osprey backup rotation"
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        texts = {
            "kept": f"The {words} keeps 7 daily snapshots.",
            "replaced": f"The {words} runs at 02:00 UTC.",
            "deleted": f"The {words} writes to the grey bucket.",
            "purged": f"The {words} secret passphrase is tangerine-walrus-42.",
        }
        ids = {name: await save(http, text) for name, text in texts.items()}
        searched = await http.post("/memories/search", json={"query": words, "k": 10}, headers=h)
        assert set(ids.values()) <= {r["id"] for r in searched.json()["results"]}
        replaced = await http.post(
            f"/memories/{ids['replaced']}/supersede",
            json={"content": f"The {words} runs at 03:00 UTC."},
            headers=ALICE,
        )
        assert replaced.status_code == 200, replaced.text
        assert (await http.delete(f"/memories/{ids['deleted']}", headers=ALICE)).status_code == 200
        await admin.purge(stack.pool, ids["purged"], "test-operator")
        (delivery,) = await listed(http, ALICE, 1, session=session)
        body = (await http.get("/deliveries", params={"session": session}, headers=ALICE)).text
    states = {m["id"]: m for m in delivery["memories"]}
    assert states[ids["kept"]]["state"] == "live" and states[ids["kept"]]["content"] == texts["kept"]
    assert states[ids["replaced"]]["state"] == "superseded" and states[ids["replaced"]]["superseded_by"]
    for name in ("deleted", "purged"):
        gone = states[ids[name]]
        assert gone["state"] == name and len(gone["hash"]) == 64 and "content" not in gone
    ended = await stack.pool.fetchval(
        "SELECT record_hash FROM records WHERE target_id = $1 AND operation = 'purge'",
        uuid.UUID(ids["purged"]),
    )
    assert states[ids["purged"]]["hash"] == ended
    assert "tangerine-walrus" not in body
    code, out, err = await cli(stack, "replay", "--session", session)
    assert code == 0, err
    assert "tangerine-walrus" not in out and "[purged]" in out and "[superseded]" in out


async def record(stack: Stack, *when: datetime) -> None:
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = deliveries_pb2_grpc.DeliveriesStub(channel)
        answer = await stub.RecordDeliveries(
            deliveries_pb2.RecordDeliveriesRequest(
                deliveries=[
                    deliveries_pb2.Delivery(
                        principal="alice",
                        session="retention",
                        operation="memory_search",
                        transport="rest",
                        delivered_at=timestamp(at),
                        request_json=json.dumps({"query": "old"}),
                        scopes=["project:deliv"],
                        items=[deliveries_pb2.DeliveredItem(id=str(uuid.uuid4()), has_score=True, score=0.5)],
                        text_sha256=sha(b"x"),
                        text_bytes=1,
                    )
                    for at in when
                ]
            ),
            timeout=30,
        )
    assert answer.recorded == len(when)


async def test_retention_drops_old_entries_in_the_daily_job_and_the_chain_still_verifies(
    pg_server_url: str, embedder: str, model_cache: Path
) -> None:
    now = datetime.now(UTC)
    old, young = now - timedelta(days=100), now - timedelta(days=1)
    # A store of its own: retention drops the chain's oldest run of old entries, which must be this test's.
    async with start_stack(pg_server_url, embedder, model_cache) as stack:
        await record(stack, old - timedelta(days=20), old)
        await record(stack, young, old, young)
        verified = await cli(stack, "replay", "--verify")
        assert verified[0] == 0 and "5 deliveries" in verified[1], verified
        await cli_json(stack, "consolidate", "--job", "daily")  # HM_DELIVERY_RETENTION_DAYS: 90 by default
        left = await stack.pool.fetch("SELECT seq, delivered_at FROM deliveries ORDER BY seq")
        # The two oldest went; an old entry recorded after a young one waits for it.
        assert [r["seq"] for r in left] == [3, 4, 5]
        chain = await stack.pool.fetchrow("SELECT * FROM delivery_chain")
        assert chain["floor_seq"] == 2 and chain["last_seq"] == 5
        code, out, err = await cli(stack, "replay", "--verify")
        assert code == 0 and "3 deliveries after the retention boundary (seq 2)" in out, (out, err)
        # Append-only: a row above the floor can be neither changed nor dropped, and a changed
        # boundary (what a rewrite would need) is caught by the verify.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stack.pool.execute("DELETE FROM deliveries WHERE seq = 3")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stack.pool.execute("UPDATE deliveries SET principal = 'mallory' WHERE seq = 3")
        await stack.pool.execute("UPDATE delivery_chain SET floor_hash = repeat('1', 64)")
        code, out, err = await cli(stack, "replay", "--verify")
        assert code == 3 and "BROKEN at delivery 3" in err, (out, err)


async def test_replay_refuses_a_call_that_names_nothing_to_show(stack: Stack) -> None:
    code, out, err = await cli(stack, "replay")
    assert code == 2 and "--session" in err and not out
