"""The read path on the real stack: gates, degradation, filters, context, as-of, lineage, list,
stats and bad input."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

from tests.conftest import Stack, start_stack
from tests.helpers import mcp_session, tool_json
from tooling.local_stack import embedder_server

HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "recall"}


async def _save(http: httpx.AsyncClient, content: str, description: str = "", **extra) -> dict:
    response = await http.post("/memories", json={"content": content, "description": description, **extra})
    assert response.status_code == 200, response.text
    return response.json()["memory"]


async def _search(http: httpx.AsyncClient, query: str, **extra) -> dict:
    response = await http.post("/memories/search", json={"query": query, **extra})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
async def seeded(stack: Stack) -> Stack:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        await _save(
            http, "Our Kubernetes cluster runs on three Raspberry Pi nodes", "homelab cluster", tags=["ops"]
        )
        await _save(http, "Grandma's apple pie needs two cups of sugar and cinnamon", "apple pie recipe")
        await _save(
            http,
            "The CI pipeline fails with error ZX-4471 when the cache volume is full",
            "CI cache failure",
            tags=["ops", "ci"],
        )
        await _save(
            http,
            "Weekly sync with the data team is on Thursdays at 10:00",
            "data team meeting",
            kind="episodic",
        )
    return stack


async def test_weak_matches_are_dropped(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        body = await _search(http, "quantum chromodynamics lattice gauge theory")
        assert body["results"] == []
        # With both gates off the same query is a broad survey and returns everything.
        survey = await _search(
            http, "quantum chromodynamics lattice gauge theory", min_similarity=0.0, relative_cutoff=0.0
        )
        assert len(survey["results"]) == 4


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_empty_results_and_each_stage_are_counted(seeded: Stack) -> None:
    """The dashboard's empty-result rate and per-stage latency read these (services in-process)."""
    stage_counts = {
        s: _sample("hm_search_stage_seconds_count", {"stage": s}) for s in ("embed", "candidates")
    }
    empty = _sample("hm_search_empty_total")
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        assert (await _search(http, "quantum chromodynamics lattice gauge theory"))["results"] == []
        assert _sample("hm_search_empty_total") == empty + 1
        assert (await _search(http, "Raspberry Pi cluster"))["results"]
        assert _sample("hm_search_empty_total") == empty + 1  # a search with hits is not empty
    for stage, before in stage_counts.items():
        assert _sample("hm_search_stage_seconds_count", {"stage": stage}) == before + 2, stage


async def test_relative_cutoff_keeps_the_answer_neighbourhood(seeded: Stack) -> None:
    """The gate's mechanism at a cutoff given per search. The default (0.55, calibrated on LoCoMo and
    SciFact: docs/EVAL.md) keeps the homelab memory here, 0.49 below the best; 0.3 cuts it."""
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        body = await _search(http, "what is in the apple pie recipe", min_similarity=0.0, relative_cutoff=0.3)
        descriptions = [r["description"] for r in body["results"]]
        assert descriptions[0] == "apple pie recipe"
        assert "homelab cluster" not in descriptions  # far below the best: cut
        loose = await _search(
            http, "what is in the apple pie recipe", min_similarity=0.0, relative_cutoff=0.0
        )
        assert len(loose["results"]) > len(body["results"])


async def test_exact_token_hit_survives_the_floor(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        body = await _search(http, "ZX-4471", min_similarity=0.9)
        assert [r["description"] for r in body["results"]] == ["CI cache failure"]
        assert body["results"][0]["lexical_match"] is True
        assert body["results"][0]["similarity"] < 0.9


async def test_flat_results_are_not_cut(seeded: Stack) -> None:
    """An off-topic query with no standout: the relative gate leaves every hit above the floor."""
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        survey = await _search(http, "things", min_similarity=0.0, relative_cutoff=0.0)
        sims = [r["similarity"] for r in survey["results"]]
        assert max(sims) - min(sims) < 0.15, sims  # the premise: flat
        gated = await _search(http, "things", min_similarity=0.0, relative_cutoff=0.15)
        assert len(gated["results"]) == len(survey["results"])


async def test_filters_by_tag_kind_and_time(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        body = await _search(
            http, "cluster pipeline meeting pie", tags=["ops"], min_similarity=0.0, relative_cutoff=0.0
        )
        assert {r["description"] for r in body["results"]} == {"homelab cluster", "CI cache failure"}
        body = await _search(http, "meeting", kinds=["episodic"], min_similarity=0.0, relative_cutoff=0.0)
        assert [r["description"] for r in body["results"]] == ["data team meeting"]
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        body = await _search(http, "meeting", since=future, min_similarity=0.0, relative_cutoff=0.0)
        assert body["results"] == []


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"query": ""}, "query is empty"),
        ({"query": "x" * 20_480}, "the limit is 16,384"),
        ({"query": "ok", "k": 0}, "k must be between 1 and 100"),
        ({"query": "ok", "k": 10_000}, "k must be between 1 and 100"),
        ({"query": "ok", "fusion": "magic"}, "fusion 'magic' is unknown"),
        ({"query": "ok", "mode": "boss"}, "mode 'boss' is unknown"),
        ({"query": "ok", "kinds": ["feelings"]}, "kind 'feelings' is unknown"),
        ({"query": "ok", "min_similarity": 1.5}, "min_similarity must be between 0 and 1"),
    ],
)
async def test_bad_search_input(seeded: Stack, body: dict, fragment: str) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        response = await http.post("/memories/search", json=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]["message"]


