"""Faults on the real stack under a light load: every service a real process on a loopback port
(tooling/bench/load.py process_stack), over an embedded Postgres these tests own, while two REST
clients keep sending searches and saves. Each test kills or restarts one part, checks what the
clients saw meanwhile, brings the part back on the same port and checks the stack recovered by
itself and lost nothing it had acknowledged. The last test runs the stack again with retrieval
reading through a real streaming replica (tooling/replica.py) and stops the replica."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from hypermnesia.embedded_pg import EmbeddedPostgres
from tooling.bench.load import LOOPBACK, TOKEN, HttpClient, Load, ProcessStack, Sample, process_stack
from tooling.local_stack import create_database
from tooling.replica import StreamingReplica

EMBEDDER_UNAVAILABLE = "embedder_unavailable"  # services/retrieval/search.py
# Every wait below is bounded by this; the stack recovers in a few seconds when it recovers.
RECOVERY_S = 45.0


@pytest.fixture(scope="module")
def fault_pg(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedPostgres:
    """A Postgres of this module's own: the restart test stops it, which must not pull the
    database from under any other test."""
    return EmbeddedPostgres(tmp_path_factory.mktemp("faultpg"))


@pytest.fixture(scope="module")
async def fault_stack(
    fault_pg: EmbeddedPostgres, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ProcessStack]:
    database_url = await create_database(fault_pg.url, prefix="hm_faults")
    logs = tmp_path_factory.mktemp("fault-logs")
    async with process_stack(
        database_url, model_cache, logs, rate_writes_per_min=0, rate_searches_per_min=0
    ) as stack:
        http = HttpClient("127.0.0.1", stack.gateway.port, TOKEN)
        for i in range(5):  # something for the keyword index to find while the embedder is away
            status, body = await http.request(
                "POST",
                "/memories",
                {
                    "content": f"The deploy pipeline moved to Postgres 17 (seed {i})",
                    "scope": "bench:project-0",
                },
            )
            assert status == 200, body
        await http.close()
        yield stack


async def wait_for(
    load: Load, what: str, check: Callable[[Sample], bool], since: float, timeout_s: float = RECOVERY_S
) -> Sample:
    """The first sample started after `since` for which `check` holds, waiting for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for sample in list(load.samples):
            if sample.started >= since and check(sample):
                return sample
        await asyncio.sleep(0.1)
    recent = [(s.op, s.status, s.error[:120], s.degraded) for s in load.samples if s.started >= since][-8:]
    raise AssertionError(f"no {what} within {timeout_s:.0f} s; the last requests: {recent}")


async def acknowledged_saves_present(stack: ProcessStack, load: Load) -> int:
    """How many saves answered 200; fails if any of their memories is not in the database."""
    ids = [s.memory_id for s in load.samples if s.op == "save" and s.status == 200]
    conn = await asyncpg.connect(stack.database_url)
    try:
        found = await conn.fetchval("SELECT count(*) FROM memories WHERE id = ANY($1::uuid[])", ids)
    finally:
        await conn.close()
    assert found == len(set(ids)), f"{len(set(ids)) - found} acknowledged saves are missing"
    return len(ids)


def light_load(stack: ProcessStack, seed: int) -> Load:
    return Load(stack.base_url, clients=2, pause_s=0.05, seed=seed, timeout_s=30)


def all_running(stack: ProcessStack) -> None:
    for service in stack.services:
        assert service.proc is not None and service.proc.poll() is None, (
            f"{service.name} exited:\n{service.log_tail()}"
        )


def search_ok(sample: Sample) -> bool:
    return sample.op == "search" and sample.status == 200


def save_ok(sample: Sample) -> bool:
    return sample.op == "save" and sample.status == 200


async def test_embedder_killed_searches_go_on_degraded_and_recover(fault_stack: ProcessStack) -> None:
    stack = fault_stack
    load = light_load(stack, seed=1)
    task = asyncio.create_task(load.run(RECOVERY_S * 3))
    try:
        await wait_for(load, "search", search_ok, 0)
        killed = time.monotonic()
        await stack.embedder.kill()
        await wait_for(
            load, "degraded search", lambda s: search_ok(s) and EMBEDDER_UNAVAILABLE in s.degraded, killed
        )
        stack.embedder.start()  # the same port: retrieval's channel finds it again
        await stack.embedder.wait_ready()
        back = time.monotonic()
        await wait_for(
            load, "full search after the embedder returned", lambda s: search_ok(s) and not s.degraded, back
        )
    finally:
        load.stop()
        await task
    searches = [s for s in load.samples if s.op == "search"]
    failed = [(s.status, s.error) for s in searches if s.status != 200]
    assert not failed, f"searches failed while the embedder was away: {failed[:5]}"
    assert any(EMBEDDER_UNAVAILABLE in s.degraded for s in searches)
    await acknowledged_saves_present(stack, load)
    all_running(stack)


async def test_curation_killed_reads_go_on_writes_fail_fast_nothing_acknowledged_lost(
    fault_stack: ProcessStack,
) -> None:
    stack = fault_stack
    load = light_load(stack, seed=2)
    task = asyncio.create_task(load.run(RECOVERY_S * 3))
    try:
        await wait_for(load, "save", save_ok, 0)
        killed = time.monotonic()
        await stack.curation.kill()
        refused = await wait_for(load, "refused save", lambda s: s.op == "save" and s.status != 200, killed)
        await wait_for(load, "search while curation is away", search_ok, killed + 0.5)
        down_until = time.monotonic()
        stack.curation.start()
        await stack.curation.wait_ready()
        back = time.monotonic()
        await wait_for(load, "save after curation returned", save_ok, back)
    finally:
        load.stop()
        await task
    # Fails fast, with an answer that says what is wrong, not a hang or a bare 500.
    assert refused.status == 503, (refused.status, refused.error)
    assert "curation" in refused.error.lower(), refused.error
    assert refused.ms < 3000, f"a save with curation down took {refused.ms:.0f} ms to fail"
    down = [s for s in load.samples if killed + 0.5 <= s.started <= down_until]
    failed_reads = [(s.status, s.error) for s in down if s.op == "search" and s.status != 200]
    assert not failed_reads, f"searches failed while curation was away: {failed_reads[:5]}"
    assert await acknowledged_saves_present(stack, load) > 0
    all_running(stack)


