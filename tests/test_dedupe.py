"""A save never replaces a different fact (issue 27), on the real stack: real Postgres, the real
model, curation and retrieval on loopback gRPC, the gateway over HTTP and a real MCP client.
Dedupe merges restatements only; a near-duplicate that differs in a number, an identifier or
polarity is kept, named under `similar`, and the daily consolidation proposes the supersede when
the two give one entity and attribute different values."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx

from hypermnesia.v1 import common_pb2, intelligence_pb2, intelligence_pb2_grpc
from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json

ALICE = {"Authorization": "Bearer alice-token"}
ALICE_CALLER = common_pb2.Caller(principal="alice", grants=["user:alice", "project:*", "shared"])
RATE_LIMIT = ("The rate limit is 100 requests per minute.", "The rate limit is 1000 requests per minute.")
PAYMENTS = ("Payments are NOT retried", "Payments are retried")
# What an agent saves with each (memory_save's one-line summary).
DESCRIPTIONS = {RATE_LIMIT: "API rate limit", PAYMENTS: "payment retries"}
SEED_PAIR = (
    "The user prefers pluggable local CPU embedding models.",
    "The user prefers pluggable local CPU embedding models too.",
)


def ui_bar(i: int) -> dict[str, str]:
    """Eight different facts about different services (i = 0..7), alike in shape."""
    return {
        "content": f"UI bar memory {i}: service {i % 5} talks to queue q{i % 7} over AMQP.",
        "description": f"ui memory {i}",
    }


def new_scope() -> str:
    return f"project:dd-{uuid.uuid4().hex[:10]}"


async def save(http: httpx.AsyncClient, scope: str, content: str, description: str = "") -> dict[str, Any]:
    response = await http.post(
        "/memories", json={"content": content, "description": description, "scope": scope}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def live_contents(http: httpx.AsyncClient, scope: str) -> list[str]:
    response = await http.get("/memories", params={"scope": scope, "full": "true", "limit": 100})
    assert response.status_code == 200, response.text
    return sorted(m["content"] for m in response.json()["memories"])


@asynccontextmanager
async def stack_intelligence(stack: Stack) -> AsyncIterator[intelligence_pb2_grpc.IntelligenceStub]:
    """The curation service's Intelligence stub: the daily job on demand, as `hypermnesia
    consolidate` and the server's schedule run it."""
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        yield intelligence_pb2_grpc.IntelligenceStub(channel)


def similar_to(answer: dict[str, Any]) -> dict[str, list[str]]:
    """id -> differences of each near-duplicate the save named."""
    return {s["id"]: s["differences"] for s in answer.get("similar", [])}


async def test_eight_different_facts_stay_eight(stack: Stack) -> None:
    scope = new_scope()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        answers = [await save(http, scope, **ui_bar(i)) for i in range(8)]
        assert [a["created"] for a in answers] == [True] * 8
        assert all("replaced" not in a for a in answers)
        ids = [a["memory"]["id"] for a in answers]
        assert len(set(ids)) == 8
        assert await live_contents(http, scope) == sorted(ui_bar(i)["content"] for i in range(8))
        # The saves that used to replace an earlier fact in place (2 over 1, 5 over 0, 7 over 1)
        # now name it, with what differs.
        for later, earlier, change in ((2, 1, "q1 -> q2"), (5, 0, "q0 -> q5"), (7, 1, "q1 -> q0")):
            assert change in similar_to(answers[later]).get(ids[earlier], []), answers[later]
        # Only earlier saves can be named, each with at least one difference.
        for n, answer in enumerate(answers):
            named = similar_to(answer)
            assert set(named) <= set(ids[:n]) and all(named.values())
        # The first save had nothing to be similar to: seed 001's shape exactly.
        assert set(answers[0]) == {"created", "memory"}


async def test_a_changed_number_or_polarity_keeps_both_facts(stack: Stack) -> None:
    scope = new_scope()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        for pair, change in ((RATE_LIMIT, "100 -> 1000"), (PAYMENTS, "not removed")):
            old, new = pair
            first = await save(http, scope, old, DESCRIPTIONS[pair])
            second = await save(http, scope, new, DESCRIPTIONS[pair])
            assert first["created"] and second["created"]
            assert second["memory"]["id"] != first["memory"]["id"]
            assert second["similar"] == [
                {"id": first["memory"]["id"], "content": old, "differences": [change]}
            ]
        assert await live_contents(http, scope) == sorted([*RATE_LIMIT, *PAYMENTS])


async def test_a_restatement_still_merges(stack: Stack) -> None:
    scope = new_scope()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        first = await save(http, scope, SEED_PAIR[0])
        again = await save(http, scope, SEED_PAIR[1])
        assert set(again) == {"created", "memory", "replaced"}
        assert again["created"] is False and again["memory"]["id"] == first["memory"]["id"]
        assert again["replaced"]["content"] == SEED_PAIR[0] and again["memory"]["content"] == SEED_PAIR[1]
        assert await live_contents(http, scope) == [SEED_PAIR[1]]


SAVES = [(content, DESCRIPTIONS[RATE_LIMIT]) for content in RATE_LIMIT] + [
    (content, "") for content in SEED_PAIR
]


async def test_rest_and_mcp_answer_a_save_in_the_same_shape(stack: Stack) -> None:
    rest_scope, mcp_scope = new_scope(), new_scope()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        rest = [await save(http, rest_scope, content, description) for content, description in SAVES]
    async with mcp_session(stack.mcp_url, "alice-token") as client:
        mcp = [
            tool_json(
                await client.call_tool(
                    "memory_save", {"content": content, "description": description, "scope": mcp_scope}
                )
            )
            for content, description in SAVES
        ]

    def shape(answer: dict[str, Any]) -> dict[str, Any]:
        """The answer with the ids, times and scope (which differ between the two runs) left out."""
        out: dict[str, Any] = {k: sorted(v) if isinstance(v, dict) else v for k, v in answer.items()}
        out["memory"] = answer["memory"]["content"]
        if "replaced" in answer:
            out["replaced"] = answer["replaced"]["content"]
        if "similar" in answer:
            out["similar"] = [{**s, "id": "<id>"} for s in answer["similar"]]
        return out

    assert [shape(a) for a in mcp] == [shape(a) for a in rest]
    assert mcp[1]["similar"][0]["id"] == mcp[0]["memory"]["id"]
    assert mcp[1]["similar"][0]["differences"] == ["100 -> 1000"]
    assert mcp[3]["created"] is False and mcp[3]["replaced"]["id"] == mcp[2]["memory"]["id"]


async def test_daily_consolidation_proposes_the_supersede_of_a_changed_value_only(stack: Stack) -> None:
    scope = new_scope()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        ui = [await save(http, scope, **ui_bar(i)) for i in range(8)]
        rate = [await save(http, scope, content, DESCRIPTIONS[RATE_LIMIT]) for content in RATE_LIMIT]
        payments = [await save(http, scope, content, DESCRIPTIONS[PAYMENTS]) for content in PAYMENTS]
        async with stack_intelligence(stack) as intelligence:
            reply = await intelligence.Consolidate(
                intelligence_pb2.ConsolidateRequest(caller=ALICE_CALLER, job="daily", scope=scope),
                timeout=120,
            )
            assert [r.made_by_kind.get("contradiction", 0) for r in reply.reports] == [2]
            listed = (await http.get("/proposals", params={"scope": scope})).json()["proposals"]
            suggested = {(p["supersedes"], tuple(sorted(p["evidence"]))) for p in listed}
            assert {p["kind"] for p in listed} == {"contradiction"}
            for older, newer in (rate, payments):
                old_id, new_id = older["memory"]["id"], newer["memory"]["id"]
                assert (old_id, tuple(sorted([old_id, new_id]))) in suggested
            ui_ids = {a["memory"]["id"] for a in ui}
            assert not any(ui_ids & set(p["evidence"]) for p in listed)
            rationale = {p["supersedes"]: p["rationale"] for p in listed}
            assert "100 -> 1000" in rationale[rate[0]["memory"]["id"]]
            # Proposals are keyed by their evidence: a second run proposes nothing new.
            again = await intelligence.Consolidate(
                intelligence_pb2.ConsolidateRequest(caller=ALICE_CALLER, job="daily", scope=scope),
                timeout=120,
            )
            assert [r.proposals_made for r in again.reports] == [0]
