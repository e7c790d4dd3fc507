"""Consolidation covers any history (issue 27 item 4), on the real stack with the real model: a
LoCoMo conversation moved in with its own 2023 dates through `POST /records/import` is
consolidated by an on-demand run (`hypermnesia consolidate`) and by the first scheduled run after
the import, each memory once; `--since/--until` bound what a run reads; later scheduled runs
read their windows again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from hypermnesia.pool import connect_pool
from services.curation.consolidation import Consolidator, Report
from services.curation.dreamer import Dreamer, _cliques, _share_telling_entity
from tests.conftest import Stack
from tests.test_intelligence_interfaces import cli, cli_json
from tooling.bench import consolidation as bench
from tooling.evaluation import datasets

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = pytest.mark.timeout(900)


def _headers(project: str) -> dict[str, str]:
    return {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": project}


def _conversation(sessions: int | None = None) -> list[datasets.Doc]:
    """LoCoMo conversation 1 (19 sessions, May to October 2023), or its first `sessions`."""
    docs = datasets.load_locomo(DATA)[0].docs
    if sessions is None:
        return docs
    keep = {f"session-{n}" for n in range(1, sessions + 1)}
    return [d for d in docs if d.thread_id in keep]


async def _import(http: httpx.AsyncClient, docs: list[datasets.Doc]) -> list[str]:
    """Each turn a conversation record in its session's thread, dated when it was said."""
    records = [
        {
            "type": "conversation",
            "content": d.content,
            "source_ref": d.ref,
            "thread_id": d.thread_id,
            "created_at": d.created_at.isoformat() if d.created_at else None,
        }
        for d in docs
    ]
    response = await http.post("/records/import", json={"records": records}, timeout=600)
    assert response.status_code == 200, response.text
    assert response.json()["imported"] == len(records)
    return list(response.json()["ids"])


async def _proposals(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    listed = await http.get("/proposals", params={"status": "all", "limit": 1000})
    assert listed.status_code == 200, listed.text
    return list(listed.json()["proposals"])


async def _consolidate(stack: Stack, job: str, scope: str, *bounds: str) -> dict[str, Any]:
    (report,) = (await cli_json(stack, "consolidate", "--job", job, "--scope", scope, *bounds))["reports"]
    assert not report["skipped"], report
    return dict(report)


async def test_a_conversation_moved_in_is_consolidated_once_with_readable_evidence(stack: Stack) -> None:
    project = f"movein-{uuid.uuid4().hex[:8]}"
    scope = f"project:{project}"
    docs = _conversation()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=_headers(project), timeout=60) as http:
        ids = await _import(http, docs)
        weekly = await _consolidate(stack, "weekly", scope)
        monthly = await _consolidate(stack, "monthly", scope)
        # Every turn is an episode older than the settling time: the weekly job reads them all,
        # though each is years older than its window.
        assert (weekly["coverage"], weekly["read"]) == ("backlog", len(docs)), weekly
        assert monthly["coverage"] == "backlog" and monthly["read"] >= len(docs), monthly
        made = weekly["proposals_made"] + monthly["proposals_made"]
        assert weekly["made_by_kind"].get("fact", 0) >= 1, weekly
        proposals = await _proposals(http)
        assert len(proposals) == made
        for proposal in proposals:
            assert len(proposal["evidence"]) >= 2 and set(proposal["evidence"]) <= set(ids), proposal
        # The importing principal reads every piece of evidence by id (GET /memories/{id}).
        for memory_id in {e for p in proposals for e in p["evidence"]}:
            got = await http.get(f"/memories/{memory_id}")
            assert got.status_code == 200, got.text
            assert got.json()["created_at"].startswith("2023-")

        # A second run reads nothing (all of it is consolidated) and proposes nothing new.
        for job in ("weekly", "monthly"):
            again = await _consolidate(stack, job, scope)
            assert (again["coverage"], again["read"], again["proposals_made"]) == ("backlog", 0, 0), again
        assert len(await _proposals(http)) == made


async def test_since_and_until_bound_what_a_run_reads_and_an_edit_reopens(stack: Stack) -> None:
    project = f"bounds-{uuid.uuid4().hex[:8]}"
    scope = f"project:{project}"
    docs = _conversation(sessions=6)  # 8 May to 6 July 2023
    cut = datetime(2023, 6, 1, tzinfo=UTC)
    before = [d for d in docs if d.created_at and d.created_at < cut]
    assert 0 < len(before) < len(docs)
    async with httpx.AsyncClient(base_url=stack.base_url, headers=_headers(project), timeout=60) as http:
        ids = await _import(http, docs)
        dated = {i: d.created_at for i, d in zip(ids, docs, strict=True)}

        first = await _consolidate(stack, "weekly", scope, "--until", "2023-06-01")
        assert first["read"] == len(before), first
        early = await _proposals(http)
        assert first["proposals_made"] == len(early) >= 1
        assert all(dated[e] < cut for p in early for e in p["evidence"]), early

        rest = await _consolidate(stack, "weekly", scope, "--since", "2023-05-01T00:00:00Z")
        assert rest["read"] == len(docs) - len(before), rest  # May is consolidated already
        late = [p for p in await _proposals(http) if p["id"] not in {q["id"] for q in early}]
        assert len(late) == rest["proposals_made"]
        assert all(dated[e] >= cut for p in late for e in p["evidence"]), late

        # A turn edited after it was consolidated is not consolidated any more.
        edited = await http.patch(f"/memories/{ids[0]}", json={"content": docs[0].content + " (edited)"})
        assert edited.status_code == 200, edited.text
        reopened = await _consolidate(stack, "weekly", scope)
        assert reopened["read"] == 1, reopened

        # A consolidated memory is deleted by its owner's request (as the row-secure service role):
        # its marks go with it.
        marked = "SELECT count(*) FROM consolidation_covered WHERE memory_id = $1::uuid"
        assert await stack.pool.fetchval(marked, ids[-1]) == 1
        deleted = await http.delete(f"/memories/{ids[-1]}")
        assert deleted.status_code == 200, deleted.text
        assert await stack.pool.fetchval(marked, ids[-1]) == 0

    # Bad bounds are refused with what to do, and nothing runs.
    code, out, err = await cli(stack, "consolidate", "--job", "weekly", "--scope", scope, "--since", "May")
    assert code == 2 and out == "" and "is not an ISO 8601 date or time such as 2023-05-01" in err, err
    code, out, err = await cli(
        stack,
        "consolidate",
        "--job",
        "weekly",
        "--scope",
        scope,
        "--since",
        "2023-07-01",
        "--until",
        "2023-06-01",
    )
    assert code == 1 and out == "" and "must be before until" in err, err
    code, out, err = await cli(
        stack, "consolidate", "--job", "daily", "--scope", scope, "--since", "2023-07-01"
    )
    assert code == 1 and out == "" and "leave them out" in err, err


