"""Running `hypermnesia serve embedder` as a child process on free loopback ports (the benchmark
and the replica tests use real processes, the way a homelab scales the embedder)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbedderProcess:
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def wait_ready(self, timeout_s: float = 120.0) -> embedder_pb2.InfoResponse:
        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(self.address) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the embedder exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    return stub.Info(embedder_pb2.InfoRequest(), timeout=1)
                except grpc.RpcError as exc:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"the embedder did not start in {timeout_s:.0f} s:\n{self.log_tail()}"
                        ) from exc
                    time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_embedder(data_dir: Path, log_path: Path, **settings: str | int | float) -> EmbedderProcess:
    """Start one embedder with HM_* `settings` (by field name) on free ports; call wait_ready()."""
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "HM_DATA_DIR": str(data_dir),
        "HM_HOST": "127.0.0.1",
        "HM_EMBEDDER_PORT": str(port),
        "HM_EMBEDDER_METRICS_PORT": str(metrics_port),
        "HM_LOG_LEVEL": "WARNING",
    }
    env.update({f"HM_{name.upper()}": str(value) for name, value in settings.items()})
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hypermnesia", "serve", "embedder"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return EmbedderProcess(proc, port, metrics_port, log_path)
