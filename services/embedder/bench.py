"""`hypermnesia bench embedder`: what the service adds on top of raw onnxruntime.

One run measures (a) the provider in-process (tokenize + session.run, no service) at several
batch sizes, (b) the service over loopback gRPC under 1 client and under N concurrent clients
each sending one short text per call, (c) the same with batching disabled, (d) the same with
~100-word texts. The services are real `hypermnesia serve embedder` child processes; clients
share one channel in this process, so on a small machine they compete with the server for
cores exactly as co-located callers would.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from services.embedder.onnx_provider import OnnxProvider
from services.embedder.process import start_embedder

_WORDS = (
    "the agent saved a note about the build failing when the cache directory is missing and the "
    "user asked to remember that tests must run against a real database before each release while "
    "the retrieval service ranks memories by meaning recency and importance so that a session can "
    "recall which file holds the rules for editing the gateway configuration and why the team chose "
    "postgres over a separate vector store for the project map deadlines reviews and deployment plans"
).split()

RAW_BATCHES = (1, 4, 8, 16, 32, 64)


def make_texts(count: int, words: int, seed: int) -> list[str]:
    """Distinct English-like texts (distinct, so no cache can help)."""
    rng = np.random.default_rng(seed)
    return [f"{i} " + " ".join(rng.choice(_WORDS, size=words - 1)) for i in range(count)]


@dataclass
class Row:
    name: str
    clients: int
    texts_per_s: float
    p50_ms: float
    p95_ms: float


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q)) if values else 0.0


def bench_raw(provider: OnnxProvider, texts: list[str], label: str, total: int) -> tuple[list[Row], Row]:
    """Every batch size in RAW_BATCHES; returns all rows and the best one."""
    rows = []
    for size in RAW_BATCHES:
        provider.embed(provider.prepare(texts[:size]))  # warm up this shape
        latencies: list[float] = []
        done = 0
        started = time.perf_counter()
        while done < total:
            chunk = texts[done % len(texts) : done % len(texts) + size]
            t0 = time.perf_counter()
            provider.embed(provider.prepare(chunk))
            latencies.append(time.perf_counter() - t0)
            done += len(chunk)
        elapsed = time.perf_counter() - started
        rows.append(Row(f"raw {label}, batch {size}", 0, done / elapsed, _percentile(latencies, 50),
                        _percentile(latencies, 95)))
    return rows, max(rows, key=lambda r: r.texts_per_s)


async def _load(address: str, texts: list[str], clients: int, calls: int, warmup: int) -> tuple[float, list[float]]:
    client = EmbedderClient(address)
    try:
        await client.wait_for_info(60)
        counter = iter(range(warmup + calls))
        latencies: list[float] = []

        async def worker() -> None:
            for i in counter:
                t0 = time.perf_counter()
                await client.embed([texts[i % len(texts)]], DOCUMENT, 60)
                if i >= warmup:
                    latencies.append(time.perf_counter() - t0)

        # Warm-up calls are the first `warmup` of the shared counter; timing starts after them.
        warm = [texts[i % len(texts)] for i in range(min(warmup, 64))]
        await asyncio.gather(*(client.embed([t], DOCUMENT, 60) for t in warm))
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
        return len(latencies) / elapsed, latencies
    finally:
        await client.close()


def bench_service(
    data_dir: Path, label: str, texts: list[str], clients: tuple[int, ...], calls: dict[int, int], **settings: str | int | float
) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_embedder(data_dir, Path(tmp) / "embedder.log", **settings)
        try:
            proc.wait_ready()
            rows = []
            for n in clients:
                rate, latencies = asyncio.run(_load(proc.address, texts, n, calls[n], warmup=2 * n))
                rows.append(Row(label, n, rate, _percentile(latencies, 50), _percentile(latencies, 95)))
            return rows
        finally:
            proc.stop()


@dataclass
class Report:
    rows: list[Row]
    raw_best: Row
    raw_batch1: Row
    ratio_batched_vs_raw: float
    ratio_batched_vs_unbatched: float
    single_client_overhead_ms: float

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "raw_best": asdict(self.raw_best),
            "ratio_b32_over_a": self.ratio_batched_vs_raw,
            "ratio_b32_over_c32": self.ratio_batched_vs_unbatched,
            "single_client_p50_minus_raw_batch1_p50_ms": self.single_client_overhead_ms,
        }


def run(data_dir: Path | None, *, clients: int = 32, scale: float = 1.0, quantization: str = "fp32") -> Report:
    work = Path(tempfile.mkdtemp(prefix="hm-bench-")) if data_dir is None else data_dir
    short = make_texts(4000, 14, seed=1)
    long = make_texts(1000, 100, seed=2)
    n = lambda base: max(clients, int(base * scale))  # noqa: E731

    provider = OnnxProvider.from_settings(
        None, work / "models", max_tokens=256, quantization=quantization, intra_op_threads=0, inter_op_threads=0
    )
    raw_short, raw_best = bench_raw(provider, short, "short", n(1600))
    raw_long, raw_long_best = bench_raw(provider, long, "~100 words", n(400))
    del provider

    common = {"embedding_quantization": quantization}
    batched = bench_service(work, "service, batching, short", short, (1, clients),
                            {1: n(800), clients: n(4000)}, **common)
    unbatched = bench_service(work, "service, no batching, short", short, (1, clients),
                              {1: n(800), clients: n(2000)}, embed_max_batch_size=1, **common)
    longer = bench_service(work, "service, batching, ~100 words", long, (1, clients),
                           {1: n(200), clients: n(800)}, **common)
    raw_batch1 = raw_short[0]
    b1, b32 = batched
    rows = [raw_batch1, raw_best, raw_long[0], raw_long_best, *batched, *unbatched, *longer]
    return Report(
        rows=rows,
        raw_best=raw_best,
        raw_batch1=raw_batch1,
        ratio_batched_vs_raw=b32.texts_per_s / raw_best.texts_per_s,
        ratio_batched_vs_unbatched=b32.texts_per_s / unbatched[1].texts_per_s,
        single_client_overhead_ms=b1.p50_ms - raw_batch1.p50_ms,
    )


def format_report(report: Report) -> str:
    lines = [
        "| scenario | clients | texts/s | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        who = "in-process" if r.clients == 0 else str(r.clients)
        lines.append(f"| {r.name} | {who} | {r.texts_per_s:,.0f} | {r.p50_ms:.2f} | {r.p95_ms:.2f} |")
    lines += [
        "",
        f"- b{_clients(report)}/a (service, concurrent clients / raw best batch): "
        f"{report.ratio_batched_vs_raw:.2f} (target >= 0.85)",
        f"- b{_clients(report)}/c{_clients(report)} (batching / no batching): "
        f"{report.ratio_batched_vs_unbatched:.2f}x (target >= 1.5x)",
        f"- single-client p50 - raw batch-1 p50: {report.single_client_overhead_ms:+.2f} ms (target <= 2 ms)",
    ]
    return "\n".join(lines)


def _clients(report: Report) -> int:
    return max(r.clients for r in report.rows)
