"""The JSON form of a memory's curated columns (the column list is hypermnesia.memory_rows.COLUMNS).

Used by every place that copies a memory whole: the raw-log payloads (so a rebuild can
replay every field), export/import, and the rebuild's comparison. The embedding and the generated
tsvector are never part of it: vectors belong to a model, not to the memory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from hypermnesia import memory_rows
from hypermnesia.times import iso_exact, parse_iso

# Column -> JSON codec name, in INSERT order (defined with the rest of the row in memory_rows).
COLUMNS = memory_rows.COLUMNS

SELECT_LIST = ", ".join(COLUMNS)

# Side effects of reads (retrieval bumps them outside the raw log), so a replay cannot know them.
ACCESS_COLUMNS = ("last_accessed_at", "access_count")


def to_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A memory (row or dict of column values) as plain JSON values."""
    out: dict[str, Any] = {}
    for name, codec in COLUMNS.items():
        value = row.get(name) if isinstance(row, dict) else row[name]
        if value is None:
            out[name] = None
        elif codec == "uuid":
            out[name] = str(value)
        elif codec == "time":
            out[name] = iso_exact(value)
        elif codec == "json":
            out[name] = json.loads(value) if isinstance(value, str) else dict(value)
        elif codec == "list":
            out[name] = list(value)
        elif codec == "float":
            # importance is a `real`: round so a value read back from Postgres equals the one sent.
            out[name] = round(float(value), 6)
        elif codec == "int":
            out[name] = int(value)
        else:
            out[name] = value
    return out


def from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of to_json: Python values ready for asyncpg. Missing columns become None."""
    out: dict[str, Any] = {}
    for name, codec in COLUMNS.items():
        value = data.get(name)
        if value is None:
            out[name] = None
        elif codec == "uuid":
            out[name] = uuid.UUID(str(value))
        elif codec == "time":
            out[name] = parse_iso(value)
        elif codec == "float":
            out[name] = float(value)
        elif codec == "int":
            out[name] = int(value)
        elif codec == "list":
            out[name] = [str(v) for v in value]
        else:
            out[name] = value
    return out


def db_value(name: str, value: Any) -> Any:
    """One column's value as asyncpg takes it (metadata as JSON text, defaults filled)."""
    if name == "metadata":
        return json.dumps(value or {})
    if name == "tags":
        return list(value or [])
    if name == "access_count":
        return int(value or 0)
    return value


def db_args(fields: Mapping[str, Any]) -> list[Any]:
    """Positional INSERT arguments in COLUMNS order."""
    return [db_value(name, fields.get(name)) for name in COLUMNS]


def from_json_partial(data: Mapping[str, Any]) -> dict[str, Any]:
    """from_json for only the columns present in data (an update's `set`)."""
    full = from_json(data)
    return {name: full[name] for name in data if name in COLUMNS}


def to_json_partial(fields: Mapping[str, Any]) -> dict[str, Any]:
    full = to_json({name: fields.get(name) for name in COLUMNS})
    return {name: full[name] for name in fields if name in COLUMNS}
