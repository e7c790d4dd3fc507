"""One meaning of "live" (hypermnesia.memory_rows.live_sql): an expired working memory is gone for
search, get, stats, thread neighbours and dedupe alike, from the moment its TTL passes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from services.retrieval.filters import Prefilter
from services.retrieval.search import SearchInput
from tests.conftest import Stack

SCOPE = "project:live"
CALLER = common_pb2.Caller(principal="alice", grants=["project:*"])
WORKING = "The staging database password rotates every Friday at noon"


async def _expire(stack: Stack, memory_id: str) -> None:
    """Let the memory's TTL pass (as 48 hours would) without waiting for it."""
    await stack.pool.execute(
        "UPDATE memories SET kind = 'working', expires_at = now() - interval '1 minute' WHERE id = $1::uuid",
        memory_id,
    )


async def _live_count(retrieval: retrieval_pb2_grpc.RetrievalStub) -> int:
    stats = await retrieval.Stats(retrieval_pb2.StatsRequest(caller=CALLER, scopes=[SCOPE]), timeout=60)
    return sum(s.live for s in stats.scopes if s.scope == SCOPE)


async def test_an_expired_working_memory_is_not_live(stack: Stack) -> None:
    async with (
        grpc.aio.insecure_channel(stack.curation_address) as curation_channel,
        grpc.aio.insecure_channel(stack.retrieval_address) as retrieval_channel,
    ):
        curation = curation_pb2_grpc.CurationStub(curation_channel)
        retrieval = retrieval_pb2_grpc.RetrievalStub(retrieval_channel)

        def save() -> curation_pb2.SaveRequest:
            return curation_pb2.SaveRequest(caller=CALLER, content=WORKING, scope=SCOPE, kind="working")

        await curation.Save(
            curation_pb2.SaveRequest(
                caller=CALLER, content="The office wifi is called hm-guest", scope=SCOPE
            ),
            timeout=60,
        )
        first = await curation.Save(save(), timeout=60)
        again = await curation.Save(save(), timeout=60)
        # While live, the same fact saved twice is one memory (dedupe merges into it).
        assert first.created and not again.created and again.memory.id == first.memory.id
        search = retrieval_pb2.SearchRequest(
            caller=CALLER, query="when does the staging password rotate", scopes=[SCOPE], k=5
        )
        assert first.memory.id in [h.memory.id for h in (await retrieval.Search(search, timeout=60)).hits]
        assert await _live_count(retrieval) == 2

        await _expire(stack, first.memory.id)

        assert first.memory.id not in [h.memory.id for h in (await retrieval.Search(search, timeout=60)).hits]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await retrieval.Get(retrieval_pb2.GetRequest(caller=CALLER, id=first.memory.id), timeout=60)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert await _live_count(retrieval) == 1
        # Not a dedupe target: the same fact saved now is a new memory, not merged into the expired one.
        third = await curation.Save(save(), timeout=60)
        assert third.created and third.memory.id != first.memory.id
        assert await _live_count(retrieval) == 2


async def test_an_expired_turn_is_not_a_thread_neighbour(stack: Stack) -> None:
    base = datetime(2025, 3, 1, tzinfo=UTC)
    turns = []
    for i, text in enumerate(
        [
            "Bob: the canary deploy of the ledger service failed its health check",
            "Alice: I will page the on-call engineer",
            "Bob: rolling the ledger canary back to the previous image",
        ]
    ):
        stamp = Timestamp()
        stamp.FromDatetime(base + timedelta(minutes=i))
        turns.append(
            curation_pb2.RecordInput(
                type="conversation",
                scope=SCOPE,
                content=text,
                thread_id="canary",
                source_ref=f"canary-{i}",
                created_at=stamp,
            )
        )
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        reply = await curation_pb2_grpc.CurationStub(channel).ImportRecords(
            curation_pb2.ImportRecordsRequest(caller=CALLER, records=turns), timeout=60
        )
    first, middle, last = (uuid.UUID(i) for i in reply.ids)

    async def neighbours() -> tuple[uuid.UUID | None, uuid.UUID | None]:
        out = await stack.searcher.search(
            SearchInput(
                principal="alice",
                grants=("project:*",),
                query="ledger canary deploy health check",
                k=10,
                filters=Prefilter(scopes=[SCOPE]),
                min_similarity=0.0,
                relative_cutoff=0.0,
            )
        )
        hit = next(c for c in out.hits if c.id == first)
        return hit.prev_id, hit.next_id

    assert await neighbours() == (None, middle)
    await _expire(stack, str(middle))
    assert await neighbours() == (None, last)
