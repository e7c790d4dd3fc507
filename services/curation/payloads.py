"""What each raw-log record carries, and how a replay applies it to the curated layer.

The raw log is the truth; `memories` is derived from it. So every write's payload is
complete enough to redo the write with no other input: a create carries every curated column,
an update carries every column it set, and an event names its memory and its time. The live
write path and `apply` below must agree; the rebuild's `--check` is the test that they do.

Payload ops:
  create   {"op", "memory": {all columns}, "closes"?: id | [ids], "evidence"?: [ids]}   the
           memory(ies) it supersedes; the premises a derived memory rests on (evidence edges)
  evidence {"op", "id", "premises": [ids], "at"}   edges added to an existing conclusion
  perspective {"op", "id", "observer", "observed"}   (not part of the compared columns)
  update   {"op", "id", "set": {columns}, "reason"?}
  archive  {"op", "id", "at", "reason"?}     restore {"op", "id", "at"}
  retire   {"op", "id", "at"}                a document chunk whose file was deleted
  delete   {"op", "id", "at"}
  purge    {"op", "id", "at", "records", "reclose"?: {"id", "valid_to"}}   GDPR erasure (texts removed)
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hypermnesia.times import iso_exact, parse_iso
from services.curation import memory_fields
from services.curation.embedding import embedding_text

PAYLOAD_VERSION = 1


def create(
    fields: Mapping[str, Any], closes: uuid.UUID | list[uuid.UUID] | None = None, **extra: Any
) -> dict[str, Any]:
    """`closes`: the memory (or memories: a re-ingested file's old chunks) this one supersedes."""
    data: dict[str, Any] = {"v": PAYLOAD_VERSION, "op": "create", "memory": memory_fields.to_json(fields)}
    if isinstance(closes, list):
        data["closes"] = [str(c) for c in closes]
    elif closes is not None:
        data["closes"] = str(closes)
    data.update(extra)
    return data


def update(memory_id: uuid.UUID, changes: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    data = {
        "v": PAYLOAD_VERSION,
        "op": "update",
        "id": str(memory_id),
        "set": memory_fields.to_json_partial(changes),
    }
    data.update(extra)
    return data


def event(op: str, memory_id: uuid.UUID, at: datetime, **extra: Any) -> dict[str, Any]:
    data = {"v": PAYLOAD_VERSION, "op": op, "id": str(memory_id), "at": iso_exact(at)}
    data.update(extra)
    return data


def evidence(derived: uuid.UUID, premises: list[uuid.UUID], at: datetime) -> dict[str, Any]:
    return {
        "v": PAYLOAD_VERSION,
        "op": "evidence",
        "id": str(derived),
        "premises": [str(p) for p in premises],
        "at": iso_exact(at),
    }


def edges(payload: Mapping[str, Any]) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The evidence edges (derived, premise) a record adds: rebuild restores them with the memories."""
    op = payload.get("op")
    if op == "create" and payload.get("evidence"):
        derived = uuid.UUID(payload["memory"]["id"])
        return [(derived, uuid.UUID(p)) for p in payload["evidence"]]
    if op == "evidence":
        derived = uuid.UUID(payload["id"])
        return [(derived, uuid.UUID(p)) for p in payload.get("premises", [])]
    return []


def apply(state: dict[uuid.UUID, dict[str, Any]], payload: Mapping[str, Any]) -> None:
    """Redo one record on `state` (memory id -> curated columns), exactly as the live write did."""
    op = payload.get("op")
    if op == "create":
        memory = memory_fields.from_json(payload["memory"])
        state[memory["id"]] = memory
        closes = payload.get("closes")
        for closed in [closes] if isinstance(closes, str) else closes or []:
            if (old := state.get(uuid.UUID(closed))) is not None:
                old["superseded_by"] = memory["id"]
                old["valid_to"] = memory["valid_from"]
        return
    memory_id = uuid.UUID(payload["id"]) if "id" in payload else None
    current = state.get(memory_id) if memory_id is not None else None
    if op in ("delete", "purge"):
        state.pop(memory_id, None)  # type: ignore[arg-type]
        # A purged correction's create record has lost its text, so the close it made is redone here.
        reclose = payload.get("reclose")
        if reclose and (old := state.get(uuid.UUID(reclose["id"]))) is not None:
            old["superseded_by"] = memory_id
            old["valid_to"] = parse_iso(reclose["valid_to"])
    elif current is None or op in ("evidence", "perspective"):
        return  # a later purge removed it; or graph data, replayed by `edges`, not a column
    elif op == "update":
        current.update(memory_fields.from_json_partial(payload["set"]))
    elif op == "archive":
        current["archived_at"] = parse_iso(payload["at"])
    elif op == "restore":
        current["archived_at"] = None
        current["last_accessed_at"] = parse_iso(payload["at"])
    elif op == "retire":
        current["archived_at"] = parse_iso(payload["at"])
        current["valid_to"] = parse_iso(payload["at"])


def embedded_texts(payload_list: list[dict[str, Any]]) -> list[str]:
    """The embedding texts that creates and updates in these payloads produced."""
    texts = []
    current: dict[str, str] = {}
    for data in payload_list:
        fields = data.get("memory") or data.get("set") or {}
        current.update({k: fields[k] for k in ("description", "content") if fields.get(k) is not None})
        if "description" in current or "content" in current:
            texts.append(embedding_text(current.get("description", ""), current.get("content", "")))
    return texts
