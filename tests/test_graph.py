"""The evidence graph, proposals, propagation and consolidation on the real stack (real Postgres,
real embedder, real gRPC; issue 18 items 1, 2, 5-7), with no LLM configured (extractive mode)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2,
    curation_pb2_grpc,
    intelligence_pb2,
    intelligence_pb2_grpc,
)
from services.curation.server import running
from tests.conftest import Stack

ALICE = common_pb2.Caller(principal="alice", grants=["user:alice", "project:*", "shared"])
BOB = common_pb2.Caller(principal="bob", grants=["user:bob", "project:bobs"])
TIMEOUT = 60


def new_scope() -> str:
    return f"project:g-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def replica(stack: Stack, data_dir: Path, **overrides: Any) -> AsyncIterator[str]:
    """Another curation server over the stack's database, wired to the stack's retrieval."""
    options: dict[str, Any] = {
        "database_url": stack.database_url,
        "data_dir": data_dir,
        "embedder_address": stack.embedder_address,
        "retrieval_address": stack.retrieval_address,
        "curation_port": 0,
        "scope_graph_rows": 0,
        "consolidation_min_age_days": 0,
        # Runs on demand only, unless a test sets a schedule.
        "consolidation_daily_hours": 0,
        "consolidation_weekly_hours": 0,
        "consolidation_monthly_hours": 0,
    }
    settings = CurationSettings(**{**options, **overrides})
    async with running(settings) as (_server, port, _writer):
        yield f"127.0.0.1:{port}"


@asynccontextmanager
async def stubs(
    address: str,
) -> AsyncIterator[tuple[curation_pb2_grpc.CurationStub, intelligence_pb2_grpc.IntelligenceStub]]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield curation_pb2_grpc.CurationStub(channel), intelligence_pb2_grpc.IntelligenceStub(channel)


async def save(
    cur: curation_pb2_grpc.CurationStub,
    scope: str,
    content: str,
    caller: common_pb2.Caller = ALICE,
    **kw: Any,
) -> str:
    reply = await cur.Save(
        curation_pb2.SaveRequest(caller=caller, scope=scope, content=content, **kw), timeout=TIMEOUT
    )
    assert reply.created, f"deduplicated into {reply.memory.id}: {content!r}"
    return str(reply.memory.id)


async def proposals(
    intel: intelligence_pb2_grpc.IntelligenceStub,
    scope: str,
    caller: common_pb2.Caller = ALICE,
    status: str = "",
) -> list[intelligence_pb2.Proposal]:
    reply = await intel.ListProposals(
        intelligence_pb2.ListProposalsRequest(caller=caller, scopes=[scope], status=status), timeout=TIMEOUT
    )
    return list(reply.proposals)


async def consolidate(
    intel: intelligence_pb2_grpc.IntelligenceStub, job: str, scope: str
) -> intelligence_pb2.ConsolidateReport:
    reply = await intel.Consolidate(
        intelligence_pb2.ConsolidateRequest(caller=ALICE, job=job, scope=scope), timeout=TIMEOUT
    )
    assert len(reply.reports) == 1
    return reply.reports[0]


async def decide(
    intel: intelligence_pb2_grpc.IntelligenceStub, proposal_id: str, decision: str, reason: str = ""
) -> intelligence_pb2.DecideProposalResponse:
    return await intel.DecideProposal(
        intelligence_pb2.DecideProposalRequest(
            caller=ALICE, id=proposal_id, decision=decision, reason=reason
        ),
        timeout=TIMEOUT,
    )


async def evidence(
    intel: intelligence_pb2_grpc.IntelligenceStub,
    memory_id: str,
    caller: common_pb2.Caller = ALICE,
    depth: str = "",
) -> intelligence_pb2.EvidenceResponse:
    return await intel.Evidence(
        intelligence_pb2.EvidenceRequest(caller=caller, id=memory_id, depth=depth), timeout=TIMEOUT
    )


async def rebuild_differences(cur: curation_pb2_grpc.CurationStub, scope: str) -> list[str]:
    reply = await cur.Rebuild(
        curation_pb2.RebuildRequest(caller=ALICE, scopes=[scope], check=True), timeout=TIMEOUT
    )
    return list(reply.differences)


async def test_a_cycle_is_refused_through_the_rpc_and_from_raw_sql(stack: Stack) -> None:
    scope = new_scope()
    async with stubs(stack.curation_address) as (cur, intel):
        a = await save(cur, scope, "Premise A: the billing service owns invoices")
        b = await save(cur, scope, "Conclusion B: invoices are never edited outside billing")
        c = await save(cur, scope, "Conclusion C: support cannot change an invoice total")
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(caller=ALICE, derived_id=b, premise_ids=[a])
        )
        reply = await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(caller=ALICE, derived_id=c, premise_ids=[b]), timeout=TIMEOUT
        )
        assert [p.memory.id for p in reply.premises] == [b]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await intel.AddEvidence(
                intelligence_pb2.AddEvidenceRequest(caller=ALICE, derived_id=a, premise_ids=[c]),
                timeout=TIMEOUT,
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "cycle" in (refused.value.details() or "")
        with pytest.raises(asyncpg.CheckViolationError, match="cycle"):
            await stack.pool.execute(
                "INSERT INTO evidence_edges (derived_id, premise_id, created_by) VALUES ($1::uuid, $2::uuid, 'raw')",
                a,
                c,
            )
        # Nothing of the refused call was written: no edge, no raw-log record.
        assert (
            await stack.pool.fetchval("SELECT count(*) FROM evidence_edges WHERE derived_id = $1::uuid", a)
            == 0
        )
        assert (
            await stack.pool.fetchval(
                "SELECT count(*) FROM records WHERE operation = 'evidence' AND target_id = $1::uuid", a
            )
            == 0
        )
        ancestry = await evidence(intel, c, depth="ancestry")
        assert [(p.memory.id, p.hops) for p in ancestry.premises] == [(b, 1), (a, 2)]
        assert await rebuild_differences(cur, scope) == []


async def test_graph_reads_never_reveal_a_row_outside_the_callers_scopes(stack: Stack) -> None:
    # alice's grants include project:*, so bob's private side is his user scope.
    both = common_pb2.Caller(principal="carol", grants=["user:alice", "user:bob"])
    async with stubs(stack.curation_address) as (cur, intel):
        alices = await save(
            cur, "user:alice", f"Alice's private note {uuid.uuid4().hex[:6]}: the vault code rotates"
        )
        bobs = await save(cur, "user:bob", f"Bob's runbook {uuid.uuid4().hex[:6]}: restart the queue", BOB)
        derived = await save(cur, "user:bob", f"Queue restarts need the vault {uuid.uuid4().hex[:6]}", BOB)
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(caller=both, derived_id=derived, premise_ids=[alices, bobs]),
            timeout=TIMEOUT,
        )
        as_bob = await evidence(intel, derived, BOB, depth="ancestry")
        assert [p.memory.id for p in as_bob.premises] == [bobs]  # alice's premise: not even counted
        as_carol = await evidence(intel, derived, both)
        assert sorted(p.memory.id for p in as_carol.premises) == sorted([alices, bobs])
        from_alice = await evidence(intel, alices, ALICE)
        assert list(from_alice.derived) == []  # bob's conclusion is not revealed to alice
        for caller, memory_id in ((ALICE, derived), (BOB, alices)):
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await evidence(intel, memory_id, caller)
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        # Writing an edge needs both ends readable.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await intel.AddEvidence(
                intelligence_pb2.AddEvidenceRequest(caller=BOB, derived_id=derived, premise_ids=[alices]),
                timeout=TIMEOUT,
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        # Alice changes her premise: bob's conclusion goes stale, and the revision proposed in his
        # scope lists only the evidence bob may read.
        await cur.Update(
            curation_pb2.UpdateRequest(caller=ALICE, id=alices, content="The vault code no longer rotates"),
            timeout=TIMEOUT,
        )
        report = await intel.Consolidate(
            intelligence_pb2.ConsolidateRequest(caller=BOB, job="daily", scope="user:bob"), timeout=TIMEOUT
        )
        assert report.reports[0].made_by_kind["revision"] == 1
        (revision,) = [p for p in await proposals(intel, "user:bob", BOB) if p.supersedes == derived]
        assert list(revision.evidence) == [bobs]
        (as_carol,) = [p for p in await proposals(intel, "user:bob", both) if p.supersedes == derived]
        assert sorted(as_carol.evidence) == sorted([alices, bobs])
        with pytest.raises(grpc.aio.AioRpcError) as not_hers:
            await proposals(intel, "user:bob", ALICE)
        assert not_hers.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # Bob may not approve a revision resting on a premise he cannot read.
        with pytest.raises(grpc.aio.AioRpcError) as blind:
            await intel.DecideProposal(
                intelligence_pb2.DecideProposalRequest(caller=BOB, id=revision.id, decision="approve"),
                timeout=TIMEOUT,
            )
        assert blind.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_identities_are_owned_by_their_author(stack: Stack) -> None:
    scope = new_scope()
    async with stubs(stack.curation_address) as (cur, intel):
        memory = await save(cur, scope, "Carol prefers async reviews over meetings")
        mine = await intel.CreateIdentity(
            intelligence_pb2.CreateIdentityRequest(caller=ALICE, scope=scope, name="alice")
        )
        theirs = await intel.CreateIdentity(
            intelligence_pb2.CreateIdentityRequest(
                caller=common_pb2.Caller(principal="carol", grants=[scope]), scope=scope, name="carol"
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await intel.SetPerspective(
                intelligence_pb2.SetPerspectiveRequest(
                    caller=ALICE, memory_id=memory, observer=mine.id, observed=theirs.id
                )
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        ok = await intel.SetPerspective(
            intelligence_pb2.SetPerspectiveRequest(caller=ALICE, memory_id=memory, observer=mine.id)
        )
        assert ok.observer == mine.id and ok.observed == ""
        row = await stack.pool.fetchrow("SELECT observer, observed FROM memories WHERE id = $1::uuid", memory)
        assert str(row["observer"]) == mine.id and row["observed"] is None


async def test_approve_then_a_changed_premise_propagates_and_is_revised(stack: Stack, tmp_path: Path) -> None:
    scope = new_scope()
    async with replica(stack, tmp_path) as address, stubs(address) as (cur, intel):
        a = await save(
            cur, scope, "ArgoCD deploys the Kubernetes cluster every Tuesday morning", kind="episodic"
        )
        b = await save(
            cur, scope, "On Tuesday ArgoCD rolled the new release out to Kubernetes", kind="episodic"
        )
        weekly = await consolidate(intel, "weekly", scope)
        assert (weekly.skipped, weekly.mode, weekly.proposals_made) == (False, "extractive", 1)
        assert "no LLM configured" in " ".join(weekly.notes)
        (fact,) = await proposals(intel, scope)
        assert (fact.kind, fact.status, fact.mode) == ("fact", "pending", "extractive")
        assert sorted(fact.evidence) == sorted([a, b]) and fact.rationale
        again = await consolidate(intel, "weekly", scope)
        assert again.proposals_made == 0 and again.pending == 1  # idempotent: nothing new

        approved = await decide(intel, fact.id, "approve")
        derived = approved.memory_id
        assert approved.proposal.status == "approved" and approved.proposal.decided_by == "alice"
        assert approved.proposal.result_id == derived and approved.proposal.HasField("decided_at")
        row = await stack.pool.fetchrow(
            "SELECT kind, type, content FROM memories WHERE id = $1::uuid", derived
        )
        # A derived memory names its own type (a save's default, `fact`, is not one's).
        assert (row["kind"], row["type"], row["content"]) == ("semantic", "note", fact.content)
        graph = await evidence(intel, derived)
        assert sorted(p.memory.id for p in graph.premises) == sorted([a, b]) and not graph.memory.stale
        decided = await stack.pool.fetchrow(
            "SELECT author, operation FROM records WHERE kind = 'proposal' AND target_id = $1::uuid"
            " AND operation = 'approve'",
            fact.id,
        )
        assert decided["author"] == "alice"
        with pytest.raises(grpc.aio.AioRpcError) as twice:
            await decide(intel, fact.id, "reject", "changed my mind")
        assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert await rebuild_differences(cur, scope) == []

        # A premise changes: the conclusion reads stale, naming it.
        await cur.Update(
            curation_pb2.UpdateRequest(
                caller=ALICE, id=a, content="ArgoCD now deploys Kubernetes every Thursday"
            ),
            timeout=TIMEOUT,
        )
        stale = await evidence(intel, derived)
        assert stale.memory.stale and stale.memory.stale_because == f"premise {a} was updated"
        assert [d.memory.id for d in (await evidence(intel, a)).derived] == [derived]

        daily = await consolidate(intel, "daily", scope)
        assert daily.made_by_kind["revision"] == 1
        revision = next(p for p in await proposals(intel, scope) if p.kind == "revision")
        assert revision.supersedes == derived and sorted(revision.evidence) == sorted([a, b])
        assert "Thursday" in revision.content and f"premise {a} was updated" in revision.rationale
        assert (await consolidate(intel, "daily", scope)).proposals_made == 0  # never re-proposed
        revised = (await decide(intel, revision.id, "approve")).memory_id
        old = await stack.pool.fetchrow("SELECT superseded_by FROM memories WHERE id = $1::uuid", derived)
        assert str(old["superseded_by"]) == revised
        fresh = await evidence(intel, revised)
        assert not fresh.memory.stale and sorted(p.memory.id for p in fresh.premises) == sorted([a, b])
        assert await rebuild_differences(cur, scope) == []


async def test_archiving_a_premise_makes_stale_and_restoring_clears(stack: Stack) -> None:
    scope = new_scope()
    async with stubs(stack.curation_address) as (cur, intel):
        premise = await save(
            cur, scope, "The staging database is restored nightly", tags=["temp"], importance=0.5
        )
        other = await save(cur, scope, "Staging data is at most a day old")
        conclusion = await save(cur, scope, "Never test migrations against data older than a day on staging")
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(
                caller=ALICE, derived_id=conclusion, premise_ids=[premise, other]
            )
        )
        forgot = await cur.Forget(
            curation_pb2.ForgetRequest(
                caller=ALICE, scopes=[scope], tags=["temp"], older_than_days=0, importance_floor=1, apply=True
            ),
            timeout=TIMEOUT,
        )
        assert forgot.archived == 1
        stale = await evidence(intel, conclusion)
        assert stale.memory.stale_because == f"premise {premise} was archived"
        await cur.Restore(curation_pb2.MemoryRequest(caller=ALICE, id=premise), timeout=TIMEOUT)
        cleared = await evidence(intel, conclusion)
        assert not cleared.memory.stale and cleared.memory.stale_because == ""


async def test_contradictions_are_proposed_and_approval_supersedes(stack: Stack, tmp_path: Path) -> None:
    scope = new_scope()
    async with replica(stack, tmp_path) as address, stubs(address) as (cur, intel):
        older = await save(cur, scope, "Dana's editor is vim.")
        await asyncio.sleep(0.01)
        newer = await save(cur, scope, "After the laptop migration in March, a note: Dana's editor is emacs.")
        await save(cur, scope, "Dana's team is platform.")
        report = await consolidate(intel, "daily", scope)
        assert report.made_by_kind == {"contradiction": 1}
        (suggestion,) = await proposals(intel, scope)
        assert suggestion.supersedes == older and sorted(suggestion.evidence) == sorted([older, newer])
        assert "vim" in suggestion.rationale and "emacs" in suggestion.rationale
        # Bob cannot see or decide alice's proposals.
        assert await proposals(intel, "project:bobs", BOB) == []
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await intel.DecideProposal(
                intelligence_pb2.DecideProposalRequest(caller=BOB, id=suggestion.id, decision="approve")
            )
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as no_reason:
            await decide(intel, suggestion.id, "reject")
        assert no_reason.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        kept = await decide(intel, suggestion.id, "approve")
        assert kept.memory_id == newer
        rows = {
            str(r["id"]): r
            for r in await stack.pool.fetch(
                "SELECT id, supersedes, superseded_by FROM memories WHERE id = ANY($1::uuid[])",
                [older, newer],
            )
        }
        assert str(rows[older]["superseded_by"]) == newer and str(rows[newer]["supersedes"]) == older
        assert (await consolidate(intel, "daily", scope)).proposals_made == 0
        assert await rebuild_differences(cur, scope) == []


async def test_daily_promotes_expires_and_marks_conclusions_of_expired_premises(
    stack: Stack, tmp_path: Path
) -> None:
    scope = new_scope()
    async with replica(stack, tmp_path) as address, stubs(address) as (cur, intel):
        kept = await save(cur, scope, "Working on the flaky login test in auth_flow.py", kind="working")
        dropped = await save(cur, scope, "Scratch: the printer on floor two jams", kind="working")
        conclusion = await save(cur, scope, "Printing on floor two is unreliable")
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(caller=ALICE, derived_id=conclusion, premise_ids=[dropped])
        )
        # Time passes: both TTLs run out; the first was recalled meanwhile.
        await stack.pool.execute(
            "UPDATE memories SET expires_at = now() - interval '1 minute' WHERE id = ANY($1::uuid[])",
            [kept, dropped],
        )
        await stack.pool.execute("UPDATE memories SET access_count = 2 WHERE id = $1::uuid", kept)
        report = await consolidate(intel, "daily", scope)
        assert (report.promoted, report.expired) == (1, 1) and report.marked_stale >= 1
        assert report.made_by_kind == {"retirement": 1}
        rows = {
            str(r["id"]): r
            for r in await stack.pool.fetch(
                "SELECT id, kind, expires_at, archived_at, stale_because FROM memories WHERE id = ANY($1::uuid[])",
                [kept, dropped, conclusion],
            )
        }
        assert rows[kept]["kind"] == "episodic" and rows[kept]["expires_at"] is None
        assert rows[dropped]["archived_at"] is not None
        assert rows[conclusion]["stale_because"] == f"premise {dropped} was expired"
        again = await consolidate(intel, "daily", scope)
        assert (again.promoted, again.expired, again.proposals_made) == (0, 0, 0)
        (retirement,) = await proposals(intel, scope)
        assert retirement.supersedes == conclusion
        archived = await decide(intel, retirement.id, "approve")
        assert archived.memory_id == conclusion
        assert await stack.pool.fetchval(
            "SELECT archived_at IS NOT NULL FROM memories WHERE id = $1::uuid", conclusion
        )
        # Promotion and expiry are raw-log records too; the expiry itself was simulated in SQL
        # above (time passing), so only expires_at of those two may differ from the replay.
        differences = await rebuild_differences(cur, scope)
        assert differences and all(": expires_at live=" in d for d in differences), differences


async def test_consolidation_runs_once_across_two_replicas(stack: Stack, tmp_path: Path) -> None:
    scope = new_scope()
    async with (
        replica(stack, tmp_path / "one") as first,
        replica(stack, tmp_path / "two") as second,
        stubs(first) as (cur, intel_one),
        stubs(second) as (_cur, intel_two),
    ):
        for text in (
            "Grafana alerts for Postgres replica lag fired at 3am during the backup window",
            "On Friday the Postgres replica fell behind and Grafana paged the on-call engineer",
            "The Grafana dashboard shows Postgres replica lag spikes whenever the nightly vacuum runs",
        ):
            await save(cur, scope, text, kind="episodic")
        reports = await asyncio.gather(
            consolidate(intel_one, "weekly", scope), consolidate(intel_two, "weekly", scope)
        )
        made = sum(r.proposals_made for r in reports)
        assert made == 1, reports
        assert any(
            r.skipped and r.skipped_reason == "another run holds the lock" or r.proposals_made == 0
            for r in reports
        )
        assert len(await proposals(intel_one, scope)) == 1
        third = await consolidate(intel_two, "weekly", scope)
        assert third.proposals_made == 0 and not third.skipped
        # While another run holds the lock (here: a transaction holding the same key), a run skips.
        async with stack.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"hm:consolidate:weekly:{scope}"
            )
            held = await consolidate(intel_one, "weekly", scope)
        assert (held.skipped, held.skipped_reason, held.proposals_made) == (
            True,
            "another run holds the lock",
            0,
        )


async def test_bad_requests_say_what_to_do(stack: Stack) -> None:
    async with stubs(stack.curation_address) as (_cur, intel):
        for call, request, fragment in (
            (
                intel.Consolidate,
                intelligence_pb2.ConsolidateRequest(caller=ALICE, job="hourly"),
                "daily, weekly or monthly",
            ),
            (
                intel.Consolidate,
                intelligence_pb2.ConsolidateRequest(caller=BOB, job="daily", scope="user:alice"),
                "not granted",
            ),
            (
                intel.DecideProposal,
                intelligence_pb2.DecideProposalRequest(caller=ALICE, id="nope", decision="approve"),
                "not a proposal id",
            ),
            (
                intel.DecideProposal,
                intelligence_pb2.DecideProposalRequest(caller=ALICE, id=str(uuid.uuid4()), decision="maybe"),
                "approve or reject",
            ),
            (
                intel.ListProposals,
                intelligence_pb2.ListProposalsRequest(caller=ALICE, status="odd"),
                "pending, approved",
            ),
            (
                intel.Evidence,
                intelligence_pb2.EvidenceRequest(caller=ALICE, id=str(uuid.uuid4()), depth="deep"),
                "premises",
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await call(request, timeout=TIMEOUT)
            assert fragment in (bad.value.details() or ""), bad.value.details()


async def test_monthly_proposes_a_summary_and_a_repeated_procedure(stack: Stack, tmp_path: Path) -> None:
    scope = new_scope()
    async with replica(stack, tmp_path) as address, stubs(address) as (cur, intel):
        release_one = await save(
            cur,
            scope,
            "How we shipped 1.4:\n1. bump the version in pyproject.toml\n2. tag the commit\n"
            "3. push the tag to trigger the release workflow",
        )
        release_two = await save(
            cur,
            scope,
            "Shipping 1.5 went like this:\n- updated the version number in pyproject.toml\n"
            "- created a git tag for the release commit\n- pushed the tag so the CI release job published it",
        )
        await save(cur, scope, "The team decided to drop Python 3.10 support in the next minor release.")
        report = await consolidate(intel, "monthly", scope)
        assert report.made_by_kind == {"summary": 1, "procedure": 1}, report
        by_kind = {p.kind: p for p in await proposals(intel, scope)}
        assert sorted(by_kind["procedure"].evidence) == sorted([release_one, release_two])
        assert len(by_kind["summary"].evidence) == 3 and "Python 3.10" in by_kind["summary"].content
        made = await decide(intel, by_kind["procedure"].id, "approve")
        kind = await stack.pool.fetchval("SELECT kind FROM memories WHERE id = $1::uuid", made.memory_id)
        assert kind == "procedural"
        rejected = await decide(intel, by_kind["summary"].id, "reject", "too early for a summary")
        assert (
            rejected.proposal.status == "rejected"
            and rejected.proposal.decision_reason == "too early for a summary"
        )
        assert rejected.memory_id == ""
        assert (await consolidate(intel, "monthly", scope)).proposals_made == 0  # rejected stays rejected
        assert await rebuild_differences(cur, scope) == []


async def test_the_schedule_runs_consolidation_inside_the_server(stack: Stack, tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    scope = new_scope()
    async with stubs(stack.curation_address) as (cur, intel):
        await save(cur, scope, "Sentry reported a spike of TimeoutError in checkout at noon", kind="episodic")
        await save(
            cur, scope, "Checkout threw TimeoutError again, Sentry grouped 300 events", kind="episodic"
        )
    before = (
        REGISTRY.get_sample_value("hm_consolidation_runs_total", {"schedule": "weekly", "outcome": "ran"})
        or 0
    )
    async with (
        replica(stack, tmp_path, consolidation_weekly_hours=0.0003) as address,
        stubs(address) as (_c, intel),
    ):
        for _ in range(100):
            if await proposals(intel, scope):
                break
            await asyncio.sleep(0.2)
        (made,) = await proposals(intel, scope)
        assert made.kind == "fact"
    after = (
        REGISTRY.get_sample_value("hm_consolidation_runs_total", {"schedule": "weekly", "outcome": "ran"})
        or 0
    )
    assert after > before
    assert REGISTRY.get_sample_value("hm_proposals_pending") is not None
