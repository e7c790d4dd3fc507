"""Anchored checkpoints (issue 22) with the admin CLI as a user runs it: a chain rewritten end to
end by a superuser (every record_hash and the head recomputed) passes today's `verify` and fails
`verify --checkpoint` at the edited seq; a checkpoint signed by another key, or altered, is refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
from pathlib import Path

import asyncpg
import httpx

from services.curation import checkpoints, rawlog
from tests.conftest import Stack
from tests.test_curation_admin import ALICE, Result, cli

WORDS = ["The quokka census runs every March", "Zephyrine keeps the lighthouse keys"]


async def hm(stack: Stack, model_cache: Path, key: Path, *args: str) -> Result:
    """The CLI with HM_CHECKPOINT_KEY pointing at `key`."""
    return await cli(stack.database_url, model_cache, *args, HM_CHECKPOINT_KEY=str(key))


async def _save(stack: Stack, count: int) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        for i in range(count):
            saved = await http.post("/memories", json={"content": f"{WORDS[i % 2]} (note {i})"})
            assert saved.status_code == 200, saved.text


async def _rewrite_from(pool: asyncpg.Pool, seq: int, author: str) -> list[tuple[int, str, str]]:
    """Edit the record at `seq` as a superuser and recompute every hash after it and the head,
    as someone who controls the application would. Returns what to put back."""
    original = [
        (r["seq"], r["author"], r["record_hash"])
        for r in await pool.fetch("SELECT seq, author, record_hash FROM records WHERE seq >= $1", seq)
    ]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("ALTER TABLE records DISABLE TRIGGER USER")
        await conn.execute("UPDATE records SET author = $2 WHERE seq = $1", seq, author)
        prev = await conn.fetchval("SELECT record_hash FROM records WHERE seq = $1", seq - 1)
        rows = await conn.fetch("SELECT * FROM records WHERE seq >= $1 ORDER BY seq", seq)
        for row in rows:
            prev = rawlog.compute_hash(row, row["content_sha256"], prev)
            await conn.execute("UPDATE records SET record_hash = $2 WHERE seq = $1", row["seq"], prev)
        await conn.execute("UPDATE record_chain SET last_hash = $1", prev)
        await conn.execute("ALTER TABLE records ENABLE TRIGGER USER")
    return original


async def _put_back(pool: asyncpg.Pool, original: list[tuple[int, str, str]]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("ALTER TABLE records DISABLE TRIGGER USER")
        for seq, author, record_hash in original:
            await conn.execute(
                "UPDATE records SET author = $2, record_hash = $3 WHERE seq = $1", seq, author, record_hash
            )
        await conn.execute("UPDATE record_chain SET last_hash = $1", original[-1][2])
        await conn.execute("ALTER TABLE records ENABLE TRIGGER USER")


async def test_rewritten_chain_fails_the_checkpoint_at_the_edited_seq(
    stack: Stack, model_cache: Path, tmp_path: Path
) -> None:
    await _save(stack, 12)
    key = tmp_path / "keys" / "checkpoint-key.pem"
    small = tmp_path / "small.json"
    made = await hm(stack, model_cache, key, "checkpoint", "--out", str(small), "--block", "4")
    assert made.code == 0, made.err
    assert "created a signing key" in made.err and stat.S_IMODE(key.stat().st_mode) == 0o600
    default = await hm(stack, model_cache, key, "checkpoint", "--out", str(tmp_path))
    assert default.code == 0 and "created" not in default.err, default.err
    (wide,) = tmp_path.glob("checkpoint-*.json")

    body = json.loads(small.read_text())
    head = await stack.pool.fetchrow("SELECT last_seq, last_hash FROM record_chain")
    assert (body["seq"], body["record_hash"]) == (head["last_seq"], head["last_hash"])
    assert body["scopes"] == ["project:admin"] and body["key_id"] and body["signature"]
    text = small.read_text() + wide.read_text()
    assert not any(word in text for word in ("quokka", "Zephyrine", "lighthouse"))  # never memory text

    ok = await hm(stack, model_cache, key, "verify", "--checkpoint", str(small), str(wide))
    assert ok.code == 0, ok.err
    assert ok.out.count(f"the log up to seq {head['last_seq']} is the one signed") == 2

    # Records written after a checkpoint do not fail it.
    await _save(stack, 2)
    later = await hm(stack, model_cache, key, "verify", "--checkpoint", str(small))
    assert later.code == 0, later.err

    edited = head["last_seq"] - 5
    original = await _rewrite_from(stack.pool, edited, "mallory")
    try:
        today = await cli(stack.database_url, model_cache, "verify")
        assert today.code == 0 and "the chain holds" in today.out  # the rewrite fools the chain alone
        caught = await hm(stack, model_cache, key, "verify", "--checkpoint", str(small), str(wide))
        assert caught.code == 3, caught.out + caught.err
        assert caught.err.count(f"BROKEN at seq {edited}:") == 2, caught.err
    finally:
        await _put_back(stack.pool, original)
    restored = await hm(stack, model_cache, key, "verify", "--checkpoint", str(small))
    assert restored.code == 0, restored.err


async def test_checkpoint_of_another_key_or_altered_is_refused(
    stack: Stack, model_cache: Path, tmp_path: Path
) -> None:
    ours = tmp_path / "ours.pem"
    theirs = tmp_path / "theirs.pem"
    mine = tmp_path / "mine.json"
    foreign = tmp_path / "foreign.json"
    assert (await hm(stack, model_cache, ours, "checkpoint", "--out", str(mine))).code == 0
    assert (await hm(stack, model_cache, theirs, "checkpoint", "--out", str(foreign))).code == 0

    refused = await hm(stack, model_cache, ours, "verify", "--checkpoint", str(foreign))
    assert refused.code == 3 and "REFUSED" in refused.err and "signed by another key" in refused.err
    assert "HM_CHECKPOINT_KEY" in refused.err

    altered = json.loads(mine.read_text())
    altered["seq"] -= 1
    (tmp_path / "altered.json").write_text(json.dumps(altered))
    bad = await hm(stack, model_cache, ours, "verify", "--checkpoint", str(tmp_path / "altered.json"))
    assert bad.code == 3 and "signature does not match" in bad.err

    missing = await cli(
        stack.database_url,
        model_cache,
        "verify",
        "--checkpoint",
        str(mine),
        HM_CHECKPOINT_KEY=str(tmp_path / "nowhere.pem"),
    )
    assert missing.code == 1 and "no checkpoint key" in missing.err
    assert not (tmp_path / "nowhere.pem").exists()  # verify never makes a key


async def test_scheduled_checkpoints_land_in_the_folder(
    stack: Stack, model_cache: Path, tmp_path: Path
) -> None:
    key = tmp_path / "sched.pem"
    task = asyncio.create_task(
        checkpoints.run_schedule(stack.pool, tmp_path / "cps", 0.0001, key, tmp_path)  # every 0.36 s
    )
    try:
        for _ in range(100):
            if len(list((tmp_path / "cps").glob("checkpoint-*.json"))) >= 2:
                break
            await asyncio.sleep(0.1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    written = sorted((tmp_path / "cps").glob("checkpoint-*.json"))
    assert len(written) >= 1 and stat.S_IMODE(key.stat().st_mode) == 0o600
    ok = await hm(stack, model_cache, key, "verify", "--checkpoint", *map(str, written))
    assert ok.code == 0, ok.err
    # 0 hours is off: the schedule returns at once, writing nothing.
    await asyncio.wait_for(checkpoints.run_schedule(stack.pool, tmp_path / "none", 0, key, tmp_path), 5)
    assert not (tmp_path / "none").exists()
