"""The defaults a save fills in (hypermnesia/kinds.py): a save or an imported line that names no
type is a `fact` on every path (REST, MCP, gRPC, dump lines, seed 001's export lines, markdown
files), of importance 1.0, with its kind's decay class; a memory curation derives names its own."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import grpc
import httpx
import pytest

from gateway.memories import SaveMemory, UpdateMemory
from hypermnesia import kinds
from hypermnesia.errors import InvalidArgument
from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc
from services.curation import admin
from services.curation.writer import check_decay_class, new_memory
from tests.conftest import Stack, create_database
from tests.helpers import mcp_session, tool_json
from tests.test_curation_admin import cli
from tooling import moving_in

AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALICE = {"Authorization": "Bearer alice-token"}
CALLER = common_pb2.Caller(principal="alice", grants=["project:*"])
SCOPE = "project:defaults"


def test_the_gateway_save_defaults_to_a_fact_of_full_importance() -> None:
    request = SaveMemory(content="The VPN lives in rack 4")
    assert (request.type, request.importance) == ("fact", 1.0)
    schema = SaveMemory.model_json_schema()["properties"]
    assert schema["type"]["default"] == kinds.DEFAULT_TYPE == "fact"
    assert schema["importance"]["default"] == kinds.DEFAULT_IMPORTANCE


def test_a_memory_curation_makes_names_its_type() -> None:
    with pytest.raises(TypeError, match="type"):
        new_memory(memory_id=uuid.uuid4(), scope="s", owner="o", kind="episodic", content="x", at=AT)  # type: ignore[call-arg]
    row = new_memory(
        memory_id=uuid.uuid4(), scope="s", owner="o", kind="episodic", type="note", content="x", at=AT
    )
    assert (row["type"], row["importance"], row["decay_class"]) == ("note", 1.0, "medium")


@pytest.mark.parametrize("kind", sorted(kinds.DECAY_CLASS_FOR_KIND))
def test_a_dump_line_without_type_importance_or_decay_class_gets_the_save_defaults(kind: str) -> None:
    line = {"id": str(uuid.uuid4()), "scope": "s", "content": "x", "owner_id": "o", "kind": kind}
    fields = admin.parse_line(1, json.dumps({**line, "created_at": AT.isoformat()}))
    expected = ("fact", 1.0, kinds.DECAY_CLASS_FOR_KIND[kind])
    assert (fields["type"], fields["importance"], fields["decay_class"]) == expected
    # What the line names is kept.
    named = admin.parse_line(
        1, json.dumps({**line, "created_at": AT.isoformat(), "type": "note", "decay_class": "none"})
    )
    assert (named["type"], named["decay_class"]) == ("note", "none")


def test_seed_lines_and_markdown_read_in_as_facts_of_full_importance(tmp_path: Path) -> None:
    seeded = moving_in.seed_line({"content": "x"}, owner="o")
    assert (seeded["type"], seeded["importance"]) == ("fact", 1.0)
    notes = tmp_path / "notes.md"
    notes.write_text("# Rules\n\n- Run the tests before pushing\n", encoding="utf-8")
    (line,) = [json.loads(text) for text in moving_in.markdown_dump_lines(notes, "s", "o")]
    assert (line["type"], line["importance"]) == ("fact", 1.0)


def test_decay_classes_are_declared_once_with_their_half_lives() -> None:
    assert kinds.DECAY_CLASSES == ("none", "slow", "medium", "fast")
    assert set(kinds.DECAY_CLASS_FOR_KIND.values()) <= set(kinds.DECAY_CLASSES)
    # The gateway's enum is the same list, in the same order.
    schema = UpdateMemory.model_json_schema()["properties"]["decay_class"]
    assert tuple(schema["enum"]) == kinds.DECAY_CLASSES
    with pytest.raises(InvalidArgument, match="use one of none, slow, medium, fast"):
        check_decay_class("glacial")


async def test_every_save_path_stores_a_fact_when_no_type_is_named(
    stack: Stack, model_cache: Path, tmp_path: Path, pg_server_url: str
) -> None:
    """A save over REST, MCP and gRPC, and a dump line read by `hypermnesia import`, name no type."""
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = await http.post("/memories", json={"content": "The standup is at nine", "scope": SCOPE})
        assert saved.status_code == 200, saved.text
        rest_id = saved.json()["memory"]["id"]
    async with mcp_session(stack.mcp_url, "alice-token") as client:
        result = await client.call_tool("memory_save", {"content": "The retro is on Fridays", "scope": SCOPE})
        mcp_id = tool_json(result)["memory"]["id"]
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        response = await curation_pb2_grpc.CurationStub(channel).Save(
            curation_pb2.SaveRequest(caller=CALLER, content="The demo is on Thursdays", scope=SCOPE),
            timeout=60,
        )
        grpc_id = response.memory.id
    assert response.memory.type == "fact"
    types = await stack.pool.fetch(
        "SELECT id::text, type FROM memories WHERE id = ANY($1::uuid[])", [rest_id, mcp_id, grpc_id]
    )
    assert {r["id"]: r["type"] for r in types} == {rest_id: "fact", mcp_id: "fact", grpc_id: "fact"}

    # `hypermnesia import`: a working memory's line without type or decay class.
    fresh = await create_database(pg_server_url)
    line = {
        "id": str(uuid.uuid4()),
        "scope": SCOPE,
        "content": "The deploy window is open until five",
        "owner_id": "alice",
        "kind": "working",
        "created_at": AT.isoformat(),
    }
    dump = tmp_path / "dump.jsonl"
    dump.write_text(json.dumps(line) + "\n", encoding="utf-8")
    imported = await cli(fresh, model_cache, "import", str(dump))
    assert imported.code == 0, imported.err
    conn = await asyncpg.connect(fresh)
    try:
        row = await conn.fetchrow("SELECT type, decay_class FROM memories WHERE id = $1::uuid", line["id"])
    finally:
        await conn.close()
    assert row is not None and (row["type"], row["decay_class"]) == ("fact", "fast")
