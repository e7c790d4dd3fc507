"""`hypermnesia up`: the whole stack on one machine, supervised.

Starts the embedded Postgres when HM_DATABASE_URL is unset, then the four services as child
processes in dependency order (embedder, curation, retrieval, gateway), each checked ready through
its health endpoint. A child that dies is restarted with backoff; `up` gives up (non-zero exit) only
when a port is taken or a child keeps failing to start. Ctrl-C/SIGTERM stops every child cleanly,
then the embedded Postgres.

When `up` is killed (SIGKILL: no handler runs), its children get SIGTERM (their parent-death
signal): the services stop, and the database guard (tooling/database_guard.py) stops the embedded
Postgres. One left running by a kill of every process is adopted by the next `up`, which stops it
at exit (hypermnesia/embedded_pg.py).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hypermnesia.embedded_pg import EmbeddedPostgres, resolve_database_url
from hypermnesia.errors import StartupError
from hypermnesia.pool import check_reachable, redact
from hypermnesia.settings import CurationSettings, EmbedderSettings, GatewaySettings, RetrievalSettings
from tooling.database_guard import start_guard
from tooling.first_run import ensure_local_token

log = logging.getLogger(__name__)

MAX_START_FAILURES = 5
BACKOFF_S = (1, 2, 4, 8, 15, 30)
STOP_GRACE_S = 10.0
GUARD_START_S = 60.0


# Each child is started through this trampoline: it asks for SIGTERM when `up` dies (so no orphan
# keeps a port; the setting survives exec) and then becomes the service. Setting it from a
# preexec_fn instead made every start a fork() of `up`, whose gRPC health probes have started
# gRPC's threads; gRPC's fork handlers then hung `up` in that fork, before it started the gateway.
_TRAMPOLINE = """import ctypes, os, signal, sys
try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except OSError:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # `up` died before the line above
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def child_command(service: str) -> list[str]:
    return [sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), "-m", "hypermnesia", "serve", service]


@dataclass
class Child:
    name: str
    grpc_port: int | None
    http_port: int
    host: str
    proc: subprocess.Popen | None = None
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=30))
    ready: bool = False
    failures: int = 0
    restart_at: float = 0.0

    def endpoint_lines(self) -> list[str]:
        lines = []
        if self.grpc_port is not None:
            lines.append(f"{self.name:<10} grpc     {self.host}:{self.grpc_port}")
            lines.append(f"{self.name:<10} metrics  http://{self.host}:{self.http_port}/metrics")
        else:
            lines.append(f"{self.name:<10} mcp      http://{self.host}:{self.http_port}/mcp")
            lines.append(f"{self.name:<10} rest     http://{self.host}:{self.http_port}/docs")
            lines.append(f"{self.name:<10} metrics  http://{self.host}:{self.http_port}/metrics")
        return lines

    def probe(self) -> bool:
        if self.grpc_port is None:
            try:
                url = f"http://{self.host}:{self.http_port}/health"
                with urllib.request.urlopen(url, timeout=1) as response:
                    return bool(response.status == 200)
            except OSError:
                return False
        with grpc.insecure_channel(f"{self.host}:{self.grpc_port}") as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _pump(child: Child, stream: object) -> None:
    """Forward a child's output with its name, keeping the last lines for error messages."""
    for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
        line = raw.decode(errors="replace").rstrip()
        child.tail.append(line)
        print(f"[{child.name}] {line}", file=sys.stderr, flush=True)


