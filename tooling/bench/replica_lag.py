"""How far a streaming replica trails a save, and what read-after-write costs a search right after it.

An embedded primary and a hot standby of it (tooling/replica.py), the real services and gateway
reading through the standby (HM_DATABASE_READ_URL). Three measurements:

1. commit -> replayed: a one-row commit on the primary, then the standby's replay position polled
   until it passes the primary's flushed WAL after that commit (what curation reports);
2. save -> replayed: the same after each real save through the gateway (embedding, memory row,
   indexes, raw log), timed from the answer; `already` counts saves replayed by the time they
   were answered;
3. save then search at once, same caller: the search's latency, and where retrieval ran it
   (the replica after waiting for it, or the primary when the wait ran out).

    hypermnesia bench replica-lag --saves 200 [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx
from prometheus_client import REGISTRY

from hypermnesia.embedded_pg import EmbeddedPostgres
from hypermnesia.read_after_write import parse_lsn
from tooling.local_stack import create_database, embedder_server, local_stack
from tooling.replica import StreamingReplica

TOKEN = "lag-token"
TOKENS = {TOKEN: {"principal": "lag", "scopes": ["project:*"]}}
MAX_SAVES = 10_000
HEADERS = {"Authorization": f"Bearer {TOKEN}", "X-Hypermnesia-Project": "lag"}


def _quantiles(values: list[float]) -> dict[str, object]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    slowest = sorted(range(len(values)), key=values.__getitem__)[-3:]
    return {
        "p50": round(cuts[49], 3),
        "p95": round(cuts[94], 3),
        "p99": round(cuts[98], 3),
        "slowest": {i: round(values[i], 1) for i in reversed(slowest)},
    }


async def _until_replayed(standby: asyncpg.Connection, lsn: int) -> None:
    # A tight loop: each poll is one ~0.1 ms round trip, the resolution of the figure.
    while parse_lsn(await standby.fetchval("SELECT pg_last_wal_replay_lsn()::text")) < lsn:
        pass


async def _flushed(primary: asyncpg.Connection) -> int:
    return parse_lsn(await primary.fetchval("SELECT pg_current_wal_flush_lsn()::text"))


def _waits() -> tuple[float, float]:
    """Reads that waited for the replica, and their seconds waited in all."""
    count = REGISTRY.get_sample_value("hm_replica_wait_seconds_count") or 0.0
    return count, REGISTRY.get_sample_value("hm_replica_wait_seconds_sum") or 0.0


def _routed(reason: str) -> float:
    return REGISTRY.get_sample_value("hm_replica_reads_on_primary_total", {"reason": reason}) or 0.0


async def run(saves: int, data_dir: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="hm-replica-lag-") as work:
        primary = EmbeddedPostgres(Path(work) / "primary", shared_buffers_mb=128)
        replica = StreamingReplica(primary, Path(work) / "standby")
        try:
            replica.start()
            database_url = await create_database(primary.url, prefix="hm_lag")
            read_url = replica.url_for(database_url)
            await asyncio.sleep(0.5)  # the new database reaches the standby by replay
            async with (
                embedder_server(data_dir) as embedder,
                local_stack(
                    database_url,
                    embedder,
                    data_dir,
                    gateway=True,
                    auth_tokens=TOKENS,
                    database_read_url=read_url,
                    search_bump_access=False,
                ) as stack,
                httpx.AsyncClient(base_url=stack.base_url or "", headers=HEADERS, timeout=30) as http,
            ):
                on_primary = await asyncpg.connect(database_url)
                on_standby = await asyncpg.connect(read_url)
                try:
                    await on_primary.execute("CREATE TABLE lag_probe (n int)")
                    commit_ms = []
                    for i in range(saves):
                        await on_primary.execute("INSERT INTO lag_probe VALUES ($1)", i)
                        started = time.perf_counter()
                        await _until_replayed(on_standby, await _flushed(on_primary))
                        commit_ms.append((time.perf_counter() - started) * 1000)

                    save_ms, already = [], 0
                    for i in range(saves):
                        response = await http.post(
                            "/memories",
                            json={"content": f"Replica lag probe {i}: the deploy window is {i % 24}:00"},
                        )
                        response.raise_for_status()
                        started = time.perf_counter()
                        lsn = await _flushed(on_primary)
                        if (
                            parse_lsn(await on_standby.fetchval("SELECT pg_last_wal_replay_lsn()::text"))
                            >= lsn
                        ):
                            already += 1
                        await _until_replayed(on_standby, lsn)
                        save_ms.append((time.perf_counter() - started) * 1000)

                    alone_ms = []
                    for i in range(saves):
                        started = time.perf_counter()
                        found = await http.post("/memories/search", json={"query": f"deploy window {i % 24}"})
                        alone_ms.append((time.perf_counter() - started) * 1000)
                        found.raise_for_status()

                    search_ms = []
                    behind = _routed("behind")
                    waits = _waits()
                    for i in range(saves):
                        response = await http.post(
                            "/memories", json={"content": f"Read-after-write probe {i}: codename heron-{i}"}
                        )
                        response.raise_for_status()
                        started = time.perf_counter()
                        found = await http.post("/memories/search", json={"query": f"codename heron-{i}"})
                        search_ms.append((time.perf_counter() - started) * 1000)
                        found.raise_for_status()
                        ids = [h["id"] for h in found.json()["results"]]
                        assert response.json()["memory"]["id"] in ids, f"save {i} not found at once"
                    waited = _waits()
                finally:
                    await on_primary.close()
                    await on_standby.close()
        finally:
            replica.close()
            primary.close()
    return {
        "saves": saves,
        "commit_to_replayed_ms": _quantiles(commit_ms),
        "save_answered_to_replayed_ms": _quantiles(save_ms),
        "saves_replayed_when_answered": already,
        "search_alone_ms": _quantiles(alone_ms),
        "search_after_save_ms": _quantiles(search_ms),
        "searches_after_save_that_waited": int(waited[0] - waits[0]),
        "their_wait_ms_mean": round((waited[1] - waits[1]) * 1000 / max(1.0, waited[0] - waits[0]), 3),
        "searches_after_save_on_primary": int(_routed("behind") - behind),
    }


def format_table(r: dict[str, object]) -> str:
    lines = [
        f"{r['saves']} saves through REST, retrieval reading a streaming replica (HM_DATABASE_READ_URL)",
        "",
        "| measurement | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("commit_to_replayed_ms", "one-row commit -> replayed on the standby"),
        ("save_answered_to_replayed_ms", "save answered -> replayed"),
        ("search_alone_ms", "search with no save before it"),
        ("search_after_save_ms", "search right after its own save"),
    ):
        q = r[key]
        assert isinstance(q, dict)
        lines.append(f"| {label} | {q['p50']:.1f} | {q['p95']:.1f} | {q['p99']:.1f} |")
    lines += [
        "",
        f"saves already replayed when answered: {r['saves_replayed_when_answered']} of {r['saves']}; "
        f"searches after a save that waited: {r['searches_after_save_that_waited']} "
        f"(mean wait {r['their_wait_ms_mean']} ms), read from the primary: {r['searches_after_save_on_primary']}",
    ]
    return "\n".join(lines)


def cmd_bench_replica_lag(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, load_settings

    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    if not 1 <= args.saves <= MAX_SAVES:
        raise SystemExit(f"--saves must be between 1 and {MAX_SAVES}; got {args.saves}")
    result = asyncio.run(run(args.saves, settings.data_dir))
    print(json.dumps(result, indent=2) if args.json else format_table(result))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench replica-lag` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser(
        "replica-lag", help="a streaming replica's lag after a save, and read-after-write's cost to a search"
    )
    b.add_argument("--saves", type=int, default=200, help=f"saves to time (1-{MAX_SAVES})")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_replica_lag)
