"""The benches' shared setup: a database of their own (embedded Postgres unless one is given), the
real embedder in a process, the synthetic store's texts, records and cached real vectors
(tooling/bench/search.py), and a local stack whose curation embeds those records through the known
vectors, with a gateway process in front. Each bench builds the store and times its own part."""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.v1 import curation_pb2
from tooling.bench.known_vectors import known_vectors_embedder
from tooling.bench.synthesis import REAL_MEMORIES
from tooling.local_stack import (
    LocalStack,
    embedder_process,
    gateway_process,
    local_stack,
    scratch_database,
)


@dataclass
class BenchStack:
    work: Path  # the temporary directory (the embedder's model cache is under it)
    db_url: str
    embedder: EmbedderClient  # the real embedder
    stack: LocalStack
    base_url: str  # the gateway's
    records: list[curation_pb2.RecordInput]  # not yet stored: the bench builds the store, timed
    texts: list[str]  # the records' contents
    vectors: Any  # their vectors (np.ndarray): real, then derived
    vectors_s: float  # seconds spent on the records' vectors (read from the cache or embedded)
    stack_started: float  # time.perf_counter() as the stack began to start


@asynccontextmanager
async def bench_stack(
    memories: int,
    database_url: str | None,
    cache_dir: Path | None,
    seed: int,
    *,
    prefix: str,
    arrange: Callable[[list[curation_pb2.RecordInput]], None] = lambda records: None,
    stack_options: dict[str, Any],
    gateway_options: dict[str, Any],
    real: int = REAL_MEMORIES,
) -> AsyncIterator[BenchStack]:
    """`memories` synthetic records (`arrange` may regroup them before their vectors are read;
    past `real` of them, derived ones: tooling/bench/synthesis.py), and the stack and gateway serving a database of their own, dropped on the way out."""
    # Imported here: tooling/bench/search.py imports this module for its run.
    from tooling.bench.search import store_texts, store_vectors, synthetic_records

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        async with (
            scratch_database(database_url, work, "hm_bench") as db_url,
            embedder_process(work) as embedder_address,
        ):
            client = EmbedderClient(embedder_address)
            await client.wait_for_info(60)
            rng = random.Random(seed)
            texts, pairs = store_texts(rng, memories, real)
            records = synthetic_records(texts, rng)
            arrange(records)
            started = time.perf_counter()
            vectors = await store_vectors(client, texts, pairs, cache_dir)
            vectors_s = time.perf_counter() - started
            stack_started = time.perf_counter()
            async with (
                known_vectors_embedder(dict(zip(texts, vectors, strict=True)), embedder_address) as known,
                # Curation embeds the records through the known vectors; retrieval embeds
                # every query with the real embedder.
                local_stack(
                    db_url, embedder_address, work, curation_embedder_address=known, **stack_options
                ) as stack,
                gateway_process(
                    stack.retrieval_address,
                    stack.curation_address,
                    work / "gateway.log",
                    require_auth=False,
                    **gateway_options,
                ) as base_url,
            ):
                yield BenchStack(
                    work, db_url, client, stack, base_url, records, texts, vectors, vectors_s, stack_started
                )
            await client.close()
