"""The field table of a memory (hypermnesia.memory_rows.FIELDS) against the three shapes it drives:
the `memories` table's columns, the `Memory` message's fields and the JSON a save and a get answer.
Adding a field means a row in the table, a migration and a field in common.proto; these tests say
which of them is missing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gateway.shaping import memory_json
from hypermnesia.memory_rows import (
    ANSWER_FIELDS,
    COLUMNS,
    FIELDS,
    OTHER_COLUMNS,
    READ_COLUMNS,
    memory_from_row,
)
from hypermnesia.times import parse_iso
from hypermnesia.v1 import common_pb2
from services.curation import memory_fields
from tests.conftest import Stack

ALICE = {"Authorization": "Bearer alice-token"}
SCOPE = "project:fields"

# The Postgres type each codec's column has (information_schema.columns.data_type).
SQL_TYPES = {
    "uuid": {"uuid"},
    "text": {"text"},
    "list": {"ARRAY"},
    "json": {"jsonb"},
    "float": {"double precision"},
    "int": {"integer", "bigint"},
    "time": {"timestamp with time zone"},
    "flag": {"timestamp with time zone"},
}


def test_each_column_and_key_is_named_once_and_every_codec_is_known() -> None:
    for attribute in ("column", "proto", "json"):
        named = [getattr(f, attribute) for f in FIELDS if getattr(f, attribute) is not None]
        assert len(named) == len(set(named)), f"a {attribute} is named twice in FIELDS: {named}"
    assert {f.codec for f in FIELDS} <= set(SQL_TYPES)
    assert {f.shown for f in FIELDS} <= {"always", "set", "if_stale"}
    assert not set(OTHER_COLUMNS) & {f.column for f in FIELDS}
    # What the services derive from the table.
    assert memory_fields.COLUMNS == COLUMNS == {f.column: f.codec for f in FIELDS if f.curated}
    assert READ_COLUMNS == tuple(f.column for f in FIELDS if f.proto is not None)


def test_every_field_of_the_memory_message_is_in_the_table() -> None:
    message = {f.name for f in common_pb2.Memory.DESCRIPTOR.fields}
    table = {f.proto for f in FIELDS if f.proto is not None}
    assert not set(ANSWER_FIELDS) & table
    assert set(ANSWER_FIELDS) <= message, "ANSWER_FIELDS names a field common.proto's Memory lacks"
    assert message - table - set(ANSWER_FIELDS) == set(), (
        "Memory fields FIELDS lacks: give each a MemoryField with its proto name"
    )
    assert table - message == set(), "FIELDS names proto fields common.proto's Memory lacks: add them there"


async def test_every_column_of_memories_is_in_the_table_with_its_type(stack: Stack) -> None:
    rows = await stack.pool.fetch(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = 'memories'"
    )
    columns = {r["column_name"]: r["data_type"] for r in rows}
    fields = {f.column: f for f in FIELDS}
    missing = set(columns) - set(fields) - set(OTHER_COLUMNS)
    assert missing == set(), (
        f"columns of memories the field table lacks: {sorted(missing)}; add a MemoryField "
        "(or an OTHER_COLUMNS entry saying why it is not a memory's field)"
    )
    gone = (set(fields) | set(OTHER_COLUMNS)) - set(columns)
    assert gone == set(), f"the field table names columns memories lacks: {sorted(gone)}; add a migration"
    wrong = {
        name: (columns[name], f.codec)
        for name, f in fields.items()
        if columns[name] not in SQL_TYPES[f.codec]
    }
    assert wrong == {}, f"columns whose type is not their codec's: {wrong}"


def _full_row() -> dict[str, Any]:
    """A row with every column of the table holding something."""
    at = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    values = {
        "uuid": uuid.uuid4,
        "text": lambda: "t-" + uuid.uuid4().hex[:6],
        "list": lambda: ["a", "b"],
        "json": lambda: {"k": "v"},
        "float": lambda: 2.5,
        "int": lambda: 3,
        "time": lambda: at,
        "flag": lambda: at,
    }
    return {f.column: values[f.codec]() for f in FIELDS}


def _check(answer: Any, value: Any, codec: str, column: str) -> None:
    """The JSON value `answer` is the column value `value` as its codec converts it."""
    if codec == "time":
        assert parse_iso(answer) == value, column
    elif codec == "uuid":
        assert answer == str(value), column
    elif codec == "flag":
        assert answer is (value is not None), column
    elif codec == "float":
        assert answer == pytest.approx(value), column
    elif codec == "json":
        assert answer == (json.loads(value) if isinstance(value, str) else dict(value)), column
    elif codec == "list":
        assert answer == list(value), column
    else:
        assert answer == value, column


def test_a_full_row_reaches_the_json_through_the_message_field_by_field() -> None:
    row = _full_row()
    out = memory_json(memory_from_row(row))
    assert set(out) == {f.json for f in FIELDS if f.json is not None}
    for f in FIELDS:
        if f.json is not None:
            _check(out[f.json], row[f.column], f.codec, f.column)


def test_a_row_without_the_derived_columns_reads_as_not_stale() -> None:
    row = {k: v for k, v in _full_row().items() if k in COLUMNS}
    out = memory_json(memory_from_row(row))
    assert "stale" not in out and "stale_because" not in out


async def test_a_save_and_a_get_answer_the_table_s_json_keys(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = await http.post(
            "/memories",
            json={
                "content": "The field table drives the memory's JSON",
                "description": "field table",
                "scope": SCOPE,
                "tags": ["fields"],
                "metadata": {"origin": "test"},
                "importance": 2.0,
                "kind": "working",
            },
        )
        assert saved.status_code == 200, saved.text
        memory = saved.json()["memory"]
        got = await http.get(f"/memories/{memory['id']}")
        assert got.status_code == 200, got.text
    row = await stack.pool.fetchrow("SELECT * FROM memories WHERE id = $1", uuid.UUID(memory["id"]))
    assert row is not None
    known = {f.json for f in FIELDS if f.json is not None}
    always = {f.json for f in FIELDS if f.json is not None and f.shown == "always"}
    # A working memory expires and has a decay class; nothing supersedes it, it is not stale.
    shown = always | {"decay_class", "expires_at"}
    for answer in (memory, got.json()):
        assert set(answer) - known == set(), "keys the field table does not name"
        assert set(answer) == shown
        for f in FIELDS:
            if f.json in answer:
                _check(answer[f.json], row[f.column], f.codec, f.column)
