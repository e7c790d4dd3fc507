"""A bulk import and a record-by-record import of the same records give the same store: the same
search results (mapped by content, since ids are new in each store), ranked the same with the same
scores, and a raw log whose chain verifies in both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Stack, start_stack
from tooling.bench.search import verify_store

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "bulk"}
SCOPES = ("project:bulk", "project:bulk-other")
TOPICS = (
    "the release train leaves on Tuesday at noon and Maria owns the checklist",
    "the staging database moved to a larger disk after the outage in March",
    "Caroline is training for a half marathon in Lisbon this autumn",
    "the deploy script reads its token from the vault, never from the repository",
    "our team switched the nightly backups to run at three in the morning",
)
QUERIES = ("when does the release train leave", "what happened to the staging database", "marathon training")


def _records() -> list[dict[str, Any]]:
    """120 conversation turns in two scopes and six threads, with re-sent duplicates (same
    source_ref) inside the batch."""
    base = datetime(2024, 5, 8, 13, 0, tzinfo=UTC)
    out = []
    for i in range(120):
        out.append(
            {
                "type": "conversation",
                "scope": SCOPES[i % 2],
                "content": f"turn {i}: {TOPICS[i % len(TOPICS)]}, said speaker {i % 3} in session {i // 20}",
                "source_ref": f"turn-{i}",
                "thread_id": f"session-{i % 6}",
                "created_at": (base + timedelta(minutes=i)).isoformat(),
            }
        )
    return out + [dict(out[i]) for i in (3, 50, 99)]


@pytest.fixture(scope="module")
async def two_stacks(
    pg_server_url: str, embedder: str, model_cache: Path
) -> AsyncIterator[tuple[Stack, Stack]]:
    async with (
        start_stack(pg_server_url, embedder, model_cache) as bulk,
        start_stack(pg_server_url, embedder, model_cache) as one_by_one,
    ):
        yield bulk, one_by_one


async def _search(http: httpx.AsyncClient, query: str, scope: str) -> list[tuple[str, float]]:
    response = await http.post(
        "/memories/search",
        json={"query": query, "scope": scope, "k": 20, "min_similarity": 0.0, "relative_cutoff": 0.0},
    )
    assert response.status_code == 200, response.text
    return [(r["content"], r["score"]) for r in response.json()["results"]]


async def test_bulk_and_one_by_one_imports_search_the_same(two_stacks: tuple[Stack, Stack]) -> None:
    bulk, one_by_one = two_stacks
    records = _records()
    async with httpx.AsyncClient(base_url=bulk.base_url, headers=ALICE, timeout=300) as http:
        response = await http.post("/records/import", json={"records": records})
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["imported"], body["skipped"]) == (120, 3)
        bulk_ids = body["ids"]
    one_ids = []
    async with httpx.AsyncClient(base_url=one_by_one.base_url, headers=ALICE, timeout=300) as http:
        for record in records:
            response = await http.post("/records/import", json={"records": [record]})
            assert response.status_code == 200, response.text
            one_ids.extend(response.json()["ids"])
    # The duplicates answer with the first one's id in both stores.
    for store_ids in (bulk_ids, one_ids):
        assert [store_ids[i] for i in (3, 50, 99)] == store_ids[120:]

    for stack in two_stacks:
        assert await verify_store(stack.database_url) == 120
        rows = await stack.pool.fetch(
            "SELECT scope, thread_id, ordinal, content FROM memories ORDER BY scope, thread_id, ordinal"
        )
        assert len(rows) == 120
    bulk_rows = await bulk.pool.fetch(
        "SELECT source_ref, thread_id, ordinal FROM memories ORDER BY source_ref"
    )
    one_rows = await one_by_one.pool.fetch(
        "SELECT source_ref, thread_id, ordinal FROM memories ORDER BY source_ref"
    )
    assert [tuple(r) for r in bulk_rows] == [tuple(r) for r in one_rows]

    for scope in SCOPES:
        for query in QUERIES:
            async with (
                httpx.AsyncClient(base_url=bulk.base_url, headers=ALICE, timeout=60) as a,
                httpx.AsyncClient(base_url=one_by_one.base_url, headers=ALICE, timeout=60) as b,
            ):
                found_bulk = await _search(a, query, scope)
                found_one = await _search(b, query, scope)
            assert found_bulk, (scope, query)
            assert [content for content, _ in found_bulk] == [content for content, _ in found_one]
            assert [score for _, score in found_bulk] == pytest.approx(
                [score for _, score in found_one], abs=1e-4
            )
