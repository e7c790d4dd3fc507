"""The embedded Postgres starts with hypermnesia's own settings (a buffer cache sized to the
store within the machine's memory, or to HM_PG_SHARED_BUFFERS_MB), a bad value is refused before anything starts, and a
server whose holders were killed is adopted and stopped by the next."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import psutil
import pytest

from hypermnesia import embedded_pg


async def shared_buffers_mb(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        # pg_settings gives shared_buffers in 8 kB blocks.
        return int(
            await conn.fetchval(
                "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
            )
        )
    finally:
        await conn.close()


def test_auto_size_is_the_store_and_half_again_within_a_quarter_of_memory() -> None:
    physical_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    memory_mb = embedded_pg.available_memory_mb()
    assert 0 < memory_mb <= physical_mb
    big = 64 * 1024
    assert embedded_pg.auto_shared_buffers_mb(big, store_mb=0) == 128  # Postgres's own default
    assert embedded_pg.auto_shared_buffers_mb(big, store_mb=30) == 256  # 45 MB, in 128 MB steps, + 128
    assert embedded_pg.auto_shared_buffers_mb(big, store_mb=1000) == 1664  # 1,500 MB -> 1,536 + 128
    assert embedded_pg.auto_shared_buffers_mb(big, store_mb=10_000) == 4096  # at most 4 GiB
    assert embedded_pg.auto_shared_buffers_mb(2048, store_mb=1000) == 512  # a quarter of memory
    assert embedded_pg.auto_shared_buffers_mb(100, store_mb=1000) == 128  # never below the default
    assert embedded_pg.max_shared_buffers_mb() == min(max(memory_mb // 4, 128), 4096)
    assert embedded_pg.auto_shared_buffers_mb(store_mb=10**6) == embedded_pg.max_shared_buffers_mb()


def test_the_store_size_is_what_its_databases_take_on_disk(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    (pgdata / "base" / "16384").mkdir(parents=True)
    (pgdata / "base" / "16384" / "2619").write_bytes(b"x" * 3 * 2**20)
    (pgdata / "base" / "5").mkdir()
    (pgdata / "base" / "5" / "1259").write_bytes(b"x" * 2 * 2**20)
    (pgdata / "pg_wal").mkdir()
    (pgdata / "pg_wal" / "000000010000000000000001").write_bytes(b"x" * 16 * 2**20)  # not the store
    assert embedded_pg.store_size_mb(pgdata) == 5


def test_a_container_limit_below_the_machine_wins(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2 without a limit
    v1.write_text(f"{2 * 2**30}\n")  # a 2 GiB container
    assert embedded_pg.available_memory_mb((v2, v1)) == 2048
    assert embedded_pg.auto_shared_buffers_mb(2048, store_mb=10_000) == 512


async def test_embedded_server_uses_the_configured_buffer_cache(tmp_path: Path) -> None:
    server = embedded_pg.EmbeddedPostgres(tmp_path / "data", shared_buffers_mb=200)
    assert await shared_buffers_mb(server.url) == 200
    pgdata = tmp_path / "data" / "pg"
    assert (pgdata / embedded_pg.TUNING_FILE).read_text() == "shared_buffers = '200MB'\n"
    # Writing the settings again (the next start) keeps one include line, and the new value.
    assert embedded_pg.write_tuning(pgdata, 200) is False  # unchanged: nothing rewritten
    assert embedded_pg.write_tuning(pgdata, 300) is True
    assert (pgdata / "postgresql.conf").read_text().count(embedded_pg.TUNING_FILE) == 1
    assert "300MB" in (pgdata / embedded_pg.TUNING_FILE).read_text()


async def test_unset_means_the_automatic_size_for_the_store_found_at_start(tmp_path: Path) -> None:
    server = embedded_pg.EmbeddedPostgres(tmp_path / "data")
    pgdata = tmp_path / "data" / "pg"
    empty_mb = embedded_pg.store_size_mb(pgdata)  # the cluster's template databases
    assert await shared_buffers_mb(server.url) == server.shared_buffers_mb == 256 > 1.5 * empty_mb
    conn = await asyncpg.connect(server.url)
    try:  # ~100 MB of rows that do not compress
        await conn.execute(
            "CREATE TABLE filler AS SELECT i, md5(i::text) || repeat(md5((i * 7)::text), 20) AS pad"
            " FROM generate_series(1, 130000) AS i"
        )
    finally:
        await conn.close()
    server.close()
    store_mb = embedded_pg.store_size_mb(pgdata)
    assert store_mb > 90
    again = embedded_pg.EmbeddedPostgres(tmp_path / "data")
    expected = embedded_pg.auto_shared_buffers_mb(store_mb=store_mb)
    assert expected > 128
    assert await shared_buffers_mb(again.url) == again.shared_buffers_mb == expected


@pytest.mark.parametrize("value", ["5", "-1", "lots"])
def test_a_bad_buffer_size_is_refused_before_anything_starts(value: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env.update(HM_PG_SHARED_BUFFERS_MB=value, HM_DATA_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "hypermnesia", "serve", "retrieval"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "HM_PG_SHARED_BUFFERS_MB" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "pg").exists()  # no server was initialised


async def test_close_stops_the_server_before_its_folder_goes(tmp_path: Path) -> None:
    server = embedded_pg.EmbeddedPostgres(tmp_path / "data", shared_buffers_mb=64)
    assert await shared_buffers_mb(server.url) == 64
    server.close()
    with pytest.raises(OSError):  # nothing listens on its socket any more
        await asyncpg.connect(server.url, timeout=5)


def postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


async def test_a_server_whose_holders_were_killed_is_adopted_and_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process holding the server is killed (SIGKILL: it never lets go): the next handle adopts the
    server it left running, and stops it when it lets go, as if it had started it. So too when a
    killed holder's pid belongs to another process by then (pids are reused)."""
    data_dir = tmp_path / "data"
    pgdata = data_dir / "pg"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from hypermnesia.embedded_pg import EmbeddedPostgres;"
            " EmbeddedPostgres(Path(sys.argv[1]), shared_buffers_mb=64); print('ready', flush=True); time.sleep(300)",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        holder_started = psutil.Process(holder.pid).create_time()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    orphan = postmaster_pid(pgdata)
    assert psutil.Process(orphan).is_running()  # the killed holder left it running
    # A second killed holder whose pid a live process (not a holder) has taken since.
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    holders, starts = pgdata / ".handle_pids.json", pgdata / ".hypermnesia_holder_starts.json"
    assert json.loads(holders.read_text()) == [holder.pid]
    holders.write_text(json.dumps([holder.pid, stranger.pid]))
    starts.write_text(json.dumps({str(holder.pid): holder_started, str(stranger.pid): holder_started}))

    try:
        server = embedded_pg.EmbeddedPostgres(data_dir, shared_buffers_mb=64)
        assert postmaster_pid(pgdata) == orphan  # adopted, not started anew
        assert await shared_buffers_mb(server.url) == 64
        adopted = [
            r.getMessage() for r in caplog.records if "adopted the embedded Postgres" in r.getMessage()
        ]
        assert len(adopted) == 1 and f"(pids {holder.pid}, {stranger.pid})" in adopted[0], caplog.text
        assert json.loads(holders.read_text()) == [os.getpid()]
        server.close()
        assert not (pgdata / "postmaster.pid").exists()  # stopped (pg_ctl stop -w has returned)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(orphan).wait(30)  # gone: raises TimeoutExpired while it runs
        assert stranger.poll() is None  # the stranger was only forgotten as a holder
    finally:  # a failure must not leave the server (or the stranger) running
        stranger.kill()
        stranger.wait()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(orphan).terminate()
