"""Retrieval over a real streaming replica (HM_DATABASE_READ_URL): a hot standby of an embedded
primary made by `pg_basebackup` (tooling/replica.py), the real services and the gateway.

- read-after-write: with the replica's replay paused, a save followed at once by a search from
  the same caller finds what it saved (the search waited, then ran on the primary); another
  caller's search does not wait and is served by the lagging replica;
- a replica in step serves the searches (its own pg_stat_activity shows retrieval's connections);
- a replica stopped under a light load: reads go on from the primary with no error to the client,
  and return to the replica once it is back;
- reads waiting for the replica share one poll of its position;
- the WAL positions as they travel, and the gateway's memory of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client import REGISTRY

from gateway.backends import WritePositions
from hypermnesia.embedded_pg import EmbeddedPostgres
from hypermnesia.pool import connect_pool
from hypermnesia.read_after_write import COMMIT_LSN_KEY, commit_lsn, format_lsn, parse_lsn
from services.retrieval.replica import ReadRouter, open_replica_pool
from tests.conftest import TOKENS
from tooling.local_stack import create_database, local_stack
from tooling.replica import StreamingReplica

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "replica"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
WAIT_MS = 150  # HM_REPLICA_WAIT_MS for these stacks: short, so a test of the fallback is quick
pytestmark = pytest.mark.timeout(60)


def counter(name: str, **labels: str) -> float:
    """A retrieval metric (services/retrieval/metrics.py) of this process's registry."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def on_primary(reason: str) -> float:
    return counter("hm_replica_reads_on_primary_total", reason=reason)


def replica_reads() -> float:
    return counter("hm_replica_reads_total")


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """A primary of this module's own: its replica is paused and stopped here."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("primary"), shared_buffers_mb=128)
    yield server
    server.close()


@pytest.fixture(scope="module")
def replica(
    primary: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StreamingReplica]:
    standby = StreamingReplica(primary, tmp_path_factory.mktemp("replica") / "data")
    standby.start()
    yield standby
    standby.close()


async def replica_has_database(url: str, timeout_s: float = 10.0) -> None:
    """A database just created on the primary reaches the standby by replay."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = await asyncpg.connect(url)
        except asyncpg.InvalidCatalogNameError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        else:
            await conn.close()
            return


@dataclass
class ReplicaStack:
    http_alice: httpx.AsyncClient
    http_bob: httpx.AsyncClient
    database_url: str
    read_url: str


@pytest.fixture(scope="module")
async def stack(
    primary: EmbeddedPostgres, replica: StreamingReplica, embedder: str, model_cache: Path
) -> AsyncIterator[ReplicaStack]:
    database_url = await create_database(primary.url, prefix="hm_replica")
    read_url = replica.url_for(database_url)
    await replica_has_database(read_url)
    async with (
        local_stack(
            database_url,
            embedder,
            model_cache,
            gateway=True,
            auth_tokens=TOKENS,
            require_auth=True,
            database_read_url=read_url,
            replica_wait_ms=WAIT_MS,
        ) as running,
        httpx.AsyncClient(base_url=running.base_url or "", headers=ALICE, timeout=30) as alice,
        httpx.AsyncClient(base_url=running.base_url or "", headers=BOB, timeout=30) as bob,
    ):
        yield ReplicaStack(alice, bob, database_url, read_url)


async def save(http: httpx.AsyncClient, content: str) -> str:
    response = await http.post("/memories", json={"content": content})
    assert response.status_code == 200, response.text
    return str(response.json()["memory"]["id"])


async def search_ids(http: httpx.AsyncClient, query: str) -> list[str]:
    response = await http.post("/memories/search", json={"query": query})
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["results"]]


