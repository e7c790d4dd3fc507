"""Every version stays readable (issue 27), on the real stack: an update in place (memory_update, a
save merged into a memory) is a version that memory_lineage (MCP) and GET /memories/{id}/lineage
(REST) list with its text, time and author, read from the raw log and matching the records
`hypermnesia why` lists; a purged version shows as purged and a deleted predecessor as deleted,
with the chain still whole; a supersede keeps every field it is not given; an update or supersede
that keeps a description written for the old content says so."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from hypermnesia.kinds import DECAY_CLASS_FOR_KIND
from tests.conftest import TOKENS, Stack, start_stack
from tests.helpers import mcp_session, tool_json
from tests.test_curation_admin import cli

PROJECT = "versions"
SCOPE = f"project:{PROJECT}"
ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": PROJECT}
# A second writer of the same project, so that versions have different authors.
CAROL = {"Authorization": "Bearer carol-token", "X-Hypermnesia-Project": PROJECT}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}

V1 = "The staging cluster is called heron"
V2 = "The staging cluster is called heron-2"
V3 = "The staging cluster is called heron-3"
V4 = "The staging cluster is called heron-3."  # a restatement: dedupe merges it into the memory
V5 = "Staging moved to the egret cluster"


@pytest.fixture(scope="module")
async def stack(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    tokens = {**TOKENS, "carol-token": {"principal": "carol", "scopes": [SCOPE]}}
    async with start_stack(pg_server_url, embedder, model_cache, auth_tokens=tokens) as running:
        yield running


async def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def _lineage(http: httpx.AsyncClient, memory_id: str) -> dict[str, Any]:
    return await _ok(await http.get(f"/memories/{memory_id}/lineage", headers=ALICE))


async def _raw_log(stack: Stack, memory_id: str) -> list[asyncpg.Record]:
    """The memory's records read straight from the table, the independent account of its versions."""
    return await stack.pool.fetch(
        "SELECT id, seq, operation, author, created_at FROM records"
        " WHERE (id = $1::uuid OR target_id = $1::uuid) ORDER BY seq",
        memory_id,
    )


