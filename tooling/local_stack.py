"""An ephemeral stack inside one process — real gRPC servers on loopback ports, optionally the
gateway on a loopback HTTP port — over a fresh database. Used by `hypermnesia eval`, the
benchmarks and the tests, so they all exercise the real service path the same way."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from hypermnesia.settings import CurationSettings, EmbedderSettings, GatewaySettings, RetrievalSettings

if TYPE_CHECKING:
    from gateway.operations import Operation


# Settings for a stack whose consolidation runs only when asked (a bench or an eval calls it).
CONSOLIDATION_ON_DEMAND: dict[str, Any] = {
    "consolidation_daily_hours": 0,
    "consolidation_weekly_hours": 0,
    "consolidation_monthly_hours": 0,
}


@dataclass
class LocalStack:
    database_url: str
    embedder_address: str
    retrieval_address: str
    curation_address: str
    base_url: str | None
    searcher: Any
    writer: Any


def with_database(server_url: str, name: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def create_database(server_url: str, prefix: str = "hm_tmp") -> str:
    """A new, empty database on the server of server_url; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return with_database(server_url, name)


async def drop_database(database_url: str) -> None:
    name = urlsplit(database_url).path.lstrip("/")
    conn = await asyncpg.connect(with_database(database_url, "postgres"))
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


@asynccontextmanager
async def scratch_database(database_url: str | None, work: Path, prefix: str) -> AsyncIterator[str]:
    """A new database on database_url's server (an embedded one under `work` when None), dropped
    on the way out; returns its URL."""
    from hypermnesia.embedded_pg import max_shared_buffers_mb, resolve_database_url

    # The store is built after the server starts, so its size cannot pick the cache: the most.
    server_url, embedded = resolve_database_url(database_url, work, max_shared_buffers_mb())
    db_url = await create_database(server_url, prefix=prefix)
    try:
        yield db_url
    finally:
        await drop_database(db_url)
        if embedded is not None:  # before the directory under it goes
            embedded.close()


def _pick(cls: type, values: dict[str, Any]) -> Any:
    fields = cls.model_fields  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in values.items() if k in fields})


@asynccontextmanager
async def embedder_server(data_dir: Path, **overrides: Any) -> AsyncIterator[str]:
    from services.embedder.server import running

    settings = _pick(EmbedderSettings, {"data_dir": data_dir, "embedder_port": 0, **overrides})
    async with running(settings) as (_server, port, _engine):
        yield f"127.0.0.1:{port}"


@asynccontextmanager
async def embedder_process(data_dir: Path, **overrides: Any) -> AsyncIterator[str]:
    """The embedder as its own process (as in production), so a busy event loop elsewhere in this
    process cannot delay its batches; yields its address."""
    from tooling.process import start_embedder

    log_path = data_dir / "embedder.log"
    child = start_embedder(data_dir, log_path, **overrides)
    try:
        await asyncio.to_thread(child.wait_ready)
        yield child.address
    finally:
        await asyncio.to_thread(child.stop)


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


@asynccontextmanager
async def gateway_process(
    retrieval_address: str, curation_address: str, log_path: Path, **overrides: Any
) -> AsyncIterator[str]:
    """`hypermnesia serve gateway` as its own process, as deployed (`hypermnesia up`), so its HTTP
    work does not share an event loop with the services; yields its base URL."""
    from tooling.process import free_port

    port = free_port()
    env = {
        **os.environ,
        "HM_HOST": "127.0.0.1",
        "HM_GATEWAY_PORT": str(port),
        "HM_RETRIEVAL_ADDRESS": retrieval_address,
        "HM_CURATION_ADDRESS": curation_address,
        "HM_LOG_LEVEL": "WARNING",
        **{f"HM_{name.upper()}": _env_value(value) for name, value in overrides.items()},
    }
    base_url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hypermnesia",
            "serve",
            "gateway",
            env=env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=2) as http:
            for _ in range(300):
                if child.returncode is not None:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the gateway exited with {child.returncode}:\n{tail}")
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise TimeoutError(f"the gateway did not answer /health in 30 s; see {log_path}")
        yield base_url
    finally:
        if child.returncode is None:
            child.terminate()
            await child.wait()


