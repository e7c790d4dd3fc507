"""Shared fixtures: a real Postgres (embedded, or HM_TEST_DATABASE_URL), a fresh database per
stack, the real embedder on loopback, and the real services + gateway wired over gRPC."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from hypermnesia.embedded_pg import EmbeddedPostgres
from tooling.local_stack import create_database as _create_database
from tooling.local_stack import embedder_server, local_stack

TOKENS = {
    "alice-token": {"principal": "alice", "scopes": ["user:alice", "project:*", "shared"]},
    "bob-token": {"principal": "bob", "scopes": ["user:bob", "project:bobs"]},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = os.environ.get("HM_TEST_DATABASE_URL")
    if url:
        return url
    return EmbeddedPostgres(tmp_path_factory.mktemp("pgdata")).url


async def create_database(server_url: str) -> str:
    return await _create_database(server_url, prefix="hm_test")


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir for the built ONNX model, shared by every test in the session."""
    return tmp_path_factory.mktemp("hm-data")


@pytest.fixture(scope="session")
async def embedder(model_cache: Path) -> AsyncIterator[str]:
    """The real embedder on a loopback port; yields its address. Its load sessions, once loaded,
    stay (idle 0): released at a random moment, they would move the process-wide session gauge
    under tests that read it (tests/test_embedder_idle_sessions.py)."""
    async with embedder_server(model_cache, embed_load_sessions_idle_s=0) as address:
        yield address


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
    settings = {"auth_tokens": TOKENS, "require_auth": True, **overrides}
    async with local_stack(database_url, embedder_address, data_dir, gateway=True, **settings) as running:
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        try:
            assert running.base_url is not None
            yield Stack(
                database_url=database_url,
                pool=pool,
                embedder_address=embedder_address,
                retrieval_address=running.retrieval_address,
                curation_address=running.curation_address,
                base_url=running.base_url,
                searcher=running.searcher,
                writer=running.writer,
            )
        finally:
            await pool.close()


@pytest.fixture(scope="module")
async def stack(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache) as running_stack:
        yield running_stack