def _check_port(host: str, port: int, variable: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StartupError(
                f"port {port} on {host} ({variable}) is taken by another program; stop it or set "
                f"{variable} to a free port"
            ) from exc


@dataclass(frozen=True)
class StackSettings:
    """Every service's settings, read (and so validated) before anything starts: a bad HM_* value
    is one line from `up`, not a child that fails to start five times."""

    embedder: EmbedderSettings
    retrieval: RetrievalSettings
    curation: CurationSettings
    gateway: GatewaySettings


class Stack:
    def __init__(self, settings: StackSettings) -> None:
        self.embedder = settings.embedder
        self.retrieval = settings.retrieval
        self.curation = settings.curation
        self.gateway = settings.gateway
        host = self.gateway.host
        self.children = [
            Child("embedder", self.embedder.embedder_port, self.embedder.embedder_metrics_port, host),
            Child("curation", self.curation.curation_port, self.curation.curation_metrics_port, host),
            Child("retrieval", self.retrieval.retrieval_port, self.retrieval.retrieval_metrics_port, host),
            Child("gateway", None, self.gateway.gateway_port, host),
        ]
        self.stopping = threading.Event()
        self.embedded: EmbeddedPostgres | None = None
        self.guard: subprocess.Popen | None = None
        self.env = dict(os.environ)
        self.token_lines: list[str] = []

    def check_ports(self) -> None:
        ports = [
            (self.embedder.embedder_port, "HM_EMBEDDER_PORT"),
            (self.embedder.embedder_metrics_port, "HM_EMBEDDER_METRICS_PORT"),
            (self.curation.curation_port, "HM_CURATION_PORT"),
            (self.curation.curation_metrics_port, "HM_CURATION_METRICS_PORT"),
            (self.retrieval.retrieval_port, "HM_RETRIEVAL_PORT"),
            (self.retrieval.retrieval_metrics_port, "HM_RETRIEVAL_METRICS_PORT"),
            (self.gateway.gateway_port, "HM_GATEWAY_PORT"),
        ]
        for port, variable in ports:
            if port == 0:
                raise StartupError(f"{variable}=0 is not supported by `up`; give each service a fixed port")
            _check_port(self.gateway.host, port, variable)
        # The services find each other through these.
        host = self.gateway.host
        self.env.setdefault("HM_EMBEDDER_ADDRESS", f"{host}:{self.embedder.embedder_port}")
        self.env.setdefault("HM_RETRIEVAL_ADDRESS", f"{host}:{self.retrieval.retrieval_port}")
        self.env.setdefault("HM_CURATION_ADDRESS", f"{host}:{self.curation.curation_port}")

    def start_database(self) -> None:
        url, self.embedded = resolve_database_url(
            self.gateway.database_url, self.gateway.data_dir, self.gateway.pg_shared_buffers_mb
        )
        asyncio.run(check_reachable(url))  # fail once, clearly, instead of in every child
        self.env["HM_DATABASE_URL"] = url
        if self.embedded is not None:
            self.guard = start_guard(
                self.gateway.data_dir, self.gateway.pg_shared_buffers_mb, self.env, GUARD_START_S
            )
        where = f"embedded, data in {self.gateway.data_dir / 'pg'}" if self.embedded else redact(url)
        print(f"{'postgres':<10} {where}", flush=True)
        self.token_lines = asyncio.run(ensure_local_token(url, self.gateway))

    def spawn(self, child: Child) -> None:
        child.ready = False
        child.proc = subprocess.Popen(
            child_command(child.name),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches only `up`, which stops children in order
        )
        threading.Thread(target=_pump, args=(child, child.proc.stdout), daemon=True).start()

    def wait_ready(self, child: Child, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            assert child.proc is not None
            if child.proc.poll() is not None:
                return False
            if child.probe():
                child.ready = True
                child.failures = 0
                return True
            time.sleep(0.2)
        return False

    def start_in_order(self) -> bool:
        for child in self.children:
            while not self.stopping.is_set():
                self.spawn(child)
                if self.wait_ready(child, self.gateway.startup_timeout_s):
                    break
                self.record_start_failure(child)
                time.sleep(BACKOFF_S[min(child.failures, len(BACKOFF_S) - 1)])
            if self.stopping.is_set():
                return False
        return True

    def record_start_failure(self, child: Child) -> None:
        child.failures += 1
        self.terminate(child)
        if child.failures >= MAX_START_FAILURES:
            last = "\n    ".join(list(child.tail)[-10:]) or "(no output)"
            raise StartupError(
                f"the {child.name} service failed to start {child.failures} times in a row; its last "
                f"output:\n    {last}"
            )
        log.warning("%s did not become ready (attempt %d); retrying", child.name, child.failures)

    def supervise(self) -> None:
        while not self.stopping.wait(0.5):
            for child in self.children:
                assert child.proc is not None
                code = child.proc.poll()
                if code is None:
                    continue
                delay = BACKOFF_S[min(child.failures, len(BACKOFF_S) - 1)]
                log.warning("%s exited with code %s; restarting in %ss", child.name, code, delay)
                if self.stopping.wait(delay):
                    return
                self.spawn(child)
                if not self.wait_ready(child, self.gateway.startup_timeout_s):
                    self.record_start_failure(child)
                else:
                    log.warning("%s restarted and ready", child.name)

    def terminate(self, child: Child) -> None:
        _stop(child.proc)

    def shutdown(self) -> None:
        for child in reversed(self.children):
            self.terminate(child)
        # The embedded Postgres (if any) is stopped by its package when this process exits, its
        # last holder once the guard has let go.
        _stop(self.guard)
        if self.guard is not None and self.guard.stdout is not None:
            self.guard.stdout.close()


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_stack(settings: StackSettings) -> int:
    stack = Stack(settings)
    stack.check_ports()

    def on_signal(signum: int, _frame: object) -> None:
        stack.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        stack.start_database()
        if not stack.start_in_order():
            return 0
        for child in stack.children:
            for line in child.endpoint_lines():
                print(line, flush=True)
        for line in stack.token_lines:
            print(line, flush=True)
        print(f"hypermnesia is up ({time.monotonic() - started:.1f} s); Ctrl-C stops it", flush=True)
        stack.supervise()
        print("stopping hypermnesia", flush=True)
        return 0
    finally:
        stack.shutdown()
