"""The 3D memory map (issue 20): curation's stored projection and GET /viz/graph, on the real stack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.curation.projection import Projector
from tests.conftest import Stack, start_stack

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "vizmap"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
PROJECT = "project:vizmap"
PRIVATE = "user:alice"

FACTS = [
    ("The Grafana dashboard for Postgres replication lag lives in the Ops folder", PROJECT),
    ("Postgres replication lag alerts go to the Ops channel through Grafana", PROJECT),
    ("The nightly backup uses restic to push snapshots to the NAS", PROJECT),
    ("Alice prefers dark mode in every editor she uses", PRIVATE),
    ("Alice reads the weekly release notes on Fridays", PRIVATE),
]
THREAD = [
    "We agreed to move the CI runners to the new build host",
    "The build host needs 64 GB of RAM for the integration suite",
    "Next week the old runners are switched off",
]


@pytest.fixture(scope="module")
async def viz_stack(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    # Curation's projection pass every half second, so the map's first basis comes quickly.
    async with start_stack(pg_server_url, embedder, model_cache, viz_refresh_s=0.5) as running:
        yield running


async def _save(http: httpx.AsyncClient, headers: dict[str, str], content: str, scope: str) -> str:
    response = await http.post(
        "/memories", json={"content": content, "description": content[:60], "scope": scope}, headers=headers
    )
    assert response.status_code == 200, response.text
    return str(response.json()["memory"]["id"])


async def _graph(http: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    response = await http.get("/viz/graph", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture(scope="module")
async def store(viz_stack: Stack) -> dict[str, Any]:
    """Alice's memories in two scopes (one superseded, one resting on another, a thread of three
    turns) and Bob's in his own, with the projection fitted."""
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        ids = [await _save(http, ALICE, content, scope) for content, scope in FACTS]
        response = await http.post(
            f"/memories/{ids[2]}/supersede",
            json={"content": "The nightly backup uses restic to push snapshots to the NAS and to B2"},
            headers=ALICE,
        )
        assert response.status_code == 200, response.text
        correction = response.json()["memory"]["id"]
        response = await http.post(
            "/records/import",
            json={
                "records": [
                    {"type": "conversation", "thread_id": "ci-move", "content": text, "source_ref": f"t{i}"}
                    for i, text in enumerate(THREAD)
                ]
            },
            headers=ALICE,
        )
        assert response.status_code == 200, response.text
        bob_ids = [
            await _save(http, BOB, "Bob keeps his homelab notes in Obsidian", "project:bobs"),
            await _save(http, BOB, "Bob's Grafana runs on the Postgres box", "project:bobs"),
        ]
    # An evidence edge, as the Dreamer writes one: the second Grafana fact rests on the first.
    await viz_stack.pool.execute(
        "INSERT INTO evidence_edges (derived_id, premise_id, created_by) VALUES ($1, $2, 'test')",
        ids[1],
        ids[0],
    )
    turns = [
        str(r["id"])
        for r in await viz_stack.pool.fetch(
            "SELECT id FROM memories WHERE thread_id = 'ci-move' ORDER BY ordinal, created_at"
        )
    ]
    assert len(turns) == 3
    await _wait_for_basis(viz_stack)
    return {"alice": ids, "correction": correction, "turns": turns, "bob": bob_ids}


async def _wait_for_basis(stack: Stack) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if await stack.pool.fetchval("SELECT count(*) FROM viz_basis"):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("curation fitted no projection basis within 30 s")


async def test_curation_stores_a_position_for_every_memory(viz_stack: Stack, store: dict[str, Any]) -> None:
    missing = await viz_stack.pool.fetchval(
        "SELECT count(*) FROM memories m LEFT JOIN memory_positions p ON p.memory_id = m.id"
        " WHERE p.memory_id IS NULL"
    )
    # The basis was fitted after most writes: its refit positioned all of them (or the next pass did).
    deadline = time.monotonic() + 10
    while missing and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        missing = await viz_stack.pool.fetchval(
            "SELECT count(*) FROM memories m LEFT JOIN memory_positions p ON p.memory_id = m.id"
            " WHERE p.memory_id IS NULL"
        )
    assert missing == 0
    basis = await viz_stack.pool.fetchrow("SELECT method, dims FROM viz_basis ORDER BY id DESC LIMIT 1")
    assert basis["method"] == "pca" and basis["dims"] > 3


async def test_a_pass_reads_the_whole_table_only_when_a_sweep_is_due(
    viz_stack: Stack, store: dict[str, Any]
) -> None:
    """Between sweeps a pass reads no table (services/curation/projection.py SWEEP_EVERY_S): a
    position lost by a path that does not project waits for the next sweep, which restores it."""
    projector = Projector(viz_stack.pool, refit_growth=1000.0, refit_hours=1e6, sweep_every_s=3600)
    memory_id = store["bob"][0]
    await viz_stack.pool.execute("DELETE FROM memory_positions WHERE memory_id = $1", memory_id)
    for _ in range(2):  # nor at start: a start must not read the table
        quiet = await projector.refresh()
        assert (quiet.refitted, quiet.projected, quiet.dropped) == (False, 0, 0)
    projector.sweep_every_s = 0
    await projector.refresh()
    positioned = await viz_stack.pool.fetchval(
        "SELECT count(*) FROM memory_positions WHERE memory_id = $1", memory_id
    )
    assert positioned == 1


