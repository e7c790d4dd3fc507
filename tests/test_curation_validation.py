"""Curation is the validation authority: it refuses bad input itself, whoever calls it. These tests
call the curation gRPC service directly (no gateway in front) and check that nothing was written."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import struct_pb2

from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc
from hypermnesia.validation import MAX_METADATA_BYTES
from tests.conftest import Stack

SCOPE = "project:limits"
CALLER = common_pb2.Caller(principal="alice", grants=["project:*"])


def _struct(value: dict) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


# Just over the limit once JSON-encoded ({"blob":"..."} adds 11 bytes).
TOO_BIG = _struct({"blob": "x" * MAX_METADATA_BYTES})
JUST_FITS = _struct({"blob": "x" * (MAX_METADATA_BYTES - 11)})


async def _written(stack: Stack) -> tuple[int, int]:
    memories = await stack.pool.fetchval("SELECT count(*) FROM memories WHERE scope = $1", SCOPE)
    records = await stack.pool.fetchval("SELECT count(*) FROM records WHERE scope = $1", SCOPE)
    return int(memories), int(records)


def _assert_metadata_refused(err: pytest.ExceptionInfo[grpc.aio.AioRpcError]) -> None:
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the limit is {MAX_METADATA_BYTES:,}" in (err.value.details() or "")


@pytest.mark.parametrize(
    "call",
    [
        "save",
        "import",
        "append",
    ],
)
async def test_metadata_over_the_limit_is_refused_by_curation(stack: Stack, call: str) -> None:
    before = await _written(stack)
    record = curation_pb2.RecordInput(
        type="note", scope=SCOPE, content="a note with huge metadata", metadata=TOO_BIG
    )
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            if call == "save":
                await stub.Save(
                    curation_pb2.SaveRequest(
                        caller=CALLER, content="a memory with huge metadata", scope=SCOPE, metadata=TOO_BIG
                    ),
                    timeout=60,
                )
            elif call == "import":
                ok = curation_pb2.RecordInput(
                    type="note", scope=SCOPE, content="a fine note", source_ref="fine-1"
                )
                await stub.ImportRecords(
                    curation_pb2.ImportRecordsRequest(caller=CALLER, records=[ok, record]), timeout=60
                )
            else:
                await stub.AppendRecord(
                    curation_pb2.AppendRecordRequest(caller=CALLER, record=record), timeout=60
                )
    _assert_metadata_refused(err)
    if call == "import":
        assert (err.value.details() or "").startswith("records[1]: ")
    assert await _written(stack) == before


async def test_metadata_at_the_limit_is_kept_and_update_over_it_is_refused(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        saved = await stub.Save(
            curation_pb2.SaveRequest(
                caller=CALLER, content="The limits test memory", scope=SCOPE, metadata=JUST_FITS
            ),
            timeout=60,
        )
        assert saved.created and len(saved.memory.metadata["blob"]) == MAX_METADATA_BYTES - 11
        before = await _written(stack)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Update(
                curation_pb2.UpdateRequest(
                    caller=CALLER, id=saved.memory.id, set_metadata=True, metadata=TOO_BIG
                ),
                timeout=60,
            )
        _assert_metadata_refused(err)
        assert await _written(stack) == before
        kept = await stack.pool.fetchval(
            "SELECT metadata->>'blob' FROM memories WHERE id = $1::uuid", saved.memory.id
        )
        assert kept == "x" * (MAX_METADATA_BYTES - 11)


async def test_a_tag_given_twice_is_stored_once_on_every_write(stack: Stack) -> None:
    """Decided in validation (check_tags), so save, update, supersede, a record appended and records
    imported all keep a repeated tag once, in the order first given."""
    twice = ["ops", "ops", "cron", "ops"]
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = curation_pb2_grpc.CurationStub(channel)
        saved = await stub.Save(
            curation_pb2.SaveRequest(caller=CALLER, content="The tags test memory", scope=SCOPE, tags=twice),
            timeout=60,
        )
        assert list(saved.memory.tags) == ["ops", "cron"]
        updated = await stub.Update(
            curation_pb2.UpdateRequest(
                caller=CALLER, id=saved.memory.id, set_tags=True, tags=["b", "a", "b"]
            ),
            timeout=60,
        )
        assert list(updated.tags) == ["b", "a"]
        newer = await stub.Save(
            curation_pb2.SaveRequest(
                caller=CALLER,
                content="The tags test memory, corrected",
                supersedes=saved.memory.id,
                set_tags=True,
                tags=["c", "c"],
            ),
            timeout=60,
        )
        assert list(newer.memory.tags) == ["c"]
        appended = await stub.AppendRecord(
            curation_pb2.AppendRecordRequest(
                caller=CALLER,
                record=curation_pb2.RecordInput(
                    type="note", scope=SCOPE, content="An appended note", tags=twice
                ),
            ),
            timeout=60,
        )
        imported = await stub.ImportRecords(
            curation_pb2.ImportRecordsRequest(
                caller=CALLER,
                records=[
                    curation_pb2.RecordInput(
                        type="note", scope=SCOPE, content="An imported note", source_ref="tags-1", tags=twice
                    )
                ],
            ),
            timeout=60,
        )
    for memory_id in (appended.ids[0], imported.ids[0]):
        tags = await stack.pool.fetchval("SELECT tags FROM memories WHERE id = $1::uuid", memory_id)
        assert list(tags) == ["ops", "cron"], memory_id
