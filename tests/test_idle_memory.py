"""An idle stack started the way a user starts it (`hypermnesia up` over the embedded Postgres, an
empty store) holds at most 500 MB of PSS with every process counted: `up`, its database guard, the
four services and every Postgres process (issue 31). Each process also has a budget of its own, with
room over what it holds today (docs/PERFORMANCE.md, "Where the memory goes"), so a regression says
where it is: the embedder holding 100 MB more fails both.

Memory, not time: the sizes are read once the stack has answered a save and searches, and read
again until they fit or a deadline passes (start-up work may still be settling)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest

from services.embedder.model import resolve_model
from tests.helpers import UpProcess
from tests.test_up import stack_env
from tooling.bench.load import postgres_pss_mb, pss_mb

pytestmark = pytest.mark.timeout(420)

TOTAL_MB = 500.0
# Today (2026-12-04, empty store): up 37, guard 12, embedder 170, retrieval 50, curation 62,
# gateway 77, Postgres 57; 466 in all.
BUDGETS_MB = {
    "up": 50.0,
    "database guard": 20.0,
    "embedder": 215.0,
    "retrieval": 70.0,
    "curation": 90.0,
    "gateway": 100.0,
    "postgres": 90.0,
}
SETTLE_S = 60.0


def sizes(up: UpProcess, data_dir: Path) -> dict[str, float | None]:
    """PSS in MB of every process of the stack, by role."""
    found: dict[str, float | None] = {"up": pss_mb(up.proc.pid)}
    for child in psutil.Process(up.proc.pid).children():
        cmd = " ".join(child.cmdline())
        name = cmd.split("serve ", 1)[1].split()[0] if " serve " in cmd else None
        if name is None and "database_guard" in cmd:
            name = "database guard"
        if name is not None:
            found[name] = pss_mb(child.pid)
    postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    found["postgres"] = postgres_pss_mb(postmaster)
    return found


def over(found: dict[str, float | None]) -> list[str]:
    """What is missing or over its budget, and the total if over."""
    problems = [
        f"{name} {found.get(name)} MB > {budget:.0f}"
        for name, budget in BUDGETS_MB.items()
        if found.get(name) is None or found[name] > budget  # type: ignore[operator]
    ]
    total = sum(v for v in found.values() if v is not None)
    if total > TOTAL_MB:
        problems.append(f"total {total:.0f} MB > {TOTAL_MB:.0f}")
    return problems


def test_an_idle_stack_fits_in_500_mb_with_every_process_counted(tmp_path: Path, model_cache: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    resolve_model(None, model_cache / "models")  # converted once per test session
    (data_dir / "models").symlink_to(model_cache / "models")
    env = stack_env(data_dir)
    base = f"http://127.0.0.1:{env['HM_GATEWAY_PORT']}"
    headers = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "idle-memory"}
    up = UpProcess(env)
    try:
        up.wait_for(r"hypermnesia is up", 240)
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            saved = http.post("/memories", json={"content": "The office plants need watering every Tuesday"})
            assert saved.status_code in (200, 201), saved.text
            for query in ("when to water the plants", "office chores", "what happens on Tuesday"):
                found = http.post("/memories/search", json={"query": query})
                assert found.status_code == 200, found.text
            assert found.json()["results"][0]["id"] == saved.json()["memory"]["id"]
        deadline = time.monotonic() + SETTLE_S
        while over(measured := sizes(up, data_dir)) and time.monotonic() < deadline:
            time.sleep(1)
        print({name: round(v, 1) for name, v in measured.items() if v is not None})
        assert set(measured) == set(BUDGETS_MB), measured
        assert not over(measured), (over(measured), measured)
    finally:
        up.stop()
