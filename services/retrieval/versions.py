"""The versions of the memories on a supersede chain, read from the raw log (what lineage lists).

A memory's versions are the record that created it and every record that changed it in place
(operation `update`: memory_update, a save that dedupe merged into it, a consolidation step), in
log order; other records about it (archive, restore, a supersede's closing, a task decision) are
events, not versions. Each version carries the memory's text as of its record, replayed from the
payloads curation writes (services/curation/payloads.py: a create holds every column, an update
the columns it set). A purge erases a record's text: that version says so, and a value it may have
set stays unknown until a later version sets it again. A memory gone from the store keeps its
versions in the chain, without their text: a purged one's is erased, a deleted one's is kept in
the raw log for audit only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hypermnesia.scopes import permits
from hypermnesia.times import timestamp
from hypermnesia.v1 import retrieval_pb2

__all__ = ["CHANGE_OPERATION", "of_chain"]

# The record operation of a change in place (services/curation/writer.py: update and merge).
CHANGE_OPERATION = "update"
_TEXT_FIELDS = ("content", "description")
# Bookkeeping every update sets: not a change a reader looks for.
_NOT_CHANGES = ("updated_at",)


def of_chain(
    chain_ids: Sequence[uuid.UUID],
    stored: set[uuid.UUID],
    records: Iterable[Mapping[str, Any]],
    grants: Sequence[str],
) -> list[retrieval_pb2.MemoryVersion]:
    """The versions of every memory on the chain (`chain_ids`, oldest first; `stored`: those still
    in the store), from their records in log order; only records of scopes `grants` permit."""
    about: dict[uuid.UUID, list[Mapping[str, Any]]] = {memory_id: [] for memory_id in chain_ids}
    for record in records:
        if not permits(grants, record["scope"]):
            continue
        # A record that created a memory shares its id; every other one targets it.
        memory_id = record["id"] if record["id"] in about else record["target_id"]
        if memory_id in about:
            about[memory_id].append(record)
    out: list[retrieval_pb2.MemoryVersion] = []
    for memory_id in chain_ids:
        out += _versions(memory_id, about[memory_id], memory_id in stored)
    return out


def _versions(
    memory_id: uuid.UUID, records: list[Mapping[str, Any]], stored: bool
) -> list[retrieval_pb2.MemoryVersion]:
    if not records:
        return []
    # The creating record: the one with the memory's id, else (a memory saved through Save) the
    # first that targets it.
    creating = next((r for r in records if r["id"] == memory_id), records[0])
    picked = [creating] + [
        r for r in records if r["seq"] > creating["seq"] and r["operation"] == CHANGE_OPERATION
    ]
    known: dict[str, str | None] = dict.fromkeys(_TEXT_FIELDS)
    out = []
    for record in picked:
        payload = json.loads(record["payload"]) if record["payload"] is not None else None
        at = timestamp(record["created_at"])
        version = retrieval_pb2.MemoryVersion(
            memory_id=str(memory_id),
            record_id=str(record["id"]),
            seq=int(record["seq"]),
            operation=record["operation"],
            at=at,
            author=record["author"],
            text="present" if payload is not None and stored else ("deleted" if payload else "purged"),
        )
        if payload is None:
            known = dict.fromkeys(_TEXT_FIELDS)  # the erased text may have set any of them
        else:
            creates = payload.get("op") == "create"
            values = payload.get("memory" if creates else "set") or {}
            known.update({name: values[name] for name in _TEXT_FIELDS if name in values})
            version.reason = str(payload.get("reason") or "")
            if not creates:
                version.changed.extend(sorted(name for name in values if name not in _NOT_CHANGES))
        if version.text == "present":
            for name, value in known.items():
                if value is not None:
                    setattr(version, name, value)
        out.append(version)
    return out
