"""Property-based fuzzing of the gateway's REST surface (issue 21 item 6): schemathesis reads the
served OpenAPI document and sends generated requests, valid and invalid, to every operation of the
real stack. No answer may be a 5xx, and no answer may show internals (a stack trace, SQL, a file
path of the install): bad input is the caller's mistake and gets a 4xx that says what to do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode

from tests.conftest import Stack, start_stack

HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "fuzz"}
# Generated cases per operation and per mode (valid, then invalid input): enough to reach the
# validation edges of each model (fewer missed two of the findings), few enough that the whole
# surface runs in under a minute.
EXAMPLES = 25
LEAKS = (
    "Traceback (most recent call last)",
    "asyncpg",
    "SELECT ",
    "syntax error at",
    "/site-packages/",
    "/work/",
)


@pytest.fixture(scope="module")
async def fuzzed(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    # Rate limits off: hundreds of generated calls from one principal are the point here, and a
    # 429 would hide the answer the operation itself gives.
    async with start_stack(
        pg_server_url, embedder, model_cache, rate_writes_per_min=0, rate_searches_per_min=0
    ) as running:
        yield running


def _problem(response: requests.Response) -> str | None:
    text = response.text
    if response.status_code >= 500:
        return f"{response.status_code}: {text[:300]}"
    leaked = [leak for leak in LEAKS if leak in text]
    if leaked:
        return f"{response.status_code} shows {leaked}: {text[:300]}"
    return None


def _fuzz_operation(
    base_url: str, session: requests.Session, strategy: st.SearchStrategy[Case], mode: GenerationMode
) -> tuple[list[str], int]:
    problems: list[str] = []
    calls = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        # Every finding is recorded rather than raised, so there is nothing to shrink.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Case) -> None:
        nonlocal calls
        response = case.call(base_url=base_url, session=session, headers=HEADERS, timeout=60)
        calls += 1
        problem = _problem(response)
        if problem:
            curl = case.as_curl_command(headers=HEADERS)
            problems.append(f"{case.method} {case.formatted_path} ({mode.value}) -> {problem}\n  {curl}")

    try:
        run()
    except Unsatisfiable:
        # An operation without parameters or body (GET /health) has no invalid input to send.
        if mode is not GenerationMode.NEGATIVE:
            raise
    return problems, calls


def _fuzz(base_url: str) -> tuple[list[str], list[str], int]:
    """Runs in a thread: schemathesis's calls are blocking, and the gateway answers on the test's
    event loop. Returns (operations fuzzed, problems found, calls made)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    problems: list[str] = []
    calls = 0
    with requests.Session() as session:
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                found, made = _fuzz_operation(base_url, session, operation.as_strategy(mode), mode)
                problems += found
                calls += made
    return [operation.label for operation in operations], problems, calls


async def test_no_generated_request_gets_a_5xx_or_shows_internals(fuzzed: Stack) -> None:
    started = time.monotonic()
    labels, problems, calls = await asyncio.to_thread(_fuzz, fuzzed.base_url)
    elapsed = time.monotonic() - started
    # The whole REST surface is in the document (MCP is not REST and is not in it).
    assert "POST /memories" in labels and "GET /memories/{memory_id}" in labels
    assert not any("/mcp" in label for label in labels)
    assert calls >= len(labels) * 2, f"{calls} calls for {len(labels)} operations"
    report = "\n".join(problems)
    assert not problems, f"{len(problems)} problems in {calls} calls ({elapsed:.0f}s):\n{report}"