async def _why(stack: Stack, model_cache: Path, memory_id: str) -> dict[str, Any]:
    result = await cli(stack.database_url, model_cache, "why", memory_id, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


async def _purge(stack: Stack, model_cache: Path, some_id: str) -> None:
    result = await cli(stack.database_url, model_cache, "purge", some_id)
    assert result.code == 0, result.err


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_every_update_in_place_is_a_version(stack: Stack, model_cache: Path) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        saved = await _ok(
            await http.post(
                "/memories",
                headers=ALICE,
                json={"content": V1, "description": "staging cluster", "tags": ["ops"]},
            )
        )
        memory_id = saved["memory"]["id"]
        # Content without a description: the description is kept, and the answer says it may be stale.
        first = await _ok(await http.patch(f"/memories/{memory_id}", headers=ALICE, json={"content": V2}))
        assert first["description"] == "staging cluster" and first["description_may_be_stale"] is True
        second = await _ok(
            await http.patch(
                f"/memories/{memory_id}", headers=CAROL, json={"content": V3, "description": "staging name"}
            )
        )
        assert "description_may_be_stale" not in second
        merged = await _ok(
            await http.post("/memories", headers=CAROL, json={"content": V4, "description": "staging name"})
        )
        assert merged["created"] is False and merged["memory"]["id"] == memory_id, merged

        rest = await _lineage(http, memory_id)
        versions = rest["versions"]
        assert [v["version"] for v in versions] == [1, 2, 3, 4]
        assert [v["content"] for v in versions] == [V1, V2, V3, V4]
        assert [v["description"] for v in versions] == [
            "staging cluster",
            "staging cluster",
            "staging name",
            "staging name",
        ]
        assert [(v["operation"], v["reason"]) for v in versions] == [
            ("save", None),
            ("update", None),
            ("update", None),
            ("update", "dedupe"),
        ]
        assert [v["author"] for v in versions] == ["alice", "alice", "carol", "carol"]
        assert versions[0]["changed"] == [] and versions[1]["changed"] == ["content"]
        assert versions[2]["changed"] == ["content", "description"]
        assert {v["memory_id"] for v in versions} == {memory_id}
        assert {v["text"] for v in versions} == {"present"}
        # Each version is one record of the raw log: its id, seq, author and time.
        raw = await _raw_log(stack, memory_id)
        assert [(v["record_id"], v["seq"], v["author"]) for v in versions] == [
            (str(r["id"]), r["seq"], r["author"]) for r in raw
        ]
        assert [_at(v["at"]) for v in versions] == [r["created_at"] for r in raw]
        # The chain itself reads as before: the memory, as it is now.
        assert [(m["id"], m["content"]) for m in rest["lineage"]] == [(memory_id, V4)]

        async with mcp_session(stack.mcp_url, "alice-token", PROJECT) as client:
            over_mcp = tool_json(await client.call_tool("memory_lineage", {"memory_id": memory_id}))
        assert over_mcp == rest

        why = await _why(stack, model_cache, memory_id)
        assert [(r["seq"], r["operation"], r["author"]) for r in why["records"]] == [
            (v["seq"], v["operation"], v["author"]) for v in versions
        ]

        # Purging one version's record erases that text only: its time and author stay, and the
        # versions after it that set the text read as before.
        await _purge(stack, model_cache, versions[1]["record_id"])
        after = (await _lineage(http, memory_id))["versions"]
        assert [v["text"] for v in after] == ["present", "purged", "present", "present"]
        assert [v["content"] for v in after] == [V1, None, V3, V4]
        assert after[1]["description"] is None and after[1]["changed"] == []
        assert [(v["at"], v["author"], v["seq"]) for v in after] == [
            (v["at"], v["author"], v["seq"]) for v in versions
        ]
        why = await _why(stack, model_cache, memory_id)
        assert [r["text"] for r in why["records"]] == ["present", "purged", "present", "present"]
        assert why["all_verify"]

        # A supersede adds the correction's version to the chain...
        corrected = await _ok(
            await http.post(f"/memories/{memory_id}/supersede", headers=ALICE, json={"content": V5})
        )
        new_id = corrected["memory"]["id"]
        assert corrected["memory"]["description"] == "staging name"
        assert corrected["description_may_be_stale"] is True
        chain = (await _lineage(http, new_id))["versions"]
        assert [v["memory_id"] for v in chain] == [memory_id] * 4 + [new_id]
        assert (chain[4]["operation"], chain[4]["content"], chain[4]["version"]) == ("supersede", V5, 5)

        # ...and purging the memory it replaced leaves that memory's versions in the chain, purged.
        await _purge(stack, model_cache, memory_id)
        gone = await _lineage(http, new_id)
        assert [m["id"] for m in gone["lineage"]] == [new_id]
        assert [(v["memory_id"], v["text"]) for v in gone["versions"]] == [(memory_id, "purged")] * 4 + [
            (new_id, "present")
        ]
        assert all(v["content"] is None and v["description"] is None for v in gone["versions"][:4])
        assert [v["author"] for v in gone["versions"]] == ["alice", "alice", "carol", "carol", "alice"]
        assert (await http.get(f"/memories/{memory_id}/lineage", headers=ALICE)).status_code == 404

        # Another principal's lineage of it is not found, its versions with it.
        hidden = await http.get(f"/memories/{new_id}/lineage", headers=BOB)
        assert hidden.status_code == 404 and V5 not in hidden.text


async def test_a_deleted_memory_keeps_its_place_in_the_chain(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        first = (
            await _ok(await http.post("/memories", headers=ALICE, json={"content": "The VPN is wireguard"}))
        )["memory"]
        middle = (
            await _ok(
                await http.post(
                    f"/memories/{first['id']}/supersede",
                    headers=ALICE,
                    json={"content": "The VPN is tailscale"},
                )
            )
        )["memory"]
        last = (
            await _ok(
                await http.post(
                    f"/memories/{middle['id']}/supersede",
                    headers=ALICE,
                    json={"content": "The VPN is headscale"},
                )
            )
        )["memory"]
        deleted = await _ok(await http.delete(f"/memories/{middle['id']}", headers=ALICE))
        assert deleted == {"deleted": True}
        # From either end the chain steps over the deleted memory; its version is there without its text.
        for end in (first, last):
            answer = await _lineage(http, end["id"])
            assert [m["id"] for m in answer["lineage"]] == [first["id"], last["id"]]
            assert [(v["memory_id"], v["text"], v["content"]) for v in answer["versions"]] == [
                (first["id"], "present", "The VPN is wireguard"),
                (middle["id"], "deleted", None),
                (last["id"], "present", "The VPN is headscale"),
            ]
        assert "tailscale" not in json.dumps(await _lineage(http, last["id"]))


async def test_a_supersede_keeps_every_field_it_is_not_given(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        old = (
            await _ok(
                await http.post(
                    "/memories",
                    headers=ALICE,
                    json={
                        "content": "Release trains leave every second Tuesday",
                        "description": "release train",
                        "type": "decision",
                        "tags": ["release", "ops"],
                        "metadata": {"ticket": 7, "owner": "alice"},
                        "importance": 3.0,
                        "kind": "procedural",
                    },
                )
            )
        )["memory"]
        # A decay class that is not the kind's default, so keeping it differs from defaulting it.
        old = await _ok(
            await http.patch(f"/memories/{old['id']}", headers=ALICE, json={"decay_class": "fast"})
        )
        kept_fields = (
            "type",
            "tags",
            "metadata",
            "importance",
            "kind",
            "decay_class",
            "description",
            "scope",
        )

        answer = await _ok(
            await http.post(
                f"/memories/{old['id']}/supersede",
                headers=ALICE,
                json={"content": "Release trains leave every Tuesday"},
            )
        )
        new = answer["memory"]
        assert {f: new[f] for f in kept_fields} == {f: old[f] for f in kept_fields}
        assert new["supersedes"] == old["id"] and answer["description_may_be_stale"] is True

        async with mcp_session(stack.mcp_url, "alice-token", PROJECT) as client:
            # Given values win, and an empty list or description given clears what was there.
            cleared = tool_json(
                await client.call_tool(
                    "memory_supersede",
                    {
                        "memory_id": new["id"],
                        "content": "Release trains leave every Wednesday",
                        "tags": [],
                        "description": "",
                        "importance": 0.5,
                    },
                )
            )
            newest = cleared["memory"]
            assert (newest["tags"], newest["description"], newest["importance"]) == ([], "", 0.5)
            assert {f: newest[f] for f in ("type", "metadata", "kind", "decay_class")} == {
                f: old[f] for f in ("type", "metadata", "kind", "decay_class")
            }
            assert "description_may_be_stale" not in cleared
            # A kind given that differs brings its own decay class.
            rekinded = tool_json(
                await client.call_tool(
                    "memory_supersede",
                    {
                        "memory_id": newest["id"],
                        "content": "The release train left on Wednesday",
                        "kind": "episodic",
                    },
                )
            )["memory"]
            assert (rekinded["kind"], rekinded["decay_class"]) == (
                "episodic",
                DECAY_CLASS_FOR_KIND["episodic"],
            )
            assert rekinded["metadata"] == old["metadata"] and rekinded["type"] == "decision"
            # memory_update over MCP says the same about a description kept for new content.
            updated = tool_json(
                await client.call_tool(
                    "memory_update", {"memory_id": rekinded["id"], "content": "The release train left late"}
                )
            )
            assert "description_may_be_stale" not in updated  # its description is empty
            described = tool_json(
                await client.call_tool(
                    "memory_update", {"memory_id": rekinded["id"], "description": "last train"}
                )
            )
            assert "description_may_be_stale" not in described
            stale = tool_json(
                await client.call_tool(
                    "memory_update",
                    {"memory_id": rekinded["id"], "content": "The release train left on time"},
                )
            )
            assert stale["description"] == "last train" and stale["description_may_be_stale"] is True
