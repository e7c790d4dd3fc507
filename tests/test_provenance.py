"""Provenance (issue 22): `hypermnesia why ID` names the records a memory came from, with seqs and
hashes that verify, its supersede lineage, its evidence and conclusions, and who wrote and who
approved what, for a saved, an updated, a superseded, an imported and a derived memory."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.curation import proposals
from tests.conftest import Stack
from tests.test_curation_admin import ALICE, cli


async def why(stack: Stack, model_cache: Path, memory_id: str) -> dict[str, Any]:
    result = await cli(stack.database_url, model_cache, "why", memory_id, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def ops(data: dict[str, Any]) -> list[str]:
    return [r["operation"] for r in data["records"]]


async def test_why_names_records_lineage_evidence_and_decisions(
    stack: Stack, model_cache: Path, tmp_path: Path
) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        first = (await http.post("/memories", json={"content": "The staging cluster is called heron"})).json()
        first_id = first["memory"]["id"]
        other = (await http.post("/memories", json={"content": "Deploys to heron need the VPN"})).json()
        other_id = other["memory"]["id"]

        saved = await why(stack, model_cache, first_id)
        assert ops(saved) == ["save"] and saved["state"] == "live" and saved["all_verify"]
        record = saved["records"][0]
        seq, record_hash = await stack.pool.fetchrow(
            "SELECT seq, record_hash FROM records WHERE id = $1::uuid OR target_id = $1::uuid", first_id
        )
        assert (record["seq"], record["record_hash"], record["verifies"]) == (seq, record_hash, True)
        assert "alice" in saved["written_by"]

        patched = await http.patch(
            f"/memories/{first_id}", json={"content": "The staging cluster is heron-2"}
        )
        assert patched.status_code == 200, patched.text
        updated = await why(stack, model_cache, first_id)
        assert ops(updated) == ["save", "update"] and updated["all_verify"]

        new = (
            await http.post(f"/memories/{first_id}/supersede", json={"content": "Staging moved to egret"})
        ).json()
        new_id = new["memory"]["id"] if "memory" in new else new["id"]
        old = await why(stack, model_cache, first_id)
        assert old["state"] == "superseded" and old["lineage"]["superseded_by"] == [new_id]
        assert [r["operation"] for r in old["mentioned_by"]] == ["supersede"]
        successor = await why(stack, model_cache, new_id)
        assert ops(successor) == ["supersede"] and successor["lineage"]["supersedes"] == [first_id]
        assert successor["lineage"]["closed_by_its_records"] == [first_id]

    # Imported through the admin CLI.
    imported_id = str(uuid.uuid4())
    line = {
        "id": imported_id,
        "scope": "project:admin",
        "content": "The backup bucket is hm-backups-eu",
        "owner_id": "alice",
        "kind": "semantic",
        "created_at": "2026-01-02T03:04:05+00:00",
    }
    (tmp_path / "dump.jsonl").write_text(json.dumps(line) + "\n")
    done = await cli(stack.database_url, model_cache, "import", str(tmp_path / "dump.jsonl"))
    assert done.code == 0, done.err
    imported = await why(stack, model_cache, imported_id)
    assert ops(imported) == ["import"] and imported["records"][0]["author"].startswith("admin")

    # Derived: a Dreamer proposal resting on two memories, approved by alice.
    async with stack.pool.acquire() as conn, conn.transaction():
        (proposal,) = await proposals.propose(
            conn,
            [
                proposals.Draft(
                    scope="project:admin",
                    kind="fact",
                    content="Deploys to staging (egret) need the VPN",
                    rationale="both memories say so",
                    evidence=(uuid.UUID(new_id), uuid.UUID(other_id)),
                    mode="extractive",
                )
            ],
            "system:dreamer",
        )
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        approved = await http.post(f"/proposals/{proposal['id']}/approve", json={"reason": "right"})
        assert approved.status_code == 200, approved.text
    derived_id = str(
        await stack.pool.fetchval("SELECT result_id FROM proposals WHERE id = $1", proposal["id"])
    )
    derived = await why(stack, model_cache, derived_id)
    assert ops(derived) == ["derive"] and derived["all_verify"]
    assert {p["id"] for p in derived["premises"]} == {new_id, other_id}
    (made,) = derived["proposals"]
    assert made["role"] == "made this memory" and made["status"] == "approved"
    assert made["decided_by"] == "alice" and derived["approved_by"] == ["alice"]
    assert [r["operation"] for r in made["records"]] == ["propose", "approve"]
    assert made["records"][0]["author"] == "system:dreamer"
    premise = await why(stack, model_cache, other_id)
    assert [c["id"] for c in premise["conclusions"]] == [derived_id]
    assert premise["proposals"][0]["role"] == "quotes it as evidence"

    text = await cli(stack.database_url, model_cache, "why", derived_id)
    assert text.code == 0 and "every record verifies" in text.out and "derive" in text.out

    # A record edited behind the service's back shows as not verifying.
    await stack.pool.execute("ALTER TABLE records DISABLE TRIGGER records_no_update")
    try:
        await stack.pool.execute("UPDATE records SET author = 'mallory' WHERE seq = $1", seq)
        tampered = await cli(stack.database_url, model_cache, "why", first_id)
        assert tampered.code == 3 and "DOES NOT VERIFY" in tampered.out
    finally:
        await stack.pool.execute("UPDATE records SET author = $2 WHERE seq = $1", seq, record["author"])
        await stack.pool.execute("ALTER TABLE records ENABLE TRIGGER records_no_update")

    unknown = await cli(stack.database_url, model_cache, "why", str(uuid.uuid4()))
    assert unknown.code == 1 and "no memory" in unknown.err


async def test_provenance_rpc_is_scope_checked(stack: Stack) -> None:
    import grpc

    from hypermnesia.v1 import common_pb2, provenance_pb2, provenance_pb2_grpc

    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = (await http.post("/memories", json={"content": "The pager rota lives in the wiki"})).json()
    memory_id = saved["memory"]["id"]
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = provenance_pb2_grpc.ProvenanceStub(channel)
        alice = common_pb2.Caller(principal="alice", grants=["project:*"])
        answer = await stub.Explain(provenance_pb2.ProvenanceRequest(caller=alice, id=memory_id))
        assert [r.operation for r in answer.records] == ["save"] and answer.all_verify
        assert answer.scope == "project:admin" and answer.records[0].verifies
        bob = common_pb2.Caller(principal="bob", grants=["user:bob"])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Explain(provenance_pb2.ProvenanceRequest(caller=bob, id=memory_id))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.Explain(provenance_pb2.ProvenanceRequest(caller=alice, id="nope"))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a memory id" in (
            bad.value.details() or ""
        )
