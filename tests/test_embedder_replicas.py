"""Scaling out: two real `hypermnesia serve embedder` processes behind one client address list.
Calls are spread round robin across both, and losing one replica is survived."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypermnesia.embedder_client import DOCUMENT, EmbedderClient
from tooling.process import EmbedderProcess, start_embedder


def texts_served(proc: EmbedderProcess) -> float:
    with urllib.request.urlopen(proc.metrics_url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("hm_embed_texts_total "):
                return float(line.split()[1])
    raise AssertionError(f"{proc.metrics_url} has no hm_embed_texts_total")


@pytest.fixture
def replicas(model_cache: Path, tmp_path: Path) -> Iterator[list[EmbedderProcess]]:
    procs = [start_embedder(model_cache, tmp_path / f"embedder-{i}.log") for i in range(2)]
    try:
        for proc in procs:
            proc.wait_ready(120)
        yield procs
    finally:
        for proc in procs:
            proc.stop()


async def test_two_replicas_share_the_load_and_survive_losing_one(replicas: list[EmbedderProcess]) -> None:
    first, second = replicas
    client = EmbedderClient(f"{first.address},{second.address}")
    try:
        info = await client.wait_for_info(30)
        assert info.dimension == 384
        for i in range(40):
            assert (await client.embed([f"note number {i}"], DOCUMENT, 30)).shape == (1, 384)
        served = [texts_served(first), texts_served(second)]
        assert sum(served) == 40
        assert min(served) >= 10, f"round robin left a replica idle: {served}"

        # Kill one replica while calls are in flight: every call still succeeds (one that raced
        # the death is retried on the other replica by the channel's retry policy), and the dead
        # one is dropped from the rotation.
        during = [asyncio.create_task(client.embed([f"during {i} " * 20], DOCUMENT, 30)) for i in range(60)]
        await asyncio.sleep(0.05)
        first.stop(signal.SIGKILL)
        assert all(r.shape == (1, 384) for r in await asyncio.gather(*during))
        before = texts_served(second)
        results = await asyncio.gather(*(client.embed([f"after {i}"], DOCUMENT, 30) for i in range(30)))
        assert all(r.shape == (1, 384) for r in results)
        assert texts_served(second) - before == 30
    finally:
        await client.close()
