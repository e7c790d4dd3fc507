"""The structural scoring signals on the real stack: entity overlap between the query and a
memory's entity links, manager mode's active-task bonus (off in answer mode), which ends when the
task is dismissed, and the topic match, which follows the search's topic."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx

from services.retrieval.scoring import Candidate, Weights, blend
from services.retrieval.signals import TASK_BONUS, jaccard, query_entities
from tests.conftest import Stack

HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "signals"}
GATES_OFF = {"min_similarity": 0.0, "relative_cutoff": 0.0, "k": 20}


async def _search(http: httpx.AsyncClient, query: str, **extra) -> list[dict]:
    response = await http.post("/memories/search", json={"query": query, **GATES_OFF, **extra})
    assert response.status_code == 200, response.text
    return response.json()["results"]


async def _import(http: httpx.AsyncClient, records: list[dict]) -> None:
    response = await http.post("/records/import", json={"records": records})
    assert response.status_code == 200, response.text


def _note(content: str, ref: str, topic: str = "") -> dict:
    """A note record, filed under `topic` when one is given."""
    return {"type": "note", "content": content, "source_ref": ref, **({"topic_id": topic} if topic else {})}


def test_entity_and_task_terms_add_their_weight_to_the_score() -> None:
    now = datetime.now(UTC)
    row = {"id": uuid.uuid4(), "decay_class": "permanent", "last_accessed_at": now, "importance": 0}
    weights = Weights(
        relevance=1,
        recency=0,
        importance=0,
        lexical_boost=0,
        rank_decay_k=5,
        neighbour=0,
        thread=0,
        entity=0.2,
        task=0.1,
    )
    plain = Candidate(row=row, similarity=0.5, bm25=0.0, all_terms=False, context=0.5)
    linked = Candidate(
        row=row,
        similarity=0.5,
        bm25=0.0,
        all_terms=False,
        context=0.5,
        entity_overlap=0.5,
        task_bonus=TASK_BONUS,
    )
    blend([plain, linked], weights, now)
    assert plain.score == 0.5
    assert abs(linked.score - (0.5 + 0.2 * 0.5 + 0.1 * TASK_BONUS)) < 1e-12


def test_query_entities_compare_ignoring_case() -> None:
    assert query_entities("what broke in ops-812?") == frozenset()  # a ticket is upper case
    a = query_entities("Why did Alice change billing_service?")
    assert a == {("name", "alice"), ("identifier", "billing_service")}
    assert jaccard(a, frozenset({("name", "alice")})) == 0.5
    assert jaccard(a, frozenset()) == 0.0


async def test_entity_overlap_is_reported_for_memories_naming_the_querys_entities(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        for content in (
            "OPS-812 is open: the nightly backup skipped the photo library",
            "the nightly backup skipped the photo library again last week",
        ):
            saved = await http.post("/memories", json={"content": content})
            assert saved.status_code == 200, saved.text
        results = await _search(http, "what happened with OPS-812 and the nightly backup")
        overlap = {r["content"][:9]: r["entity_overlap"] for r in results}
        assert overlap["OPS-812 i"] == 1.0  # both name exactly the ticket
        assert overlap["the night"] == 0.0
        assert results[0]["content"].startswith("OPS-812")
        # A query naming no entity looks nothing up and reports no overlap.
        assert {r["entity_overlap"] for r in await _search(http, "nightly backup photo library")} == {0.0}


async def test_manager_mode_favours_open_tasks_and_what_they_came_from(stack: Stack) -> None:
    turns = [
        "We are moving the invoice_worker to the new queue this sprint.",
        "TODO: raise the invoice_worker retry limit before Friday.",
        "Lunch was good today.",
    ]
    records = [
        {"type": "conversation", "content": t, "source_ref": f"signals-{i}", "thread_id": "signals-thread"}
        for i, t in enumerate(turns)
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        await _import(http, records)
        query = "invoice_worker retry limit"
        manager = await _search(http, query, mode="manager")
        by_content = {r["content"]: r for r in manager}
        task = by_content["raise the invoice_worker retry limit before Friday"]
        assert task["type"] == "task" and task["active_task"] is True
        source = by_content[turns[1]]
        assert source["active_task"] is True
        assert by_content[turns[0]]["active_task"] is False
        # Answer mode turns the bonus off: relevance first.
        assert not any(r["active_task"] for r in await _search(http, query, mode="answer"))

        dismissed = await http.post(f"/tasks/{task['id']}/dismiss")
        assert dismissed.status_code == 200, dismissed.text
        after = {r["content"]: r for r in await _search(http, query, mode="manager")}
        assert "raise the invoice_worker retry limit before Friday" not in after  # archived
        assert after[turns[1]]["active_task"] is False


async def test_the_active_topic_lifts_memories_filed_under_it(stack: Stack) -> None:
    records = [
        _note("The retry limit of the invoice queue is five attempts", "topic-billing", "billing"),
        _note("The retry limit of the photo upload queue is five attempts", "topic-media", "media"),
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        await _import(http, records)
        query = "what is the retry limit of the queue"
        for topic, first in (("billing", "invoice"), ("media", "photo upload")):
            results = [r for r in await _search(http, query, topic=topic) if "retry limit" in r["content"]]
            assert first in results[0]["content"], (topic, [r["content"] for r in results])
            assert [r["topic_match"] for r in results[:2]] == [True, False]
        assert not any(r["topic_match"] for r in await _search(http, query))
        bad = await http.post("/memories/search", json={"query": query, "topic": "a\x01b"})
        assert bad.status_code == 400 and "topic" in bad.json()["error"]["message"]


async def test_topic_only_restricts_the_search_to_the_topic(stack: Stack) -> None:
    records = [
        _note("Deploys of the ledger service wait for the nightly reconciliation", "filter-ledger", "ledger"),
        _note(
            "Deploys of the thumbnail service wait for the nightly cache purge",
            "filter-thumbnails",
            "thumbnails",
        ),
        _note("Deploys of the search service wait for nothing", "filter-none"),
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        await _import(http, records)
        query = "when do deploys of the service wait"
        everything = [r["content"] for r in await _search(http, query)]
        assert sum("Deploys of the" in c for c in everything) == 3
        only = await _search(http, query, topic="ledger", topic_only=True)
        assert [r["content"] for r in only] == [records[0]["content"]]
        assert only[0]["topic_match"] is True
        # Without topic_only the topic is a preference: the ledger note passes its twin, and the
        # others are still found.
        preferred = [r["content"] for r in await _search(http, query, topic="ledger")]
        assert len(preferred) == len(everything)
        assert preferred.index(records[0]["content"]) < preferred.index(records[1]["content"])
        bad = await http.post("/memories/search", json={"query": query, "topic_only": True})
        assert bad.status_code == 400 and "topic_only needs a topic" in bad.json()["error"]["message"]