async def on_replica(read_url: str, memory_id: str) -> bool:
    conn = await asyncpg.connect(read_url)
    try:
        return bool(await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1::uuid", memory_id))
    finally:
        await conn.close()


async def caught_up(replica: StreamingReplica, read_url: str, memory_id: str) -> None:
    deadline = time.monotonic() + 10
    while not await on_replica(read_url, memory_id):
        assert time.monotonic() < deadline, "the replica did not replay a save within 10 s"
        await asyncio.sleep(0.02)


async def test_a_save_is_found_at_once_by_its_writer_through_a_lagging_replica(
    stack: ReplicaStack, replica: StreamingReplica
) -> None:
    await replica.pause_replay()
    try:
        behind = on_primary("behind")
        started = time.perf_counter()
        memory_id = await save(stack.http_alice, "The staging database is rotated every Tuesday at noon")
        found = await search_ids(stack.http_alice, "when is the staging database rotated")
        took = time.perf_counter() - started
        # The replica really lags: the row is not there, yet the writer's search found it.
        assert not await on_replica(stack.read_url, memory_id)
        assert memory_id in found
        assert on_primary("behind") == behind + 1  # it waited HM_REPLICA_WAIT_MS, then the primary
        assert took >= WAIT_MS / 1000

        # Another caller has written nothing: it reads the (lagging) replica without waiting. Replay
        # is paused, so a wait could only have ended on the primary ("behind"); the counters show
        # the replica served it and nothing fell back (a condition, not a time: load stretches both).
        served, behind = replica_reads(), on_primary("behind")
        await search_ids(stack.http_bob, "staging database rotation")
        assert replica_reads() == served + 1
        assert on_primary("behind") == behind
    finally:
        await replica.resume_replay()
    await caught_up(replica, stack.read_url, memory_id)


async def test_a_replica_in_step_serves_the_reads(stack: ReplicaStack, replica: StreamingReplica) -> None:
    memory_id = await save(stack.http_alice, "The office coffee machine is descaled on the first Monday")
    await caught_up(replica, stack.read_url, memory_id)
    served, fallbacks = (
        replica_reads(),
        sum(on_primary(r) for r in ("behind", "replica_down", "replica_error")),
    )
    assert memory_id in await search_ids(stack.http_alice, "when is the coffee machine descaled")
    response = await stack.http_alice.get(f"/memories/{memory_id}")
    assert response.status_code == 200, response.text
    response = await stack.http_alice.get("/memories", params={"limit": 5})
    assert response.status_code == 200, response.text
    assert replica_reads() == served + 3
    assert sum(on_primary(r) for r in ("behind", "replica_down", "replica_error")) == fallbacks
    # The standby's own view: retrieval's connections to this database are there.
    conn = await asyncpg.connect(stack.read_url)
    try:
        sessions = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    assert sessions >= 1


async def test_a_stopped_replica_leaves_reads_on_the_primary_until_it_returns(
    stack: ReplicaStack, replica: StreamingReplica
) -> None:
    memory_id = await save(stack.http_alice, "The VPN certificate expires at the end of March")
    await caught_up(replica, stack.read_url, memory_id)
    failures: list[str] = []
    answered = 0
    running = True

    async def light_load() -> None:
        nonlocal answered
        while running:
            response = await stack.http_alice.post(
                "/memories/search", json={"query": "VPN certificate expiry"}
            )
            hits = [h["id"] for h in response.json()["results"]] if response.is_success else []
            if response.status_code != 200 or memory_id not in hits:
                failures.append(f"{response.status_code}: {response.text[:200]}")
            answered += 1
            await asyncio.sleep(0.05)

    load = asyncio.create_task(light_load())
    try:
        await asyncio.sleep(0.3)
        down = on_primary("replica_down")
        await asyncio.to_thread(replica.stop)
        stopped_at = answered
        deadline = time.monotonic() + 10
        while on_primary("replica_down") < down + 5:
            assert time.monotonic() < deadline, "reads did not move to the primary"
            await asyncio.sleep(0.05)
        assert answered > stopped_at

        await asyncio.to_thread(replica.start)
        served = replica_reads()
        deadline = time.monotonic() + 15
        while replica_reads() < served + 3:  # the probe (each second) puts it back in service
            assert time.monotonic() < deadline, "reads did not return to the restarted replica"
            await asyncio.sleep(0.05)
    finally:
        running = False
        await load
    assert not failures, f"the client saw errors while the replica was away: {failures[:3]}"


def test_wal_positions_read_as_postgres_writes_them() -> None:
    assert parse_lsn("0/16B3748") == 0x16B3748
    assert parse_lsn("1A/0") == 0x1A << 32
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
    assert commit_lsn([("hm-error", "service"), (COMMIT_LSN_KEY, "4242")]) == 4242
    assert commit_lsn(None) == 0


def test_the_gateway_keeps_each_writers_highest_position_within_its_bound() -> None:
    positions = WritePositions(max_writers=2)
    positions.wrote("alice", 10)
    positions.wrote("alice", 7)  # an older answer arriving late does not lower it
    assert positions.min_lsn("alice") == 10
    positions.wrote("bob", 5)
    positions.wrote("carol", 6)  # past the bound the longest idle writer is forgotten
    assert (positions.min_lsn("alice"), positions.min_lsn("bob"), positions.min_lsn("carol")) == (0, 5, 6)


async def test_reads_waiting_for_the_replica_share_one_poll(
    stack: ReplicaStack, replica: StreamingReplica
) -> None:
    """A burst of reads behind the replica polls its replay position once per poll interval in
    all, not once each: 20 reads waiting 100 ms at a 2 ms poll make at most ~50 position reads
    (one each would be ~20 x 40), and each then runs on the primary."""
    primary_pool = await connect_pool(stack.database_url, max_size=4)
    replica_pool = await open_replica_pool(stack.read_url, max_size=4)
    router = ReadRouter(primary_pool, replica_pool, wait_ms=100, poll_ms=2)
    await replica.pause_replay()
    try:
        await router.start()
        ahead = router.replayed + (1 << 40)  # a write the replica has not replayed
        polls = router.polls
        answers = await asyncio.gather(
            *(router.read(ahead, lambda pool: pool.fetchval("SELECT pg_is_in_recovery()")) for _ in range(20))
        )
        assert answers == [False] * 20  # every one ran on the primary after its wait
        assert 1 <= router.polls - polls <= 60, router.polls - polls
    finally:
        await replica.resume_replay()
        await router.close()
        await primary_pool.close()
