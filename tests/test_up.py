"""`hypermnesia up` and `serve` as real processes: start, serve MCP, supervise, stop, fail clearly."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import TOKENS, free_port
from tests.helpers import mcp_session, tool_json

pytestmark = pytest.mark.timeout(420)


class UpProcess:
    """A `hypermnesia up` child with its output collected line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hypermnesia", "up"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.append(raw.decode(errors="replace").rstrip())

    def wait_for(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if re.search(pattern, line):
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None and seen == len(self.lines):
                time.sleep(0.2)
                if not any(re.search(pattern, x) for x in self.lines):
                    raise AssertionError(
                        f"up exited ({self.proc.returncode}) before {pattern!r}:\n" + self.output()
                    )
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {pattern!r}:\n" + self.output())

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def children(self) -> dict[str, psutil.Process]:
        found = {}
        for child in psutil.Process(self.proc.pid).children():
            cmd = child.cmdline()
            if "serve" in cmd:
                found[cmd[cmd.index("serve") + 1]] = child
        return found

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


def stack_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    ports = {
        name: free_port()
        for name in (
            "HM_EMBEDDER_PORT",
            "HM_EMBEDDER_METRICS_PORT",
            "HM_RETRIEVAL_PORT",
            "HM_RETRIEVAL_METRICS_PORT",
            "HM_CURATION_PORT",
            "HM_CURATION_METRICS_PORT",
            "HM_GATEWAY_PORT",
        )
    }
    env.update({k: str(v) for k, v in ports.items()})
    env["HM_DATA_DIR"] = str(data_dir)
    env["HM_AUTH_TOKENS"] = __import__("json").dumps(TOKENS)
    return env


async def test_up_serves_supervises_and_restarts(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "data")
    base = f"http://127.0.0.1:{env['HM_GATEWAY_PORT']}"
    started = time.monotonic()
    up = UpProcess(env)
    try:
        up.wait_for(r"hypermnesia is up", 180)
        first_start_s = time.monotonic() - started
        for name in ("EMBEDDER", "RETRIEVAL", "CURATION"):
            port = env[f"HM_{name}_PORT"]
            assert any(f"127.0.0.1:{port}" in line for line in up.lines), up.output()
            metrics_url = f"http://127.0.0.1:{env[f'HM_{name}_METRICS_PORT']}/metrics"
            assert any(metrics_url in line for line in up.lines), up.output()
            assert "hm_rpc_seconds" in httpx.get(metrics_url, timeout=5).text
        assert any(f"{base}/mcp" in line for line in up.lines)

        async with mcp_session(f"{base}/mcp", "alice-token", "up-test") as client:
            saved = tool_json(
                await client.call_tool(
                    "memory_save",
                    {
                        "content": "The office plants need watering every Tuesday",
                        "description": "plant watering day",
                    },
                )
            )
            assert saved["created"] is True
            results = tool_json(
                await client.call_tool("memory_search", {"query": "when to water the plants"})
            )
            assert results[0]["id"] == saved["memory"]["id"]

        # A child that dies is restarted and the stack keeps answering.
        up.children()["retrieval"].kill()
        up.wait_for(r"retrieval exited with code", 30)
        up.wait_for(r"retrieval restarted and ready", 120)
        async with mcp_session(f"{base}/mcp", "alice-token", "up-test") as client:
            results = tool_json(await client.call_tool("memory_search", {"query": "plant watering"}))
            assert results[0]["id"] == saved["memory"]["id"]

        children = list(up.children().values())
        assert len(children) == 4
        assert up.stop() == 0
        for child in children:
            assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE

        # Memories survive a restart of the whole stack on the same data dir.
        started = time.monotonic()
        up = UpProcess(env)
        up.wait_for(r"hypermnesia is up", 120)
        restart_s = time.monotonic() - started
        response = httpx.post(
            f"{base}/memories/search",
            json={"query": "plant watering"},
            headers={"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "up-test"},
        )
        assert response.json()["results"][0]["id"] == saved["memory"]["id"]
        print(f"first start {first_start_s:.1f} s, restart {restart_s:.1f} s")
    finally:
        up.stop()


def stack_processes(data_dir: Path) -> dict[int, str]:
    """Every live process of the stack on `data_dir`, by pid: the embedded Postgres (its command line
    names the data dir: `postgres -D <data_dir>/pg`) and whatever runs with HM_DATA_DIR set to it
    (`up`, the services, and the Postgres processes `up` started, which inherit its environment)."""
    found = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = proc.cmdline()
            if str(data_dir) in " ".join(cmdline) or proc.environ().get("HM_DATA_DIR") == str(data_dir):
                found[proc.pid] = " ".join(cmdline)
                # Postgres's own processes (checkpointer, backends) write their title over their
                # command line and environment: they are found as the server's children.
                for child in proc.children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        if child.status() != psutil.STATUS_ZOMBIE:
                            found[child.pid] = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_until_gone(data_dir: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while stack_processes(data_dir):
        if time.monotonic() > deadline:
            raise AssertionError(f"still running after {timeout_s:.0f} s: {stack_processes(data_dir)}")
        time.sleep(0.2)


def postmasters(processes: dict[int, str], pgdata: Path) -> list[int]:
    return [pid for pid, cmd in processes.items() if f"-D {pgdata}" in cmd]


@pytest.mark.timeout(900)
def test_a_killed_up_leaves_no_process_and_the_next_up_owns_the_database(tmp_path: Path) -> None:
    """SIGKILL of `up` (no handler runs) leaves neither services nor the embedded Postgres behind;
    a Postgres orphaned by a kill of every process is adopted by the next `up` and stopped at its
    Ctrl-C."""
    data_dir = tmp_path / "data"
    pgdata = (data_dir / "pg").resolve()
    env = stack_env(data_dir)
    up = UpProcess(env)
    try:
        up.wait_for(r"hypermnesia is up", 240)
        running = stack_processes(data_dir)
        assert len(postmasters(running, pgdata)) == 1, running  # the scan sees what it must not see later
        services = up.children()
        assert sorted(services) == ["curation", "embedder", "gateway", "retrieval"]
        assert {child.pid for child in services.values()} <= set(running)
        assert any("database_guard" in cmd for cmd in running.values()), running

        # `up` dies at once: its services and its database guard get SIGTERM (their parent-death
        # signal); the services stop, and the guard stops the database `up` never let go of.
        up.proc.kill()
        up.proc.wait()
        wait_until_gone(data_dir, 90)

        # Every process but the database dies at once (kill -9 of them all, the OOM killer):
        # nothing is left to stop it, and its list of holders names dead processes only.
        up = UpProcess(env)
        up.wait_for(r"hypermnesia is up", 240)
        everything = psutil.Process(up.proc.pid).children()  # the services and the guard
        assert len(everything) == 5
        # `up` frozen first, its children killed before it: a child that saw `up` die first would
        # get its parent-death signal and start letting go.
        up.proc.send_signal(signal.SIGSTOP)
        for child in everything:
            child.kill()
        psutil.wait_procs(everything, timeout=30)
        up.proc.kill()
        up.proc.wait()
        orphan = postmasters(stack_processes(data_dir), pgdata)
        assert len(orphan) == 1

        # The next `up` adopts it, and stops it at its Ctrl-C.
        up = UpProcess(env)
        up.wait_for(r"adopted the embedded Postgres", 60)
        up.wait_for(r"hypermnesia is up", 240)
        assert postmasters(stack_processes(data_dir), pgdata) == orphan  # the same server, not another
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(60) == 0, up.output()
        wait_until_gone(data_dir, 30)
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        for pid in stack_processes(data_dir):  # whatever a failure left, so no test leaks a stack
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()


def test_up_refuses_a_taken_port(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "data")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env["HM_GATEWAY_PORT"] = str(taken.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "hypermnesia", "up"], env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode != 0
    assert "HM_GATEWAY_PORT" in result.stderr and "taken" in result.stderr


def test_up_gives_up_on_a_child_that_keeps_failing(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "data")
    broken = tmp_path / "broken-model"
    broken.mkdir()
    env["HM_EMBEDDING_MODEL_DIR"] = str(broken)  # exists, but holds no model
    result = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "up"], env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode != 0
    assert "embedder service failed to start 5 times" in result.stderr
    assert "tokenizer.json" in result.stderr


@pytest.mark.parametrize("service", ["curation", "retrieval"])
def test_unreachable_postgres_is_one_sentence(tmp_path: Path, service: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["HM_DATABASE_URL"] = f"postgresql://nobody@127.0.0.1:{free_port()}/nothing"
    env["HM_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "serve", service],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("hypermnesia:")]
    assert len(lines) == 1 and "HM_DATABASE_URL" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_setting_names_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["HM_EMBED_TIMEOUT_MS"] = "-5"
    env["HM_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "serve", "retrieval"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "HM_EMBED_TIMEOUT_MS" in result.stderr and "greater than 0" in result.stderr


def test_up_checks_every_service_setting_before_starting(tmp_path: Path) -> None:
    """A bad value for any one service stops `up` before the database or any child starts."""
    env = stack_env(tmp_path / "data")
    env["HM_EMBED_MAX_QUEUE"] = "1"  # valid on its own, but below HM_EMBED_MAX_TEXTS: the embedder's check
    result = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "up"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "HM_EMBED_MAX_QUEUE" in result.stderr and "HM_EMBED_MAX_TEXTS" in result.stderr
    assert "Traceback" not in result.stderr and "ValidationError" not in result.stderr
    assert result.stdout == ""  # no "postgres ..." line, no endpoint: nothing started
    assert not (tmp_path / "data" / "pg").exists()
