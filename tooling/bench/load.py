"""`hypermnesia bench load`: mixed searches and saves from concurrent REST clients against the
whole stack run as real processes (the `hypermnesia up` shape), and the resident memory of each.

A store of M memories is built once through curation's import path (tooling/bench/search.py,
vectors from the real model, cached) into a template database `hm_load_<M>`; every run works on
a fresh copy of it, so the saves of one run never land in the next. The stack is then started as
child processes on free loopback ports: embedder, retrieval, curation, gateway. Each of N clients
sends one request at a time over a keep-alive connection for S seconds: 80% searches, 20% saves.
Before that run, one client alone times saves (a lone agent's write latency). PSS (proportional
set size, from /proc/<pid>/smaps_rollup) is read for every process idle (the bench's own
Postgres restarted before the stack starts, then 20 requests from one client) and after the run.
With a baseline (another checkout, `git worktree add`), its code runs the same runs on copies of
the same store, the two taking turns round by round; CPU per request is compared side by side.

The process and client helpers here are also what the fault tests (tests/test_faults.py) kill
and restart: every piece is a real process on a real port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hypermnesia.embedded_pg import EmbeddedPostgres, max_shared_buffers_mb
from hypermnesia.embedder_client import EmbedderClient
from tooling.process import free_port

LOOPBACK = "127.0.0.1"
TOKEN = "bench-load-token"
PRINCIPAL = "bench"
TOKENS = {TOKEN: {"principal": PRINCIPAL, "scopes": ["bench:*"]}}
SEARCH_SHARE = 0.8
# The lone client's saves: this many, or fewer if the run's duration is over first.
LONE_SAVES = 100
SERVICES = ("embedder", "retrieval", "curation", "gateway")
MAX_MEMORIES = 1_000_000
MAX_CLIENTS = 256
MAX_DURATION_S = 600.0
MAX_ROUNDS = 10


# --- processes -------------------------------------------------------------------------------


def pss_mb(pid: int) -> float | None:
    """The process's proportional set size in MB (shared pages split among their sharers), or
    None when it is gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name (2nd field) may hold spaces; the fields after its ')' do not.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


async def postmaster_pid(database_url: str) -> int | None:
    """The Postgres server's postmaster: the parent of a backend we connect to; None when the
    server is not on this machine (its backends are not in our /proc)."""
    conn = await asyncpg.connect(database_url)
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        # Asked while connected: the backend exits with the connection.
        return parent_of(backend) if os.path.exists(f"/proc/{backend}") else None
    finally:
        await conn.close()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time the process has used, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_pss_mb(postmaster: int | None) -> float | None:
    if postmaster is None:
        return None
    sizes = [pss_mb(pid) for pid in [postmaster, *children_of(postmaster)]]
    return sum(s for s in sizes if s is not None)


@dataclass
class ServiceProcess:
    """`hypermnesia serve <name>` as a child process with fixed ports, so it can be killed and
    started again where its clients expect it."""

    name: str
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    # Run the code of this checkout (another commit's, for a side-by-side bench) rather than ours.
    code_root: Path | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            env = self.env
            if self.code_root is not None:
                # `-m` puts the working directory first on the path: that checkout's packages win.
                env = {**env, "PYTHONPATH": str(self.code_root)}
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hypermnesia", "serve", self.name],
                env=env,
                cwd=self.code_root,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until it answers: gRPC health SERVING, or the gateway's liveness route."""
        deadline = time.monotonic() + timeout_s
        while not await self._answers():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not start in {timeout_s:.0f} s:\n{self.log_tail()}")
            await asyncio.sleep(0.2)

    async def _answers(self) -> bool:
        if self.name == "gateway":
            try:
                status, _ = await HttpClient(LOOPBACK, self.port).request("GET", "/health/live", timeout_s=1)
            except (TimeoutError, OSError, ConnectionError):
                return False
            return status == 200
        async with grpc.aio.insecure_channel(self.address) as channel:
            try:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1
                )
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            await asyncio.to_thread(proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)

    async def kill(self) -> None:
        """SIGKILL: no clean shutdown, as a crash or the OOM killer would leave it."""
        await self.stop(signal.SIGKILL)

    async def restart(self, timeout_s: float = 120.0) -> None:
        await self.stop()
        self.start()
        await self.wait_ready(timeout_s)