async def test_k_is_configurable(pg_server_url: str, embedder: str, model_cache: Path) -> None:
    async with start_stack(pg_server_url, embedder, model_cache, search_max_k=500) as stack:
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
            assert (await http.post("/memories/search", json={"query": "x", "k": 500})).status_code == 200
            assert (await http.post("/memories/search", json={"query": "x", "k": 501})).status_code == 400


async def test_embedder_down_degrades_to_lexical(pg_server_url: str, model_cache: Path) -> None:
    """Stop the real embedder: search still answers from the lexical leg and says so."""
    async with embedder_server(model_cache) as own_embedder:
        stack_cm = start_stack(pg_server_url, own_embedder, model_cache, embed_timeout_ms=300)
        stack = await stack_cm.__aenter__()
    try:
        # The embedder context has exited: its server is stopped.
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=30) as http:
            # Saving needs the embedder: a clear 503, nothing written.
            response = await http.post("/memories", json={"content": "lexical only fact about zebras"})
            assert response.status_code == 503
            assert "embedder" in response.json()["error"]["message"]
            assert await stack.pool.fetchval("SELECT count(*) FROM records") == 0
            body = await _search(http, "zebras")
            assert body["degraded"] == ["embedder_unavailable"]
            assert body["results"] == []
    finally:
        await stack_cm.__aexit__(None, None, None)


async def test_degraded_search_still_finds_words(pg_server_url: str, model_cache: Path) -> None:
    async with embedder_server(model_cache) as own_embedder:
        stack_cm = start_stack(pg_server_url, own_embedder, model_cache, embed_timeout_ms=300)
        stack = await stack_cm.__aenter__()
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
            await _save(http, "The zebra enclosure opens at nine", "zoo hours")
            await _save(http, "Penguins are fed at noon", "feeding time")
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=30) as http:
            body = await _search(http, "when does the zebra enclosure open")
            assert body["degraded"] == ["embedder_unavailable"]
            assert body["results"][0]["description"] == "zoo hours"
            # Each hit says what was missing, the same way over REST and MCP.
            assert all(hit["degraded"] == ["embedder_unavailable"] for hit in body["results"])
        async with mcp_session(stack.mcp_url, "alice-token", "recall") as client:
            hits = tool_json(
                await client.call_tool("memory_search", {"query": "when does the zebra enclosure open"})
            )
            assert {hit["id"] for hit in hits} == {hit["id"] for hit in body["results"]}
            assert all(hit["degraded"] == ["embedder_unavailable"] for hit in hits)
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=30) as http:
            await stack.searcher.drain()  # the search_log row is written off the hot path
            stats = (await http.get("/stats")).json()
            assert stats["degraded_rate"] > 0
    finally:
        await stack_cm.__aexit__(None, None, None)


