"""The optional LLM's daily token budget (table llm_usage, migration 0021), per UTC day."""

from __future__ import annotations

from datetime import date

import asyncpg


async def spent(conn: asyncpg.Connection | asyncpg.Pool, day: date) -> int:
    value = await conn.fetchval("SELECT tokens FROM llm_usage WHERE day = $1", day)
    return int(value or 0)


async def add(conn: asyncpg.Connection | asyncpg.Pool, day: date, tokens: int) -> int:
    """Count one call's tokens; returns the day's total."""
    return int(
        await conn.fetchval(
            "INSERT INTO llm_usage (day, tokens, calls) VALUES ($1, $2, 1)"
            " ON CONFLICT (day) DO UPDATE SET tokens = llm_usage.tokens + $2, calls = llm_usage.calls + 1"
            " RETURNING tokens",
            day,
            tokens,
        )
    )
