"""Memory lifecycle on the real stack: the append-only raw log, dedupe, update, supersede with
lineage and as-of columns, delete, forget/restore, archiving one memory and the periodic sweep."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import Stack, start_stack

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "life"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}


async def _records(stack: Stack) -> int:
    return int(await stack.pool.fetchval("SELECT count(*) FROM records"))


@pytest.mark.parametrize(
    "statement",
    ["UPDATE records SET author = 'mallory'", "DELETE FROM records", "TRUNCATE records CASCADE"],
)
async def test_raw_log_is_append_only(stack: Stack, statement: str) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        await http.post(
            "/memories", json={"content": "The append-only test needs one record", "description": "x"}
        )
    before = await _records(stack)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
        await stack.pool.execute(statement)
    assert await _records(stack) == before


async def test_dedupe_keeps_different_facts_with_similar_descriptions_apart(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        a = (
            await http.post(
                "/memories",
                json={
                    "content": "The staging database password rotates every 30 days",
                    "description": "database password policy",
                },
            )
        ).json()
        b = (
            await http.post(
                "/memories",
                json={
                    "content": "Production database passwords are stored in Vault under secret/prod/db",
                    "description": "database password policy",
                },
            )
        ).json()
        assert a["created"] and b["created"] and a["memory"]["id"] != b["memory"]["id"]
        same = (
            await http.post(
                "/memories",
                json={
                    "content": "The staging database password rotates every 30 days.",
                    "description": "database password policy",
                },
            )
        ).json()
        assert same["created"] is False and same["memory"]["id"] == a["memory"]["id"]
        assert same["replaced"]["content"] == "The staging database password rotates every 30 days"


async def test_dedupe_without_descriptions_merges_the_same_fact_and_keeps_others(stack: Stack) -> None:
    """With no description on either side the embedded texts are the contents, so the content
    gate reads the similarity the lookup already measured (writer._is_same_fact)."""
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:

        async def save(content: str) -> dict:
            response = await http.post("/memories", json={"content": content, "scope": "project:nodesc"})
            assert response.status_code == 200, response.text
            return response.json()

        first = await save("The nightly backup of the billing database runs at 02:30 UTC")
        again = await save("The nightly backup of the billing database runs at 02:30 UTC.")
        other = await save("Billing invoices are emailed to customers on the first of the month")
        assert first["created"] and not again["created"]
        assert again["memory"]["id"] == first["memory"]["id"]
        assert other["created"] and other["memory"]["id"] != first["memory"]["id"]


async def test_update_changes_only_given_fields_and_reembeds(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        saved = (
            await http.post(
                "/memories",
                json={
                    "content": "Lunch is served at noon in the atrium",
                    "description": "lunch time",
                    "tags": ["office"],
                    "importance": 2,
                },
            )
        ).json()["memory"]
        before = await stack.pool.fetchval(
            "SELECT embedding::text FROM memories WHERE id = $1::uuid", saved["id"]
        )
        patched = await http.patch(f"/memories/{saved['id']}", json={"importance": 4})
        assert patched.status_code == 200, patched.text
        body = patched.json()
        assert body["importance"] == 4 and body["content"] == saved["content"] and body["tags"] == ["office"]
        assert (
            await stack.pool.fetchval("SELECT embedding::text FROM memories WHERE id = $1::uuid", saved["id"])
            == before
        )
        patched = (
            await http.patch(
                f"/memories/{saved['id']}", json={"content": "Lunch moved to 12:30 in the canteen"}
            )
        ).json()
        assert patched["id"] == saved["id"] and patched["content"].startswith("Lunch moved")
        assert patched["description"] == "lunch time" and patched["importance"] == 4
        after = await stack.pool.fetchval(
            "SELECT embedding::text FROM memories WHERE id = $1::uuid", saved["id"]
        )
        assert after != before
        empty = await http.patch(f"/memories/{saved['id']}", json={})
        assert empty.status_code == 400 and "nothing to update" in empty.json()["error"]["message"]
        bad = await http.patch(f"/memories/{saved['id']}", json={"importance": 11})
        assert bad.status_code == 400
        other = await http.patch(f"/memories/{saved['id']}", headers=BOB, json={"importance": 1})
        assert other.status_code == 404


async def test_supersede_lineage_and_as_of(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        v1 = (
            await http.post(
                "/memories",
                json={"content": "Deploys go to the staging cluster", "description": "deploy target"},
            )
        ).json()["memory"]
        v2 = await http.post(
            f"/memories/{v1['id']}/supersede",
            json={
                "content": "Deploys go to production since the 2.0 release",
                "description": "deploy target",
            },
        )
        assert v2.status_code == 200, v2.text
        v2 = v2.json()["memory"]
        assert v2["id"] != v1["id"] and v2["supersedes"] == v1["id"]
        old = await stack.pool.fetchrow(
            "SELECT superseded_by, valid_to, valid_from FROM memories WHERE id = $1::uuid", v1["id"]
        )
        assert str(old["superseded_by"]) == v2["id"] and old["valid_to"] is not None
        # As-of: at a time between the two versions the old one was the valid one.
        as_of = await stack.pool.fetch(
            "SELECT id FROM memories WHERE scope = 'project:life' AND description = 'deploy target'"
            " AND valid_from <= $1 AND (valid_to IS NULL OR valid_to > $1)",
            old["valid_to"] - __import__("datetime").timedelta(microseconds=1),
        )
        assert [str(r["id"]) for r in as_of] == [v1["id"]]
        gone = await http.get(f"/memories/{v1['id']}")
        assert gone.status_code == 404  # superseded rows drop out of default reads
        lineage = (await http.get(f"/records/{v2['id']}/lineage")).json()
        assert [m["id"] for m in lineage["memories"]] == [v1["id"], v2["id"]]

        twice = await http.post(f"/memories/{v1['id']}/supersede", json={"content": "again"})
        assert twice.status_code == 409 and "already superseded" in twice.json()["error"]["message"]
        unknown = await http.post(
            "/memories/00000000-0000-0000-0000-000000000000/supersede", json={"content": "x"}
        )
        assert unknown.status_code == 404
        bobs = (
            await http.post("/memories", headers=BOB, json={"content": "Bob's own fact about printers"})
        ).json()["memory"]
        cross = await http.post(
            f"/memories/{bobs['id']}/supersede",
            json={"content": "alice overrides bob", "scope": "project:life"},
        )
        assert cross.status_code == 400 and "same scope" in cross.json()["error"]["message"]
        records_before = await _records(stack)
        denied = await http.post(
            f"/memories/{bobs['id']}/supersede", headers=BOB, json={"content": "x", "scope": "shared"}
        )
        assert denied.status_code == 403
        assert await _records(stack) == records_before


async def test_delete_leaves_a_tombstone(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE) as http:
        saved = (
            await http.post("/memories", json={"content": "Temporary note about the coffee machine"})
        ).json()["memory"]
        assert (await http.delete(f"/memories/{saved['id']}")).status_code == 200
        assert (await http.get(f"/memories/{saved['id']}")).status_code == 404
        again = await http.delete(f"/memories/{saved['id']}")
        assert again.status_code == 200 and again.json() == {"deleted": False}
        ops = await stack.pool.fetch(
            "SELECT operation FROM records WHERE target_id = $1::uuid ORDER BY seq", saved["id"]
        )
        assert [o["operation"] for o in ops] == ["save", "delete"]


async def test_forget_dry_run_apply_and_restore(stack: Stack) -> None:
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers={**ALICE, "X-Hypermnesia-Project": "forget"}
    ) as http:
        ids = []
        for i, word in enumerate(["tulips", "volcanoes", "saxophones", "glaciers", "origami"]):
            saved = (
                await http.post(
                    "/memories", json={"content": f"Notes on {word}: item {i}", "importance": 0.5}
                )
            ).json()
            ids.append(saved["memory"]["id"])
        keep = (
            await http.post(
                "/memories",
                json={"content": "Pinned: the CEO's name is Ada", "kind": "core", "importance": 0.1},
            )
        ).json()["memory"]["id"]
        important = (
            await http.post("/memories", json={"content": "The root CA expires in 2031", "importance": 8})
        ).json()
        # Make them stale: last access 200 days ago (as if not recalled since).
        await stack.pool.execute(
            "UPDATE memories SET last_accessed_at = now() - interval '200 days' - (importance * interval '1 hour')"
            " - (length(content) * interval '1 minute') WHERE scope = 'project:forget'"
        )
        dry = (await http.post("/memories/forget", json={"limit": 2})).json()
        assert (
            dry["matched"] == 5
            and dry["archived"] == 0
            and dry["truncated"] is True
            and len(dry["memories"]) == 2
        )
        assert dry["applied"] is False
        stalest = await stack.pool.fetch(
            "SELECT id FROM memories WHERE scope = 'project:forget' AND importance <= 1 AND kind <> 'core'"
            " ORDER BY last_accessed_at LIMIT 2"
        )
        assert [m["id"] for m in dry["memories"]] == [str(r["id"]) for r in stalest]
        applied = (await http.post("/memories/forget", json={"apply": True, "limit": 2})).json()
        assert applied["matched"] == 5 and applied["archived"] == 5 and applied["truncated"] is True
        assert all(m["archived_at"] for m in applied["memories"])
        assert (await http.get(f"/memories/{ids[0]}")).status_code == 404
        still = await stack.pool.fetch(
            "SELECT id FROM memories WHERE scope = 'project:forget' AND archived_at IS NULL"
        )
        assert {str(r["id"]) for r in still} == {keep, important["memory"]["id"]}

        restored = await http.post(f"/memories/{ids[0]}/restore")
        assert restored.status_code == 200, restored.text
        assert restored.json()["memory"]["archived_at"] is None
        assert (await http.get(f"/memories/{ids[0]}")).status_code == 200
        again = (await http.post("/memories/forget", json={})).json()
        assert again["matched"] == 0  # restore refreshed the access time
        not_archived = await http.post(f"/memories/{ids[0]}/restore")
        assert not_archived.status_code == 409


async def test_archive_one_memory_then_restore_it(stack: Stack) -> None:
    """POST /memories/{id}/archive archives the memory named, even one the sweep would spare (core,
    important): it leaves reads, the raw log says who archived it, a replay agrees, and restore
    brings it back."""
    here = {**ALICE, "X-Hypermnesia-Project": "archive-one"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=here, timeout=60) as http:
        saved = await http.post(
            "/memories",
            json={"content": "The staging database is rebuilt every Sunday", "kind": "core", "importance": 9},
        )
        assert saved.status_code == 200, saved.text
        memory_id = saved.json()["memory"]["id"]

        # Another principal cannot archive it: the same answer as for no memory at all.
        refused = await http.post(f"/memories/{memory_id}/archive", headers=BOB)
        assert refused.status_code == 404, refused.text
        assert (await http.get(f"/memories/{memory_id}")).status_code == 200

        archived = await http.post(f"/memories/{memory_id}/archive")
        assert archived.status_code == 200, archived.text
        body = archived.json()
        assert body["archived"] is True and body["memory"]["id"] == memory_id
        assert body["memory"]["archived_at"] is not None
        assert (await http.get(f"/memories/{memory_id}")).status_code == 404
        listed = (await http.get("/memories", params={"include_archived": "true"})).json()["memories"]
        assert [m["archived_at"] is not None for m in listed if m["id"] == memory_id] == [True]

        again = await http.post(f"/memories/{memory_id}/archive")
        assert again.status_code == 409 and "archived already" in again.json()["error"]["message"]
        missing = await http.post("/memories/00000000-0000-4000-8000-000000000000/archive")
        assert missing.status_code == 404, missing.text

        ops = await stack.pool.fetch(
            "SELECT operation, author FROM records WHERE target_id = $1::uuid ORDER BY seq", memory_id
        )
        assert [(o["operation"], o["author"]) for o in ops] == [("save", "alice"), ("archive", "alice")]
        replay = await http.post("/records/rebuild", json={"scopes": ["project:archive-one"], "check": True})
        assert replay.status_code == 200, replay.text
        assert replay.json()["differences"] == []

        restored = await http.post(f"/memories/{memory_id}/restore")
        assert restored.status_code == 200, restored.text
        assert restored.json()["memory"]["archived_at"] is None
        assert (await http.get(f"/memories/{memory_id}")).status_code == 200


async def test_periodic_sweep_archives_and_logs(
    pg_server_url: str, embedder: str, model_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="services.curation.lifecycle")
    async with start_stack(
        pg_server_url, embedder, model_cache, forget_sweep_hours=0.0003, forget_after_days=0.0
    ) as small:
        async with httpx.AsyncClient(base_url=small.base_url, headers=ALICE) as http:
            saved = (
                await http.post(
                    "/memories",
                    json={
                        "content": "Sweep me: an unimportant note",
                        "importance": 0.2,
                        "description": "sweepable note",
                    },
                )
            ).json()["memory"]
            kept = (
                await http.post("/memories", json={"content": "Keep me: an important note", "importance": 5})
            ).json()["memory"]
        for _ in range(50):
            if await small.pool.fetchval("SELECT archived_at FROM memories WHERE id = $1::uuid", saved["id"]):
                break
            await asyncio.sleep(0.2)
        assert await small.pool.fetchval("SELECT archived_at FROM memories WHERE id = $1::uuid", saved["id"])
        assert (
            await small.pool.fetchval("SELECT archived_at FROM memories WHERE id = $1::uuid", kept["id"])
            is None
        )
        assert any("sweepable note" in r.getMessage() for r in caplog.records)
        author = await small.pool.fetchval(
            "SELECT author FROM records WHERE target_id = $1::uuid AND operation = 'archive'", saved["id"]
        )
        assert author == "system:sweep"


async def test_mcp_lifecycle_tools(stack: Stack) -> None:
    from tests.helpers import mcp_session, tool_json

    async with mcp_session(stack.mcp_url, "alice-token", "life-mcp") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_update", "memory_delete", "memory_forget", "memory_restore"} <= tools
        saved = tool_json(
            await client.call_tool("memory_save", {"content": "MCP lifecycle fact", "description": "m"})
        )
        updated = tool_json(
            await client.call_tool("memory_update", {"memory_id": saved["memory"]["id"], "tags": ["x"]})
        )
        assert updated["tags"] == ["x"] and updated["id"] == saved["memory"]["id"]
        dry = tool_json(
            await client.call_tool("memory_forget", {"older_than_days": 0, "importance_floor": 10})
        )
        assert dry["matched"] == 1 and dry["applied"] is False
        tool_json(
            await client.call_tool(
                "memory_forget", {"older_than_days": 0, "importance_floor": 10, "apply": True}
            )
        )
        restored = tool_json(await client.call_tool("memory_restore", {"memory_id": saved["memory"]["id"]}))
        assert restored["archived_at"] is None
        deleted = tool_json(await client.call_tool("memory_delete", {"memory_id": saved["memory"]["id"]}))
        assert deleted["deleted"] is True
        missing = await client.call_tool("memory_delete", {"memory_id": "not-a-uuid"})
        assert missing.is_error and "not a memory id" in missing.content[0].text