async def test_conversation_neighbours_lift_the_answer(stack: Stack) -> None:
    """A question about the previous turn's topic finds the answering turn through its neighbour."""
    base = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    turns = [
        "Jon: How was the weekend?",
        "Gina: Busy! I finally adopted a dog from the shelter.",
        "Jon: That's wonderful, what breed is it?",
        "Gina: A three-legged greyhound named Pixel.",
        "Jon: I started learning the cello this month.",
        "Gina: Cool, classical music is relaxing.",
    ]
    records = [
        {
            "type": "conversation",
            "scope": "project:recall-chat",
            "content": t,
            "source_ref": f"t{i}",
            "thread_id": "weekend-chat",
            "created_at": (base + timedelta(seconds=i)).isoformat(),
        }
        for i, t in enumerate(turns)
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        response = await http.post("/records/import", json={"records": records})
        assert response.status_code == 200, response.text
        body = await _search(
            http,
            "what breed is the dog Gina adopted",
            min_similarity=0.0,
            relative_cutoff=0.0,
            scope="project:recall-chat",
            k=3,
        )
        top = [r["content"] for r in body["results"]]
        assert "Gina: A three-legged greyhound named Pixel." in top, top
        assert all(r.get("source_ref") for r in body["results"])


async def test_as_of_and_lineage_along_a_supersede_chain(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        first = await _save(http, "The deploy target is the staging cluster", "deploy target")
        t1 = datetime.now(UTC)
        await asyncio.sleep(0.05)
        response = await http.post(
            f"/memories/{first['id']}/supersede",
            json={"content": "The deploy target is production", "description": "deploy target"},
        )
        assert response.status_code == 200, response.text
        second = response.json()["memory"]
        t2 = datetime.now(UTC)
        await asyncio.sleep(0.05)
        response = await http.post(
            f"/memories/{second['id']}/supersede",
            json={
                "content": "The deploy target is staging again after the incident",
                "description": "deploy target",
            },
        )
        third = response.json()["memory"]

        now = await _search(http, "what is the deploy target", min_similarity=0.0, relative_cutoff=0.0)
        ids = [r["id"] for r in now["results"]]
        assert third["id"] in ids and first["id"] not in ids and second["id"] not in ids
        for moment, expected in ((t1, first), (t2, second)):
            past = await _search(
                http,
                "what is the deploy target",
                as_of=moment.isoformat(),
                min_similarity=0.0,
                relative_cutoff=0.0,
            )
            chain_ids = {first["id"], second["id"], third["id"]}
            assert [r["id"] for r in past["results"] if r["id"] in chain_ids] == [expected["id"]]
        listed = (await http.get("/memories", params={"as_of": t1.isoformat()})).json()
        assert first["id"] in [m["id"] for m in listed["memories"]]
        lineage = (await http.get(f"/memories/{second['id']}/lineage")).json()["lineage"]
        assert [m["id"] for m in lineage] == [first["id"], second["id"], third["id"]]


async def test_list_is_an_index_without_bodies(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        index = (await http.get("/memories", params={"limit": 2})).json()
        assert len(index["memories"]) == 2 and index["truncated"] is True and index["total"] >= 4
        assert all("content" not in m and m["description"] for m in index["memories"])
        full = (await http.get("/memories", params={"limit": 2, "full": "true"})).json()
        assert all(m["content"] for m in full["memories"])
        bad = await http.get("/memories", params={"limit": 0})
        assert bad.status_code == 400


async def test_searches_bump_their_hits_and_log_themselves(seeded: Stack) -> None:
    """Bookkeeping is batched off the hot path: after a flush each hit's access count has grown by
    the number of searches that returned it, and every search has its search_log row."""
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        await seeded.searcher.drain()
        before = dict(await seeded.pool.fetch("SELECT id::text, access_count FROM memories"))
        query = "which error does the CI pipeline fail with?"
        hits = [(await _search(http, query, k=2))["results"] for _ in range(2)]
        assert [h["id"] for h in hits[0]] == [h["id"] for h in hits[1]]
        await seeded.searcher.drain()
        after = dict(await seeded.pool.fetch("SELECT id::text, access_count FROM memories"))
        for hit in hits[0]:
            assert after[hit["id"]] == before[hit["id"]] + 2
        logged = await seeded.pool.fetch("SELECT hits, stage_ms, at FROM search_log WHERE query = $1", query)
        assert len(logged) == 2 and all(
            r["hits"] == len(hits[0]) and "embed_ms" in r["stage_ms"] for r in logged
        )


async def test_stats_report_searches_and_misses(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        await _search(http, "unicorn tax law in atlantis")
        await seeded.searcher.drain()
        stats = (await http.get("/stats")).json()
        assert stats["searches"] >= 1
        assert "unicorn tax law in atlantis" in stats["recent_misses"]
        assert any(s["scope"] == "project:recall" and s["live"] >= 4 for s in stats["scopes"])


async def test_rerank_reorders_the_top_by_the_cross_encoder(
    pg_server_url: str, model_cache: Path, tmp_path: Path
) -> None:
    from hypermnesia.embedder_client import EmbedderClient
    from tests.test_embedder_rerank import write_cross_encoder

    write_cross_encoder(tmp_path)
    async with (
        embedder_server(model_cache, rerank_model_dir=tmp_path) as with_reranker,
        start_stack(pg_server_url, with_reranker, model_cache) as stack,
    ):
        async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
            for i in range(6):
                await _save(http, f"Release note {i}: the build config moved to folder {i}", f"release {i}")
            plain = await _search(http, "where is the build config", min_similarity=0.0, relative_cutoff=0.0)
            reranked = await _search(
                http, "where is the build config", min_similarity=0.0, relative_cutoff=0.0, rerank=True
            )
        assert reranked["degraded"] == []
        client = EmbedderClient(with_reranker)
        try:
            texts = [f"{r['description']}\n{r['content']}" for r in plain["results"]]
            scores = await client.rerank("where is the build config", texts, timeout_s=30)
        finally:
            await client.close()
        expected = [
            r["id"] for _, r in sorted(zip(scores, plain["results"], strict=True), key=lambda p: -p[0])
        ]
        assert [r["id"] for r in reranked["results"]] == expected
        assert {r["id"] for r in reranked["results"]} == {r["id"] for r in plain["results"]}


async def test_rerank_without_a_reranker_says_so(seeded: Stack) -> None:
    async with httpx.AsyncClient(base_url=seeded.base_url, headers=HEADERS) as http:
        body = await _search(http, "apple pie", rerank=True)
    assert body["degraded"] == ["rerank_unavailable"]
    assert body["results"][0]["description"] == "apple pie recipe"