async def test_postgres_restarted_services_reconnect_nothing_acknowledged_lost(
    fault_stack: ProcessStack, fault_pg: EmbeddedPostgres
) -> None:
    stack = fault_stack
    # The package's server handle: stop and start it as an operator's `pg_ctl stop` / `start`
    # would, with the same socket and data, so the services' URL stays valid.
    server = fault_pg._server
    load = light_load(stack, seed=3)
    task = asyncio.create_task(load.run(RECOVERY_S * 3))
    try:
        await wait_for(load, "save", save_ok, 0)
        await asyncio.to_thread(server.stop)
        await asyncio.sleep(2)  # a short outage under load, not just a blip
        await asyncio.to_thread(_start, server)
        back = time.monotonic()
        await wait_for(load, "save after Postgres returned", save_ok, back)
        await wait_for(load, "search after Postgres returned", search_ok, back)
    finally:
        load.stop()
        await task
    assert await acknowledged_saves_present(stack, load) > 0
    all_running(stack)  # reconnected by themselves: no service restarted
    verified = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "verify"],
        env={**os.environ, "HM_DATABASE_URL": stack.database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _start(server: object) -> None:
    with server._lock:  # type: ignore[attr-defined]
        server.ensure_postgres_running()  # type: ignore[attr-defined]


async def test_gateway_restarted_clients_reconnect(fault_stack: ProcessStack) -> None:
    stack = fault_stack
    load = light_load(stack, seed=4)
    task = asyncio.create_task(load.run(RECOVERY_S * 3))
    try:
        await wait_for(load, "search", search_ok, 0)
        await stack.gateway.stop()
        stack.gateway.start()
        await stack.gateway.wait_ready()
        back = time.monotonic()
        await wait_for(load, "save after the gateway returned", save_ok, back)
        await wait_for(load, "search after the gateway returned", search_ok, back)
        await asyncio.sleep(1)
    finally:
        load.stop()
        await task
    after = [(s.op, s.status, s.error) for s in load.samples if s.started >= back and s.status != 200]
    assert not after, f"requests failed after the gateway was back: {after[:5]}"
    await acknowledged_saves_present(stack, load)
    all_running(stack)


@pytest.fixture(scope="module")
async def replica_stack(
    fault_pg: EmbeddedPostgres, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[ProcessStack, StreamingReplica]]:
    """The stack again, its retrieval reading through a real streaming replica of fault_pg."""
    replica = StreamingReplica(fault_pg, tmp_path_factory.mktemp("fault-replica") / "data")
    replica.start()
    try:
        database_url = await create_database(fault_pg.url, prefix="hm_faults_replica")
        await asyncio.sleep(0.5)  # the new database reaches the standby by replay
        async with process_stack(
            database_url,
            model_cache,
            tmp_path_factory.mktemp("fault-replica-logs"),
            database_read_url=replica.url_for(database_url),
            rate_writes_per_min=0,
            rate_searches_per_min=0,
        ) as stack:
            yield stack, replica
    finally:
        replica.close()


def replica_reads(stack: ProcessStack) -> dict[str, float]:
    """Retrieval's replica counters, scraped from its /metrics (services/retrieval/metrics.py)."""
    port = stack.retrieval.env["HM_RETRIEVAL_METRICS_PORT"]
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    counts = {"replica": 0.0, "replica_down": 0.0}
    for line in text.splitlines():
        if line.startswith("hm_replica_reads_total "):
            counts["replica"] = float(line.split()[-1])
        elif line.startswith('hm_replica_reads_on_primary_total{reason="replica_down"}'):
            counts["replica_down"] = float(line.split()[-1])
    return counts


async def test_replica_stopped_reads_go_on_from_the_primary_and_return(
    replica_stack: tuple[ProcessStack, StreamingReplica],
) -> None:
    stack, replica = replica_stack
    load = light_load(stack, seed=5)
    task = asyncio.create_task(load.run(RECOVERY_S * 3))
    try:
        await wait_for(load, "search", search_ok, 0)
        assert replica_reads(stack)["replica"] > 0, "retrieval is not reading from its replica"
        stopped = time.monotonic()
        await asyncio.to_thread(replica.stop)
        await asyncio.sleep(2)  # a short outage under load
        await wait_for(load, "search while the replica is away", search_ok, stopped + 0.5)
        away = replica_reads(stack)
        assert away["replica_down"] > 0, "no read was sent to the primary while the replica was away"
        await asyncio.to_thread(replica.start)
        deadline = time.monotonic() + RECOVERY_S
        while replica_reads(stack)["replica"] <= away["replica"]:  # the probe puts it back (1 s)
            assert time.monotonic() < deadline, "reads did not return to the restarted replica"
            await asyncio.sleep(0.2)
    finally:
        load.stop()
        await task
    failed = [(s.op, s.status, s.error[:120]) for s in load.samples if s.status != 200]
    assert not failed, f"requests failed around the replica's outage: {failed[:5]}"
    await acknowledged_saves_present(stack, load)
    all_running(stack)