@dataclass
class ProcessStack:
    database_url: str
    embedder: ServiceProcess
    retrieval: ServiceProcess
    curation: ServiceProcess
    gateway: ServiceProcess

    @property
    def base_url(self) -> str:
        return f"http://{self.gateway.address}"

    @property
    def services(self) -> list[ServiceProcess]:
        return [self.embedder, self.retrieval, self.curation, self.gateway]


def _env(values: dict[str, Any]) -> dict[str, str]:
    out = {}
    for name, value in values.items():
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, dict | list):
            out[name] = json.dumps(value)
        else:
            out[name] = str(value)
    return out


@asynccontextmanager
async def process_stack(
    database_url: str, data_dir: Path, log_dir: Path, code_root: Path | None = None, **overrides: Any
) -> AsyncIterator[ProcessStack]:
    """Embedder, retrieval, curation and gateway as child processes on free loopback ports, in
    `up`'s order, each waited for; stopped (SIGTERM) on exit. `overrides` are HM_* settings by
    field name for every service; `code_root` a checkout whose code they run (default ours)."""
    ports = {name: free_port() for name in SERVICES}
    addresses = {name: f"{LOOPBACK}:{port}" for name, port in ports.items()}
    common = {
        **os.environ,
        **_env(
            {
                "HM_DATA_DIR": data_dir,
                "HM_DATABASE_URL": database_url,
                "HM_HOST": LOOPBACK,
                "HM_LOG_LEVEL": "WARNING",
                "HM_EMBEDDER_ADDRESS": addresses["embedder"],
                "HM_RETRIEVAL_ADDRESS": addresses["retrieval"],
                "HM_CURATION_ADDRESS": addresses["curation"],
                "HM_EMBEDDER_PORT": ports["embedder"],
                "HM_RETRIEVAL_PORT": ports["retrieval"],
                "HM_CURATION_PORT": ports["curation"],
                "HM_GATEWAY_PORT": ports["gateway"],
                "HM_EMBEDDER_METRICS_PORT": free_port(),
                "HM_RETRIEVAL_METRICS_PORT": free_port(),
                "HM_CURATION_METRICS_PORT": free_port(),
                "HM_AUTH_TOKENS": TOKENS,
                "HM_REQUIRE_AUTH": True,
                **{f"HM_{name.upper()}": value for name, value in overrides.items()},
            }
        ),
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = {
        name: ServiceProcess(name, common, ports[name], log_dir / f"{name}.log", code_root=code_root)
        for name in SERVICES
    }
    stack = ProcessStack(database_url, **procs)
    try:
        for name in SERVICES:  # retrieval before curation: curation's Dialectic searches through it
            procs[name].start()
            await procs[name].wait_ready()
        yield stack
    finally:
        for name in reversed(SERVICES):
            await procs[name].stop()


# --- clients -------------------------------------------------------------------------------


class HttpClient:
    """A keep-alive HTTP/1.1 client on asyncio streams. The load's clients share this process's
    one core with each other; httpx cost ~2.7 ms a call on this machine (docs/PERFORMANCE.md),
    which 32 clients would pay in the driver instead of measuring the gateway."""

    def __init__(self, host: str, port: int, token: str | None = None) -> None:
        self.host, self.port = host, port
        self.headers = f"Host: {host}:{port}\r\nConnection: keep-alive\r\n"
        if token:
            self.headers += f"Authorization: Bearer {token}\r\n"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
        self._reader = self._writer = None

    async def request(
        self, method: str, path: str, body: Any = None, timeout_s: float = 30.0
    ) -> tuple[int, bytes]:
        """(status, body). A connection the server closed while idle is opened again and the
        request sent again, once: nothing of it had reached the server."""
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\n{self.headers}Content-Length: {len(payload)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        message = (head + "\r\n").encode() + payload
        for attempt in (0, 1):
            reused = self._writer is not None
            try:
                return await asyncio.wait_for(self._exchange(message), timeout_s)
            except _StaleConnection:
                await self.close()
                if attempt or not reused:
                    raise ConnectionError("the server closed the connection before answering") from None
            except BaseException:
                await self.close()
                raise
        raise AssertionError("unreachable")

    async def _exchange(self, message: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        try:
            self._writer.write(message)
            await self._writer.drain()
            status_line = await self._reader.readline()
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise _StaleConnection from exc
        if not status_line:
            raise _StaleConnection
        status = int(status_line.split()[1])
        length, close = None, False
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        if length is None:
            raise ConnectionError(f"answer without Content-Length (status {status})")
        data = await self._reader.readexactly(length)
        if close:
            await self.close()
        return status, data


class _StaleConnection(Exception):
    pass


@dataclass
class Sample:
    op: str  # "search" | "save"
    started: float  # time.monotonic()
    ms: float
    status: int  # HTTP status; 0 when no answer came (connection refused, cut, timed out)
    error: str = ""
    memory_id: str | None = None  # a save's, when it answered 200
    degraded: list[str] = field(default_factory=list)  # a search's


def _query(rng: random.Random) -> dict[str, Any]:
    from tooling.bench.search import SCOPES, synthetic_query

    return {"query": synthetic_query(rng), "k": 10, "scope": rng.choice(SCOPES)}


def _memory(rng: random.Random, client: int, n: int) -> dict[str, Any]:
    from tooling.bench.search import SCOPES, TAGS, synthetic_text

    # The run id keeps every save new: a re-sent text would be a near-duplicate, an update.
    text = synthetic_text(rng, n).rstrip(")") + f", load {uuid.uuid4().hex[:8]} client {client})"
    return {"content": text, "scope": rng.choice(SCOPES), "tags": [rng.choice(TAGS)]}


class Load:
    """`clients` concurrent clients, each one request at a time (searches with probability
    `search_share`, saves otherwise) until `run`'s duration is over or stop() is called; every
    request is kept as a Sample. `pause_s` between a client's requests makes a light load."""

    def __init__(
        self,
        base_url: str,
        *,
        clients: int,
        search_share: float = SEARCH_SHARE,
        pause_s: float = 0.0,
        seed: int = 11,
        timeout_s: float = 30.0,
        max_requests: int | None = None,
    ) -> None:
        host, _, port = base_url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.clients = clients
        self.search_share = search_share
        self.pause_s = pause_s
        self.seed = seed
        self.timeout_s = timeout_s
        self.max_requests = max_requests
        self.samples: list[Sample] = []
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, duration_s: float) -> float:
        """Runs the clients; the seconds they ran."""
        self._stop.clear()
        started = time.monotonic()
        deadline = started + duration_s
        await asyncio.gather(*(self._client(i, deadline) for i in range(self.clients)))
        return time.monotonic() - started

    async def _client(self, index: int, deadline: float) -> None:
        rng = random.Random(self.seed * 1000 + index)
        http = HttpClient(self.host, self.port, TOKEN)
        n = 0
        try:
            while time.monotonic() < deadline and not self._stop.is_set():
                if self.max_requests is not None and len(self.samples) >= self.max_requests:
                    break
                n += 1
                if rng.random() < self.search_share:
                    await self._one(http, "search", "/memories/search", _query(rng))
                else:
                    await self._one(http, "save", "/memories", _memory(rng, index, n))
                if self.pause_s:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), self.pause_s)
        finally:
            await http.close()

    async def _one(self, http: HttpClient, op: str, path: str, body: dict[str, Any]) -> None:
        started = time.monotonic()
        sample = Sample(op, started, 0.0, 0)
        try:
            status, data = await http.request("POST", path, body, self.timeout_s)
        except (TimeoutError, OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            sample.error = f"{type(exc).__name__}: {exc}"
            # A refused connection answers at once: without a pause a client would spin.
            await asyncio.sleep(0.05)
        else:
            sample.status = status
            try:
                answer = json.loads(data)
            except ValueError:
                answer = {}
            if status != 200:
                sample.error = str(answer.get("error", data[:200]))
            elif op == "save":
                sample.memory_id = answer["memory"]["id"]
            else:
                sample.degraded = list(answer.get("degraded", []))
        sample.ms = (time.monotonic() - started) * 1000
        self.samples.append(sample)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "mean_ms": 0.0}
    ordered = sorted(values)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]

    return {
        "p50_ms": pick(0.5),
        "p95_ms": pick(0.95),
        "p99_ms": pick(0.99),
        "mean_ms": statistics.fmean(ordered),
    }


