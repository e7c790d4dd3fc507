"""hypermnesia/times.py: the one home for datetime <-> Timestamp and the ISO text the JSON uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from google.protobuf.timestamp_pb2 import Timestamp

from hypermnesia import times
from hypermnesia.v1 import common_pb2, viz_pb2

BERLIN_SUMMER = timezone(timedelta(hours=2))
INSTANT = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)


def test_timestamp_takes_naive_as_utc_and_reads_back_aware_utc() -> None:
    naive = times.timestamp(INSTANT.replace(tzinfo=None))
    assert naive == times.timestamp(INSTANT)
    assert naive.seconds == int(INSTANT.timestamp()) and naive.nanos == 250_000_000
    back = times.from_timestamp(naive)
    assert back == INSTANT and back.tzinfo is UTC


def test_timestamp_normalises_other_zones_to_the_same_instant() -> None:
    elsewhere = INSTANT.astimezone(BERLIN_SUMMER)
    assert elsewhere.hour == 14
    assert times.timestamp(elsewhere) == times.timestamp(INSTANT)


def test_optional_timestamp_keeps_none() -> None:
    assert times.optional_timestamp(None) is None
    assert times.optional_timestamp(INSTANT) == times.timestamp(INSTANT)


def test_field_time_reads_an_unset_field_as_none() -> None:
    request = viz_pb2.VizGraphRequest()
    assert times.field_time(request, "since") is None
    request.since.CopyFrom(times.timestamp(INSTANT))
    assert times.field_time(request, "since") == INSTANT
    # A set field holding the epoch is still set: it is not confused with "no time".
    request.until.CopyFrom(Timestamp())
    assert times.field_time(request, "until") == datetime(1970, 1, 1, tzinfo=UTC)


def test_iso_writes_utc_whatever_zone_the_value_has() -> None:
    assert times.iso(None) is None
    assert times.iso(INSTANT) == "2024-05-01T12:00:00.250000+00:00"
    assert times.iso(INSTANT.replace(microsecond=0)) == "2024-05-01T12:00:00+00:00"
    # The bug the helpers it replaces had: an aware non-UTC time kept its own offset, a naive one none.
    assert times.iso(INSTANT.astimezone(BERLIN_SUMMER)) == "2024-05-01T12:00:00.250000+00:00"
    assert times.iso(INSTANT.replace(tzinfo=None)) == "2024-05-01T12:00:00.250000+00:00"


def test_iso_exact_always_writes_microseconds_and_parses_back() -> None:
    whole = INSTANT.replace(microsecond=0)
    assert times.iso_exact(whole) == "2024-05-01T12:00:00.000000+00:00"
    assert times.iso_exact(whole.astimezone(BERLIN_SUMMER)) == "2024-05-01T12:00:00.000000+00:00"
    assert times.iso_exact(None) is None
    text = times.iso_exact(INSTANT)
    assert text is not None and times.parse_iso(text) == INSTANT


def test_parse_iso_takes_naive_text_as_utc() -> None:
    assert times.parse_iso("2024-05-01T12:00:00.250000") == INSTANT
    assert times.parse_iso(None) is None
    assert times.parse_iso(INSTANT) is INSTANT


def test_stamp_iso_is_the_gateway_z_form() -> None:
    assert times.stamp_iso(times.timestamp(INSTANT)) == "2024-05-01T12:00:00.250000Z"
    assert times.stamp_iso(times.timestamp(INSTANT.replace(microsecond=0))) == "2024-05-01T12:00:00Z"
    memory = common_pb2.Memory()
    memory.created_at.CopyFrom(times.timestamp(INSTANT.astimezone(BERLIN_SUMMER)))
    assert times.stamp_iso(memory.created_at) == "2024-05-01T12:00:00.250000Z"
