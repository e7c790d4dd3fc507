"""Curation verifies the raw log on a schedule and exports the outcome (the alert
HypermnesiaRawLogBroken reads it): a whole chain counts `ok`, an edited row `broken`."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import REGISTRY

from services.curation import verify_schedule
from tests.conftest import Stack


def _runs(outcome: str) -> float:
    return REGISTRY.get_sample_value("hm_rawlog_verify_runs_total", {"outcome": outcome}) or 0.0


async def _save_three(stack: Stack) -> None:
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers={"Authorization": "Bearer alice-token"}, timeout=60
    ) as http:
        for i in range(3):
            answer = await http.post("/memories", json={"content": f"verify schedule fact number {i}"})
            assert answer.status_code == 200, answer.text


async def test_a_whole_chain_counts_ok_and_an_edited_row_counts_broken(stack: Stack) -> None:
    await _save_three(stack)
    ok_before, broken_before = _runs("ok"), _runs("broken")
    result = await verify_schedule.verify_once(stack.pool)
    assert result is not None and result.first_broken_seq is None
    assert _runs("ok") == ok_before + 1
    records = await stack.pool.fetchval("SELECT count(*) FROM records")
    assert REGISTRY.get_sample_value("hm_rawlog_verified_records") == records >= 3
    assert (REGISTRY.get_sample_value("hm_rawlog_verify_last_ok_timestamp_seconds") or 0) > 0

    target = await stack.pool.fetchrow("SELECT seq, author FROM records ORDER BY seq OFFSET 1 LIMIT 1")
    await stack.pool.execute("ALTER TABLE records DISABLE TRIGGER records_no_update")
    try:
        await stack.pool.execute("UPDATE records SET author = 'mallory' WHERE seq = $1", target["seq"])
        broken = await verify_schedule.verify_once(stack.pool)
        assert broken is not None and broken.first_broken_seq == target["seq"]
        assert _runs("broken") == broken_before + 1
        assert _runs("ok") == ok_before + 1  # a broken walk is not also counted whole
    finally:
        await stack.pool.execute(
            "UPDATE records SET author = $2 WHERE seq = $1", target["seq"], target["author"]
        )
        await stack.pool.execute("ALTER TABLE records ENABLE TRIGGER records_no_update")


async def test_the_schedule_walks_by_itself_and_zero_hours_is_off(stack: Stack) -> None:
    await _save_three(stack)
    # Off: returns at once, walks nothing.
    before = _runs("ok")
    await asyncio.wait_for(verify_schedule.run_schedule(stack.pool, 0), timeout=1)
    assert _runs("ok") == before
    # 0.0002 hours = 0.72 s between walks (and before the first).
    task = asyncio.create_task(verify_schedule.run_schedule(stack.pool, 0.0002))
    try:
        for _ in range(100):
            if _runs("ok") >= before + 2:
                break
            await asyncio.sleep(0.1)
        assert _runs("ok") >= before + 2
    finally:
        task.cancel()