def summarise(samples: list[Sample], seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    errors = [s for s in samples if s.status != 200]
    for op in ("search", "save"):
        ok = [s.ms for s in samples if s.op == op and s.status == 200]
        failed = sum(1 for s in errors if s.op == op)
        out[op] = {"count": len(ok), "errors": failed, "rps": len(ok) / seconds if seconds else 0.0}
        out[op].update(percentiles(ok))
    ok_total = len(samples) - len(errors)
    out["requests"] = len(samples)
    out["seconds"] = seconds
    out["throughput_rps"] = ok_total / seconds if seconds else 0.0
    out["errors"] = len(errors)
    kinds: dict[str, int] = {}
    for s in errors:
        key = f"{s.op} {s.status}: {s.error[:160]}"
        kinds[key] = kinds.get(key, 0) + 1
    out["error_kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:10])
    out["degraded_searches"] = sum(1 for s in samples if s.op == "search" and s.degraded)
    flags: dict[str, int] = {}
    for s in samples:
        for flag in s.degraded:
            flags[flag] = flags.get(flag, 0) + 1
    out["degraded_flags"] = flags
    return out


# --- the store -------------------------------------------------------------------------------

COMPLETE = "hypermnesia bench load store: complete"


async def _comment(server_url: str, name: str) -> str | None:
    from tooling.local_stack import with_database

    conn = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        return await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", name
        )
    finally:
        await conn.close()


async def ensure_store(server_url: str, data_dir: Path, memories: int) -> dict[str, Any]:
    """The template database of `memories` memories, built through curation's ImportRecords
    unless a complete one is there; {"database": name, "built_seconds": None when reused}."""
    from tooling.bench.known_vectors import known_vectors_embedder
    from tooling.bench.search import (
        build_scope_graphs,
        build_store,
        synthetic_records,
        synthetic_text,
        synthetic_vectors,
        verify_store,
    )
    from tooling.local_stack import embedder_process, local_stack, with_database

    name = f"hm_load_{memories}"
    if await _comment(server_url, name) == COMPLETE:
        return {"database": name, "built_seconds": None}
    conn = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        # A build stopped half-way left a store of unknown content: start over.
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    url = with_database(server_url, name)
    started = time.perf_counter()
    rng = random.Random(7)
    texts = [synthetic_text(rng, i) for i in range(memories)]
    records = synthetic_records(texts, rng)
    with tempfile.TemporaryDirectory(prefix="hm-load-build-") as tmp:
        async with embedder_process(data_dir) as embedder_address:
            client = EmbedderClient(embedder_address)
            try:
                vectors = await synthetic_vectors(client, texts, data_dir / "bench-vectors")
            finally:
                await client.close()
            async with (
                known_vectors_embedder(dict(zip(texts, vectors, strict=True)), embedder_address) as known,
                # The scope graphs are built below, after the import's VACUUM: curation's own pass
                # building one concurrently deadlocked with that VACUUM (Postgres broke it, and the
                # pass retried a minute later).
                local_stack(
                    url, embedder_address, Path(tmp), curation_embedder_address=known, scope_graph_rows=0
                ) as stack,
            ):
                await build_store(stack.curation_address, url, records)
    await verify_store(url)
    await build_scope_graphs(url)
    conn = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await conn.execute(f"COMMENT ON DATABASE {name} IS '{COMPLETE}'")
    finally:
        await conn.close()
    return {"database": name, "built_seconds": time.perf_counter() - started}


@asynccontextmanager
async def store_copy(server_url: str, template: str) -> AsyncIterator[str]:
    """A fresh copy of the template database for one run (file copy: seconds even at 100k)."""
    from tooling.local_stack import with_database

    name = f"hm_load_run_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    finally:
        await conn.close()
    try:
        yield with_database(server_url, name)
    finally:
        conn = await asyncpg.connect(with_database(server_url, "postgres"))
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()


# --- the run ---------------------------------------------------------------------------------


async def memory_snapshot(stack: ProcessStack, postmaster: int | None) -> dict[str, float | None]:
    sizes: dict[str, float | None] = {p.name: pss_mb(p.pid) for p in stack.services}
    sizes["postgres"] = postgres_pss_mb(postmaster)
    sizes["total"] = sum(v for v in sizes.values() if v is not None)
    return sizes


def cpu_snapshot(stack: ProcessStack, postmaster: int | None) -> dict[str, float | None]:
    """CPU seconds used so far by each process; Postgres's summed over the postmaster and the
    backends alive now (the services' pooled connections live as long as the run)."""
    used: dict[str, float | None] = {p.name: cpu_seconds(p.pid) for p in stack.services}
    if postmaster is None:
        used["postgres"] = None
    else:
        times = [cpu_seconds(pid) for pid in [postmaster, *children_of(postmaster)]]
        used["postgres"] = sum(t for t in times if t is not None)
    used["bench clients"] = cpu_seconds(os.getpid())
    return used


def cpu_used(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, end in after.items():
        start = before.get(name)
        out[name] = None if end is None or start is None else max(0.0, end - start)
    out["total"] = sum(v for k, v in out.items() if v is not None and k != "bench clients")
    return out


async def settle(seconds: float = 3.0) -> None:
    """Idle means idle: the services' start-up work (first pool connections, curation's first
    maintenance pass) is over before memory is read."""
    await asyncio.sleep(seconds)


def check_bounds(memories: int, clients: int, duration_s: float) -> None:
    if not 1 <= memories <= MAX_MEMORIES:
        raise ValueError(f"--memories must be between 1 and {MAX_MEMORIES:,}, not {memories}")
    if not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"--clients must be between 1 and {MAX_CLIENTS}, not {clients}")
    if not 1 <= duration_s <= MAX_DURATION_S:
        raise ValueError(f"--duration must be between 1 and {MAX_DURATION_S:.0f} seconds, not {duration_s:g}")


async def run(
    memories: int,
    clients: int,
    duration_s: float,
    database_url: str | None,
    data_dir: Path,
    shared_buffers_mb: int = 0,
    baseline: Path | None = None,
    rounds: int = 1,
) -> dict[str, Any]:
    """One run, or with `baseline` (another checkout) or `rounds` > 1, several on the same store:
    {"runs": [...], "by_code": ...}, this checkout's and the baseline's taking turns."""
    check_bounds(memories, clients, duration_s)
    root = data_dir / "bench-load"
    root.mkdir(parents=True, exist_ok=True)
    embedded = None
    if database_url:
        server_url = database_url
    else:
        # A server of the bench's own, so its backends are the only ones counted as Postgres; while
        # it builds the store, with the most cache the automatic size gives (the store's size is
        # not known yet).
        embedded = EmbeddedPostgres(root, shared_buffers_mb or max_shared_buffers_mb())
        server_url = embedded.url
    arms: list[tuple[str, Path | None]] = [("this", None)] + ([("baseline", baseline)] if baseline else [])
    runs: list[dict[str, Any]] = []
    try:
        store = await ensure_store(server_url, data_dir, memories)
        for i in range(rounds):
            # Taking turns (this, baseline; then baseline, this), so a slow spell of the machine
            # lands on both.
            for code, code_root in arms if i % 2 == 0 else arms[::-1]:
                if embedded is not None:
                    # Started afresh, as a user's stack starts: the idle figure must not count the
                    # buffers that building the template or the last run filled.
                    embedded.close()
                    embedded = EmbeddedPostgres(root, shared_buffers_mb)
                    server_url = embedded.url
                result = await one_run(
                    server_url, store["database"], data_dir, clients, duration_s, code_root
                )
                runs.append({"code": code, "round": i + 1, **result})
    finally:
        if embedded is not None:
            embedded.close()
    common = {
        "memories": memories,
        "clients": clients,
        "duration_s": duration_s,
        "store": store,
        "shared_buffers_mb": embedded.shared_buffers_mb if embedded is not None else None,
    }
    if len(runs) == 1:
        return {**common, **runs[0]}
    return {**common, "baseline": str(baseline) if baseline else None, "runs": runs, "by_code": by_code(runs)}


async def one_run(
    server_url: str, template: str, data_dir: Path, clients: int, duration_s: float, code_root: Path | None
) -> dict[str, Any]:
    """The stack (this checkout's code, or `code_root`'s) on a fresh copy of the store: idle
    memory, a lone client's saves, then the load, with each process's CPU during it."""
    async with store_copy(server_url, template) as url:
        postmaster = await postmaster_pid(url)
        with tempfile.TemporaryDirectory(prefix="hm-load-") as tmp:
            async with process_stack(
                url,
                data_dir,
                Path(tmp) / "logs",
                code_root=code_root,
                # The gateway's per-token rate limits would measure themselves: off.
                rate_writes_per_min=0,
                rate_searches_per_min=0,
            ) as stack:
                warm = Load(stack.base_url, clients=1, max_requests=20)
                await warm.run(duration_s)  # first connections, first query plans
                await settle()
                idle = await memory_snapshot(stack, postmaster)
                lone = Load(stack.base_url, clients=1, search_share=0.0, max_requests=LONE_SAVES)
                lone_s = await lone.run(duration_s)
                load = Load(stack.base_url, clients=clients)
                cpu_before = cpu_snapshot(stack, postmaster)
                seconds = await load.run(duration_s)
                cpu = cpu_used(cpu_before, cpu_snapshot(stack, postmaster))
                after = await memory_snapshot(stack, postmaster)
    summary = summarise(load.samples, seconds)
    lone_summary = summarise(lone.samples, lone_s)
    answered = summary["search"]["count"] + summary["save"]["count"]
    return {
        **summary,
        "lone_save": {**lone_summary["save"], "errors": lone_summary["errors"]},
        "pss_mb": {"idle": idle, "after": after},
        "cpu_seconds": cpu,
        # The stack's CPU per answered request (the bench's own clients not counted).
        "cpu_ms_per_request": {
            name: None if used is None or not answered else used * 1000 / answered
            for name, used in cpu.items()
            if name != "bench clients"
        },
        "load_average": os.getloadavg()[0],
    }


def by_code(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each checkout's runs in brief (the spread is their range) and, beside the baseline's, the
    ratio of the means."""
    out: dict[str, dict[str, Any]] = {}
    for code in dict.fromkeys(r["code"] for r in runs):
        mine = [r for r in runs if r["code"] == code]
        out[code] = {
            "runs": len(mine),
            "throughput_rps": [r["throughput_rps"] for r in mine],
            "search_p95_ms": [r["search"]["p95_ms"] for r in mine],
            "cpu_ms_per_request": [r["cpu_ms_per_request"]["total"] for r in mine],
            "postgres_cpu_ms_per_request": [r["cpu_ms_per_request"].get("postgres") for r in mine],
            "idle_pss_mb": [r["pss_mb"]["idle"]["total"] for r in mine],
        }
    if "baseline" in out:
        base, this = out["baseline"], out["this"]
        out["this"]["vs_baseline"] = {
            key: statistics.fmean(this[key]) / statistics.fmean(base[key]) - 1
            for key in ("throughput_rps", "search_p95_ms", "cpu_ms_per_request", "idle_pss_mb")
            if all(v is not None for v in this[key] + base[key]) and statistics.fmean(base[key])
        }
    return out


def format_table(r: dict[str, Any]) -> str:
    built = r["store"]["built_seconds"]
    lines = [
        f"{r['memories']:,} memories (built through curation's import"
        + (f" in {built:.0f} s" if built is not None else ", reused")
        + f"), {r['clients']} clients for {r['seconds']:.0f} s through REST, "
        f"{SEARCH_SHARE:.0%} searches / {1 - SEARCH_SHARE:.0%} saves"
        + (
            f", the bench's Postgres at shared_buffers {r['shared_buffers_mb']} MB"
            if r.get("shared_buffers_mb")
            else ""
        ),
        "",
        "| operation | requests | per s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, key in (("search", "search"), ("save", "save"), ("lone client's save", "lone_save")):
        p = r[key]
        lines.append(
            f"| {name} | {p['count']} | {p['rps']:.1f} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} "
            f"| {p['p99_ms']:.1f} | {p['errors']} |"
        )
    lines += [
        "",
        f"throughput {r['throughput_rps']:.1f} requests/s, {r['errors']} errors,"
        f" {r['degraded_searches']} degraded searches; load average at the end {r['load_average']:.2f}",
    ]
    for kind, count in r["error_kinds"].items():
        lines.append(f"  {count} x {kind}")
    if r["degraded_flags"]:
        lines.append("degraded flags: " + ", ".join(f"{k} {v}" for k, v in r["degraded_flags"].items()))
    lines += [
        "",
        "| process | PSS idle MB | PSS after MB | CPU s during the run | CPU ms per request |",
        "|---|---|---|---|---|",
    ]
    idle, after, cpu = r["pss_mb"]["idle"], r["pss_mb"]["after"], r["cpu_seconds"]
    per_request = r.get("cpu_ms_per_request", {})

    def fmt(value: float | None, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    for name in [*idle, "bench clients"]:
        lines.append(
            f"| {name} | {fmt(idle.get(name), '.0f')} | {fmt(after.get(name), '.0f')} "
            f"| {fmt(cpu.get(name), '.1f')} | {fmt(per_request.get(name), '.1f')} |"
        )
    return "\n".join(lines)


def format_runs(r: dict[str, Any]) -> str:
    """Every run's table, then the checkouts side by side."""
    lines: list[str] = []
    for run_ in r["runs"]:
        label = "this checkout" if run_["code"] == "this" else f"baseline {r['baseline']}"
        lines += [f"## round {run_['round']}, {label}", "", format_table({**r, **run_}), ""]
    lines += [
        "| code | runs | requests/s | search p95 ms | CPU ms / request (Postgres) | idle PSS MB |",
        "|---|---|---|---|---|---|",
    ]

    def span(values: list[Any], spec: str) -> str:
        known = [v for v in values if v is not None]
        return "n/a" if not known else " / ".join(format(v, spec) for v in known)

    for code, c in r["by_code"].items():
        lines.append(
            f"| {code} | {c['runs']} | {span(c['throughput_rps'], '.1f')} | {span(c['search_p95_ms'], '.0f')}"
            f" | {span(c['cpu_ms_per_request'], '.1f')} ({span(c['postgres_cpu_ms_per_request'], '.1f')})"
            f" | {span(c['idle_pss_mb'], '.0f')} |"
        )
    ratios = r["by_code"].get("this", {}).get("vs_baseline")
    if ratios:
        names = {
            "throughput_rps": "requests/s",
            "search_p95_ms": "search p95",
            "cpu_ms_per_request": "CPU per request",
            "idle_pss_mb": "idle PSS",
        }
        lines += ["", "this checkout against the baseline, mean of its runs: " + ", ".join(
            f"{names[k]} {v:+.1%}" for k, v in ratios.items()
        )]  # fmt: skip
    return "\n".join(lines)


def main(
    memories: int,
    clients: int,
    duration_s: float,
    database_url: str | None,
    data_dir: Path,
    as_json: bool,
    shared_buffers_mb: int = 0,
    baseline: Path | None = None,
    rounds: int = 1,
) -> None:
    result = asyncio.run(
        run(memories, clients, duration_s, database_url, data_dir, shared_buffers_mb, baseline, rounds)
    )
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(format_runs(result) if "runs" in result else format_table(result))
