"""`up`'s database guard: a child process that holds the embedded Postgres for as long as `up` lives.

The embedded server stops when the last process holding it lets go (hypermnesia/embedded_pg.py).
`up` is one holder, but a killed `up` (SIGKILL) runs none of its own cleanup. The guard is a
second holder that gets SIGTERM when `up` dies (its parent-death signal), lets go, and so, as the
last live holder, stops the server.

Its signals are blocked and taken with sigwait rather than handled: a multi-threaded parent that
dies hands its children from thread to thread, and each hand-over sends the parent-death signal
again, so a handler that had already run and been taken down would let a later SIGTERM kill the
guard halfway through letting go (the services die that way when `up` is killed).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from hypermnesia.embedded_pg import EmbeddedPostgres

__all__ = ["hold", "start_guard"]

_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_READY = b"holding\n"
PR_SET_PDEATHSIG = 1


def hold(parent_pid: int, data_dir: Path, shared_buffers_mb: int) -> None:
    """The guard's body: hold the server until `parent_pid` dies or asks (SIGTERM), then return,
    letting go at exit."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # before the parent-death signal is asked for
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # no glibc (not Linux): the next `up` adopts a server left running instead
        pass
    if os.getppid() != parent_pid:
        return  # `up` died before the line above: nothing to hold for
    EmbeddedPostgres(data_dir, shared_buffers_mb)
    sys.stdout.buffer.write(_READY)
    sys.stdout.flush()
    signal.sigwait(_SIGNALS)


def start_guard(
    data_dir: Path, shared_buffers_mb: int, env: dict[str, str], timeout_s: float
) -> subprocess.Popen:
    """Start the guard for this process and wait until it holds the server."""
    code = "import sys; from pathlib import Path; from tooling.database_guard import hold; "
    code += "hold(int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(os.getpid()), str(data_dir), str(shared_buffers_mb)],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches only `up`, which stops the guard last
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready or proc.stdout.readline() != _READY:
        # Imported here, in `up`: the guard itself, which imports this module for hold(), has
        # no use for grpc (~9 MB resident), which the error classes bring.
        from hypermnesia.errors import StartupError

        proc.kill()
        proc.wait()
        raise StartupError(
            f"the embedded Postgres's guard did not start within {timeout_s:.0f} s (exit code "
            f"{proc.returncode}); run `hypermnesia up` again"
        )
    return proc