@asynccontextmanager
async def _scheduler(stack: Stack) -> AsyncIterator[Consolidator]:
    """The curation service's consolidator over the stack's store, as server.py builds it (no
    LLM, the default settling time), to drive the schedule's pass directly."""
    pool = await connect_pool(stack.database_url, max_size=4)
    try:
        dreamer = Dreamer(pool, None, similarity=0.5, similarity_alone=0.8, near_duplicate=0.92)
        yield Consolidator(pool, dreamer, promote_importance=1.0, min_age_days=7.0)
    finally:
        await pool.close()


def _mine(reports: list[Report], scope: str) -> Report:
    (report,) = [r for r in reports if r.scope == scope]
    assert not report.skipped, report
    return report


async def test_the_first_scheduled_run_after_an_import_covers_the_backlog(stack: Stack) -> None:
    project = f"sched-{uuid.uuid4().hex[:8]}"
    scope = f"project:{project}"
    history = _conversation(sessions=3)
    recent_day = datetime.now(UTC) - timedelta(days=10)
    recent = [
        datasets.Doc(
            ref=f"recent-{i}",
            content=text,
            thread_id=f"recent-{i}",
            created_at=recent_day + timedelta(hours=i),
        )
        for i, text in enumerate(
            (
                "Grafana paged us because the Postgres replica lag passed 30 seconds overnight.",
                "The Postgres replica lag alert in Grafana fired again last night.",
            )
        )
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=_headers(project), timeout=60) as http:
        await _import(http, history + recent)
        async with _scheduler(stack) as consolidator:
            first = _mine(await consolidator.scheduled("weekly"), scope)
            assert (first.coverage, first.read) == ("backlog", len(history) + len(recent)), first
            assert first.proposals_made >= 2  # from 2023, and the two recent alerts
            recent_ids = {
                p["id"]
                for p in await _proposals(http)
                if {(await http.get(f"/memories/{e}")).json()["source_ref"] for e in p["evidence"]}
                == {"recent-0", "recent-1"}
            }
            assert len(recent_ids) == 1

            # The backlog is consolidated: the schedule is back to its window (episodes 7-30 days
            # old), which re-reads the two recent ones and proposes nothing new.
            second = _mine(await consolidator.scheduled("weekly"), scope)
            assert (second.coverage, second.read, second.proposals_made) == ("window", 2, 0), second

            monthly = _mine(await consolidator.scheduled("monthly"), scope)
            assert monthly.coverage == "backlog", monthly
            assert _mine(await consolidator.scheduled("monthly"), scope).coverage == "window"


def test_groups_are_cliques_not_chains_and_common_entities_do_not_link() -> None:
    # a~b and b~c but not a~c: one group {a, b} (the most similar pair), not a chain of three.
    sims = np.array([[1, 0.9, 0.1], [0.9, 1, 0.7], [0.1, 0.7, 1]], dtype=np.float32)
    linked = sims >= 0.5
    np.fill_diagonal(linked, False)
    assert _cliques(sims, linked, cap=20) == [[0, 1]]
    # Four all alike: one group, unless the cap splits it.
    alike = np.full((4, 4), 0.9, dtype=np.float32)
    every = ~np.eye(4, dtype=bool)
    assert _cliques(alike, every, cap=20) == [[0, 1, 2, 3]]
    assert sorted(_cliques(alike, every, cap=2)) == [[0, 1], [2, 3]]
    # An entity every memory names (a speaker) links none of them once there are enough; a rare one does.
    ids = [uuid.uuid4() for _ in range(40)]
    ents = {memory_id: {1} for memory_id in ids} | {ids[0]: {1, 2}, ids[1]: {1, 2}}
    share = _share_telling_entity(ids, ents)
    assert share[0, 1] and share.sum() == 4  # (0,1), (1,0) and the diagonal
    few = ids[:3]
    assert _share_telling_entity(few, {i: {1} for i in few}).all()  # three alike share their entity


async def test_the_consolidation_bench_runs_on_one_conversation(pg_server_url: str) -> None:
    (result,) = await bench.run(DATA, 1, pg_server_url)
    assert (result["turns"], result["weekly_read"], result["monthly_read"]) == (419, 419, 419), result
    assert result["facts"] >= 1 and result["group_sizes"]["min"] >= 2
    assert (result["second_run_read"], result["second_run_proposals"]) == (0, 0)
    # Members of a group are more alike than two turns drawn at random.
    assert result["cosine_in_group"] > result["cosine_at_random"]
    assert "| 1 | 419 | 419 |" in bench.format_table([result])