async def test_a_memory_is_positioned_as_it_is_written(viz_stack: Stack, store: dict[str, Any]) -> None:
    # No pass in between: the writer's own transaction stores the position with the current basis.
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        memory_id = await _save(http, ALICE, "Carol owns the on-call rotation schedule in PagerDuty", PRIVATE)
    row = await viz_stack.pool.fetchrow(
        "SELECT p.basis_id, b.id AS current FROM memory_positions p, viz_basis b"
        " WHERE p.memory_id = $1 AND b.id = (SELECT max(id) FROM viz_basis)",
        memory_id,
    )
    assert row is not None and row["basis_id"] == row["current"]


async def test_graph_has_the_nodes_and_every_edge_kind(viz_stack: Stack, store: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        body = await _graph(http, ALICE, scope=[PROJECT, PRIVATE])
    nodes = {n["id"]: n for n in body["nodes"]}
    expected = {*store["alice"], store["correction"], *store["turns"]}
    assert expected <= set(nodes)
    assert not set(store["bob"]) & set(nodes)
    assert body["projection"] == "pca" and body["truncated"] is False and body["total"] == len(nodes)
    node = nodes[store["alice"][0]]
    assert set(node) == {
        "id", "kind", "type", "scope", "position", "importance", "decay", "label", "created_at",
        "archived_at", "superseded_by", "stale",
    }  # fmt: skip
    assert node["label"].startswith("The Grafana dashboard")
    assert 0 < node["decay"] <= 1 and node["importance"] == 1.0
    positions = [tuple(n["position"]) for n in nodes.values()]
    assert all(len(p) == 3 and all(abs(v) < 10 for v in p) for p in positions)
    assert len(set(positions)) == len(positions), "distinct memories share a position"
    superseded = nodes[store["alice"][2]]
    assert superseded["superseded_by"] == store["correction"]
    edges = {(e["relation"], e["source"], e["target"]) for e in body["edges"]}
    assert ("supersedes", store["correction"], store["alice"][2]) in edges
    assert ("evidence", store["alice"][1], store["alice"][0]) in edges
    turns = store["turns"]
    assert ("same_thread", turns[0], turns[1]) in edges and ("same_thread", turns[1], turns[2]) in edges
    overlap = [e for e in body["edges"] if e["relation"] == "entity_overlap"]
    assert {frozenset((e["source"], e["target"])) for e in overlap} >= {
        frozenset((store["alice"][0], store["alice"][1]))
    }
    assert all(0 < e["weight"] <= 1 for e in overlap)
    assert all(e["source"] in nodes and e["target"] in nodes for e in body["edges"])
    assert len(edges) == len(body["edges"]), "an edge is listed twice"


async def test_graph_filters_by_kind_and_time(viz_stack: Stack, store: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        episodic = await _graph(http, ALICE, scope=[PROJECT], kinds=["episodic"])
        assert {n["id"] for n in episodic["nodes"]} == set(store["turns"])
        assert {e["relation"] for e in episodic["edges"]} == {"same_thread"}
        future = await _graph(http, ALICE, scope=[PROJECT], since="2999-01-01T00:00:00Z")
        assert future["nodes"] == [] and future["edges"] == [] and future["total"] == 0


async def test_bob_sees_none_of_alices_map(viz_stack: Stack, store: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        body = await _graph(http, BOB)
        ids = {n["id"] for n in body["nodes"]}
        assert ids == set(store["bob"])
        alices = {*store["alice"], store["correction"], *store["turns"]}
        assert not {x for e in body["edges"] for x in (e["source"], e["target"])} & alices
        refused = await http.get("/viz/graph", params={"scope": PROJECT}, headers=BOB)
        assert refused.status_code == 403
        assert PROJECT in refused.json()["error"]["message"]


async def test_limit_truncates_and_reports_the_total(viz_stack: Stack, store: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=viz_stack.base_url, timeout=60) as http:
        full = await _graph(http, ALICE, scope=[PROJECT, PRIVATE])
        body = await _graph(http, ALICE, scope=[PROJECT, PRIVATE], limit=3)
        assert len(body["nodes"]) == 3 and body["truncated"] is True and body["total"] == full["total"]
        ids = {n["id"] for n in body["nodes"]}
        assert all(e["source"] in ids and e["target"] in ids for e in body["edges"])
        for bad in (0, 5001, "many"):
            response = await http.get("/viz/graph", params={"limit": bad}, headers=ALICE)
            assert response.status_code == 400, response.text
            assert "limit" in response.json()["error"]["message"]
        response = await http.get("/viz/graph", params={"kinds": "dream"}, headers=ALICE)
        assert response.status_code == 400 and "dream" in response.json()["error"]["message"]
        response = await http.get("/viz/graph")
        assert response.status_code == 401
