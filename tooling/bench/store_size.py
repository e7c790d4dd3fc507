"""What a store costs as it grows, for `hypermnesia bench search`: the HNSW indexes' size on disk,
Postgres's memory while the store is built (sampled), and the idle stack's memory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from tooling.bench.load import children_of

__all__ = ["PeakMemory", "idle_memory_mb", "index_sizes_mb", "peak_postgres_memory", "process_memory_mb"]

MB = 1024 * 1024


def process_memory_mb(pid: int) -> tuple[float, float] | None:
    """(RSS, PSS) of a process in MB; None when it is gone or not ours to read."""
    found: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("Rss", "Pss"):
                    found[key] = int(line.split()[1]) / 1024
    except OSError:
        return None
    return (found["Rss"], found["Pss"]) if len(found) == 2 else None


@dataclass
class PeakMemory:
    """The largest Postgres footprint seen: every process's PSS summed (shared buffers counted
    once), and the largest single process's RSS (the backend building an index holds its graph)."""

    pss_mb: float = 0.0
    rss_max_process_mb: float = 0.0
    samples: int = 0

    def sample(self, postmaster: int) -> None:
        sizes = [process_memory_mb(pid) for pid in [postmaster, *children_of(postmaster)]]
        known = [s for s in sizes if s is not None]
        if not known:
            return
        self.pss_mb = max(self.pss_mb, sum(pss for _, pss in known))
        self.rss_max_process_mb = max(self.rss_max_process_mb, max(rss for rss, _ in known))
        self.samples += 1


@asynccontextmanager
async def peak_postgres_memory(postmaster: int | None, every_s: float = 1.0) -> AsyncIterator[PeakMemory]:
    """Samples Postgres's memory every `every_s` while the block runs (and once at its end)."""
    peak = PeakMemory()
    if postmaster is None:  # a server on another machine: its processes are not in our /proc
        yield peak
        return

    async def sampling() -> None:
        while True:
            await asyncio.to_thread(peak.sample, postmaster)
            await asyncio.sleep(every_s)

    task = asyncio.create_task(sampling())
    try:
        yield peak
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        peak.sample(postmaster)


async def index_sizes_mb(conn: asyncpg.Connection) -> dict[str, float]:
    """The memories table (heap + TOAST) and its HNSW indexes, in MB: the global graph and the
    scope graphs (hypermnesia/scope_graphs.py) summed."""
    rows = await conn.fetch(
        "SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " WHERE i.indrelid = 'memories'::regclass AND a.amname = 'hnsw'"
    )
    scope = [r["bytes"] for r in rows if r["relname"].startswith("memories_embedding_scope_")]
    total = sum(r["bytes"] for r in rows)
    return {
        "table": int(await conn.fetchval("SELECT pg_table_size('memories'::regclass)")) / MB,
        "global_hnsw": (total - sum(scope)) / MB,
        "scope_hnsw": sum(scope) / MB,
        "scope_graphs": float(len(scope)),
    }


def idle_memory_mb(
    postmaster: int | None, names: tuple[str, ...] = ("embedder", "gateway")
) -> dict[str, float]:
    """PSS in MB of Postgres (every process) and of this process's `hypermnesia serve <name>`
    children, as they sit idle."""
    out: dict[str, float] = {}
    if postmaster is not None:
        sizes = [process_memory_mb(pid) for pid in [postmaster, *children_of(postmaster)]]
        out["postgres"] = sum(s[1] for s in sizes if s is not None)
    for pid in children_of(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        for name in names:
            if b"serve" in argv and name.encode() in argv and (size := process_memory_mb(pid)):
                out[name] = out.get(name, 0.0) + size[1]
    return out
