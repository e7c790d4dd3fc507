"""Time conversion, in one place: datetime <-> protobuf Timestamp and the ISO 8601 text the JSON uses.

Every time the project keeps is UTC (Postgres timestamptz, read back aware in UTC). A naive
datetime is taken as UTC on the way in; on the way out a datetime is always aware and in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

__all__ = [
    "field_time",
    "from_timestamp",
    "iso",
    "iso_exact",
    "optional_timestamp",
    "parse_iso",
    "stamp_iso",
    "timestamp",
    "utc",
]


def utc(value: datetime) -> datetime:
    """`value` in UTC; a naive one is taken as UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def timestamp(value: datetime) -> Timestamp:
    """A Timestamp from a datetime (naive ones are taken as UTC)."""
    stamp = Timestamp()
    stamp.FromDatetime(utc(value))
    return stamp


def optional_timestamp(value: datetime | None) -> Timestamp | None:
    return None if value is None else timestamp(value)


def from_timestamp(stamp: Timestamp) -> datetime:
    """The Timestamp as an aware UTC datetime."""
    return stamp.ToDatetime(tzinfo=UTC)


def field_time(message: Any, name: str) -> datetime | None:
    """An optional Timestamp field of a proto message: None when unset."""
    return from_timestamp(getattr(message, name)) if message.HasField(name) else None


def iso(value: datetime | None) -> str | None:
    """ISO 8601 text for JSON shown to a user (2024-05-01T12:00:00+00:00; microseconds when not zero)."""
    return None if value is None else utc(value).isoformat()


def iso_exact(value: datetime | None) -> str | None:
    """ISO 8601 text with microseconds always written: what the raw log hashes and a replay parses
    back, so one instant has exactly one text."""
    return None if value is None else utc(value).isoformat(timespec="microseconds")


def parse_iso(value: str | datetime | None) -> datetime | None:
    """The datetime an ISO 8601 text names (a naive one taken as UTC); a datetime passes through."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def stamp_iso(stamp: Timestamp) -> str:
    """A Timestamp as the gateway's JSON writes it (2024-05-01T12:00:00Z)."""
    return stamp.ToDatetime().isoformat() + "Z"
