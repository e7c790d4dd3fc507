"""The defaults a save fills in (hypermnesia/kinds.py), as each entry point applies them today:
the gateway's save says `fact`, curation's own writes and dump lines say `note`, seed 001's
export lines and markdown files read in say `fact`; every path gives importance 1.0."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.memories import SaveMemory, UpdateMemory
from hypermnesia import kinds
from hypermnesia.errors import InvalidArgument
from services.curation import admin
from services.curation.writer import check_decay_class, new_memory
from tooling import moving_in

AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_the_gateway_save_defaults_to_a_fact_of_full_importance() -> None:
    request = SaveMemory(content="The VPN lives in rack 4")
    assert (request.type, request.importance) == ("fact", 1.0)
    schema = SaveMemory.model_json_schema()["properties"]
    assert schema["type"]["default"] == kinds.AGENT_DEFAULT_TYPE
    assert schema["importance"]["default"] == kinds.DEFAULT_IMPORTANCE


def test_curation_writes_default_to_a_note_of_full_importance() -> None:
    row = new_memory(memory_id=uuid.uuid4(), scope="s", owner="o", kind="episodic", content="x", at=AT)
    assert (row["type"], row["importance"], row["decay_class"]) == ("note", 1.0, "medium")


def test_a_dump_line_without_type_or_importance_is_a_note_of_full_importance() -> None:
    line = {"id": str(uuid.uuid4()), "scope": "s", "content": "x", "owner_id": "o", "kind": "semantic"}
    fields = admin.parse_line(1, json.dumps({**line, "created_at": AT.isoformat()}))
    assert (fields["type"], fields["importance"], fields["decay_class"]) == ("note", 1.0, "slow")


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