@asynccontextmanager
async def local_stack(
    database_url: str,
    embedder_address: str,
    data_dir: Path,
    *,
    gateway: bool = False,
    curation_embedder_address: str | None = None,
    **overrides: Any,
) -> AsyncIterator[LocalStack]:
    """Curation + retrieval (+ gateway) over database_url. `overrides` are settings by field name;
    curation_embedder_address gives curation an embedder of its own (the search bench's known vectors)."""
    from services.curation.server import running as curation_running
    from services.retrieval.server import running as retrieval_running

    common = {"database_url": database_url, "data_dir": data_dir, "embedder_address": embedder_address}
    curation_embedder = {"embedder_address": curation_embedder_address} if curation_embedder_address else {}
    async with AsyncExitStack() as stack:
        # Retrieval first: curation's Dialectic searches through it, so curation must know its address.
        _r, r_port, searcher = await stack.enter_async_context(
            retrieval_running(_pick(RetrievalSettings, {**common, "retrieval_port": 0, **overrides}))
        )
        curation = {**common, "curation_port": 0, "retrieval_address": f"127.0.0.1:{r_port}"}
        _c, c_port, writer = await stack.enter_async_context(
            curation_running(_pick(CurationSettings, {**curation, **overrides, **curation_embedder}))
        )
        base_url = None
        if gateway:
            gateway_settings = _pick(
                GatewaySettings,
                {
                    **common,
                    "retrieval_address": f"127.0.0.1:{r_port}",
                    "curation_address": f"127.0.0.1:{c_port}",
                    **overrides,
                },
            )
            base_url = await stack.enter_async_context(_gateway(gateway_settings))
        yield LocalStack(
            database_url=database_url,
            embedder_address=embedder_address,
            retrieval_address=f"127.0.0.1:{r_port}",
            curation_address=f"127.0.0.1:{c_port}",
            base_url=base_url,
            searcher=searcher,
            writer=writer,
        )


@asynccontextmanager
async def _gateway(settings: GatewaySettings) -> AsyncIterator[str]:
    async with serve_gateway(settings) as url:
        yield url


@asynccontextmanager
async def serve_gateway(
    settings: GatewaySettings, operations: Sequence[Operation] | None = None
) -> AsyncIterator[str]:
    """The gateway app on a free loopback port, in this event loop; yields its base URL. With
    `operations`, it serves that table instead of gateway.operations.OPERATIONS."""
    import uvicorn

    from gateway.app import HTTP_PARSER, create_app

    # proto=IPPROTO_TCP, as uvicorn's own binding has it: asyncio sets TCP_NODELAY only on sockets
    # that say they are TCP, and without it every HTTP response waited ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The port it listens on, so what it says of itself (the usage guide's URLs) is its address.
    settings = settings.model_copy(update={"gateway_port": port})
    app = create_app(settings) if operations is None else create_app(settings, operations=operations)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", http=HTTP_PARSER))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the gateway stopped during start-up")
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@asynccontextmanager
async def scratch_stack(
    database_url: str | None, *, prefix: str, work_dir: Path | None = None, **overrides: Any
) -> AsyncIterator[LocalStack]:
    """An embedder process and local_stack(**overrides) over a scratch database, working in
    work_dir (a temporary directory when None); everything goes on the way out."""
    with tempfile.TemporaryDirectory(prefix=prefix.replace("_", "-") + "-") as tmp:
        work = work_dir or Path(tmp)
        async with (
            scratch_database(database_url, work, prefix) as db_url,
            embedder_process(work) as embedder,
            local_stack(db_url, embedder, work, **overrides) as stack,
        ):
            yield stack
