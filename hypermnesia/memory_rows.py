"""The memory row, in one place: its columns, what "live" means, the walk along a supersede chain,
and the one mapping between a `memories` row and the `Memory` message (both services use them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.protobuf import struct_pb2

from hypermnesia.times import optional_timestamp
from hypermnesia.v1 import common_pb2

__all__ = [
    "COLUMNS",
    "MAX_CHAIN",
    "MEMORY_COLUMNS",
    "READ_COLUMNS",
    "chain_ids_sql",
    "chain_sql",
    "fresh_sql",
    "is_live",
    "live_sql",
    "memory_columns",
    "memory_from_row",
    "predecessors_sql",
    "struct_from",
]

# Every curated column -> the type its JSON form takes (services/curation/memory_fields.py), in
# INSERT order: what copies a memory whole (raw-log payloads, export/import, rebuild). The
# embedding and the generated tsvector are never part of it: vectors belong to a model, not to
# the memory.
COLUMNS: dict[str, str] = {
    "id": "uuid",
    "scope": "text",
    "repo": "text",
    "owner_id": "text",
    "type": "text",
    "kind": "text",
    "description": "text",
    "content": "text",
    "tags": "list",
    "metadata": "json",
    "importance": "float",
    "decay_class": "text",
    "created_at": "time",
    "updated_at": "time",
    "last_accessed_at": "time",
    "archived_at": "time",
    "expires_at": "time",
    "access_count": "int",
    "valid_from": "time",
    "valid_to": "time",
    "supersedes": "uuid",
    "superseded_by": "uuid",
    "source_ref": "text",
    "thread_id": "text",
    "ordinal": "int",
    "path": "text",
    "heading_path": "list",
    "state_key": "text",
}

# The columns every read selects: the fields of the `Memory` message (memory_from_row). The
# staleness columns are derived from the evidence graph (migration 0021), not curated: COLUMNS
# leaves them out, a read shows them.
READ_COLUMNS: tuple[str, ...] = (
    "id", "owner_id", "scope", "type", "kind", "content", "description", "tags", "metadata", "importance",
    "created_at", "updated_at", "last_accessed_at", "archived_at", "expires_at", "decay_class", "access_count",
    "supersedes", "superseded_by", "source_ref", "repo", "thread_id", "stale_at", "stale_because",
)  # fmt: skip


def memory_columns(alias: str = "") -> str:
    """READ_COLUMNS as a select list, each qualified by `alias` when one is given."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + c for c in READ_COLUMNS)


MEMORY_COLUMNS = memory_columns()


def live_sql(alias: str = "") -> str:
    """The condition a live memory meets: not archived, not superseded, not expired.

    One meaning for every read and write that asks (search, get, context, stats, thread
    neighbours, the active-task signal, dedupe, forgetting): an expired working memory is gone
    as soon as its TTL passes, not when a sweep gets round to it. Were it still live for dedupe, a
    new save would merge into the expired row and vanish with it (the row stays expired); counted
    live in stats, it would be a memory that no search can find; as a thread neighbour, a turn the
    caller cannot read. `now()` is not immutable, so the partial indexes on liveness
    (memories_scope_idx, memories_open_tasks_idx) hold the first two conditions only; a query
    with the full condition still uses them, since it implies theirs."""
    a = f"{alias}." if alias else ""
    return (
        f"{a}archived_at IS NULL AND {a}superseded_by IS NULL"
        f" AND ({a}expires_at IS NULL OR {a}expires_at > now())"
    )


def fresh_sql(alias: str = "") -> str:
    """The condition a memory that is not stale meets. Not part of live_sql: a stale conclusion is
    still read by id, in lineage and by the curation steps that revise it; only the default
    search, list and context leave it out (like an archived one), `include_stale` brings it back."""
    a = f"{alias}." if alias else ""
    return f"{a}stale_at IS NULL"


def is_live(row: Mapping[str, Any], now: datetime) -> bool:
    """live_sql for a row already read (with archived_at, superseded_by and expires_at)."""
    expires = row["expires_at"]
    return row["archived_at"] is None and row["superseded_by"] is None and (expires is None or expires > now)


