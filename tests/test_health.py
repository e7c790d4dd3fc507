"""/health on the real stack: the database, the embedder, retrieval and curation, each `ok` or what
is wrong, with the build. Faults are real: the embedder and Postgres are reached through TCP
proxies that the test stops (cutting every connection) and starts again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from gateway.app import create_app
from hypermnesia import __version__
from hypermnesia.settings import GatewaySettings
from tests.conftest import TOKENS, free_port, start_stack
from tests.tcp_proxy import TcpProxy

SERVICES = ("database", "embedder", "retrieval", "curation")


def postgres_target(url: str) -> str:
    """Where the server of `url` listens: host:port, or its unix socket."""
    parts = urlsplit(url)
    port = parts.port or 5432
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    if socket_dir.startswith("/"):
        return f"{socket_dir}/.s.PGSQL.{port}"
    return f"{parts.hostname}:{port}"


def through(url: str, proxy: TcpProxy) -> str:
    """`url` with its server reached through `proxy` (over TCP)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@{proxy.address}" if auth else proxy.address
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "host"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


async def health(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    started = time.monotonic()
    response = await http.get("/health")
    # Every check has a deadline: /health answers in about two seconds at worst.
    assert time.monotonic() - started < 5, "slow /health"
    return response.status_code, response.json()


async def wait_until_ok(http: httpx.AsyncClient, timeout_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        code, body = await health(http)
        if code == 200 and body["status"] == "ok":
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.3)


async def test_health_reports_each_dependency(pg_server_url: str, embedder: str, model_cache: Path) -> None:
    pg = TcpProxy(postgres_target(pg_server_url))
    emb = TcpProxy(embedder)
    await pg.start()
    await emb.start()
    try:
        async with start_stack(through(pg_server_url, pg), emb.address, model_cache) as stack:
            async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
                code, body = await health(http)
                assert code == 200, body
                assert body["status"] == "ok" and body["version"] == __version__
                assert body["checks"] == {name: "ok" for name in SERVICES}
                assert body["versions"] == {
                    name: __version__ for name in ("gateway", "retrieval", "curation")
                }
                live = await http.get("/health/live")
                assert live.status_code == 200 and live.json()["status"] == "ok"

                # The embedder stops: the store still answers, so 200, but degraded, naming it.
                await emb.stop()
                code, body = await health(http)
                assert code == 200 and body["status"] == "degraded", body
                assert body["checks"]["embedder"] != "ok" and emb.address in body["checks"]["embedder"]
                assert "unreachable" in body["checks"]["embedder"]
                assert all(body["checks"][name] == "ok" for name in ("database", "retrieval", "curation"))
                await emb.start()
                await wait_until_ok(http)

                # Postgres stops: nothing can be stored or found, so 503, naming the database.
                await pg.stop()
                code, body = await health(http)
                assert code == 503 and body["status"] == "unavailable", body
                assert body["checks"]["database"] != "ok"
                assert body["checks"]["retrieval"] == "ok" and body["checks"]["curation"] == "ok"
                await pg.start()
                await wait_until_ok(http)
    finally:
        await emb.stop()
        await pg.stop()


async def test_health_without_services_is_503() -> None:
    """A gateway whose retrieval and curation do not answer says which, and that it cannot tell
    the state of what they check."""
    settings = GatewaySettings(
        retrieval_address=f"127.0.0.1:{free_port()}",
        curation_address=f"127.0.0.1:{free_port()}",
        auth_tokens=TOKENS,
    )
    app = create_app(settings)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway", timeout=30
        ) as http:
            code, body = await health(http)
            assert code == 503 and body["status"] == "unavailable", body
            assert body["checks"]["retrieval"].startswith("unreachable")
            assert body["checks"]["curation"].startswith("unreachable")
            assert body["checks"]["database"].startswith("unknown")
            assert body["versions"] == {"gateway": __version__}
    finally:
        await app.state.backends.close()
