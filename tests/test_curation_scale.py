"""Writes at scale on the real stack, through the in-process writer of the curation service:
50 concurrent writers lose nothing; after 10,000+ mixed writes the chain verifies, a replay of the
raw log matches the live memories exactly, and a rebuild restores an emptied memories table."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.curation import rawlog
from services.curation.lifecycle import ForgetInput, Forgetter
from services.curation.rebuild import Rebuilder
from services.curation.writer import MemoryWriter, SaveInput, UpdateInput
from tests.conftest import Stack, start_stack

SCOPE = "project:scale"
GRANTS = ("project:*",)
WORDS = (
    "apple harbor violin meteor cactus lantern quartz tundra falcon pepper bamboo glacier saddle kettle "
    "orchid marble canyon ember walnut hammock puzzle trumpet nebula pebble tractor sapphire lagoon "
    "biscuit compass dolphin feather granite helmet igloo jasmine koala lemon magnet noodle olive "
    "penguin quiver raven scarf tulip umbrella velvet wizard yacht zebra anchor blossom candle desert "
    "engine forest garlic hazel island jungle kayak ladder meadow nickel oyster parrot quill river"
).split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(8))


def _save(writer: MemoryWriter, content: str, **extra: object) -> SaveInput:
    return SaveInput(
        principal="loadtest",
        grants=GRANTS,
        content=content,
        description="",
        scope=SCOPE,
        type="note",
        tags=[],
        metadata={},
        importance=extra.pop("importance", None),  # type: ignore[arg-type]
        kind="",
        **extra,
    )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
async def big(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache) as running:
        yield running


async def _gather_limited(jobs: list, limit: int) -> list:
    gate = asyncio.Semaphore(limit)

    async def one(job: object) -> object:
        async with gate:
            return await job  # type: ignore[misc]

    return await asyncio.gather(*(one(j) for j in jobs))


async def _check_chain(stack: Stack) -> int:
    async with stack.pool.acquire() as conn:
        result = await rawlog.verify(conn)
    assert result.first_broken_seq is None, result.reason
    count, max_seq = await stack.pool.fetchrow("SELECT count(*), max(seq) FROM records")
    assert count == max_seq == result.checked  # gapless
    return int(count)


async def test_fifty_concurrent_writers_lose_nothing(big: Stack) -> None:
    writer: MemoryWriter = big.writer
    rng = random.Random(1)
    started = time.perf_counter()

    async def one_writer(w: int) -> list[tuple[str, bool]]:
        acks = []
        for i in range(100):
            result = await writer.save(_save(writer, f"writer {w} note {i}: {_text(rng)}"))
            acks.append((str(result.memory["id"]), result.created))
        return acks

    results = [ack for acks in await asyncio.gather(*(one_writer(w) for w in range(50))) for ack in acks]
    elapsed = time.perf_counter() - started
    print(f"50 x 100 saves in {elapsed:.1f}s ({5000 / elapsed:.0f} saves/s)")
    stored = {str(r["id"]) for r in await big.pool.fetch("SELECT id FROM memories WHERE scope = $1", SCOPE)}
    assert {i for i, _ in results} <= stored  # every acknowledged write is there
    # Random texts are distinct facts; a rare dedupe merge is an update of an acknowledged memory.
    created = sum(1 for _, c in results if c)
    assert len(stored) == created >= 4990
    assert await _check_chain(big) == 5000  # one record per save, gapless


async def test_ten_thousand_mixed_writes_replay_exactly(big: Stack) -> None:
    writer: MemoryWriter = big.writer
    rng = random.Random(2)
    rows = await big.pool.fetch("SELECT id, content FROM memories WHERE scope = $1 ORDER BY id", SCOPE)
    assert len(rows) >= 4990
    base = len(rows)
    rng.shuffle(rows := list(rows))
    dedupe, supersede, update, delete = rows[:500], rows[500:1000], rows[1000:2500], rows[2500:3000]
    started = time.perf_counter()

    # Same text again: the dedupe gate updates the existing memory instead of inserting.
    results = await _gather_limited(
        [writer.save(_save(writer, r["content"], importance=2.0)) for r in dedupe], 32
    )
    assert not any(r.created for r in results)
    results = await _gather_limited(
        [writer.save(_save(writer, f"correction: {_text(rng)}", supersedes=str(r["id"]))) for r in supersede],
        32,
    )
    assert all(r.created and str(r.memory["supersedes"]) for r in results)
    await _gather_limited(
        [
            writer.update(UpdateInput("loadtest", GRANTS, str(r["id"]), {"importance": 0.5, "tags": ["t"]}))
            for r in update
        ],
        32,
    )
    # Make the updated ones stale, then forget them (one archive record each).
    await big.pool.execute(
        "UPDATE memories SET last_accessed_at = now() - interval '400 days' WHERE id = ANY($1)",
        [r["id"] for r in update],
    )
    forgetter = Forgetter(writer.pool, after_days=180, importance_floor=1.0)
    forgot = await forgetter.forget(ForgetInput("loadtest", GRANTS, [SCOPE], apply=True, limit=10))
    assert forgot.matched == forgot.archived == 1500 and forgot.truncated
    await _gather_limited([forgetter.restore("loadtest", GRANTS, str(r["id"])) for r in update[:500]], 32)
    await _gather_limited([writer.delete("loadtest", GRANTS, str(r["id"])) for r in delete], 32)
    total = await _check_chain(big)
    print(
        f"{total - 5000} mixed writes in {time.perf_counter() - started:.1f}s; {total} records in the chain"
    )
    assert total >= 10_000

    rebuilder = Rebuilder(writer.pool, writer.embeddings.many)
    report = await rebuilder.rebuild(None, check=True)
    assert report.differences == [], report.differences[:10]
    assert report.live == base + 500 - 500

    snapshot = await big.pool.fetch(
        "SELECT id, scope, content, importance, tags, archived_at, superseded_by, supersedes, valid_to, created_at,"
        " updated_at FROM memories ORDER BY id"
    )
    await big.pool.execute("DELETE FROM memories")
    started = time.perf_counter()
    report = await rebuilder.rebuild(None, check=False)
    print(f"rebuild of {report.inserted} memories in {time.perf_counter() - started:.1f}s")
    # Every vector comes back from the raw layer's embedding store: nothing is re-embedded.
    assert report.applied and report.inserted == len(snapshot) and report.reembedded == 0
    restored = await big.pool.fetch(
        "SELECT id, scope, content, importance, tags, archived_at, superseded_by, supersedes, valid_to, created_at,"
        " updated_at FROM memories ORDER BY id"
    )
    assert [tuple(r) for r in restored] == [tuple(r) for r in snapshot]
    assert (await rebuilder.rebuild(None, check=True)).differences == []
    assert await _check_chain(big) == total  # a rebuild writes nothing to the raw log
