"""The memory row, in one place: its columns, what "live" means, the walk along a supersede chain,
and the one mapping between a `memories` row and the `Memory` message (both services use them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.protobuf import struct_pb2

from hypermnesia.times import optional_timestamp
from hypermnesia.v1 import common_pb2

__all__ = [
    "COLUMNS",
    "FIELDS",
    "MAX_CHAIN",
    "ANSWER_FIELDS",
    "MEMORY_COLUMNS",
    "OTHER_COLUMNS",
    "READ_COLUMNS",
    "chain_ids_sql",
    "chain_sql",
    "fresh_sql",
    "is_live",
    "live_sql",
    "MemoryField",
    "memory_columns",
    "memory_from_row",
    "predecessors_sql",
    "struct_from",
]


@dataclass(frozen=True)
class MemoryField:
    """One field of a memory: its `memories` column, the `Memory` message's field (None: the
    message lacks it), the key of the gateway's memory JSON (None: left out) and when the JSON
    shows it, and its codec: the column's type, which decides every conversion (row -> message
    in memory_from_row, message -> JSON in gateway/shaping.py, row <-> plain JSON in
    services/curation/memory_fields.py)."""

    column: str
    codec: str  # uuid | text | list | json | float | int | time | flag (a time read as set or not)
    proto: str | None
    json: str | None
    # always | set (only when it holds something) | if_stale (only with the stale flag)
    shown: str = "always"
    # Curated: written by curation, copied whole (raw-log payloads, export/import, rebuild).
    # Not curated: derived from the evidence graph (migration 0021); a read shows it.
    curated: bool = True


# A memory, field by field, in the order its JSON lists them. Adding a field: a row here, a
# migration for its column and a field in common.proto's Memory; tests/test_memory_fields.py
# names whatever one of the three still lacks.
FIELDS: tuple[MemoryField, ...] = (
    MemoryField("id", "uuid", "id", "id"),
    MemoryField("owner_id", "text", "owner_id", "owner_id"),
    MemoryField("scope", "text", "scope", "scope"),
    MemoryField("type", "text", "type", "type"),
    MemoryField("kind", "text", "kind", "kind"),
    MemoryField("content", "text", "content", "content"),
    MemoryField("description", "text", "description", "description"),
    MemoryField("tags", "list", "tags", "tags"),
    MemoryField("metadata", "json", "metadata", "metadata"),
    MemoryField("importance", "float", "importance", "importance"),
    MemoryField("created_at", "time", "created_at", "created_at"),
    MemoryField("updated_at", "time", "updated_at", "updated_at"),
    MemoryField("last_accessed_at", "time", "last_accessed_at", "last_accessed_at"),
    MemoryField("archived_at", "time", "archived_at", "archived_at"),
    MemoryField("decay_class", "text", "decay_class", "decay_class", "set"),
    MemoryField("supersedes", "uuid", "supersedes", "supersedes", "set"),
    MemoryField("superseded_by", "uuid", "superseded_by", "superseded_by", "set"),
    MemoryField("source_ref", "text", "source_ref", "source_ref", "set"),
    MemoryField("repo", "text", "repo", "repo", "set"),
    MemoryField("thread_id", "text", "thread_id", "thread_id", "set"),
    MemoryField("expires_at", "time", "expires_at", "expires_at", "set"),
    # A conclusion whose evidence changed: readable, but never served as if nothing happened.
    MemoryField("stale_at", "flag", "stale", "stale", "set", curated=False),
    MemoryField("stale_because", "text", "stale_because", "stale_because", "if_stale", curated=False),
    MemoryField("access_count", "int", "access_count", None),
    MemoryField("valid_from", "time", None, None),
    MemoryField("valid_to", "time", None, None),
    MemoryField("ordinal", "int", None, None),
    MemoryField("path", "text", None, None),
    MemoryField("heading_path", "list", None, None),
    MemoryField("state_key", "text", None, None),
)

# The fields of the Memory message that are no column: what one answer reports, and why.
ANSWER_FIELDS: dict[str, str] = {
    "redacted": "an update's answer: the secrets that write masked (hypermnesia/secrets.py)",
}

# The columns of `memories` that are not a memory's fields, and why.
OTHER_COLUMNS: dict[str, str] = {
    "embedding": "the model's vector: it belongs to a model, not to the memory",
    "search_tsv": "generated from description and content (the lexical index)",
    "lex_len": "generated (the lexical leg's document length)",
    "observer": "a perspective link, its own raw-log record (services/curation/graph.py)",
    "observed": "a perspective link, its own raw-log record (services/curation/graph.py)",
    "stale_premise": "the premise named in stale_because, for its index (migration 0027)",
}

# Every curated column -> its codec, in INSERT order: what copies a memory whole (raw-log
# payloads, export/import, rebuild).
COLUMNS: dict[str, str] = {f.column: f.codec for f in FIELDS if f.curated}

# The columns every read selects: those the `Memory` message carries (memory_from_row).
READ_COLUMNS: tuple[str, ...] = tuple(f.column for f in FIELDS if f.proto is not None)


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


# Column value -> the Memory message's value, by codec (a NULL becomes the field's empty value).
_TO_PROTO: dict[str, Callable[[Any], Any]] = {
    "uuid": lambda v: "" if v is None else str(v),
    "text": lambda v: v or "",
    "list": lambda v: list(v or ()),
    "json": struct_from,
    "float": float,
    "int": int,
    "time": optional_timestamp,
    "flag": lambda v: v is not None,
}


def memory_from_row(row: Mapping[str, Any]) -> common_pb2.Memory:
    """The Memory message of a row. A row read without the columns that are not curated
    (curation's curated-column reads) reads as not stale."""
    return common_pb2.Memory(
        **{
            f.proto: _TO_PROTO[f.codec](row[f.column] if f.curated else row.get(f.column))
            for f in FIELDS
            if f.proto is not None
        }
    )
