"""Start the whole stack with `hypermnesia up` under the interpreter running this script, save a
memory and find it again over REST, then stop the stack: the check that an install on another
Python version works end to end (`make smoke PYTHON=python3.12`).

Everything runs on loopback ports chosen free, in a temporary data dir; the stack is stopped
(SIGTERM, then SIGKILL) whatever happens, and the whole check gives up after a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

DEADLINE_S = 600
TOKEN = "smoke-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        base + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "X-Hypermnesia-Project": "smoke",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hm-smoke-") as data_dir:
        ports = {
            name: free_port()
            for name in (
                "GATEWAY_PORT",
                "EMBEDDER_PORT",
                "EMBEDDER_METRICS_PORT",
                "RETRIEVAL_PORT",
                "RETRIEVAL_METRICS_PORT",
                "CURATION_PORT",
                "CURATION_METRICS_PORT",
            )
        }
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HM_")},
            **{f"HM_{name}": str(port) for name, port in ports.items()},
            "HM_DATA_DIR": data_dir,
            "HM_HOST": "127.0.0.1",
            "HM_AUTH_TOKENS": json.dumps({TOKEN: {"principal": "smoke", "scopes": ["project:*"]}}),
        }
        log_path = Path(data_dir) / "up.log"
        with log_path.open("wb") as log:
            up = subprocess.Popen(
                [sys.executable, "-m", "hypermnesia", "up"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        base = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
        try:
            while True:
                if up.poll() is not None:
                    raise RuntimeError(f"`hypermnesia up` exited with {up.returncode}")
                if time.monotonic() - started > DEADLINE_S:
                    raise TimeoutError(f"the stack did not answer /health within {DEADLINE_S} s")
                try:
                    with urllib.request.urlopen(base + "/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except (OSError, urllib.error.URLError):
                    pass
                time.sleep(1)
            status, saved = call(
                base,
                "POST",
                "/memories",
                {"content": "The smoke test's marker word is quillwort.", "description": "smoke marker"},
            )
            assert status == 200, (status, saved)
            status, found = call(base, "POST", "/memories/search", {"query": "what is the marker word?"})
            assert status == 200, (status, found)
            hits = found["results"] if isinstance(found, dict) else found
            assert any("quillwort" in h["content"] for h in hits), found
            print(
                f"smoke: Python {sys.version.split()[0]}: the stack started, saved and recalled a memory "
                f"in {time.monotonic() - started:.0f} s"
            )
            return 0
        except BaseException:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGTERM)
                try:
                    up.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(up.pid, signal.SIGKILL)
                    up.wait()


if __name__ == "__main__":
    raise SystemExit(main())
