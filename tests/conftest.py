"""Shared fixtures: a real Postgres (embedded, or HM_TEST_DATABASE_URL), a fresh database per
stack, the real embedder on loopback, and the real services + gateway wired over gRPC."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import uvicorn

from gateway.app import create_app
from hypermnesia.db import EmbeddedPostgres
from hypermnesia.settings import CurationSettings, EmbedderSettings, GatewaySettings, RetrievalSettings
from services.curation.server import running as curation_running
from services.embedder.server import running as embedder_running
from services.retrieval.server import running as retrieval_running

TOKENS = {
    "alice-token": {"principal": "alice", "scopes": ["user:alice", "project:*", "shared"]},
    "bob-token": {"principal": "bob", "scopes": ["user:bob", "project:bobs"]},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_database(server_url: str, name: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = os.environ.get("HM_TEST_DATABASE_URL")
    if url:
        return url
    return EmbeddedPostgres(tmp_path_factory.mktemp("pgdata")).url


async def create_database(server_url: str) -> str:
    name = f"hm_test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return with_database(server_url, name)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir for the built ONNX model, shared by every test in the session."""
    return tmp_path_factory.mktemp("hm-data")


@pytest.fixture(scope="session")
async def embedder(model_cache: Path) -> AsyncIterator[str]:
    """The real embedder on a loopback port; yields its address."""
    settings = EmbedderSettings(data_dir=model_cache, embedder_port=0)
    async with embedder_running(settings) as (_server, port, _engine):
        yield f"127.0.0.1:{port}"


@dataclass
class Stack:
    database_url: str
    pool: asyncpg.Pool
    embedder_address: str
    retrieval_address: str
    curation_address: str
    base_url: str
    searcher: Any
    writer: Any

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"


@asynccontextmanager
async def start_stack(
    server_url: str, embedder_address: str, data_dir: Path, **overrides: Any
) -> AsyncIterator[Stack]:
    """Retrieval + curation (real gRPC on loopback) and the gateway (uvicorn on loopback) over a
    fresh database. `overrides` are HM_* settings by field name, applied to every service."""
    database_url = await create_database(server_url)
    common = {"database_url": database_url, "data_dir": data_dir, "embedder_address": embedder_address}

    def pick(cls: type, extra: dict[str, Any]) -> Any:
        fields = cls.model_fields  # type: ignore[attr-defined]
        merged = {**common, **extra, **overrides}
        return cls(**{k: v for k, v in merged.items() if k in fields})

    async with (
        curation_running(pick(CurationSettings, {"curation_port": 0})) as (_c, c_port, writer),
        retrieval_running(pick(RetrievalSettings, {"retrieval_port": 0})) as (_r, r_port, searcher),
    ):
        gateway_settings = pick(
            GatewaySettings,
            {
                "retrieval_address": f"127.0.0.1:{r_port}",
                "curation_address": f"127.0.0.1:{c_port}",
                "auth_tokens": TOKENS,
                "require_auth": True,
            },
        )
        app = create_app(gateway_settings)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        import asyncio

        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        try:
            yield Stack(
                database_url=database_url,
                pool=pool,
                embedder_address=embedder_address,
                retrieval_address=f"127.0.0.1:{r_port}",
                curation_address=f"127.0.0.1:{c_port}",
                base_url=f"http://127.0.0.1:{port}",
                searcher=searcher,
                writer=writer,
            )
        finally:
            await pool.close()
            server.should_exit = True
            await task
            sock.close()


@pytest.fixture(scope="module")
async def stack(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache) as running_stack:
        yield running_stack
