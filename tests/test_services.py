"""Each gRPC server answers the standard health and reflection services; the model is pinned."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from hypermnesia.migrator import migrate
from hypermnesia.pin import ModelMismatch, ensure_embedding_pin, read_pin
from hypermnesia.pool import advisory_lock, connect_pool
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc
from tests.conftest import Stack, create_database


@pytest.mark.parametrize(
    ("which", "service"),
    [
        ("embedder_address", "hypermnesia.v1.Embedder"),
        ("retrieval_address", "hypermnesia.v1.Retrieval"),
        ("curation_address", "hypermnesia.v1.Curation"),
    ],
)
async def test_health_and_reflection(stack: Stack, which: str, service: str) -> None:
    async with grpc.aio.insecure_channel(getattr(stack, which)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", service):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = reflection.ServerReflectionInfo()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        reply = await call.read()
        await call.done_writing()
        names = {s.name for s in reply.list_services_response.service}
        assert service in names and "grpc.health.v1.Health" in names


async def test_embedder_info_and_vectors(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.embedder_address) as channel:
        stub = embedder_pb2_grpc.EmbedderStub(channel)
        info = await stub.Info(embedder_pb2.InfoRequest(), timeout=5)
        assert (info.model_id, info.dimension, info.pooling) == (
            "sentence-transformers/all-MiniLM-L6-v2",
            384,
            "mean",
        )
        assert info.max_tokens == 256
        empty = await stub.Embed(embedder_pb2.EmbedRequest(texts=[]), timeout=5)
        assert empty.vectors == b"" and empty.dimension == 384
        counts = await stub.CountTokens(embedder_pb2.CountTokensRequest(texts=["hello world", ""]), timeout=5)
        assert list(counts.counts) == [2, 0]
    client = EmbedderClient(stack.embedder_address)
    try:
        await client.wait_for_info(5)
        vectors = await client.embed(["a cat on a mat", "", "x " * 50_000], DOCUMENT, 30)
        assert vectors.shape == (3, 384)
        norms = (vectors**2).sum(axis=1)
        assert abs(norms[0] - 1) < 1e-4 and abs(norms[2] - 1) < 1e-4
    finally:
        await client.close()


async def test_store_refuses_a_different_model(pg_server_url: str) -> None:
    pool = await connect_pool(await create_database(pg_server_url))
    try:
        await migrate(pool)
        await ensure_embedding_pin(pool, "model-a", 384)
        await ensure_embedding_pin(pool, "model-a", 384)  # same model: fine, idempotent
        with pytest.raises(ModelMismatch, match="hypermnesia reindex"):
            await ensure_embedding_pin(pool, "model-b", 768)
        assert await read_pin(pool) == ("model-a", 384)
        assert await migrate(pool) == []  # migrations are recorded and not re-applied
    finally:
        await pool.close()


async def test_advisory_locks_never_outlive_their_block(pg_server_url: str) -> None:
    """Pooled connections return without asyncpg's reset query, so advisory_lock must release
    its lock however the block ends: normally, by an error, or by a cancel (the connection closes)."""
    pool = await connect_pool(await create_database(pg_server_url), max_size=2)
    key = 0x686D5F74657374

    async def held_elsewhere() -> bool:
        async with pool.acquire() as other, advisory_lock(other, key, wait=False) as got:
            return not got

    try:
        async with pool.acquire() as conn:
            async with advisory_lock(conn, key) as got:
                assert got and await held_elsewhere()
            assert not await held_elsewhere()
            with pytest.raises(ValueError, match="inside the block"):
                async with advisory_lock(conn, key):
                    raise ValueError("inside the block")
            assert not await held_elsewhere()

        async def hold_forever() -> None:
            async with pool.acquire() as conn, advisory_lock(conn, key):
                await conn.execute("SELECT pg_sleep(30)")

        task = asyncio.create_task(hold_forever())
        for _ in range(100):
            if await held_elsewhere():
                break
            await asyncio.sleep(0.05)
        assert await held_elsewhere()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):  # the cancelled connection closes; Postgres then drops its lock
            if not await held_elsewhere():
                break
            await asyncio.sleep(0.05)
        assert not await held_elsewhere()
    finally:
        await pool.close()
