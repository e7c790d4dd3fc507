"""The records API on the real stack: bulk import (idempotent on source_ref), conversation turns,
state objects, lineage/derivations/query, task extraction, and bad input that changes nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest

from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc
from tests.conftest import Stack

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "records"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
SCOPE = "project:records"


async def _counts(stack: Stack) -> tuple[int, int]:
    records = await stack.pool.fetchval("SELECT count(*) FROM records")
    memories = await stack.pool.fetchval("SELECT count(*) FROM memories")
    return records, memories


def _batch(n: int, prefix: str) -> list[dict]:
    base = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    out = []
    for i in range(n):
        out.append(
            {
                "type": "conversation" if i % 2 == 0 else "note",
                "scope": SCOPE,
                "content": f"{prefix} fact number {i}: the build server {i % 17} uses {i % 5} workers",
                "source_ref": f"{prefix}-{i}",
                "thread_id": f"{prefix}-thread-{i % 3}" if i % 2 == 0 else None,
                "created_at": (base + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"),
                "metadata": {"speaker": "Caroline" if i % 4 == 0 else "Melanie", "n": i},
            }
        )
    return out


async def test_bulk_import_is_idempotent_and_keeps_history(stack: Stack) -> None:
    batch = _batch(600, "bulk")
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=300) as http:
        started = time.perf_counter()
        response = await http.post("/records/import", json={"records": batch})
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"imported", "skipped", "ids"}
        assert (body["imported"], body["skipped"], len(body["ids"])) == (600, 0, 600)
        print(f"imported 600 records in {elapsed:.2f}s ({600 / elapsed:.0f} records/s)")
        records, memories = await _counts(stack)

        # Re-sent (with one new record at the end): the old ones are no-ops answered with their ids.
        again = await http.post("/records/import", json={"records": [*batch, *_batch(601, "bulk")[600:]]})
        assert again.status_code == 200, again.text
        assert again.json()["imported"] == 1 and again.json()["skipped"] == 600
        assert again.json()["ids"][:600] == body["ids"]
        assert await _counts(stack) == (records + 1, memories + 1)

        # created_at is the record's, thread order is kept, source_ref is carried.
        first = await http.get(f"/memories/{body['ids'][0]}")
        assert first.status_code == 200, first.text
        assert first.json()["created_at"].startswith("2023-05-08T13:56:00")
        assert first.json()["source_ref"] == "bulk-0"
        assert first.json()["kind"] == "episodic" and first.json()["thread_id"] == "bulk-thread-0"
        turns = await stack.pool.fetch(
            "SELECT source_ref, ordinal FROM memories WHERE scope = $1 AND thread_id = 'bulk-thread-0' ORDER BY ordinal",
            SCOPE,
        )
        assert [t["ordinal"] for t in turns] == list(range(len(turns)))
        assert [t["source_ref"] for t in turns][:3] == ["bulk-0", "bulk-6", "bulk-12"]

        hits = (
            await http.post("/memories/search", json={"query": "build server 5 uses 2 workers", "k": 5})
        ).json()
        assert hits["results"] and all(h.get("source_ref", "").startswith("bulk-") for h in hits["results"])


async def test_duplicates_in_one_batch_share_an_id(stack: Stack) -> None:
    record = {"type": "note", "content": "The VPN gateway lives in rack 4", "source_ref": "dup-1"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        body = (await http.post("/records/import", json={"records": [record, record]})).json()
    assert body["imported"] == 1 and body["skipped"] == 1 and body["ids"][0] == body["ids"][1]


async def test_grpc_import_for_evaluation(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        request = curation_pb2.ImportRecordsRequest(
            caller=common_pb2.Caller(principal="eval", grants=["eval:*"]),
            records=[
                curation_pb2.RecordInput(
                    type="document",
                    scope="eval:scifact",
                    content=f"Abstract {i} about proteins",
                    source_ref=f"doc-{i}",
                )
                for i in range(5)
            ],
        )
        reply = await stub.ImportRecords(request, timeout=60)
        assert (reply.imported, reply.skipped, len(reply.ids)) == (5, 0, 5)
        again = await stub.ImportRecords(request, timeout=60)
        assert (again.imported, again.skipped, list(again.ids)) == (0, 5, list(reply.ids))
        kinds = await stack.pool.fetch(
            "SELECT DISTINCT kind, type FROM memories WHERE scope = 'eval:scifact'"
        )
        assert [(k["kind"], k["type"]) for k in kinds] == [("document", "document")]


async def test_state_objects_project_to_current_value_with_history(stack: Stack) -> None:
    versions = ["staging", "production", "staging (reverted after incident)"]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        for i, target in enumerate(versions):
            body = await http.post(
                "/records",
                json={
                    "type": "state_object",
                    "state_kind": "deploy",
                    "state_key": "target",
                    "content": f"Deploy target: {target}",
                    "source_ref": f"deploy-{i}",
                    "created_at": f"2024-0{i + 1}-01T00:00:00Z",
                },
            )
            assert body.status_code == 200, body.text
        current = (await http.get("/records/state/deploy/target")).json()["current"]
        assert current["content"].endswith("reverted after incident)")
        history = (await http.get("/records/state/deploy/target/history")).json()["history"]
        assert [h["content"] for h in history] == [f"Deploy target: {v}" for v in versions]
        assert (
            history[0]["superseded_by"] == history[1]["id"] and history[1]["supersedes"] == history[0]["id"]
        )

        lineage = (await http.get(f"/records/{history[1]['id']}/lineage")).json()
        assert [m["id"] for m in lineage["memories"]] == [h["id"] for h in history]
        assert [r["source_ref"] for r in lineage["records"]] == ["deploy-0", "deploy-1", "deploy-2"]

        record = (await http.get(f"/records/{history[0]['id']}")).json()
        assert record["type"] == "state_object" and record["payload"]["op"] == "create"
        assert record["memory"]["valid_from" if False else "id"] == history[0]["id"]
        derived = (await http.get(f"/records/{history[0]['id']}/derivations")).json()
        assert history[1]["id"] in {m["id"] for m in derived["memories"]}

        query = (
            await http.get("/records/query", params={"type": "state_object", "since": "2024-01-15T00:00:00Z"})
        ).json()
        assert [r["source_ref"] for r in query["records"]] == ["deploy-1", "deploy-2"]
        missing = await http.get("/records/state/deploy/nothing")
        assert missing.status_code == 404


async def test_explicit_supersede_by_source_ref(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        body = (
            await http.post(
                "/records/import",
                json={
                    "records": [
                        {
                            "type": "note",
                            "content": "The office wifi is called Hogwarts",
                            "source_ref": "wifi-1",
                        },
                        {
                            "type": "note",
                            "content": "The office wifi is called Narnia now",
                            "source_ref": "wifi-2",
                            "supersedes": "wifi-1",
                        },
                    ]
                },
            )
        ).json()
        old = await stack.pool.fetchrow(
            "SELECT superseded_by, valid_to FROM memories WHERE id = $1::uuid", body["ids"][0]
        )
        assert str(old["superseded_by"]) == body["ids"][1] and old["valid_to"] is not None
        # Re-sending the pair is a no-op, not an "already superseded" error.
        again = await http.post(
            "/records/import",
            json={
                "records": [
                    {"type": "note", "content": "The office wifi is called Hogwarts", "source_ref": "wifi-1"},
                    {
                        "type": "note",
                        "content": "The office wifi is called Narnia now",
                        "source_ref": "wifi-2",
                        "supersedes": "wifi-1",
                    },
                ]
            },
        )
        assert again.status_code == 200 and again.json()["skipped"] == 2
        # A second correction of the closed version is refused: the chain has one head.
        twice = await http.post(
            "/records", json={"type": "note", "content": "x", "source_ref": "wifi-3", "supersedes": "wifi-1"}
        )
        assert twice.status_code == 409 and "already superseded" in twice.json()["error"]["message"]


async def test_task_extraction_from_conversation(stack: Stack) -> None:
    turns = [
        "We are migrating the billing_service to Postgres this sprint.",
        "TODO: update the billing_service connection pool settings before Friday.",
        "Also I should water the plants.",
        "Right, the billing_service connection pool settings need an update.",
        "Don't forget to update the billing_service connection pool settings.",
    ]
    records = [
        {"type": "conversation", "content": t, "source_ref": f"task-turn-{i}", "thread_id": "task-thread"}
        for i, t in enumerate(turns)
    ]
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        body = (await http.post("/records/import", json={"records": records})).json()
        assert body["imported"] == 5
        tasks = await stack.pool.fetch(
            "SELECT id, content, metadata, kind, expires_at FROM memories WHERE type = 'task' AND scope = $1"
            " ORDER BY created_at, content",
            SCOPE,
        )
        import json

        found = {t["content"]: json.loads(t["metadata"])["task"] for t in tasks}
        todo = found["update the billing_service connection pool settings before Friday"]
        assert todo["confidence"] >= 0.70 and todo["priority"] in ("medium", "high")
        repeat = found["update the billing_service connection pool settings"]
        assert repeat["recency"] == 1.0 and repeat["priority"] == "high"
        assert not any("water the plants" in c for c in found)  # 0.65 signal, no entity: below 0.70
        assert all(t["kind"] == "working" and t["expires_at"] is not None for t in tasks)

        task_id = str(tasks[0]["id"])
        derived = (
            await http.get(f"/records/{json.loads(tasks[0]['metadata'])['derived_from'][0]}/derivations")
        ).json()
        assert task_id in {m["id"] for m in derived["memories"]}
        confirmed = await http.post(f"/tasks/{task_id}/confirm")
        assert confirmed.status_code == 200, confirmed.text
        assert (
            confirmed.json()["metadata"]["task"]["status"] == "confirmed"
            and "expires_at" not in confirmed.json()
        )
        again = await http.post(f"/tasks/{task_id}/dismiss")
        assert again.status_code == 409 and "already confirmed" in again.json()["error"]["message"]


@pytest.mark.parametrize(
    ("records", "status", "fragment"),
    [
        ([{"type": "episodic", "content": "x", "source_ref": "bad-1"}], 400, "type 'episodic' is unknown"),
        (
            [
                {"type": "note", "content": "ok", "source_ref": "bad-2"},
                {"type": "note", "content": " ", "source_ref": "b"},
            ],
            400,
            "records[1]: content is empty",
        ),
        (
            [{"type": "note", "content": "x", "source_ref": "bad-3", "supersedes": "no-such-ref"}],
            404,
            "no record or memory",
        ),
        ([{"type": "note", "content": "x", "source_ref": "bad-4", "supersedes": "bad-4"}], 400, "cycle"),
        (
            [
                {"type": "note", "content": "a", "source_ref": "bad-5", "supersedes": "bad-6"},
                {"type": "note", "content": "b", "source_ref": "bad-6", "supersedes": "bad-5"},
            ],
            400,
            "later in the batch",
        ),
        (
            [
                {
                    "type": "note",
                    "content": "x",
                    "source_ref": "bad-7",
                    "scope": "project:bobs-secret",
                    "oops": 1,
                }
            ],
            400,
            "unknown field(s) oops",
        ),
        ([{"type": "note", "content": "x", "created_at": "last tuesday"}], 400, "ISO 8601"),
        ([{"type": "state_object", "content": "x"}], 400, "state_kind and state_key"),
        ([], 400, "no records given"),
    ],
)
async def test_bad_imports_change_nothing(stack: Stack, records: list, status: int, fragment: str) -> None:
    before = await _counts(stack)
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        response = await http.post("/records/import", json={"records": records})
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]["message"]
    assert await _counts(stack) == before


async def test_other_scope_supersede_and_permissions(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        mine = (
            await http.post(
                "/records",
                headers=ALICE,
                json={"type": "note", "content": "alice's fact", "source_ref": "alice-fact"},
            )
        ).json()
        before = await _counts(stack)
        denied = await http.post(
            "/records", headers=BOB, json={"type": "note", "content": "x", "scope": SCOPE}
        )
        assert denied.status_code == 403
        other = await http.post(
            "/records",
            headers=BOB,
            json={
                "type": "note",
                "content": "bob's correction",
                "source_ref": "bob-1",
                "supersedes": mine["id"],
            },
        )
        assert other.status_code == 404 and "no record or memory" in other.json()["error"]["message"]
        assert await _counts(stack) == before
        hidden = await http.get(f"/records/{mine['id']}", headers=BOB)
        assert hidden.status_code == 404


async def test_rest_rebuild_check_and_ingest_rpc(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=120) as http:
        await http.post("/records", json={"type": "note", "content": "rebuild me", "source_ref": "rebuild-1"})
        denied = await http.post("/records/rebuild", json={"check": True})
        assert denied.status_code == 403  # every scope at once needs the "*" grant
        check = await http.post("/records/rebuild", json={"check": True, "scopes": [SCOPE]})
        assert check.status_code == 200, check.text
        assert check.json()["differences"] == [] and check.json()["applied"] is False
        assert check.json()["replayed"] > 0
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        caller = common_pb2.Caller(principal="alice", grants=["project:*"])
        files = [
            curation_pb2.IngestFile(path="guide.md", content=b"# Guide\n\nRun `make test` before pushing.\n"),
            curation_pb2.IngestFile(path="img.md", content=b"\x00\x01binary"),
        ]
        request = curation_pb2.IngestRequest(caller=caller, scope=SCOPE, repo="guide", files=files)
        first = await stub.Ingest(request, timeout=60)
        assert (first.added, first.chunks_written, list(first.skipped)) == (
            1,
            1,
            ["img.md: binary file (not UTF-8 text)"],
        )
        again = await stub.Ingest(request, timeout=60)
        assert (again.unchanged, again.chunks_written) == (1, 0)
        gone = await stub.Ingest(
            curation_pb2.IngestRequest(caller=caller, scope=SCOPE, repo="guide"), timeout=60
        )
        assert gone.retired == 1