# A chain is longer than this only through a bug (each link is a correction someone made), and
# the walk stops there instead of running away; CYCLE guards against a loop written by hand.
MAX_CHAIN = 10_000


def _walk(name: str, link: str) -> str:
    """A recursive CTE `name(id, step)` from memory $1 along `link` (supersedes: back, steps
    0, -1, ...; superseded_by: forward, 0, 1, ...).

    A purged or deleted memory leaves its row gone but its id in its neighbours' links, so the
    walk steps over it: from a gone id, the next one is the memory whose opposite link names it
    (the walk back finds the predecessor by its superseded_by, the walk forward the successor by
    its supersedes; both indexed). Gone ids stay in the chain, for the versions the raw log
    still has of them."""
    back = link == "supersedes"
    sign, opposite = ("-", "superseded_by") if back else ("+", "supersedes")
    return (
        f"{name}(id, step) AS ("
        f" SELECT id, 0 FROM memories WHERE id = $1"
        f" UNION ALL SELECT coalesce(m.{link}, n.id), w.step {sign} 1 FROM {name} w"
        f" LEFT JOIN memories m ON m.id = w.id"
        f" LEFT JOIN memories n ON m.id IS NULL AND n.{opposite} = w.id"
        f" WHERE coalesce(m.{link}, n.id) IS NOT NULL AND abs(w.step) < {MAX_CHAIN}"
        f") CYCLE id SET {name}_cycle USING {name}_path"
    )


def _chain() -> str:
    return (
        f"WITH RECURSIVE {_walk('back', 'supersedes')}, {_walk('forward', 'superseded_by')},"
        " chain AS (SELECT id, step FROM back WHERE NOT back_cycle"
        " UNION SELECT id, step FROM forward WHERE NOT forward_cycle)"
    )


def chain_sql(columns: str) -> str:
    """Every memory on the supersede chain through memory $1, oldest first; `columns` over alias m."""
    return f"{_chain()} SELECT {columns} FROM chain c JOIN memories m ON m.id = c.id ORDER BY c.step"


def chain_ids_sql() -> str:
    """Every id on the supersede chain through memory $1, oldest first, gone memories included."""
    return f"{_chain()} SELECT c.id FROM chain c ORDER BY c.step, c.id"


def predecessors_sql() -> str:
    """Whether memory $2 is memory $1 or one of its predecessors (the same walk, back only)."""
    return f"WITH RECURSIVE {_walk('back', 'supersedes')} SELECT coalesce(bool_or(id = $2), false) FROM back"


def struct_from(value: Mapping[str, Any] | str | None) -> struct_pb2.Struct:
    data = json.loads(value) if isinstance(value, str) else (value or {})
    message = struct_pb2.Struct()
    message.update(data)
    return message


def memory_from_row(row: Mapping[str, Any]) -> common_pb2.Memory:
    return common_pb2.Memory(
        id=str(row["id"]),
        owner_id=row["owner_id"],
        scope=row["scope"],
        type=row["type"],
        kind=row["kind"],
        content=row["content"],
        description=row["description"],
        tags=list(row["tags"]),
        metadata=struct_from(row["metadata"]),
        importance=float(row["importance"]),
        created_at=optional_timestamp(row["created_at"]),
        updated_at=optional_timestamp(row["updated_at"]),
        last_accessed_at=optional_timestamp(row["last_accessed_at"]),
        archived_at=optional_timestamp(row["archived_at"]),
        expires_at=optional_timestamp(row["expires_at"]),
        decay_class=row["decay_class"],
        access_count=int(row["access_count"]),
        supersedes=str(row["supersedes"] or ""),
        superseded_by=str(row["superseded_by"] or ""),
        source_ref=row["source_ref"] or "",
        repo=row["repo"] or "",
        thread_id=row["thread_id"] or "",
        # A row read without the staleness columns (curation's curated-column reads) is not flagged.
        stale=row.get("stale_at") is not None,
        stale_because=row.get("stale_because") or "",
    )
